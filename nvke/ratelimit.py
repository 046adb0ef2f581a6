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
from django.conf import settings

PREFIX = "nvke:rl:"

# KEYS: this window's counter, the previous window's. ARGV: limit, weight of the previous window, TTL ms.
_HIT = """
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
local previous = tonumber(redis.call('GET', KEYS[2]) or '0')
if previous * tonumber(ARGV[2]) + current >= tonumber(ARGV[1]) then
  return {0, current, previous}
end
current = redis.call('INCR', KEYS[1])
if current == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[3]) end
return {1, current, previous}
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
class Decision:
    allowed: bool
    retry_after_s: float  # 0 when allowed


@cache
def _client() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2)


@cache
def _scripts() -> tuple:
    client = _client()
    return client.register_script(_HIT), client.register_script(_FAIL)


class _Memory:
    """The same counters for one process (the embedded default), under one lock."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counts: dict[str, tuple[int, float]] = {}  # key -> (count, expires at)

    def get(self, key: str, now: float) -> int:
        count, expires = self.counts.get(key, (0, 0.0))
        return count if expires > now else 0

    def incr(self, key: str, now: float, ttl_s: float) -> int:
        count = self.get(key, now) + 1
        expires = self.counts[key][1] if count > 1 else now + ttl_s
        self.counts[key] = (count, expires)
        return count

    def clear(self) -> None:
        with self.lock:
            self.counts.clear()


MEMORY = _Memory()


def _retry_after(limit: int, current: int, previous: int, elapsed: float, window: float) -> float:
    """Seconds until the sliding count drops below the limit, if nothing else arrives."""
    if current < limit and previous:
        # Within this window: the previous window's share fades out as the sliding window moves on.
        return max(window * (1 - (limit - current) / previous) - elapsed, 0.0)
    # In the next window, this one's count is the share that fades.
    return (window - elapsed) + window * (1 - limit / current)


def hit(key: str, limit: int, window_s: float) -> Decision:
    """Count one request under `key` if it stays within `limit` per `window_s`, atomically."""
    now = time.time()
    index = math.floor(now / window_s)
    elapsed = now - index * window_s
    weight = 1 - elapsed / window_s
    this, last = f"{PREFIX}{key}:{index}", f"{PREFIX}{key}:{index - 1}"
    if settings.REDIS_URL:
        allowed, current, previous = _scripts()[0](
            keys=[this, last], args=[limit, weight, int(window_s * 2000)]
        )
    else:
        with MEMORY.lock:
            current, previous = MEMORY.get(this, now), MEMORY.get(last, now)
            allowed = previous * weight + current < limit
            if allowed:
                MEMORY.incr(this, now, window_s * 2)
    if allowed:
        return Decision(True, 0.0)
    return Decision(False, max(_retry_after(limit, current, previous, elapsed, window_s), 1.0))


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
