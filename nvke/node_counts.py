"""A number of a pool's nodes as people write it — `max_unavailable` and `max_surge` of an upgrade, and a
pool's defaults for them: a count ("2") or a percent of the pool ("10%", rounded up). Pure."""

import math
import re

NODES = re.compile(r"(?P<n>[0-9]{1,4})(?P<percent>%?)")


def parse_nodes(text: str) -> tuple[int, bool]:
    """(n, percent) of a count or of a percent up to 100%. ValueError for anything else."""
    match = NODES.fullmatch(str(text))
    if not match or (match["percent"] and int(match["n"]) > 100):
        raise ValueError(f"{text!r} is neither a count nor a percent")
    return int(match["n"]), bool(match["percent"])


def nodes_of(text: str, nodes: int) -> int:
    """The count in a pool of `nodes`: the count, or the percent rounded up (so at least 1 when it is not
    0%)."""
    n, percent = parse_nodes(text)
    return max(1 if n else 0, math.ceil(nodes * n / 100)) if percent else n


def budget_error(max_unavailable: str, max_surge: str) -> tuple[str, str] | None:
    """The first bad one of the two as (field, message); None when both are good. An upgrade must take
    some node out: max_unavailable is 0 only with a surge."""
    for name, text in (("max_unavailable", max_unavailable), ("max_surge", max_surge)):
        try:
            parse_nodes(text)
        except ValueError:
            return name, f'{name} is a count ("2") or a percent up to 100% ("10%").'
    if not parse_nodes(max_unavailable)[0] and not parse_nodes(max_surge)[0]:
        return (
            "max_unavailable",
            "max_unavailable is at least 1 without a max_surge: the run must take some node out.",
        )
    return None
