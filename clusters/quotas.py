"""The clusters quota: the tenant's clusters that are not being deleted (see nvke/tenancy/quotas.py)."""

from clusters.models import Cluster
from nvke.tenancy.models import Tenant
from nvke.tenancy.quotas import lock_tenant, quota_of, refuse


def clusters_used(tenant: Tenant) -> int:
    return Cluster.objects.filter(tenant=tenant).exclude(status=Cluster.Status.DELETING).count()


def check_cluster(tenant: Tenant) -> None:
    """Call before saving a new cluster."""
    quota = quota_of(tenant)
    if quota is None or quota.max_clusters is None:
        return
    lock_tenant(tenant)
    used = clusters_used(tenant)
    if used + 1 > quota.max_clusters:
        refuse("max_clusters", "clusters", used, 1, quota.max_clusters)
