"""NVKE's access manifest against a stand-in that authorizes every request as kube-apiserver's RBAC does:
kube_sync lists and watches as NVKE's service account at each Kubernetes minor. (Allocating as that
account, and attach refusing a role older than NVKE's, run on both targets: test_both_targets_strict.py.)"""

import pytest

from nodepools import kube_sync
from tests.kubeapi import objects
from tests.kubeapi.fixtures import wait_until
from tests.kubeapi.server import FakeKubeApi

pytestmark = pytest.mark.django_db


@pytest.fixture(params=["1.34.2", "1.36.0"])
def kubeapi(request):
    with FakeKubeApi(version=request.param) as server:
        yield server


def refused(server: FakeKubeApi) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb) for user, group, resource, verb, allowed in server.decisions if not allowed
    }


def used(server: FakeKubeApi) -> set[tuple[str, str, str]]:
    return {(group, resource, verb) for user, group, resource, verb, allowed in server.decisions if allowed}


WATCHED = {
    ("", "nodes", "watch"),
    ("", "pods", "watch"),
    ("", "namespaces", "watch"),
    ("nvidia.com", "nvidiadrivers", "watch"),
    ("resource.k8s.io", "resourceslices", "watch"),
    ("resource.k8s.io", "resourceclaims", "watch"),
}


@pytest.mark.django_db(transaction=True)
def test_kube_sync_lists_and_watches_as_nvkes_service_account(kubeapi, attach):
    objects.gpu_operator(kubeapi)
    kubeapi.create(objects.gpu_node("gpu-a"))
    cluster = attach(kubeapi)
    sync = kube_sync.ClusterSync(cluster, debounce_s=0.05, watch_timeout_s=2).start()
    try:
        wait_until(lambda: WATCHED <= used(kubeapi), timeout=15)
    finally:
        sync.close(timeout=10)
    assert refused(kubeapi) == set()
