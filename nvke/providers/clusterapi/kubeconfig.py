"""API clients from kubeconfigs NVKE did not write: the management cluster's (the admin's form, or the
file NVKE_CAPI_KUBECONFIG names) and the `<name>-kubeconfig` Secret Cluster API writes for a new cluster.

They are read by nvke.kubeconfigs, never by the official client's loader: that loader runs `exec`
plugins and reads certificate and key paths on NVKE's own disk (a staff user pasting a kubeconfig ran a
command as the server's user). A user is a bearer token, or an inline client certificate and key (what
the kubeadm control plane provider writes); exec, auth-provider, token files, file paths and basic auth
are refused naming the field. The server must be an https URL the address policy admits (nvke.outbound),
checked here and again on each new connection; the client has the Kubernetes provider's deadlines and
retries (nvke.providers.kubernetes.client). insecure-skip-tls-verify, proxy-url and impersonation are
refused (nvke.kubeconfigs); tls-server-name is honoured, by the client and by the watches' streams."""

import atexit
import functools
import hashlib
import os
import shutil
import tempfile
from dataclasses import dataclass, field

from kubernetes import client

from nvke import caches, kubeconfigs, outbound
from nvke.providers.base import ProviderError
from nvke.providers.kubernetes.client import RETRIES, checked

# What a user entry may not use: commands run, files read, credentials NVKE does not send.
REFUSED_USER_FIELDS = (
    "exec",
    "auth-provider",
    "tokenFile",
    "client-certificate",
    "client-key",
    "username",
    "password",
)


@dataclass(frozen=True)
class Credentials:
    server: str
    ca_pem: str
    token: str = field(repr=False)
    certificate_pem: str = field(repr=False)
    key_pem: str = field(repr=False)
    tls_server_name: str = ""


def parse(text: str) -> Credentials:
    """The current context's server and credentials; ProviderError InvalidKubeconfig says why not."""
    try:
        context = kubeconfigs.current_context(text)
        user = context.user
        if used := [key for key in REFUSED_USER_FIELDS if key in user]:
            raise kubeconfigs.Refused(
                f"The kubeconfig's user uses {used[0]}, which NVKE neither runs nor reads: give a token, "
                "or client-certificate-data and client-key-data."
            )
        token = kubeconfigs.string(user, "token", "the user's token")
        certificate = kubeconfigs.decoded(user, "client-certificate-data", "a PEM certificate")
        key = kubeconfigs.decoded(user, "client-key-data", "a PEM key")
        if not token and not (certificate and key):
            raise kubeconfigs.Refused(
                "The kubeconfig's user has neither a token nor client-certificate-data and client-key-data."
            )
        outbound.resolve(context.server)
    except kubeconfigs.Refused as refused:
        raise ProviderError("InvalidKubeconfig", str(refused)) from None
    except outbound.AddressRefused as refused:
        raise ProviderError("InvalidKubeconfig", f"The kubeconfig's server: {refused}") from None
    return Credentials(context.server, context.ca_pem, token, certificate, key, context.tls_server_name)


@functools.lru_cache(maxsize=32)
def api_client(kubeconfig: str) -> client.ApiClient:
    """One client (and connection pool) per kubeconfig and process."""
    credentials = parse(kubeconfig)
    configuration = client.Configuration(
        host=credentials.server.rstrip("/"), ca_cert_data=credentials.ca_pem or None, retries=RETRIES
    )
    configuration.tls_server_name = credentials.tls_server_name or None
    if credentials.token:
        configuration.api_key = {"BearerToken": credentials.token}
        configuration.api_key_prefix = {"BearerToken": "Bearer"}
    else:  # urllib3 takes a client certificate from files only
        configuration.cert_file = _private_file(credentials.certificate_pem)
        configuration.key_file = _private_file(credentials.key_pem)
    return checked(client.ApiClient(configuration))


caches.register("nvke.providers.clusterapi.clients", "≤ 32, least recently used out", api_client.cache_clear)


@functools.cache
def _folder() -> str:
    path = tempfile.mkdtemp(prefix="nvke-capi-")  # mode 0700
    atexit.register(shutil.rmtree, path, True)
    return path


def _private_file(content: str) -> str:
    """A file only this user reads, holding `content` (one per content, removed when the process ends)."""
    path = os.path.join(_folder(), hashlib.sha256(content.encode()).hexdigest())
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as out:
        out.write(content)
    return path


def ca_bundle(api: client.ApiClient) -> str:
    """The PEM CA bundle the client verifies the server with ("" when the system's CAs are used)."""
    return api.configuration.ca_cert_data or ""
