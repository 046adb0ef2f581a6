"""Shared model pieces: tenant scoping and Kubernetes-style status conditions."""

from django.db import models
from django.utils import timezone


class TenantScopedQuerySet(models.QuerySet):
    def restrict(self, context) -> "TenantScopedQuerySet":
        """Only the objects of the request's tenant; nothing when the request has none."""
        if context is None:
            return self.none()
        return self.filter(tenant=context.tenant)


class Conditions(models.Model):
    """Status as Kubernetes reads it: a phase plus conditions (type, status, reason, message, time)."""

    status_reason = models.CharField(max_length=64, blank=True)
    status_message = models.TextField(blank=True)
    conditions = models.JSONField(default=list, blank=True)

    class Meta:
        abstract = True

    def set_condition(self, type_: str, status: bool, reason: str, message: str = "") -> None:
        """Record a condition; its transition time moves only when its status flips."""
        now = timezone.now().isoformat()
        value = "True" if status else "False"
        for condition in self.conditions:
            if condition["type"] == type_:
                if condition["status"] != value:
                    condition["lastTransitionTime"] = now
                condition.update(status=value, reason=reason, message=message)
                return
        self.conditions.append(
            {"type": type_, "status": value, "reason": reason, "message": message, "lastTransitionTime": now}
        )
