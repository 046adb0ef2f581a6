from tests.kubeapi.fixtures import kube_client, kubeapi  # noqa: F401
