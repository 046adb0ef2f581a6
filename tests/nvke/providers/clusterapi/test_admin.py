"""The management cluster setting in the admin: its kubeconfig is write-only and checked, its other fields
are checked by their validators, and there is one."""

import pytest
import yaml
from django.urls import reverse
from kubernetes.client import VersionApi

from audit.models import AuditEntry
from nvke.providers.base import ProviderError
from nvke.providers.clusterapi.kubeconfig import api_client as management_client
from nvke.providers.clusterapi.models import ManagementCluster
from nvke.providers.kubernetes.client import call
from tests.kubeapi.capi_actors import kubeconfig


@pytest.fixture
def operator(client, django_user_model, db):
    client.force_login(django_user_model.objects.create_superuser("op", "op@example.com", "pw-secret-123"))
    return client


def form(**changes) -> dict:
    fields = {
        "kubeconfig": "",
        "namespace": "nvke",
        "infrastructure_api_version": "infrastructure.cluster.x-k8s.io/v1beta2",
        "cluster_template": "Metal3ClusterTemplate/gpu-cloud",
        "control_plane_machine_template": "Metal3MachineTemplate/control-plane",
        "kubernetes_versions": '{"1.34": "v1.34.2"}',
    }
    return {**fields, **changes}


def test_the_kubeconfig_is_stored_never_shown_and_kept_when_left_empty(operator, kubeapi):
    text = kubeconfig(kubeapi, "management")
    response = operator.post(reverse("admin:clusterapi_managementcluster_add"), form(kubeconfig=text))
    assert response.status_code == 302
    setting = ManagementCluster.objects.get()
    assert setting.kubeconfig == text

    change = reverse("admin:clusterapi_managementcluster_change", args=[setting.pk])
    page = operator.get(change).content.decode()
    assert "client-key-data" not in page and "certificate-authority-data" not in page
    assert operator.post(change, form(namespace="gpu")).status_code == 302
    setting.refresh_from_db()
    assert (setting.namespace, setting.kubeconfig) == ("gpu", text)
    assert operator.get(reverse("admin:clusterapi_managementcluster_add")).status_code == 403  # only one

    entries = AuditEntry.objects.filter(object_type="clusterapi.managementcluster").order_by("pk")
    assert [e.action for e in entries] == ["create", "update"]
    assert entries[0].changes["kubeconfig"] == [None, "[secret]"]
    assert entries[1].changes == {"namespace": ["nvke", "gpu"]}  # the kept kubeconfig did not change
    assert "client-key-data" not in str(list(AuditEntry.objects.values()))


@pytest.mark.parametrize(
    "field, value, says",
    [
        ("kubeconfig", "clusters: [oops", "The kubeconfig is refused: not YAML"),
        ("cluster_template", "gpu-cloud", "Give Kind/name"),
        ("infrastructure_api_version", "infrastructure.cluster.x-k8s.io", "Give group/version"),
        ("kubernetes_versions", '{"1.34": "v1.35.0"}', "is not a release of Kubernetes 1.34"),
    ],
)
def test_a_bad_field_is_refused_under_its_name_and_nothing_is_saved(operator, field, value, says):
    response = operator.post(reverse("admin:clusterapi_managementcluster_add"), form(**{field: value}))
    assert response.status_code == 200
    assert says in str(response.context["adminform"].form.errors[field])
    assert not ManagementCluster.objects.exists()


def management_kubeconfig(fake, user: dict, **cluster) -> str:
    """The fake's kubeconfig with its user entry (and cluster entry fields) replaced."""
    document = yaml.safe_load(kubeconfig(fake, "management"))
    document["users"][0]["user"] = user
    document["clusters"][0]["cluster"].update(cluster)
    return yaml.safe_dump(document)


def test_an_exec_plugin_is_refused_and_never_run(operator, kubeapi, tmp_path):
    """The official loader ran the plugin while the form was validated: a command as the server's user."""
    ran = tmp_path / "ran"
    plugin = {
        "apiVersion": "client.authentication.k8s.io/v1",
        "command": "sh",
        "args": ["-c", f'touch {ran}; echo \'{{"status": {{"token": "t"}}}}\''],
        "interactiveMode": "Never",
    }
    text = management_kubeconfig(kubeapi, {"exec": plugin})
    response = operator.post(reverse("admin:clusterapi_managementcluster_add"), form(kubeconfig=text))
    assert response.status_code == 200
    assert "uses exec" in str(response.context["adminform"].form.errors["kubeconfig"])
    assert not ran.exists(), "the plugin ran"
    assert not ManagementCluster.objects.exists()


@pytest.mark.parametrize(
    "user, cluster, says",
    [
        (
            {"client-certificate": "/etc/nvke/tls.crt", "client-key": "/etc/nvke/tls.key"},
            {},
            "uses client-certificate",
        ),
        ({"tokenFile": "/var/run/secrets/token"}, {}, "uses tokenFile"),
        ({"auth-provider": {"name": "oidc"}}, {}, "uses auth-provider"),
        ({"username": "admin", "password": "pw"}, {}, "uses username"),
        ({}, {}, "neither a token nor client-certificate-data"),
        ({"token": "t"}, {"certificate-authority": "/etc/passwd"}, "CA file on disk"),
        ({"token": "t"}, {"insecure-skip-tls-verify": True}, "sets insecure-skip-tls-verify"),
        ({"token": "t"}, {"proxy-url": "http://203.0.113.10:3128"}, "sets proxy-url"),
        ({"token": "t", "as": "system:admin"}, {}, "sets as (impersonation)"),
        ({"token": "t", "as-groups": ["system:masters"]}, {}, "sets as-groups"),
        ({"token": "t"}, {"server": "https://169.254.169.254"}, "address is not one NVKE may call"),
        ({"token": "t"}, {"server": "http://203.0.113.7"}, "https:// URL"),
        (
            {"client-certificate-data": "%%%", "client-key-data": "a2V5"},
            {},
            "client-certificate-data is not base64",
        ),
    ],
)
def test_what_nvke_would_read_from_disk_or_could_not_call_is_refused_naming_it(
    operator, kubeapi, user, cluster, says
):
    text = management_kubeconfig(kubeapi, user, **cluster)
    response = operator.post(reverse("admin:clusterapi_managementcluster_add"), form(kubeconfig=text))
    assert response.status_code == 200
    assert says in str(response.context["adminform"].form.errors["kubeconfig"])
    assert not ManagementCluster.objects.exists()


def test_a_token_kubeconfig_is_taken(operator, kubeapi):
    text = management_kubeconfig(kubeapi, {"token": kubeapi.token})
    response = operator.post(reverse("admin:clusterapi_managementcluster_add"), form(kubeconfig=text))
    assert response.status_code == 302
    assert ManagementCluster.objects.get().kubeconfig == text


@pytest.mark.parametrize(("name", "answers"), [("localhost", True), ("nvke.invalid", False)])
def test_tls_server_name_is_the_name_the_certificate_is_checked_for(kubeapi, name, answers):
    """The stand-in's certificate holds 127.0.0.1 and localhost; its URL is by address. tls-server-name
    was dropped: a name the certificate does not hold passed."""
    text = management_kubeconfig(kubeapi, {"token": kubeapi.token}, **{"tls-server-name": name})
    api = management_client(text)
    try:
        assert call(VersionApi(api).get_code).git_version
        assert answers
    except ProviderError as error:
        assert (answers, error.reason) == (False, "TLSError")
