from django.apps import AppConfig


class ClusterAPIConfig(AppConfig):
    name = "nvke.providers.clusterapi"
    label = "clusterapi"
    verbose_name = "Cluster API"
