"""Small display filters and tags for the dashboard templates."""

import datetime

from django import template
from django.utils import timezone
from django.utils.timesince import timesince

from claims.models import Claim
from frontend.snapshot import MIG_SLOTS, css_percent, gpu_bar
from nodepools.models import Gpu
from nvke.quantity import human_mib

register = template.Library()


@register.filter
def ago(moment: datetime.datetime | None) -> str:
    """'3 minutes ago', or 'just now' within the first minute (timesince says '0 minutes')."""
    if moment is None:
        return ""
    if timezone.now() - moment < datetime.timedelta(minutes=1):
        return "just now"
    return f"{timesince(moment)} ago"


@register.filter
def width(fraction: float) -> str:
    """A fraction as a bar's CSS width: 0.25 → '25%'."""
    return css_percent(fraction)


@register.filter
def gib(mib: int | None) -> str:
    """MiB as GiB with one decimal: 81559 → '79.6'."""
    return "" if mib is None else f"{mib / 1024:.1f}"


@register.filter
def short_uuid(value) -> str:
    """The first block of a UUID, enough to tell GPUs apart on a page."""
    return str(value).split("-")[0]


@register.filter
def iso_datetime(value: str | None) -> datetime.datetime | str | None:
    """Parse a condition's ISO lastTransitionTime so the `date` filter can format it."""
    try:
        return datetime.datetime.fromisoformat(value)
    except (TypeError, ValueError):
        return value


@register.filter
def quantity(mib: int | None) -> str:
    """MiB for reading, '-' for none: 4096 → '4Gi', 20389 → '19.9Gi'."""
    return "-" if mib is None else human_mib(mib)


@register.filter
def milli_percent(milli: int | None) -> str:
    """A compute share in thousandths of a GPU as a percentage, '-' for none: 500 → '50%'."""
    return "-" if milli is None else f"{milli // 10}%"


@register.filter
def claim_kind(claim: Claim) -> str:
    """The KIND column: 'fraction', 'whole ×4', 'mig 3g.40gb'."""
    return _kind_label(claim.kind, claim.gpus, claim.mig_profile)


@register.filter
def released_kind(changes: dict) -> str:
    """The KIND column of a released claim, from its delete entry in the audit log ({field: [was, now]})."""
    was = {field: (values or [None])[0] for field, values in changes.items()}
    return _kind_label(was.get("kind") or "", was.get("gpus"), was.get("mig_profile"))


def _kind_label(kind: str, gpus: int | None, mig_profile: str | None) -> str:
    if kind == Claim.Kind.WHOLE and gpus:
        return f"whole ×{gpus}"
    if kind == Claim.Kind.MIG and mig_profile:
        return f"mig {mig_profile}"
    return kind


@register.inclusion_tag("frontend/_gpu_bar.html")
def gpu_snapshot(gpu: Gpu, mig: bool = False, detail: bool = False, budget: int = 100) -> dict:
    """One GPU's allocation drawn to scale (see frontend/snapshot.py); `detail` adds the compute bars
    (guaranteed, and ceilings on the pool's oversubscription `budget` %) and the MIG slot numbers (the
    node page)."""
    return {"bar": gpu_bar(gpu, mig, budget), "detail": detail, "mig_slots": range(MIG_SLOTS)}
