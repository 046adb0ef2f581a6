"""Atomic counters for rate limits and lockouts, shared by every process through Redis, or kept in this
process's memory in the embedded default (one process, no Redis).

Each check is one Redis script call, so concurrent requests cannot all read the same count and all pass
(DRF's cache throttle reads a history, appends and writes it back: 16 clients got 60 % past a limit).

- `hit`: a sliding log, exact: the times of the requests let through within the last window, in a
  sorted set; a request passes while fewer than the limit are there, so no stretch of the rate's period
  ever holds more than the limit. (The sliding-window approximation before it weighed the previous
  window's count as if spread evenly: a 600/minute token got 837 through in 40 s.) It keeps one member
  per request let through: at most the limit per key.
- `add_failure` / `failures`: a count whose window starts at the first failure and is not extended by
  later ones (the sign-in lockout and failed authentications).

When REDIS_URL names a Redis that does not answer, every check raises `Unavailable` (503,
`rate_limiter_unavailable`): neither a 500 nor requests let through uncounted.
"""

import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import TypeVar

import redis
from cachetools import TLRUCache
from django.conf import settings
from django.http import HttpResponse

from nvke import caches
from nvke.errors import DomainError

PREFIX = "nvke:rl:"

# Any number of counters in one call (a request's token and user limits: one round trip, not two).
# KEYS: per counter, its sorted set. ARGV: now (ms), this request's member, then per counter its limit
# and window (ms). Each counter counts the request when within its own limit. Out, per counter: 0 when
# let through, else the ms until the oldest request that keeps it at the limit leaves the window.
_HIT = """
local now, member = tonumber(ARGV[1]), ARGV[2]
local out = {}
for i = 1, #KEYS do
  local limit, window = tonumber(ARGV[1 + 2 * i]), tonumber(ARGV[2 + 2 * i])
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now - window)
  local count = redis.call('ZCARD', KEYS[i])
  if count < limit then
    redis.call('ZADD', KEYS[i], now, member)
    redis.call('PEXPIRE', KEYS[i], window)
    out[i] = 0
  else
    local oldest = redis.call('ZRANGE', KEYS[i], count - limit, count - limit, 'WITHSCORES')
    out[i] = tonumber(oldest[2]) + window - now
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


T = TypeVar("T")
PERIODS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_rate(rate: str) -> tuple[int, int]:
    """'600/minute' -> (600, 60), as Django REST framework reads rates."""
    number, period = rate.split("/")
    return int(number), PERIODS[period[0]]


class Unavailable(DomainError):
    """Redis, which holds every process's counters, does not answer."""

    status = 503
    code = "rate_limiter_unavailable"


def _redis_call(run: Callable[[], T]) -> T:
    try:
        return run()
    except redis.RedisError:
        raise Unavailable("The rate limiter's store (Redis) is not answering: try again shortly.") from None


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
    """The same counters for one process (the embedded default), under one lock: a failure count as
    (count, expires at), a sliding log as (times, expires at). An entry goes when its window ends, and past
    MEMORY_COUNTERS_KEPT the least recently used (a new caller then starts at 0)."""

    def __init__(self, maxsize: int = MEMORY_COUNTERS_KEPT) -> None:
        self.lock = threading.Lock()
        # on time.time() as Redis' expiry (read at each call: tests move it)
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

    def log(self, key: str, now: float, limit: int, window_s: float) -> float:
        """_HIT for one counter: 0 when let through (and logged), else the seconds to wait."""
        times = [t for t in self.counts.get(key, ((), 0.0))[0] if t > now - window_s]
        if len(times) >= limit:
            self.counts[key] = (times, now + window_s)
            return times[len(times) - limit] + window_s - now
        self.counts[key] = ([*times, now], now + window_s)
        return 0.0

    def clear(self) -> None:
        with self.lock:
            self.counts.clear()


MEMORY = _Memory()
caches.register(
    "nvke.ratelimit.memory",
    f"each counter until its window ends; ≤ {MEMORY_COUNTERS_KEPT:,}, least recently used out (no Redis)",
    MEMORY.clear,
)


def hit(key: str, limit: int, window_s: float) -> Verdict:
    """Count one request under `key` if it stays within `limit` per `window_s`, atomically."""
    return hit_all([(key, limit, window_s)])[0]


def hit_all(checks: list[tuple[str, int, float]]) -> list[Verdict]:
    """`hit` for several (key, limit, window_s) at once, in one Redis round trip."""
    if not checks:
        return []
    now = time.time()
    keys = [f"{PREFIX}log:{key}" for key, _, _ in checks]
    if settings.REDIS_URL:
        args: list = [int(now * 1000), f"{now:.6f}:{secrets.token_hex(6)}"]  # members unique per request
        for _, limit, window_s in checks:
            args += [limit, int(window_s * 1000)]
        waits = [ms / 1000 for ms in _redis_call(lambda: _scripts()[0](keys=keys, args=args))]
    else:
        with MEMORY.lock:
            waits = [
                MEMORY.log(key, now, limit, window_s)
                for key, (_, limit, window_s) in zip(keys, checks, strict=True)
            ]
    return [Verdict(True, 0.0) if wait <= 0 else Verdict(False, max(wait, 1.0)) for wait in waits]


def add_failure(key: str, window_s: float) -> int:
    """Count one failure; the window starts at the first and later ones do not extend it."""
    if settings.REDIS_URL:
        return int(_redis_call(lambda: _scripts()[1](keys=[PREFIX + key], args=[int(window_s * 1000)])))
    with MEMORY.lock:
        return MEMORY.incr(PREFIX + key, time.time(), window_s)


def failures(*keys: str) -> list[int]:
    """The current counts of failure counters (0 for none or expired)."""
    if settings.REDIS_URL:
        values = _redis_call(lambda: _client().mget([PREFIX + key for key in keys]))
        return [int(value or 0) for value in values]
    with MEMORY.lock:
        now = time.time()
        return [MEMORY.get(PREFIX + key, now) for key in keys]


def forget(key: str) -> None:
    if settings.REDIS_URL:
        _redis_call(lambda: _client().delete(PREFIX + key))
    else:
        with MEMORY.lock:
            MEMORY.counts.pop(PREFIX + key, None)


class UnavailableMiddleware:
    """Outside the API (which answers `Unavailable` itself), a check the store could not make — the
    sign-in lockout on the UI's and the admin's sign-in pages — is a 503 that says so, not a 500."""

    def __init__(self, get_response: Callable):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception: Exception):
        if not isinstance(exception, Unavailable):
            return None
        response = HttpResponse(
            f"<!doctype html><title>Try again shortly</title><p>{exception.message}</p>",
            status=503,
            content_type="text/html; charset=utf-8",
        )
        response["Retry-After"] = "5"
        return response
