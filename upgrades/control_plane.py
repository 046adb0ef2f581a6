"""Upgrades of a cluster's control plane: one minor version at a time, never leaving a pool's kubelets
more than the supported skew behind (clusters.skew), inside the cluster's maintenance windows unless
started with an override. The provider carries it out (Cluster API: the KubeadmControlPlane's version,
which rolls its machines); `step` asks it again until it reports the target, then the cluster runs
that version. A step is idempotent, so a lost one is only late: beat's resync steps every cluster
with an upgrade in flight."""

import datetime
import logging

from django.db import transaction
from django.utils import timezone

from catalog.compatibility import Refusal
from catalog.models import KubernetesVersion
from clusters import skew
from clusters.events import publish_cluster
from clusters.models import Cluster
from clusters.services import cluster_infrastructure, cluster_key
from nvke import jobs
from nvke.errors import Conflict, Incompatible
from nvke.providers.base import ProviderError

from . import maintenance
from .compatibility import image_options, kubernetes_options
from .models import UpgradeRun
from .run_lifecycle import LIVE

log = logging.getLogger(__name__)
CONDITION = "ControlPlaneUpToDate"
NOTICE_DAYS = 60  # a version this close to its end of support gets a notice


def refusal(cluster: Cluster, version: str, catalog: set[str]) -> Refusal | None:
    """Why the cluster's control plane cannot move to `version`; None when it can."""
    if cluster.attached or cluster.kubernetes_version is None:
        return Refusal(
            "not_managed",
            f"Cluster {cluster.name} is attached: its control plane is its owner's to upgrade, not NVKE's.",
        )
    if version not in catalog:
        return Refusal("unknown_version", f"Kubernetes {version!r} is not in the catalog.")
    pools = dict(cluster.node_pools.exclude(kubernetes_version="").values_list("name", "kubernetes_version"))
    return skew.control_plane_refusal(cluster.kubernetes_version.version, version, pools)


def options(cluster: Cluster) -> list[tuple[str, Refusal | None]]:
    """Every catalog version with why the control plane cannot move to it (None: it can), newest first."""
    catalog = set(KubernetesVersion.objects.values_list("version", flat=True))
    ordered = sorted(catalog, key=skew.minor_of, reverse=True)
    return [(version, refusal(cluster, version, catalog)) for version in ordered]


def support_notice(version: KubernetesVersion | None, today: datetime.date) -> str:
    """What a tenant should know about the end of support of the version their control plane runs."""
    if version is None or version.end_of_support is None:
        return ""
    end = version.end_of_support
    if end < today:
        return f"Kubernetes {version.version} reached its end of support on {end}: upgrade the control plane."
    if (end - today).days <= NOTICE_DAYS:
        return (
            f"Kubernetes {version.version} reaches its end of support on {end}, in {(end - today).days} "
            "days: plan its upgrade."
        )
    return ""


def _options(rows: list[tuple[str, Refusal | None]]) -> list[dict]:
    return [
        {
            "version": version,
            "allowed": broken is None,
            "rule": broken.rule if broken else "",
            "message": broken.message if broken else "",
        }
        for version, broken in rows
    ]


def _images(pool) -> list[dict]:
    return [
        {
            "image": image.name,
            "os": image.os,
            "kernel_version": image.kernel_version,
            "driver": image.driver_release.version if image.driver_release else "",
            "allowed": not refusals,
            "rule": refusals[0].rule if refusals else "",
            "message": refusals[0].message if refusals else "",
        }
        for image, refusals in image_options(pool)
    ]


def document(cluster: Cluster) -> dict:
    """The cluster's versions as the API and the UI give them: the control plane's (with its end of
    support, any upgrade in flight and where each catalog version stands) and each pool's, with its
    node image and where each catalog image stands."""
    condition = next((c for c in cluster.conditions if c["type"] == CONDITION), None)
    version = cluster.kubernetes_version
    return {
        "version": version.version if version else "",
        "auto_upgrade": cluster.auto_upgrade,
        "target": cluster.kubernetes_target.version if cluster.kubernetes_target else "",
        "end_of_support": version.end_of_support if version else None,
        "notice": support_notice(version, timezone.localdate()),
        "reason": condition["reason"] if condition else "",
        "message": condition["message"] if condition else "",
        "options": _options(options(cluster)),
        "pools": [
            {
                "id": pool.pk,
                "name": pool.name,
                "version": pool.kubernetes_version,
                "options": _options(kubernetes_options(pool)),
                "image": pool.node_image.name if pool.node_image else "",
                "image_options": _images(pool),
            }
            for pool in cluster.node_pools.select_related(
                "cluster__kubernetes_version", "node_image", "driver_release"
            ).order_by("name")
        ],
    }


def start(cluster: Cluster, version: str, *, override_window: bool = False) -> Cluster:
    """Start upgrading the control plane to `version`: 400 naming the rule it breaks, 409 when the cluster
    is not running, already upgrading, has a pool upgrade in flight, or is outside its maintenance
    windows without `override_window`."""
    with transaction.atomic():
        cluster = (
            Cluster.objects.select_for_update(of=("self",))
            .select_related("kubernetes_version")
            .get(pk=cluster.pk)
        )
        catalog = set(KubernetesVersion.objects.values_list("version", flat=True))
        if broken := refusal(cluster, version, catalog):
            raise Incompatible(broken.message, field="kubernetes_version", code=broken.rule)
        if cluster.status != Cluster.Status.RUNNING:
            raise Conflict(
                f"Cluster {cluster.name} is {cluster.status}.", field="cluster", code="not_running"
            )
        if cluster.kubernetes_target_id is not None:
            raise Conflict(
                f"Cluster {cluster.name}'s control plane is already being upgraded.",
                code="upgrade_in_progress",
            )
        if UpgradeRun.objects.filter(pool__cluster=cluster, status__in=list(LIVE)).exists():
            raise Conflict(
                f"A pool of cluster {cluster.name} is being upgraded; upgrade the control plane once it "
                "is done.",
                code="pool_upgrade_in_progress",
            )
        overridden = maintenance.started_outside_window(cluster, override_window, maintenance.CONTROL_PLANE)
        current = cluster.kubernetes_version.version
        cluster.kubernetes_target = KubernetesVersion.objects.get(version=version)
        note = " Started outside the maintenance windows on purpose." if overridden else ""
        cluster.set_condition(
            CONDITION, False, "Upgrading", f"Upgrading the control plane from {current} to {version}.{note}"
        )
        cluster.save()
        publish_cluster(cluster)
        jobs.enqueue("upgrades.tasks.step_control_plane", cluster.pk)
    return cluster


def step(cluster_id: int) -> bool:
    """Ask the provider for the target and record what it reports; True once the upgrade is over (done,
    failed, or none in flight)."""
    cluster = Cluster.objects.select_related("kubernetes_target").filter(pk=cluster_id).first()
    if cluster is None or cluster.kubernetes_target is None:
        return True
    target = cluster.kubernetes_target.version
    try:
        running = cluster_infrastructure(cluster).upgrade_control_plane(cluster_key(cluster), target)
        failure = None
    except ProviderError as error:
        running, failure = "", error
    with transaction.atomic():
        cluster = Cluster.objects.select_for_update().filter(pk=cluster_id).first()
        if cluster is None or cluster.kubernetes_target_id is None:
            return True
        if failure is not None:
            log.warning("cluster %s: control plane upgrade refused: %s", cluster_id, failure.message)
            cluster.kubernetes_target = None
            cluster.set_condition(
                CONDITION, False, failure.reason, f"The upgrade to {target} failed: {failure.message}"
            )
        elif running == target:
            cluster.kubernetes_version, cluster.kubernetes_target = cluster.kubernetes_target, None
            cluster.set_condition(CONDITION, True, "Upgraded", f"The control plane runs Kubernetes {target}.")
        else:
            return False  # still rolling: the next step asks again
        cluster.save()
        publish_cluster(cluster)
    return True
