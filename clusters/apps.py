from django.apps import AppConfig


class ClustersConfig(AppConfig):
    name = "clusters"

    def ready(self) -> None:
        from audit.recorder import CONTROL_LOOP_FIELDS, register
        from clusters.models import Cluster

        # Provisioning writes the endpoint and the admin token (encrypted, so it would be "[secret]"
        # anyway): they are the provider's output, not anyone's change, and the token is never recorded.
        register(Cluster, ignore=(*CONTROL_LOOP_FIELDS, "endpoint", "admin_token"))
