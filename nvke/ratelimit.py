"""Atomic counters for rate limits and lockouts, shared by every process through Redis, or kept in this
process's memory in the embedded default (one process, no Redis).

Each check is one Redis script call, so concurrent requests cannot all read the same count and all pass
(DRF's cache throttle reads a history, appends and writes it back: 16 clients got 60 % past a limit).

- `hit`: a sliding-window counter (the count of this fixed window plus the share of the previous one
  still inside the sliding window, as Cloudflare counts): a request is counted only when it is let
  through, and no burst of twice the limit fits across a window boundary.
- `add_failure` / `failures`: a count whose window starts at the first failure and is not extended by
  later ones (the sign-in lockout and failed authentications).
"""

import math
import threading
import time
from dataclasses import dataclass
from functools import cache

import redis
from cachetools import TLRUCache
from django.conf import settings

from nvke import caches

PREFIX = "nvke:rl:"

# Any number of counters in one call (a request's token and user limits: one round trip, not two).
# KEYS: per counter, this window's key and the previous window's. ARGV: per counter, limit, weight of the
# previous window, TTL ms. Each counter counts the request when it is within its own limit.
_HIT = """
local out = {}
for i = 1, #KEYS / 2 do
  local this, last = KEYS[2 * i - 1], KEYS[2 * i]
  local limit, weight = tonumber(ARGV[3 * i - 2]), tonumber(ARGV[3 * i - 1])
  local current = tonumber(redis.call('GET', this) or '0')
  local previous = tonumber(redis.call('GET', last) or '0')
  if previous * weight + current >= limit then
    out[i] = {0, current, previous}
  else
    current = redis.call('INCR', this)
    if current == 1 then redis.call('PEXPIRE', this, ARGV[3 * i]) end
    out[i] = {1, current, previous}
  end
end
return out
"""
# KEYS: the counter. ARGV: window ms. The expiry is set with the first failure only.
_FAIL = """
local n = redis.call('INCR', KEYS[1])
if n == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
return n
"""


PERIODS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_rate(rate: str) -> tuple[int, int]:
    """'600/minute' -> (600, 60), as Django REST framework reads rates."""
    number, period = rate.split("/")
    return int(number), PERIODS[period[0]]


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    retry_after_s: float  # 0 when allowed


@cache
def _client() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2)


@cache
def _scripts() -> tuple:
    client = _client()
    return client.register_script(_HIT), client.register_script(_FAIL)


MEMORY_COUNTERS_KEPT = 100_000


class _Memory:
    """The same counters for one process (the embedded default), under one lock. A counter goes when its
    window ends, and past MEMORY_COUNTERS_KEPT the least recently used (a new caller then starts at 0)."""

    def __init__(self, maxsize: int = MEMORY_COUNTERS_KEPT) -> None:
        self.lock = threading.Lock()
        # key -> (count, expires at), on time.time() as Redis' expiry (read at each call: tests move it)
        self.counts: TLRUCache = TLRUCache(
            maxsize, ttu=lambda _key, value, _now: value[1], timer=lambda: time.time()
        )

    def get(self, key: str, now: float) -> int:
        count, expires = self.counts.get(key, (0, 0.0))
        return count if expires > now else 0

    def incr(self, key: str, now: float, ttl_s: float) -> int:
        count, expires = self.counts.get(key, (0, 0.0))
        if expires <= now:
            count, expires = 0, now + ttl_s
        self.counts[key] = (count + 1, expires)
        return count + 1

    def clear(self) -> None:
        with self.lock:
            self.counts.clear()


MEMORY = _Memory()
caches.register(
    "nvke.ratelimit.memory",
    f"each counter until its window ends; ≤ {MEMORY_COUNTERS_KEPT:,}, least recently used out (no Redis)",
    MEMORY.clear,
)


def _retry_after(limit: int, current: int, previous: int, elapsed: float, window: float) -> float:
    """Seconds until the sliding count drops below the limit, if nothing else arrives."""
    if current < limit and previous:
        # Within this window: the previous window's share fades out as the sliding window moves on.
        return max(window * (1 - (limit - current) / previous) - elapsed, 0.0)
    # In the next window, this one's count is the share that fades.
    return (window - elapsed) + window * (1 - limit / current)


def hit(key: str, limit: int, window_s: float) -> Verdict:
    """Count one request under `key` if it stays within `limit` per `window_s`, atomically."""
    return hit_all([(key, limit, window_s)])[0]


def hit_all(checks: list[tuple[str, int, float]]) -> list[Verdict]:
    """`hit` for several (key, limit, window_s) at once, in one Redis round trip."""
    if not checks:
        return []
    now = time.time()
    keys, args, windows = [], [], []
    for key, limit, window_s in checks:
        index = math.floor(now / window_s)
        elapsed = now - index * window_s
        windows.append((limit, elapsed, window_s))
        keys += [f"{PREFIX}{key}:{index}", f"{PREFIX}{key}:{index - 1}"]
        args += [limit, 1 - elapsed / window_s, int(window_s * 2000)]
    if settings.REDIS_URL:
        counts = _scripts()[0](keys=keys, args=args)
    else:
        counts = []
        with MEMORY.lock:
            for i, (limit, _, window_s) in enumerate(windows):
                this, last = keys[2 * i], keys[2 * i + 1]
                current, previous = MEMORY.get(this, now), MEMORY.get(last, now)
                allowed = previous * args[3 * i + 1] + current < limit
                if allowed:
                    MEMORY.incr(this, now, window_s * 2)
                counts.append((allowed, current, previous))
    return [
        Verdict(True, 0.0)
        if allowed
        else Verdict(False, max(_retry_after(limit, current, previous, elapsed, window_s), 1.0))
        for (allowed, current, previous), (limit, elapsed, window_s) in zip(counts, windows, strict=True)
    ]


def add_failure(key: str, window_s: float) -> int:
    """Count one failure; the window starts at the first and later ones do not extend it."""
    if settings.REDIS_URL:
        return int(_scripts()[1](keys=[PREFIX + key], args=[int(window_s * 1000)]))
    with MEMORY.lock:
        return MEMORY.incr(PREFIX + key, time.time(), window_s)


def failures(*keys: str) -> list[int]:
    """The current counts of failure counters (0 for none or expired)."""
    if settings.REDIS_URL:
        return [int(value or 0) for value in _client().mget([PREFIX + key for key in keys])]
    with MEMORY.lock:
        now = time.time()
        return [MEMORY.get(PREFIX + key, now) for key in keys]


def forget(key: str) -> None:
    if settings.REDIS_URL:
        _client().delete(PREFIX + key)
    else:
        with MEMORY.lock:
            MEMORY.counts.pop(PREFIX + key, None)
