"""Cluster lifecycle: create, provision (via the provider), attach, delete. Writes only."""

import copy
import re

from django.conf import settings
from django.core.cache import cache
from django.db import IntegrityError, connection, transaction

from catalog.models import KubernetesVersion, Region
from clusters import addons, quotas
from clusters.events import publish_cluster
from clusters.models import Cluster, ClusterAddon
from nvke import jobs
from nvke.encryption import Undecryptable
from nvke.errors import Conflict, DomainError
from nvke.models import check_dns_label
from nvke.providers import get_infrastructure, operations_for
from nvke.providers.base import (
    ClusterOperations,
    ClusterRef,
    Infrastructure,
    ProviderError,
    ProvisioningInProgress,
)
from nvke.providers.kubernetes import attach
from nvke.tenancy.context import TenantContext
from nvke.tenancy.quotas import lock_tenant


def cluster_key(cluster: Cluster) -> str:
    """The name the provider knows the cluster by."""
    return f"c{cluster.pk}"


def cluster_ref(cluster: Cluster) -> ClusterRef:
    """How operations reach the cluster: its endpoint, decrypted admin token and CA bundle."""
    return ClusterRef(
        name=cluster_key(cluster),
        endpoint=cluster.endpoint,
        token=cluster.admin_token,
        ca_bundle=cluster.ca_bundle,
        provider=cluster.provider or ("kubernetes" if cluster.attached else ""),
    )


def cluster_operations(cluster: Cluster) -> ClusterOperations:
    """The provider's operations bound to this (provisioned or attached) cluster."""
    if isinstance(cluster.admin_token, Undecryptable):
        raise ProviderError(
            "SecretUndecryptable",
            f"Cluster {cluster.name}'s stored token does not decrypt with NVKE_ENCRYPTION_KEY: restore the "
            "key it was stored with (keys rotate by listing the new one first and keeping the old).",
        )
    return operations_for(cluster_ref(cluster))


def cluster_infrastructure(cluster: Cluster) -> Infrastructure:
    """What makes and removes the cluster's machines (adopts and releases them, when attached)."""
    return get_infrastructure(cluster_ref(cluster))


def _free_name(context: TenantContext, name: str) -> Conflict:
    """Refuse a bad or taken name now; return the Conflict to raise if a concurrent create takes it."""
    check_dns_label(name)
    duplicate = Conflict(f"A cluster named {name!r} already exists.", field="name", code="duplicate")
    if Cluster.objects.filter(tenant=context.tenant, name=name).exists():
        raise duplicate
    return duplicate


def create_cluster(
    *,
    context: TenantContext,
    name: str,
    kubernetes_version: KubernetesVersion,
    region: Region,
    control_plane_nodes: int,
) -> Cluster:
    duplicate = _free_name(context, name)
    try:
        with transaction.atomic():
            quotas.check_cluster(context.tenant)
            cluster = Cluster(
                tenant=context.tenant,
                name=name,
                kubernetes_version=kubernetes_version,
                region=region,
                control_plane_nodes=control_plane_nodes,
                status=Cluster.Status.PROVISIONING,
                provider=settings.NVKE_PROVIDER,
            )
            cluster.set_condition("Ready", False, "Provisioning", "Creating the control plane.")
            cluster.save()
            publish_cluster(cluster)
            jobs.enqueue("clusters.tasks.provision_cluster", cluster.pk)
    except IntegrityError:  # a concurrent create won the name
        raise duplicate from None
    return cluster


# Where each refused check points in the attach form (None: the cluster itself, not a field).
ATTACH_FIELDS = {
    "AddressRefused": "endpoint",
    "Unreachable": "endpoint",
    "Timeout": "endpoint",
    "TLSError": "ca_bundle",
    "Unauthorized": "token",
    "Forbidden": "token",
}


def attach_cluster(
    *, context: TenantContext, name: str, endpoint: str, token: str, ca_bundle: str = ""
) -> Cluster:
    """Attach a running cluster: check it through the Kubernetes provider (attach.inspect), and save it
    only if every check passed. A refusal raises a DomainError whose code is the first failed check's
    reason and whose details list every failed check; nothing is written.

    The checks call the tenant's endpoint for up to attach.DEADLINE_S: the request's database connection
    is handed back first (connections are pooled; a stalled endpoint must not hold one), one attach per
    tenant runs at a time, and the tenant's cap and the endpoint's uniqueness are checked before the
    calls and again, under the tenant's lock, before the save."""
    duplicate = _free_name(context, name)
    if not endpoint.startswith("https://"):
        raise DomainError("The API endpoint must be an https:// URL.", field="endpoint", code="invalid")
    endpoint = endpoint.rstrip("/")
    _check_attachable(context.tenant, endpoint)
    ref = ClusterRef(name=name, endpoint=endpoint, token=token, ca_bundle=ca_bundle, provider="kubernetes")
    lock = f"nvke:attach:{context.tenant.pk}"
    if not cache.add(lock, 1, timeout=int(attach.DEADLINE_S) + 15):
        raise Conflict(
            "Another attach of this tenant is being checked: try again when it is done.",
            code="attach_in_progress",
        )
    try:
        if not connection.in_atomic_block:  # (a test's transaction keeps it)
            connection.close()  # back to the pool: the checks below may take attach.DEADLINE_S
        facts = attach.inspect(ref)
    except attach.AttachRefused as refused:
        first = refused.failures[0]
        raise DomainError(
            first.message,
            field=ATTACH_FIELDS.get(first.reason),
            code=_snake(first.reason),
            checks=[{"check": f.check, "reason": f.reason, "message": f.message} for f in refused.failures],
        ) from None
    finally:
        cache.delete(lock)
    try:
        with transaction.atomic():
            quotas.check_cluster(context.tenant)
            lock_tenant(context.tenant)
            _check_attachable(context.tenant, endpoint)
            cluster = Cluster(
                tenant=context.tenant,
                name=name,
                attached=True,
                provider="kubernetes",
                control_plane_nodes=0,
                status=Cluster.Status.RUNNING,
                endpoint=endpoint,
                admin_token=token,
                ca_bundle=ca_bundle,
                observed=facts.as_json(),
            )
            cluster.set_condition(
                "Ready", True, "Attached", f"Kubernetes {facts.version} passed every check."
            )
            cluster.set_condition(
                "Reachable", True, "Answered", f"The API server answered as {facts.version}."
            )
            cluster.save()
            publish_cluster(cluster)
    except IntegrityError:
        raise duplicate from None
    return cluster


def _check_attachable(tenant, endpoint: str) -> None:
    """Refuse an attach over the tenant's cap (NVKE_MAX_ATTACHED_CLUSTERS) or of an endpoint the tenant
    attached already: each attached cluster costs kube_sync its watches and connections."""
    attached = Cluster.objects.filter(tenant=tenant, attached=True).exclude(status=Cluster.Status.DELETING)
    if same := attached.filter(endpoint__in=(endpoint, endpoint + "/")).first():
        raise Conflict(
            f"This endpoint is attached already, as cluster {same.name}.",
            field="endpoint",
            code="already_attached",
        )
    cap = settings.NVKE_MAX_ATTACHED_CLUSTERS
    if cap is not None and attached.count() >= cap:
        raise DomainError(
            f"A tenant attaches at most {cap} clusters: detach one first.",
            code="attached_cluster_limit",
            limit=cap,
        )


def record_observation(cluster_id: int, *, reachable: bool, reason: str, message: str, **observed) -> bool:
    """What kube_sync found on an attached cluster: the Reachable condition and facts merged into
    `observed` (GPU nodes, nodes outside every pool). Saved and published only when something changed;
    True when it did."""
    with transaction.atomic():
        cluster = Cluster.objects.select_for_update().filter(pk=cluster_id, attached=True).first()
        if cluster is None:
            return False
        before = (copy.deepcopy(cluster.conditions), dict(cluster.observed))
        cluster.set_condition("Reachable", reachable, reason, message)
        cluster.observed = {**cluster.observed, **observed}
        if (cluster.conditions, cluster.observed) == before:
            return False
        cluster.save(update_fields=["conditions", "observed", "updated_at"])
        publish_cluster(cluster)
    return True


def record_control_plane(cluster_id: int, available: bool, reason: str, message: str) -> bool:
    """What the provider reports of a running cluster's control plane (Cluster API's
    ControlPlaneAvailable): the ControlPlaneAvailable condition, saved and published only when it
    changed; True when it did."""
    with transaction.atomic():
        cluster = (
            Cluster.objects.select_for_update().filter(pk=cluster_id, status=Cluster.Status.RUNNING).first()
        )
        if cluster is None:
            return False
        before = copy.deepcopy(cluster.conditions)
        cluster.set_condition("ControlPlaneAvailable", available, reason, message)
        if cluster.conditions == before:
            return False
        cluster.save(update_fields=["conditions", "updated_at"])
        publish_cluster(cluster)
    return True


def _snake(reason: str) -> str:
    """TLSError → tls_error, NoGpuOperator → no_gpu_operator."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", reason).lower()


def provision(cluster_id: int) -> None:
    """One idempotent step: ask the provider for the control plane, record the outcome. A control plane
    still coming up (ProvisioningInProgress) keeps the cluster provisioning with what it waits for; the
    next step (beat's resync, or the provider's watch) asks again."""
    cluster = Cluster.objects.select_related("region", "kubernetes_version").filter(pk=cluster_id).first()
    if cluster is None or cluster.status != Cluster.Status.PROVISIONING:
        return
    provider = cluster_infrastructure(cluster)
    key = cluster_key(cluster)
    version = cluster.kubernetes_version.version if cluster.kubernetes_version else ""
    try:
        access = provider.provision_cluster(key, cluster.region.name, cluster.control_plane_nodes, version)
        installed = provider.install_addons(key, addons.versions())
        failure = None
    except ProviderError as error:
        failure = error
    with transaction.atomic():
        cluster = Cluster.objects.select_for_update().filter(pk=cluster_id).first()
        if cluster is None or cluster.status != Cluster.Status.PROVISIONING:
            return  # deleted meanwhile: the teardown owns it now
        if isinstance(failure, ProvisioningInProgress):
            _record_waiting(cluster, failure)
            return
        if failure:
            cluster.status = Cluster.Status.FAILED
            cluster.status_reason, cluster.status_message = failure.reason, failure.message
            cluster.set_condition("Ready", False, failure.reason, failure.message)
        else:
            cluster.status = Cluster.Status.RUNNING
            cluster.endpoint = access.endpoint
            cluster.admin_token = access.token
            cluster.ca_bundle = access.ca_bundle
            _record_addons(cluster, installed)
            cluster.status_reason, cluster.status_message = "", ""
            cluster.set_condition("Ready", True, "Provisioned", "The control plane is serving.")
        cluster.save()
        publish_cluster(cluster)
        if not failure:
            for pool_id in cluster.node_pools.values_list("pk", flat=True):
                jobs.enqueue("nodepools.tasks.reconcile_pool", pool_id)


def _record_waiting(cluster: Cluster, waiting: ProvisioningInProgress) -> None:
    """The Ready condition says what provisioning waits for; saved and published only when it changed."""
    before = copy.deepcopy(cluster.conditions)
    cluster.set_condition("Ready", False, waiting.reason, waiting.message)
    if cluster.conditions != before:
        cluster.save(update_fields=["conditions", "updated_at"])
        publish_cluster(cluster)


def _record_addons(cluster: Cluster, installed) -> None:
    """One row per add-on, updated in place on a repeated provisioning step."""
    for addon in installed:
        ClusterAddon.objects.update_or_create(
            cluster=cluster,
            name=addon.name,
            defaults={"version": addon.version, "status": addon.status, "message": addon.message[:300]},
        )
    failed = [a.name for a in installed if a.status == ClusterAddon.Status.FAILED]
    installing = [a.name for a in installed if a.status == ClusterAddon.Status.INSTALLING]
    if failed:
        cluster.set_condition("AddonsReady", False, "AddonFailed", f"Not installed: {', '.join(failed)}.")
    elif installing:
        cluster.set_condition("AddonsReady", False, "Installing", f"Installing: {', '.join(installing)}.")
    else:
        cluster.set_condition("AddonsReady", True, "Installed", "The GPU stack add-ons are installed.")


def refresh_addons(cluster_id: int) -> bool:
    """A running cluster's add-ons not installed yet, as its provider reports them now (a provider that
    installs them in the background: Cluster API's add-on provider); saved and published only when they
    changed. True when they did."""
    cluster = Cluster.objects.filter(pk=cluster_id, status=Cluster.Status.RUNNING).first()
    if cluster is None or not cluster.addons.exclude(status=ClusterAddon.Status.INSTALLED).exists():
        return False
    try:
        installed = cluster_infrastructure(cluster).install_addons(cluster_key(cluster), addons.versions())
    except ProviderError:
        return False  # the provider cannot say now: the next refresh asks again
    with transaction.atomic():
        cluster = (
            Cluster.objects.select_for_update().filter(pk=cluster_id, status=Cluster.Status.RUNNING).first()
        )
        if cluster is None:
            return False
        before = (copy.deepcopy(cluster.conditions), _addon_rows(cluster))
        _record_addons(cluster, installed)
        if (cluster.conditions, _addon_rows(cluster)) == before:
            return False
        cluster.save(update_fields=["conditions", "updated_at"])
        publish_cluster(cluster)
    return True


def _addon_rows(cluster: Cluster) -> list[tuple]:
    return sorted(cluster.addons.values_list("name", "version", "status", "message"))


def delete_cluster(cluster: Cluster) -> Cluster:
    """Mark the cluster and its pools for deletion; a task tears them down."""
    with transaction.atomic():
        cluster = Cluster.objects.select_for_update().get(pk=cluster.pk)
        if cluster.status == Cluster.Status.DELETING:
            return cluster
        cluster.status = Cluster.Status.DELETING
        cluster.status_reason, cluster.status_message = (
            "Deleting",
            "Tearing down node pools and control plane.",
        )
        cluster.set_condition("Ready", False, "Deleting", cluster.status_message)
        cluster.save()
        cluster.node_pools.update(status="deleting")
        publish_cluster(cluster)
        jobs.enqueue("clusters.tasks.teardown_cluster", cluster.pk)
    return cluster


def teardown(cluster_id: int) -> None:
    """Delete every pool's nodes, then the control plane, then the rows. Safe to repeat."""
    cluster = Cluster.objects.filter(pk=cluster_id, status=Cluster.Status.DELETING).first()
    if cluster is None:
        return
    provider = cluster_infrastructure(cluster)
    key = cluster_key(cluster)
    for pool_name in cluster.node_pools.values_list("name", flat=True):
        provider.delete_pool(key, pool_name)
    provider.delete_cluster(key)
    with transaction.atomic():
        publish_cluster(cluster, "cluster.deleted")
        cluster.delete()
