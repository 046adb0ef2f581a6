"""The models whose changes the audit log records: one `register` line per model. Other apps add theirs
here (or in their own AppConfig.ready). Status fields that control loops rewrite are ignored, so the log
holds what people and automation asked for, not every reconcile step."""

from django.contrib.auth import get_user_model

from clusters.models import Cluster
from nodepools.models import Claim, NodePool
from nvke.tenancy.models import ApiToken, GpuQuota, Membership, Quota, Tenant
from telemetry.models import ClaimScaling, NodeToken, PoolRescaling
from upgrades.models import FleetRollout, UpgradeRun

from .recorder import register

CONTROL_LOOP_FIELDS = ("status", "status_reason", "status_message", "conditions")

# Provisioning writes the endpoint and the admin token (encrypted, so it would be "[secret]" anyway): they
# are the provider's output, not anyone's change, and the token is never recorded at all.
register(Cluster, ignore=(*CONTROL_LOOP_FIELDS, "endpoint", "admin_token"))
register(NodePool, ignore=CONTROL_LOOP_FIELDS)
register(Claim, ignore=("status", "pending_reason", "allocated_at"))
register(ApiToken, ignore=("last_used_at",), secret=("key_hash",))
register(Membership)
register(Tenant, tenant_of=lambda tenant: tenant.pk)
# Accounts belong to no tenant: operators read these entries in the admin (staff and superuser grants).
register(get_user_model(), tenant_of=lambda user: None, ignore=("last_login",), secret=("password",))
register(Quota)
register(GpuQuota)
# A run's status is what its controls change (start, pause, abort…), so it is recorded, the ticks'
# transitions too (actor system); their bookkeeping is not.
RUN_TICK_FIELDS = ("reason", "message", "tick_seq", "ticked_at", "max_unavailable_seen", "canary_done_at")
register(UpgradeRun, ignore=(*RUN_TICK_FIELDS, "failed_accepted", "finished_at"))
# Fleet rollouts span tenants: operators read these entries in the admin; each run is in its tenant's log.
register(FleetRollout, tenant_of=lambda rollout: None, ignore=("wave",))
register(NodeToken, secret=("key_hash",))
register(ClaimScaling, ignore=("state", "reason"))  # the rescaler's state
register(PoolRescaling)
