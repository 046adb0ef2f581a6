from django.apps import AppConfig


class NodepoolsConfig(AppConfig):
    name = "nodepools"
    verbose_name = "GPU node pools"
