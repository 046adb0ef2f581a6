from django.apps import AppConfig


class ClusterAPIConfig(AppConfig):
    name = "nvke.providers.clusterapi"
    label = "clusterapi"
    verbose_name = "Cluster API"

    def ready(self) -> None:
        from audit.recorder import register

        from .models import ManagementCluster

        # An operator's setting, of no tenant; the kubeconfig is recorded as changed, never its value.
        register(
            ManagementCluster, tenant_of=lambda setting: None, secret=("kubeconfig",), ignore=("updated_at",)
        )
