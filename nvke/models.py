"""Shared model pieces: tenant scoping and Kubernetes-style status conditions."""

from django.core.exceptions import ValidationError
from django.core.validators import RegexValidator
from django.db import models
from django.utils import timezone

from .errors import DomainError

dns_label = RegexValidator(
    r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$",
    "Use lower-case letters, digits and '-', starting and ending with a letter or digit (at most 63).",
)


def check_dns_label(value: str, field: str = "name") -> None:
    """Services check names themselves: not every caller comes through a serializer or a form."""
    try:
        dns_label(value)
    except ValidationError as error:
        raise DomainError(f"{field}: {error.messages[0]}", field=field) from None


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
