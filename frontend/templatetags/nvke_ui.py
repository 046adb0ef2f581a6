"""Small display filters for the dashboard templates."""

import datetime

from django import template

register = template.Library()


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
