"""Redis: the latest sample of every GPU, raw samples waiting for the history rollup, per-claim usage
state for rescaling, and node heartbeats.

Keys (all under `tm:`):
  tm:gpu:<gpu id>          JSON of the GPU's latest sample {"ts", "util", "mem", ...}
  tm:raw:<bucket start>    list of JSON batches [[gpu id, ts, util, mem, temp, power, sm], ...]
  tm:raw-buckets           set of bucket starts that have raw samples
  tm:claim:<claim id>      hash: usage (% of its compute share), ts, over_since, idle_since (by the
                           thresholds of the claim's pool, telemetry.policy)
  tm:heartbeat             hash: node id → time of its last batch
  tm:fresh                 stream: each write's newest sample per GPU, read by the live streams
  tm:ingest                hash: ingestion counters of every web process (samples accepted, late,
                           rejected; batches rejected by reason), for /metrics
  tm:frame-lag             hash: live frames sent by every web process, counted by how long after
                           their oldest sample they were sent (FRAME_LAG_BUCKETS_S), and the sum, for
                           /metrics
  tm:streams               hash: live frames coalesced (merged into one a slow socket had not taken
                           yet) and sockets dropped for not draining, by every web process, for /metrics

Without REDIS_URL (the embedded default) the same keys live in an in-process Redis (fakeredis), shared by
every thread and the event loop of this process: the same commands, TTLs and stream trimming, so its
memory stays bounded as Redis's does. telemetry/embedded.py feeds it.
"""

import json
from collections import defaultdict
from typing import NamedTuple

import fakeredis
import redis
import redis.asyncio as aioredis
from django.conf import settings

from . import policy

BUCKET_S = 10
LATEST_TTL_S = 24 * 3600  # claim usage state, XID de-duplication
RAW_TTL_S = 6 * 3600  # raw batches the rollup never took (no beat running) do not pile up forever
HEARTBEATS = "tm:heartbeat"
FRESH = "tm:fresh"  # stream of [[gpu id, ts, *STREAM_KEYS], ...] per write, for telemetry.hub
FRESH_MAXLEN = 20_000  # writes kept: minutes of a 10,000-GPU fleet posting per node
STREAM_KEYS = ("util", "mem", "temp", "power", "sm", "xid")
RAW_BUCKETS = "tm:raw-buckets"
INGEST_COUNTS = "tm:ingest"
FRAME_LAG = "tm:frame-lag"
STREAM_COUNTS = "tm:streams"
FRAME_LAG_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)  # and +Inf

_client: redis.Redis | None = None
_in_process: fakeredis.FakeServer | None = None


def _in_process_server() -> fakeredis.FakeServer:
    global _in_process
    if _in_process is None:
        _in_process = fakeredis.FakeServer()
    return _in_process


def client() -> redis.Redis:
    global _client
    if _client is None:
        _client = (
            redis.Redis.from_url(settings.REDIS_URL)
            if settings.REDIS_URL
            else fakeredis.FakeRedis(server=_in_process_server())
        )
    return _client


def async_client() -> aioredis.Redis:
    """A client for this process's event loop (the live streams), on the same store as client()."""
    if settings.REDIS_URL:
        return aioredis.Redis.from_url(settings.REDIS_URL, **settings.ASYNC_REDIS_OPTIONS)
    return fakeredis.FakeAsyncRedis(server=_in_process_server())


def gpu_key(gpu_id: int) -> str:
    return f"tm:gpu:{gpu_id}"


def claim_key(claim_id: int) -> str:
    return f"tm:claim:{claim_id}"


class Sample(NamedTuple):  # a tuple: ingestion builds 10,000 a second, a frozen dataclass costs 2.3x more
    gpu_id: int
    ts: float
    values: dict[str, float]  # short keys (metrics.SHORT)
    claims: dict[int, float]  # claim id → usage in % of its compute share


def write(node_id: int, samples: list[Sample], now: float) -> None:
    """One pipelined round trip for the whole batch."""
    write_many([(node_id, samples)], now)


def write_many(
    batches: list[tuple[int, list[Sample]]], now: float, counts: dict[str, int] | None = None
) -> None:
    """Several nodes' batches in one round trip and a handful of commands, however many samples (the
    simulator writes a slice of the fleet at a time; ingestion the batches that arrived meanwhile, with
    its counters). No batches: nothing written."""
    if not batches:
        return
    latest: dict[int, Sample] = {}
    raw: dict[int, list] = defaultdict(list)
    samples = [s for _, batch in batches for s in batch]
    for s in samples:
        if s.gpu_id not in latest or latest[s.gpu_id].ts <= s.ts:
            latest[s.gpu_id] = s
        v = s.values
        raw[int(s.ts // BUCKET_S * BUCKET_S)].append(
            [s.gpu_id, s.ts, v.get("util"), v.get("mem"), v.get("temp"), v.get("power"), v.get("sm")]
        )
    pipe = client().pipeline(transaction=False)
    # Latest values carry no TTL: one key per GPU, overwritten every second; a GPU that stops
    # reporting keeps its last sample, with its time.
    pipe.mset({gpu_key(g): json.dumps({"ts": s.ts, **s.values}) for g, s in latest.items()})
    for bucket, rows in raw.items():
        pipe.rpush(f"tm:raw:{bucket}", json.dumps(rows))
        pipe.expire(f"tm:raw:{bucket}", RAW_TTL_S)
        pipe.sadd(RAW_BUCKETS, bucket)
    claimed = [(node_id, s) for node_id, batch in batches for s in batch if s.claims]
    if claimed:
        # Each claim's stretches run by the thresholds of its pool (the node's): cached, no query here.
        policies = policy.for_nodes({node_id for node_id, _ in claimed})
        for node_id, s in sorted(claimed, key=lambda pair: pair[1].ts):
            node_policy = policies[node_id]
            for claim_id, usage in s.claims.items():
                _track_claim(
                    pipe, claim_id, usage, s.ts, node_policy.pressure_percent, node_policy.idle_percent
                )
    pipe.hset(HEARTBEATS, mapping={node_id: now for node_id, _ in batches})
    # The live streams read what is new from here: one entry per write, however many samples.
    fresh = [[g, s.ts, *(s.values.get(k) for k in STREAM_KEYS)] for g, s in latest.items()]
    # Trimmed exactly: the in-process store ignores "~", and one entry a write costs Redis nothing.
    pipe.xadd(FRESH, {"rows": json.dumps(fresh)}, maxlen=FRESH_MAXLEN, approximate=False)
    _add_counts(pipe, counts or {})
    pipe.execute()


def _add_counts(pipe, counts: dict[str, int]) -> None:
    for field, n in counts.items():
        if n:
            pipe.hincrby(INGEST_COUNTS, field, n)


def count(counts: dict[str, int]) -> None:
    """Add to the ingestion counters (rejections, which write nothing else)."""
    pipe = client().pipeline(transaction=False)
    _add_counts(pipe, counts)
    pipe.execute()


def ingest_counts() -> dict[str, int]:
    return {k.decode(): int(v) for k, v in client().hgetall(INGEST_COUNTS).items()}


async def record_frames(
    redis_client: aioredis.Redis, lags: list[tuple[float, int]], coalesced: int, stalled: int
) -> None:
    """Count `n` frames handed to sockets `lag` seconds after their oldest sample, for each (lag, n) of a
    hub tick, the frames merged into one still waiting and the sockets dropped as stalled: one round
    trip."""
    if not lags and not coalesced and not stalled:
        return
    buckets: dict[str, int] = defaultdict(int)
    total = 0.0
    for lag, n in lags:
        bound = next((b for b in FRAME_LAG_BUCKETS_S if lag <= b), "+Inf")
        buckets[str(bound)] += n
        total += lag * n
    pipe = redis_client.pipeline(transaction=False)
    for bound, n in buckets.items():
        pipe.hincrby(FRAME_LAG, bound, n)
    pipe.hincrbyfloat(FRAME_LAG, "sum", total)
    for field, n in (("coalesced", coalesced), ("stalled", stalled)):
        if n:
            pipe.hincrby(STREAM_COUNTS, field, n)
    await pipe.execute()


def stream_counts() -> dict[str, int]:
    """Frames coalesced and sockets dropped as stalled, by every web process."""
    found = {k.decode(): int(v) for k, v in client().hgetall(STREAM_COUNTS).items()}
    return {"coalesced": found.get("coalesced", 0), "stalled": found.get("stalled", 0)}


def frame_lags() -> tuple[list[tuple[str, int]], float]:
    """Cumulative counts per bucket bound (Prometheus' `le`, "+Inf" last) and the sum of the lags."""
    found = {k.decode(): v for k, v in client().hgetall(FRAME_LAG).items()}
    cumulative, running = [], 0
    for bound in [*map(str, FRAME_LAG_BUCKETS_S), "+Inf"]:
        running += int(found.get(bound, 0))
        cumulative.append((bound, running))
    return cumulative, float(found.get("sum", 0.0))


def _track_claim(
    pipe, claim_id: int, usage: float, ts: float, pressure_percent: int, idle_percent: int
) -> None:
    """over_since / idle_since: when the current stretch at or above the pressure threshold (at or below
    the idle threshold) of the claim's pool began; any sample on the other side ends the stretch."""
    key = claim_key(claim_id)
    pipe.hset(key, mapping={"usage": usage, "ts": ts})
    if usage >= pressure_percent:
        pipe.hsetnx(key, "over_since", ts)
        pipe.hdel(key, "idle_since")
    elif usage <= idle_percent:
        pipe.hsetnx(key, "idle_since", ts)
        pipe.hdel(key, "over_since")
    else:
        pipe.hdel(key, "over_since", "idle_since")
    pipe.expire(key, LATEST_TTL_S)


def latest(gpu_ids: list[int]) -> dict[int, dict]:
    """The latest sample of each GPU that has one."""
    if not gpu_ids:
        return {}
    values = client().mget([gpu_key(g) for g in gpu_ids])
    return {g: json.loads(v) for g, v in zip(gpu_ids, values, strict=True) if v is not None}


def claim_states(claim_ids: list[int]) -> dict[int, dict[str, float]]:
    pipe = client().pipeline(transaction=False)
    for claim_id in claim_ids:
        pipe.hgetall(claim_key(claim_id))
    return {
        claim_id: {k.decode(): float(v) for k, v in state.items()}
        for claim_id, state in zip(claim_ids, pipe.execute(), strict=True)
        if state
    }


def reset_claim(claim_id: int) -> None:
    """After a decision the pressure (or idleness) has to build up again before the next one."""
    client().hdel(claim_key(claim_id), "over_since", "idle_since")


def heartbeats() -> dict[int, float]:
    return {int(k): float(v) for k, v in client().hgetall(HEARTBEATS).items()}


def forget_node(node_id: int) -> None:
    client().hdel(HEARTBEATS, node_id)


def take_raw(bucket: int) -> list[list]:
    """Remove and return the raw rows of a closed bucket."""
    pipe = client().pipeline(transaction=True)
    pipe.lrange(f"tm:raw:{bucket}", 0, -1)
    pipe.delete(f"tm:raw:{bucket}")
    pipe.srem(RAW_BUCKETS, bucket)
    batches = pipe.execute()[0]
    return [row for batch in batches for row in json.loads(batch)]


def raw_buckets() -> list[int]:
    return sorted(int(b) for b in client().smembers(RAW_BUCKETS))


def first_xid_report(gpu_id: int, xid: int) -> bool:
    """True once per GPU and XID a day: a GPU that keeps reporting its XID fails over once."""
    return bool(client().set(f"tm:xid:{gpu_id}:{xid}", 1, nx=True, ex=LATEST_TTL_S))
