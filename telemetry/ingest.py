"""Ingestion: a node posts a batch of samples with its node token. The whole batch is checked before
anything is written, so a bad batch (wrong token, unknown GPU, malformed) stores nothing."""

import math
import time
import uuid
from dataclasses import dataclass

from django.conf import settings

from claims.models import GpuShare
from nodepools import nodes, preflight
from nodepools.models import Gpu
from nvke import caches, jobs
from nvke.errors import DomainError

from . import metrics, store
from .models import NodeToken, hash_token

MAX_SAMPLES = 10_000
MAX_AGE_S = 3600  # older samples are refused: history past the hour is per minute and already rolled
MAX_SKEW_S = 60  # clocks of nodes may run a little ahead
IDENTITY_TTL_S = 10.0
LATE_S = 10.0  # a sample older than this when it arrives missed the live views (counted as late)
MAX_CACHED_IDENTITIES = 100_000
# Token hash → (identity, valid until). A plain dict, each entry with its own expiry: every batch looks
# its node up, and the writer renews every entry at once (`refresh_identities`).
_identities = caches.emptied_when_full(
    "telemetry.ingest.identities",
    MAX_CACHED_IDENTITIES,
    f"each valid {IDENTITY_TTL_S:g} s, all renewed every {IDENTITY_TTL_S:g} s by the writer",
)


class TelemetryUnavailable(DomainError):
    status = 503
    code = "telemetry_unavailable"


class InvalidNodeToken(DomainError):
    status = 401
    code = "invalid_node_token"


class Overloaded(DomainError):
    """More samples wait to be written than the process takes (NVKE_TELEMETRY_INGEST_MAX_PENDING)."""

    status = 503
    code = "ingest_overloaded"


class NeedsDatabase(Exception):
    """check(cached_only=True) cannot answer without the database (a token or a share not remembered)."""


@dataclass(frozen=True)
class NodeIdentity:
    node_id: int
    tenant_id: int
    cluster_id: int
    gpus: dict[str, int]  # GPU uuid → id
    unhealthy: frozenset[int]
    shares: frozenset[tuple[int, int]]  # (GPU id, claim id) of the claims holding a share of its GPUs


def cached_identity(raw_token: str) -> NodeIdentity | None:
    cached = _identities.get(hash_token(raw_token))
    return cached[0] if cached is not None and cached[1] > time.monotonic() else None


def authenticate(raw_token: str, fresh: bool = False) -> NodeIdentity:
    """The node a token belongs to. Known tokens are remembered for IDENTITY_TTL_S so the hot path
    (every node, every second) needs no database: a replaced token, a new or failed GPU are seen
    within that time (a failed GPU's repeated XIDs are de-duplicated in Redis meanwhile)."""
    identity = None if fresh else cached_identity(raw_token)
    if identity is not None:
        return identity
    identity = _load_identity(raw_token)
    _identities.put(hash_token(raw_token), (identity, time.monotonic() + IDENTITY_TTL_S))
    return identity


def _load_identity(raw_token: str) -> NodeIdentity:
    identity = _load_identities([hash_token(raw_token)]).get(hash_token(raw_token)) if raw_token else None
    if identity is None:
        raise InvalidNodeToken("Unknown node token.")
    return identity


def _load_identities(key_hashes: list[str]) -> dict[str, NodeIdentity]:
    """The identities of these token hashes (tokens that no longer exist are absent), in three queries."""
    tokens = list(NodeToken.objects.select_related("node__pool").filter(key_hash__in=key_hashes))
    node_ids = {t.node_id for t in tokens}
    gpus: dict[int, list] = {n: [] for n in node_ids}
    for node_id, pk, gpu_uuid, healthy in Gpu.objects.filter(node_id__in=node_ids).values_list(
        "node_id", "pk", "uuid", "healthy"
    ):
        gpus[node_id].append((pk, gpu_uuid, healthy))
    shares: dict[int, set] = {n: set() for n in node_ids}
    for node_id, gpu_id, claim_id in GpuShare.objects.filter(gpu__node_id__in=node_ids).values_list(
        "gpu__node_id", "gpu_id", "allocation__claim_id"
    ):
        shares[node_id].add((gpu_id, claim_id))
    return {
        t.key_hash: NodeIdentity(
            node_id=t.node_id,
            tenant_id=t.tenant_id,
            cluster_id=t.node.pool.cluster_id,
            gpus={str(uuid): pk for pk, uuid, _ in gpus[t.node_id]},
            unhealthy=frozenset(pk for pk, _, healthy in gpus[t.node_id] if not healthy),
            shares=frozenset(shares[t.node_id]),
        )
        for t in tokens
    }


def refresh_identities() -> None:
    """Reload every remembered identity at once (a web process's ingestion writer calls this every
    IDENTITY_TTL_S): at fleet scale no batch waits for its own node's reload, and replaced tokens and
    changed GPUs are still seen within that time. Each stays valid for two periods, so batches never
    miss the cache between two refreshes."""
    until = time.monotonic() + 2 * IDENTITY_TTL_S
    fresh = _load_identities(list(_identities))
    _identities.clear()
    _identities.update({key: (identity, until) for key, identity in fresh.items()})


def _invalid(message: str, field: str, code: str = "invalid") -> DomainError:
    return DomainError(message, field=field, code=code)


def _is_number(value) -> bool:
    return type(value) in (int, float) and math.isfinite(value)  # type(): a bool is no number here


def _number(value, field: str) -> float:
    if not _is_number(value):
        raise _invalid(f"{field}: expected a number.", field)
    return float(value)


def parse(identity: NodeIdentity, payload, now: float) -> list[store.Sample]:
    """Check the whole batch and return its samples; raises a DomainError naming the field."""
    if not isinstance(payload, dict) or not isinstance(payload.get("samples"), list):
        raise _invalid("samples: expected a list of samples.", "samples")
    raw_samples = payload["samples"]
    if not 1 <= len(raw_samples) <= MAX_SAMPLES:
        raise _invalid(f"samples: send 1 to {MAX_SAMPLES} samples per batch.", "samples")
    samples = []
    for i, raw in enumerate(raw_samples):
        where = f"samples[{i}]"
        if not isinstance(raw, dict):
            raise _invalid(f"{where}: expected an object.", where)
        gpu_id = identity.gpus.get(str(raw.get("gpu", "")).lower().removeprefix("gpu-"))  # NVML: GPU-<uuid>
        if gpu_id is None:
            raise _invalid(
                f"{where}.gpu: no GPU {raw.get('gpu')!r} on this node.", f"{where}.gpu", "unknown_gpu"
            )
        ts = _number(raw.get("ts"), f"{where}.ts")
        if not now - MAX_AGE_S <= ts <= now + MAX_SKEW_S:
            raise _invalid(f"{where}.ts: sample time is too old or in the future.", f"{where}.ts")
        values = raw.get("metrics")
        if not isinstance(values, dict) or not values:
            raise _invalid(f"{where}.metrics: expected an object of DCGM fields.", f"{where}.metrics")
        short = {}
        for name, value in values.items():
            key = metrics.SHORT.get(name)
            if key is None:
                raise _invalid(f"{where}.metrics: unknown field {name!r}.", f"{where}.metrics.{name}")
            if not _is_number(value):
                raise _invalid(f"{where}.metrics.{name}: expected a number.", f"{where}.metrics.{name}")
            short[key] = float(value)
        claims = raw.get("claims", {})
        if not isinstance(claims, dict) or not all(str(k).isdigit() for k in claims):
            raise _invalid(f"{where}.claims: expected {{claim id: usage %}}.", f"{where}.claims")
        usage = {int(k): _number(v, f"{where}.claims.{k}") for k, v in claims.items()}
        samples.append(store.Sample(gpu_id, ts, short, usage))
    for i, s in enumerate(samples):  # usage only for claims that hold a share of that GPU
        for claim_id in s.claims:
            if (s.gpu_id, claim_id) not in identity.shares:
                raise _invalid(
                    f"samples[{i}].claims: claim {claim_id} holds no share of this GPU.",
                    f"samples[{i}].claims.{claim_id}",
                    "unknown_claim",
                )
    return samples


def check(raw_token: str, payload, cached_only: bool = False) -> tuple[NodeIdentity, list[store.Sample]]:
    """The node and its batch's samples, checked whole (a DomainError naming the field). A batch that
    names a GPU or a claim the remembered identity lacks is checked once more against the database
    (a claim placed a moment ago): only then is it refused. `cached_only`: raise NeedsDatabase instead
    of reading it, for callers on an event loop."""
    identity = cached_identity(raw_token)
    remembered = identity is not None
    if not remembered:
        if cached_only:
            raise NeedsDatabase
        identity = authenticate(raw_token, fresh=True)
    now = time.time()
    try:
        return identity, parse(identity, payload, now)
    except DomainError as error:
        if not remembered or error.code not in ("unknown_gpu", "unknown_claim"):
            raise
        if cached_only:
            raise NeedsDatabase from None
        identity = authenticate(raw_token, fresh=True)
        return identity, parse(identity, payload, now)


def store_batches(batches: list[tuple[NodeIdentity, list[store.Sample]]], counts: dict[str, int]) -> None:
    """Write checked batches in one round trip with the ingestion counters (`counts`: rejections to add;
    accepted and late samples are counted here), then start a GPU failover for each new fatal XID."""
    now = time.time()
    samples = [s for _, batch in batches for s in batch]
    late = sum(1 for s in samples if s.ts < now - LATE_S)
    store.write_many(
        [(identity.node_id, batch) for identity, batch in batches],
        now,
        counts={**counts, "accepted": len(samples), "late": late},
    )
    fatal = set(settings.TELEMETRY_FATAL_XIDS)
    for identity, batch in batches:
        for s in batch:
            xid = int(s.values.get("xid", 0))
            if xid in fatal and s.gpu_id not in identity.unhealthy and store.first_xid_report(s.gpu_id, xid):
                # At once: the samples are in Redis, no transaction holds them.
                jobs.task("telemetry.tasks.gpu_failed").delay(s.gpu_id, xid)


def rejected(error: DomainError, payload) -> dict[str, int]:
    """What a refused batch adds to the counters: its samples (when it has a list of them) and one
    batch by reason."""
    if isinstance(error, InvalidNodeToken):
        reason = "unauthorized"
    elif isinstance(error, Overloaded):
        reason = "overloaded"
    else:
        reason = "unavailable" if error.status >= 500 else "invalid"
    samples = payload.get("samples") if isinstance(payload, dict) else None
    return {"rejected": len(samples) if isinstance(samples, list) else 0, f"batches_rejected:{reason}": 1}


def node_token(authorization: str) -> str:
    """The raw token of `Authorization: Node <node token>`, the agents' only credential."""
    scheme, _, raw = authorization.partition(" ")
    if scheme != "Node":
        raise InvalidNodeToken("Send `Authorization: Node <node token>`.")
    return raw.strip()


def ingest(authorization: str, payload) -> int:
    """Check, then store (one batch, as the Django view takes it). Returns the sample count."""
    try:
        identity, samples = check(node_token(authorization), payload)
    except DomainError as error:
        store.count(rejected(error, payload))
        raise
    store_batches([(identity, samples)], {})
    return len(samples)


def record_preflight(raw_token: str, payload) -> list[str]:
    """A node agent's sharing preflight facts, checked whole before anything is written; returns what
    fails for its pool's sharing mode."""
    identity = authenticate(raw_token)
    return nodes.record_preflight(identity.node_id, preflight.validate_facts(payload))


def record_inventory(raw_token: str, payload) -> int:
    """A node agent's GPU inventory, `{"gpus": [{"index": 0, "uuid": "GPU-…"}, …]}`: on an attached
    cluster without NVIDIA's DRA driver, the only source of the GPUs' UUIDs, which samples name. Checked
    whole before anything is written; returns how many GPUs changed."""
    identity = authenticate(raw_token)
    if not isinstance(payload, dict) or not isinstance(payload.get("gpus"), list) or not payload["gpus"]:
        raise _invalid("gpus: expected a list of {index, uuid}.", "gpus")
    uuids: dict[int, str] = {}
    for i, entry in enumerate(payload["gpus"]):
        where = f"gpus[{i}]"
        index = entry.get("index") if isinstance(entry, dict) else None
        if isinstance(index, bool) or not isinstance(index, int) or index < 0 or index in uuids:
            raise _invalid(f"{where}.index: expected a GPU index, once each.", f"{where}.index")
        try:
            uuids[index] = str(uuid.UUID(str(entry.get("uuid", "")).lower().removeprefix("gpu-")))
        except ValueError:
            raise _invalid(f"{where}.uuid: expected a GPU UUID (GPU-…).", f"{where}.uuid") from None
    changed = nodes.record_gpu_uuids(identity.node_id, uuids)
    _identities.pop(hash_token(raw_token), None)  # the next batch names the GPUs by their new UUIDs
    return changed
