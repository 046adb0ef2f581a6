"""The platform's models whose changes the audit log records: one `register` line per model. Each app
registers its own models in its AppConfig.ready (clusters, nodepools, telemetry, upgrades), so the audit
log depends on no app above it."""

from django.contrib.auth import get_user_model

from nvke.tenancy.models import ApiToken, GpuQuota, Invitation, Membership, Quota, Tenant

from .recorder import register

register(ApiToken, ignore=("last_used_at",), secret=("key_hash",))
register(Membership)
register(Invitation)
register(Tenant, tenant_of=lambda tenant: tenant.pk)
# Accounts belong to no tenant: operators read these entries in the admin (staff and superuser grants).
register(get_user_model(), tenant_of=lambda user: None, ignore=("last_login",), secret=("password",))
register(Quota)
register(GpuQuota)
