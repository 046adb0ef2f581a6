"""Cluster API's status flows back by watch: kube_sync's ManagementSync list-watches NVKE's Clusters and
MachineDeployments in the management cluster (real watches over HTTPS, in their own threads with their
own database connections), and each change takes the cluster's or the pool's next step at once."""

import pytest

from clusters.models import Cluster
from clusters.services import provision
from nodepools import kube_sync
from nodepools.models import NodePool
from nodepools.services import reconcile
from tests.kubeapi import capi
from tests.kubeapi.fixtures import wait_until

pytestmark = pytest.mark.django_db(transaction=True)
FAST = {"debounce_s": 0.05, "watch_timeout_s": 2}


@pytest.fixture
def clusterapi(settings, capi_setting):
    settings.NVKE_PROVIDER = "clusterapi"


@pytest.fixture
def tenant(owner):
    return owner.memberships.get().tenant


@pytest.fixture
def management_sync(clusterapi):
    started = []

    def start(**options):
        started.append(kube_sync.ManagementSync(**{**FAST, **options}).start())
        return started[-1]

    yield start
    for sync in started:
        sync.close(timeout=10)


def status_of(row) -> str:
    row.refresh_from_db()
    return row.status


def test_a_control_plane_coming_up_and_machines_joining_reach_the_rows(
    tenant, make_cluster, make_pool, management, cluster_api, workload, management_sync
):
    cluster = make_cluster(tenant, "train", status=Cluster.Status.PROVISIONING)
    provision(cluster.pk)
    assert status_of(cluster) == Cluster.Status.PROVISIONING
    management_sync()

    cluster_api.workloads[f"c{cluster.pk}"] = workload
    management.settle()  # the control plane comes up: the Cluster's status changes
    wait_until(lambda: status_of(cluster) == Cluster.Status.RUNNING, timeout=15)

    pool = make_pool(
        cluster,
        "h100",
        gpu_model="h100-sxm5-80gb",
        nodes=2,
        gpus_per_node=8,
        driver="570.133.20",
        status=NodePool.Status.PROVISIONING,
    )
    cluster_api.pending.add(f"c{cluster.pk}-h100")
    reconcile(pool.pk)
    assert status_of(pool) == "pending"
    cluster_api.pending.clear()
    management.settle()  # the machines boot: the MachineDeployment's status changes
    wait_until(lambda: status_of(pool) == "ready", timeout=15)
    assert pool.nodes.count() == 2


def test_each_shard_takes_only_its_own_clusters_and_names_nvke_gave(management_sync):
    sync = kube_sync.ManagementSync(shard=1, shards=2, **FAST)  # not started: its callback alone
    ours = next(pk for pk in range(1, 20) if kube_sync.shard_of(pk, 2) == 1)
    theirs = next(pk for pk in range(1, 20) if kube_sync.shard_of(pk, 2) == 0)
    for key, pool in ((f"c{ours}", ""), (f"c{ours}", "h100"), (f"c{theirs}", ""), ("someone-elses", "")):
        sync._seen(key, pool)
    assert sync._changed == {(ours, ""), (ours, "h100")}


def test_with_cluster_api_kube_sync_also_watches_the_clusters_nvke_provisioned(
    clusterapi, settings, tenant, make_cluster
):
    provisioned = make_cluster(tenant, "train", status=Cluster.Status.PROVISIONING)
    Cluster.objects.filter(pk=provisioned.pk).update(status=Cluster.Status.RUNNING)
    assert set(kube_sync.attached_clusters(0, 1)) == {provisioned.pk}
    settings.NVKE_PROVIDER = "simulator"
    assert kube_sync.attached_clusters(0, 1) == {}  # no provider recorded: NVKE_PROVIDER's
    assert not kube_sync.follows_cluster_api()
    # One Cluster API made keeps being followed when the operator switches NVKE_PROVIDER.
    Cluster.objects.filter(pk=provisioned.pk).update(provider="clusterapi")
    assert set(kube_sync.attached_clusters(0, 1)) == {provisioned.pk}
    assert kube_sync.follows_cluster_api()


def test_kube_sync_follows_cluster_api_once_the_management_cluster_is_configured(
    settings, tenant, make_cluster, management, cluster_api, workload, capi_setting, caplog
):
    import threading

    settings.NVKE_PROVIDER = "clusterapi"
    setting = {f.name: getattr(capi_setting, f.name) for f in capi_setting._meta.fields if f.name != "id"}
    capi_setting.delete()
    cluster = make_cluster(tenant, "train", status=Cluster.Status.PROVISIONING)
    stop = threading.Event()
    runner = threading.Thread(target=kube_sync.run, args=(stop,), kwargs={"poll_s": 0.1, **FAST}, daemon=True)
    runner.start()
    try:
        wait_until(lambda: "not following Cluster API" in caplog.text, timeout=10)
        from nvke.providers.clusterapi.models import ManagementCluster

        ManagementCluster.objects.create(**setting)
        provision(cluster.pk)  # its objects exist, its control plane has no machines yet
        assert status_of(cluster) == Cluster.Status.PROVISIONING
        cluster_api.workloads[f"c{cluster.pk}"] = workload
        management.settle()
        wait_until(lambda: status_of(cluster) == Cluster.Status.RUNNING, timeout=15)
    finally:
        stop.set()
        runner.join(timeout=15)
    assert not runner.is_alive()


def test_a_running_clusters_control_plane_health_is_mirrored_from_cluster_api(
    tenant, make_cluster, management, cluster_api, workload, management_sync
):
    cluster = make_cluster(tenant, "train", status=Cluster.Status.PROVISIONING)
    cluster_api.workloads[f"c{cluster.pk}"] = workload
    provision(cluster.pk)
    assert status_of(cluster) == Cluster.Status.RUNNING
    management_sync()

    def control_plane():
        cluster.refresh_from_db()
        return next((c for c in cluster.conditions if c["type"] == "ControlPlaneAvailable"), None)

    wait_until(lambda: (control_plane() or {}).get("status") == "True", timeout=15)
    cluster_api.hold.add(f"c{cluster.pk}")  # its control plane machines go
    management.settle()
    wait_until(lambda: control_plane()["status"] == "False", timeout=15)
    assert (control_plane()["reason"], cluster.status) == ("NotAvailable", Cluster.Status.RUNNING)
    assert "control plane machines are available" in control_plane()["message"]


def test_the_management_watch_lists_again_after_410_gone(capi_setting, management):
    from nvke.providers.clusterapi.management import load
    from nvke.providers.clusterapi.watch import ManagementWatch
    from nvke.providers.kubernetes import streams

    def cluster(name):
        labels = {"nvke.io/cluster": name}
        metadata = {"name": name, "namespace": "nvke", "labels": labels}
        # v1beta2's Cluster spec has minProperties: 1
        spec = {
            "controlPlaneRef": {"apiGroup": capi.CONTROL_PLANE, "kind": "KubeadmControlPlane", "name": name}
        }
        return {
            "apiVersion": "cluster.x-k8s.io/v1beta2",
            "kind": "Cluster",
            "metadata": metadata,
            "spec": spec,
        }

    management.create(cluster("c7"))
    seen = []
    watch = ManagementWatch(
        load(), changed=lambda key, pool: seen.append(key), failed=print, watch_timeout_s=2
    )
    streams.hub().call(watch.watches[0].list())  # the Clusters' list, as the watch begins
    management.create(cluster("c8"))
    management.compact()  # the list's resourceVersion is forgotten: the watch from it gets 410 Gone
    watch.start()
    try:
        wait_until(lambda: "c8" in seen, timeout=10)  # only a new list shows it
    finally:
        watch.close(timeout=10)
    lists = [q for _, path, q, _ in management.requests if path.endswith("/clusters") and "watch" not in q]
    assert len(lists) == 2 and seen[0] == "c7"


def test_add_ons_released_in_the_background_reach_the_rows(
    tenant, make_cluster, management, cluster_api, workload, management_sync
):
    cluster = make_cluster(tenant, "train", status=Cluster.Status.PROVISIONING)
    cluster_api.workloads[f"c{cluster.pk}"] = workload
    cluster_api.installing.add("gpu-operator")
    provision(cluster.pk)
    assert status_of(cluster) == Cluster.Status.RUNNING
    assert cluster.addons.get(name="gpu-operator").status == "installing"
    management_sync()

    cluster_api.installing.clear()
    management.settle()  # the release is deployed: its HelmChartProxy's status changes
    wait_until(lambda: not cluster.addons.exclude(status="installed").exists(), timeout=15)
    cluster.refresh_from_db()
    assert next(c for c in cluster.conditions if c["type"] == "AddonsReady")["status"] == "True"
