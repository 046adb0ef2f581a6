"""Automatic Kubernetes upgrades of the clusters whose tenant allows them (`Cluster.auto_upgrade`): once
the version a control plane or a pool runs is within control_plane.NOTICE_DAYS of its end of support (or
past it), the control plane moves one minor, then each such pool follows it, each only while the
cluster's maintenance windows allow (never with an override). Beat's resync calls `step`; what could not
start says why in the cluster's AutoUpgrade condition."""

import datetime
import logging

from django.utils import timezone

from catalog.models import KubernetesVersion
from clusters import skew
from clusters.events import publish_cluster
from clusters.models import Cluster
from nvke.errors import DomainError

from . import control_plane, maintenance, services
from .models import UpgradeRun
from .run_lifecycle import LIVE

log = logging.getLogger(__name__)
CONDITION = "AutoUpgrade"


def _near_end(version: str, ends: dict[str, datetime.date | None], today: datetime.date) -> bool:
    end = ends.get(version)
    return end is not None and (end - today).days <= control_plane.NOTICE_DAYS


def _next_minor(cluster: Cluster) -> str:
    """The one minor above the control plane's that the catalog has and the skew rules allow, or ""."""
    current = skew.minor_of(cluster.kubernetes_version.version)
    allowed = [version for version, refusal in control_plane.options(cluster) if refusal is None]
    return next((v for v in allowed if skew.minor_of(v) == (current[0], current[1] + 1)), "")


def _say(cluster: Cluster, ok: bool, reason: str, message: str) -> None:
    before = next(((c["reason"], c["message"]) for c in cluster.conditions if c["type"] == CONDITION), None)
    cluster.set_condition(CONDITION, ok, reason, message)
    if before != (reason, message):
        Cluster.objects.filter(pk=cluster.pk).update(conditions=cluster.conditions)
        publish_cluster(cluster)


def _upgrade(cluster: Cluster, ends: dict, today: datetime.date) -> None:
    """One cluster's step: its control plane first, then its pools, one thing at a time."""
    if cluster.kubernetes_target_id or UpgradeRun.objects.filter(
        pool__cluster=cluster, status__in=list(LIVE)
    ):
        return  # one upgrade at a time; the next step goes on
    if _near_end(cluster.kubernetes_version.version, ends, today):
        target = _next_minor(cluster)
        if not target:
            _say(
                cluster,
                False,
                "NoNewerVersion",
                "No newer Kubernetes version the skew rules allow is offered.",
            )
        elif maintenance.decide(cluster, maintenance.CONTROL_PLANE).allowed:
            control_plane.start(cluster, target)
            _say(cluster, True, "ControlPlaneStarted", f"Upgrading the control plane to {target} by itself.")
        else:
            _say(
                cluster, True, "WaitingForWindow", f"The control plane moves to {target} in the next window."
            )
        return
    version = cluster.kubernetes_version.version
    for pool in cluster.node_pools.exclude(kubernetes_version__in=["", version]).order_by("name"):
        if not _near_end(pool.kubernetes_version, ends, today):
            continue
        if not maintenance.decide(cluster, maintenance.POOL_KUBERNETES).allowed:
            _say(
                cluster, True, "WaitingForWindow", f"Pool {pool.name} moves to {version} in the next window."
            )
            return
        services.create_run(context=None, pool=pool, kubernetes_version=version)
        _say(cluster, True, "PoolStarted", f"Upgrading pool {pool.name} to {version} by itself.")
        return


def step(now: datetime.datetime | None = None) -> None:
    """Start what is due on every cluster that allows automatic upgrades."""
    today = timezone.localdate(now or timezone.now())
    ends = dict(KubernetesVersion.objects.values_list("version", "end_of_support"))
    clusters = Cluster.objects.filter(
        auto_upgrade=True, attached=False, status=Cluster.Status.RUNNING, kubernetes_version__isnull=False
    ).select_related("kubernetes_version")
    for cluster in clusters:
        try:
            _upgrade(cluster, ends, today)
        except DomainError as error:  # a rule the plan breaks, or a pool being deleted: say it, go on
            log.info("cluster %s: automatic upgrade refused: %s", cluster.pk, error.message)
            _say(cluster, False, "Refused", error.message)
