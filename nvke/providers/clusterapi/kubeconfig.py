"""API clients from kubeconfigs (the management cluster's, a new cluster's `<name>-kubeconfig` Secret),
loaded by the official client's own loader, so token, client-certificate and exec-plugin users all work;
with the Kubernetes provider's timeouts and retries (nvke.providers.kubernetes.client)."""

import functools
from pathlib import Path

import yaml
from kubernetes import client, config
from kubernetes.config.config_exception import ConfigException

from nvke import caches
from nvke.providers.base import ProviderError
from nvke.providers.kubernetes.client import RETRIES


@functools.lru_cache(maxsize=32)
def api_client(kubeconfig: str) -> client.ApiClient:
    """One client (and connection pool) per kubeconfig and process."""
    configuration = client.Configuration()
    configuration.retries = RETRIES
    try:
        document = yaml.safe_load(kubeconfig)
        if not isinstance(document, dict):
            raise ConfigException("not a kubeconfig document")
        config.load_kube_config_from_dict(document, client_configuration=configuration, persist_config=False)
    except (yaml.YAMLError, ConfigException, KeyError, TypeError) as error:
        raise ProviderError("InvalidKubeconfig", f"The kubeconfig cannot be used: {error}") from None
    return client.ApiClient(configuration)


caches.register("nvke.providers.clusterapi.clients", "≤ 32, least recently used out", api_client.cache_clear)


def ca_bundle(api: client.ApiClient) -> str:
    """The PEM CA bundle the client verifies the server with ("" when the system's CAs are used)."""
    path = api.configuration.ssl_ca_cert
    return Path(path).read_text() if path else ""
