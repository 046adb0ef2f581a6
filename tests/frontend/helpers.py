"""Reading rendered pages in tests without a browser, and form fields pages post."""

import html
import re

# The upgrade strategy as StrategyForm (frontend/views/upgrades.py) takes it: a pool's upgrade form
# and the fleet rollout form both post these fields. One node at a time, no canary, pause at the first
# failure, failed nodes kept cordoned.
STRATEGY_FORM = {
    "max_unavailable": "1",
    "canary_nodes": 0,
    "canary_bake_s": 0,
    "drain_timeout_s": 600,
    "failure_budget": 1,
    "failed_nodes": "keep-cordoned",
}


def text(response) -> str:
    return response.content.decode()


def field_block(response, name: str) -> str:
    """One form field as rendered by _field.html: label, control, help text and errors."""
    match = re.search(rf'<div class="field[^"]*" id="field-{name}">(.*?)</div>', text(response), re.S)
    assert match, f"no field {name!r} on the page"
    return match.group(1)


def field_errors(response, name: str) -> list[str]:
    """The errors shown right under one field."""
    block = field_block(response, name)
    errors = re.search(r'<ul class="errorlist"[^>]*>(.*?)</ul>', block, re.S)
    return [html.unescape(e) for e in re.findall(r"<li>(.*?)</li>", errors.group(1), re.S)] if errors else []


def live_texts(response, attr: str, pk: int) -> list[str]:
    """Texts of the elements live.js keeps current, e.g. live_texts(r, "data-cluster-status", 3)."""
    return re.findall(rf'{attr}="{pk}"[^>]*>([^<]*)<', text(response))
