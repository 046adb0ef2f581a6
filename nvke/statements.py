"""SQL written or compiled once per process for the hot reads and writes: `@compiled` on the function
that builds a statement (from the ORM's compiler or by hand from a model's columns).

Building and compiling a statement cost the ORM more than running it (a bearer token's 0.6 against
0.1 ms; a pass's claims 1.25 against 0.2 ms). The result is kept per arguments, by functools.cache (its
C wrapper: no more per call than before), and each such cache is registered by the function's name in
`nvke.caches`, so `clear_all()` drops them: after a migration, what a statement names may have changed."""

import functools
from collections.abc import Callable
from typing import TypeVar

from nvke import caches

Built = TypeVar("Built", bound=Callable)


def compiled(build: Built) -> Built:
    """`build`, its result kept once per process per arguments (a model, a query function)."""
    kept = functools.cache(build)
    caches.register(
        f"statement {build.__module__}.{build.__qualname__}",
        "one per statement built, bounded by the code",
        kept.cache_clear,
    )
    return kept
