"""Every per-process cache, by name, with its rule: what bounds it and what empties it.

A module that remembers something between requests, tasks or placements to go faster registers it here
once, at import: `bounded` (least recently used out, cachetools), `expiring` (each entry for a time,
cachetools), `emptied_when_full` and `renewed_every` (plain dicts, for lookups on hot paths), or
`register` for a cache with its own shape. `clear_all()` empties every one: the tests call it around
each test, and a migration or flush calls it (`nvke.apps`), since a database changed under a process
makes what it remembers wrong. docs/performance.md lists the entries.

cachetools' caches cost 0.2 µs (LRU) to 1 µs (TTL) a lookup against 0.02 µs for a dict (timeit, a
shared 2-core machine): fine per request or per pass, not per sample or per node of a hot loop, where a
plain dict emptied or replaced whole keeps the dict's price."""

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cachetools import LRUCache, TTLCache


@dataclass(frozen=True)
class Entry:
    name: str
    rule: str  # what bounds it and what empties it, in words (docs/performance.md)
    clear: Callable[[], None]


_entries: dict[str, Entry] = {}


def register(name: str, rule: str, clear: Callable[[], None]) -> None:
    """Name a cache once; `clear` empties it (and must be safe to call at any time)."""
    if name in _entries:
        raise ValueError(f"A per-process cache named {name!r} is already registered.")
    _entries[name] = Entry(name, rule, clear)


def entries() -> list[Entry]:
    """The caches registered so far (a module registers its own when it is imported)."""
    return sorted(_entries.values(), key=lambda entry: entry.name)


def clear_all() -> None:
    """Empty every registered cache."""
    for entry in list(_entries.values()):
        entry.clear()


def bounded(name: str, maxsize: int) -> LRUCache:
    """At most `maxsize` entries, the least recently used out first."""
    cache: LRUCache = LRUCache(maxsize)
    register(name, f"≤ {maxsize:,}, least recently used out", cache.clear)
    return cache


def expiring(name: str, maxsize: int, ttl_s: float) -> TTLCache:
    """Each entry for `ttl_s` seconds; at most `maxsize`, the least recently used out first."""
    cache: TTLCache = TTLCache(maxsize, ttl_s)
    register(name, f"each entry {ttl_s:g} s; ≤ {maxsize:,}, least recently used out", cache.clear)
    return cache


class EmptiedWhenFull(dict):
    """A plain dict (a lookup is a dict lookup, no bookkeeping) that empties whole when it is full:
    `put` is the one way in."""

    def __init__(self, maxsize: int) -> None:
        super().__init__()
        self.maxsize = maxsize

    def put(self, key: Any, value: Any) -> Any:
        if len(self) >= self.maxsize:
            self.clear()
        self[key] = value
        return value


def emptied_when_full(name: str, maxsize: int, rule: str = "") -> EmptiedWhenFull:
    cache = EmptiedWhenFull(maxsize)
    register(name, f"≤ {maxsize:,}, emptied whole when full" + (f"; {rule}" if rule else ""), cache.clear)
    return cache


class RenewedEvery:
    """A plain dict replaced whole every `ttl_s` seconds or once past `maxsize`. Replaced, never emptied
    in place, so a thread still holding the last one reads a consistent dict."""

    def __init__(self, ttl_s: float, maxsize: int) -> None:
        self.ttl_s, self.maxsize = ttl_s, maxsize
        self._current: tuple[float, dict] = (0.0, {})  # (valid until, the dict)

    def current(self) -> dict:
        """The dict to read and fill now: a new empty one when the last is too old or too big."""
        valid_until, values = self._current
        now = time.monotonic()
        if now >= valid_until or len(values) > self.maxsize:
            values = {}
            self._current = (now + self.ttl_s, values)
        return values

    def clear(self) -> None:
        self._current = (0.0, {})


def renewed_every(name: str, ttl_s: float, maxsize: int, rule: str = "") -> RenewedEvery:
    cache = RenewedEvery(ttl_s, maxsize)
    register(
        name,
        f"replaced whole every {ttl_s:g} s or past {maxsize:,}" + (f"; {rule}" if rule else ""),
        cache.clear,
    )
    return cache
