import hashlib
import secrets

from django.conf import settings
from django.db import models
from django.utils import timezone

from nvke.models import TenantScopedQuerySet

from .roles import Role


class Tenant(models.Model):
    """An organisation: owns clusters, pools and claims; its members act in roles."""

    name = models.CharField(max_length=100, unique=True)
    slug = models.SlugField(max_length=63, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Membership(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=10, choices=[(r.value, r.name.title()) for r in Role])
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "user"], name="uniq_membership")]
        ordering = ["tenant__name", "user__username"]

    def __str__(self) -> str:
        return f"{self.user} in {self.tenant} ({self.role})"


class Invitation(models.Model):
    """An offer of a role in a tenant to whoever holds one username, until they accept or decline it, it
    is revoked, or it expires. Kept by username whether or not such a user exists, so inviting tells
    nobody which usernames exist; only the user of that name sees it."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="invitations")
    username = models.CharField(max_length=150)
    role = models.CharField(max_length=10, choices=[(r.value, r.name.title()) for r in Role])
    invited_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()

    objects = TenantScopedQuerySet.as_manager()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "username"], name="uniq_invitation")]
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.username} to {self.tenant} ({self.role})"


def hash_token(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


class ApiToken(models.Model):
    """A bearer token for automation, bound to one user in one tenant. Only its hash is stored; the
    raw value is shown once, at creation. A read-only token cannot write, whatever its user's role.

    An operator token has no tenant: a staff user's, it reaches what the operator reaches (the fleet
    endpoints) and acts in no tenant. It stops working when its user is no longer staff."""

    PREFIX = "nvke_"

    class Scope(models.TextChoices):
        READ_ONLY = "read-only"
        READ_WRITE = "read-write"

    tenant = models.ForeignKey(
        Tenant,
        on_delete=models.CASCADE,
        related_name="tokens",
        null=True,
        blank=True,
        help_text="Empty: an operator token (a staff user's, for the fleet endpoints)",
    )
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100)
    key_prefix = models.CharField(max_length=16, help_text="First characters of the token, to recognise it.")
    key_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    scope = models.CharField(max_length=10, choices=Scope.choices, default=Scope.READ_WRITE)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.key_prefix}…)"

    @classmethod
    def issue(
        cls, *, tenant: Tenant | None, user, name: str, expires_at=None, scope: str = Scope.READ_WRITE
    ) -> tuple["ApiToken", str]:
        raw = cls.PREFIX + secrets.token_urlsafe(32)
        token = cls.objects.create(
            tenant=tenant,
            user=user,
            name=name,
            key_prefix=raw[:12],
            key_hash=hash_token(raw),
            expires_at=expires_at,
            scope=scope,
        )
        return token, raw

    @property
    def is_active(self) -> bool:
        now = timezone.now()
        return self.revoked_at is None and (self.expires_at is None or self.expires_at > now)

    @property
    def read_only(self) -> bool:
        return self.scope == self.Scope.READ_ONLY

    @property
    def operator(self) -> bool:
        return self.tenant_id is None


class Quota(models.Model):
    """Limits of one tenant, set by operators in the admin. An empty limit means unlimited.

    GPU use of node pools counts each pool's ceiling, gpus_per_node × max_nodes, so an autoscaler can
    never grow a tenant past its quota. Claim limits add up what every claim of the tenant asks for
    (pending or placed): see nvke/tenancy/quotas.py."""

    tenant = models.OneToOneField(Tenant, on_delete=models.CASCADE, related_name="quota")
    max_clusters = models.PositiveIntegerField(null=True, blank=True)
    max_claim_gpu_memory_mib = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="GPU memory all claims may ask for together (MiB)"
    )
    max_claim_compute_percent = models.PositiveIntegerField(
        null=True, blank=True, help_text="Compute share all claims may ask for together; 100 = one GPU"
    )
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"quota of {self.tenant}"


class GpuQuota(models.Model):
    """How many GPUs of one model a tenant's node pools may reach (gpus_per_node × max_nodes). A row
    without a tenant is the platform's default for that model: it applies to every tenant without a row
    of its own (and NVKE_DEFAULT_GPU_QUOTA to models with neither; claims/quotas.py)."""

    tenant = models.ForeignKey(
        Tenant,
        on_delete=models.CASCADE,
        related_name="gpu_quotas",
        null=True,
        blank=True,
        help_text="Empty: the platform default, for every tenant without a quota of its own for this model",
    )
    gpu_model = models.ForeignKey("catalog.GpuModel", on_delete=models.CASCADE, related_name="+")
    max_gpus = models.PositiveIntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "gpu_model"], name="uniq_gpu_quota"),
            models.UniqueConstraint(
                fields=["gpu_model"], condition=models.Q(tenant__isnull=True), name="uniq_default_gpu_quota"
            ),
        ]
        ordering = ["tenant", "gpu_model"]

    def __str__(self) -> str:
        return f"{self.tenant or 'platform default'}: {self.max_gpus} × {self.gpu_model_id}"
