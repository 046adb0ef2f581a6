from django.conf import settings
from django.db import models


class AuditEntryQuerySet(models.QuerySet):
    def restrict(self, context) -> "AuditEntryQuerySet":
        if context is None:
            return self.none()
        return self.filter(tenant=context.tenant)


class AuditEntry(models.Model):
    """One change of one object: who, what (before/after of the changed fields), when, from where.
    Written by the signal handlers in audit/recorder.py, in the transaction of the change; never edited."""

    class Action(models.TextChoices):
        CREATE = "create"
        UPDATE = "update"
        DELETE = "delete"

    # Plain references (no database constraint, nothing cascades): the log outlives what it names, and
    # deleting a tenant, which records the deletes of its objects as it goes, must not trip over them.
    tenant = models.ForeignKey(
        "tenancy.Tenant",
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        null=True,
        blank=True,
        related_name="+",
    )
    actor_user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        null=True,
        blank=True,
        related_name="+",
    )
    actor_token = models.ForeignKey(
        "tenancy.ApiToken",
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        null=True,
        blank=True,
        related_name="+",
    )
    actor = models.CharField(max_length=200, help_text="Who, as it read at the time: user, token or system")
    ip = models.GenericIPAddressField(null=True, blank=True)
    action = models.CharField(max_length=8, choices=Action.choices)
    object_type = models.CharField(max_length=100, help_text="app_label.model")
    object_id = models.CharField(max_length=64)
    object_repr = models.CharField(max_length=200)
    changes = models.JSONField(default=dict, help_text="{field: [before, after]}")
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    objects = AuditEntryQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "audit entries"
        indexes = [
            models.Index(fields=["tenant", "-created_at"]),
            models.Index(fields=["object_type", "object_id"]),
        ]

    def __str__(self) -> str:
        return f"{self.actor} {self.action} {self.object_type} {self.object_id}"
