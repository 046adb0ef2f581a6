"""Ingestion: a node posts a batch of samples with its node token. The whole batch is checked before
anything is written, so a bad batch (wrong token, unknown GPU, malformed) stores nothing."""

import math
import time
import uuid
from dataclasses import dataclass

from django.conf import settings

from nodepools import nodes, preflight
from nodepools.models import Gpu, GpuShare
from nvke import jobs
from nvke.errors import DomainError

from . import metrics, store
from .models import NodeToken, hash_token

MAX_SAMPLES = 10_000
MAX_AGE_S = 3600  # older samples are refused: history past the hour is per minute and already rolled
MAX_SKEW_S = 60  # clocks of nodes may run a little ahead
IDENTITY_TTL_S = 10.0
MAX_CACHED_IDENTITIES = 100_000
_identities: dict[str, tuple["NodeIdentity", float]] = {}  # token hash → (identity, valid until)


class TelemetryUnavailable(DomainError):
    status = 503
    code = "telemetry_unavailable"


class InvalidNodeToken(DomainError):
    status = 401
    code = "invalid_node_token"


@dataclass(frozen=True)
class NodeIdentity:
    node_id: int
    tenant_id: int
    cluster_id: int
    gpus: dict[str, int]  # GPU uuid → id
    unhealthy: frozenset[int]


def authenticate(raw_token: str) -> NodeIdentity:
    """The node a token belongs to. Known tokens are remembered for IDENTITY_TTL_S so the hot path
    (every node, every second) needs no database: a replaced token, a new or failed GPU are seen
    within that time (a failed GPU's repeated XIDs are de-duplicated in Redis meanwhile)."""
    key = hash_token(raw_token)
    cached = _identities.get(key)
    if cached is not None and cached[1] > time.monotonic():
        return cached[0]
    identity = _load_identity(raw_token)
    if len(_identities) > MAX_CACHED_IDENTITIES:
        _identities.clear()
    _identities[key] = (identity, time.monotonic() + IDENTITY_TTL_S)
    return identity


def _load_identity(raw_token: str) -> NodeIdentity:
    token = (
        NodeToken.objects.select_related("node__pool").filter(key_hash=hash_token(raw_token)).first()
        if raw_token
        else None
    )
    if token is None:
        raise InvalidNodeToken("Unknown node token.")
    gpus = list(Gpu.objects.filter(node_id=token.node_id).values_list("pk", "uuid", "healthy"))
    return NodeIdentity(
        node_id=token.node_id,
        tenant_id=token.tenant_id,
        cluster_id=token.node.pool.cluster_id,
        gpus={str(uuid): pk for pk, uuid, _ in gpus},
        unhealthy=frozenset(pk for pk, _, healthy in gpus if not healthy),
    )


def _invalid(message: str, field: str, code: str = "invalid") -> DomainError:
    return DomainError(message, field=field, code=code)


def _number(value, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
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
            if name not in metrics.SHORT:
                raise _invalid(f"{where}.metrics: unknown field {name!r}.", f"{where}.metrics.{name}")
            short[metrics.SHORT[name]] = _number(value, f"{where}.metrics.{name}")
        claims = raw.get("claims", {})
        if not isinstance(claims, dict) or not all(str(k).isdigit() for k in claims):
            raise _invalid(f"{where}.claims: expected {{claim id: usage %}}.", f"{where}.claims")
        usage = {int(k): _number(v, f"{where}.claims.{k}") for k, v in claims.items()}
        samples.append(store.Sample(gpu_id, ts, short, usage))
    _check_claims(samples)
    return samples


def _check_claims(samples: list[store.Sample]) -> None:
    """Usage may be reported only for claims that hold a share of that GPU."""
    wanted = {(s.gpu_id, c) for s in samples for c in s.claims}
    if not wanted:
        return
    held = set(
        GpuShare.objects.filter(
            gpu_id__in={g for g, _ in wanted}, allocation__claim_id__in={c for _, c in wanted}
        ).values_list("gpu_id", "allocation__claim_id")
    )
    for i, s in enumerate(samples):
        for claim_id in s.claims:
            if (s.gpu_id, claim_id) not in held:
                raise _invalid(
                    f"samples[{i}].claims: claim {claim_id} holds no share of this GPU.",
                    f"samples[{i}].claims.{claim_id}",
                    "unknown_claim",
                )


def ingest(identity: NodeIdentity, payload) -> int:
    """Validate, then store; start a GPU failover for each new fatal XID. Returns the sample count."""
    if not store.available():
        raise TelemetryUnavailable("Telemetry needs Redis: this control plane runs without REDIS_URL.")
    now = time.time()
    samples = parse(identity, payload, now)
    store.write(identity.node_id, samples, now)
    fatal = set(settings.TELEMETRY_FATAL_XIDS)
    for s in samples:
        xid = int(s.values.get("xid", 0))
        if xid in fatal and s.gpu_id not in identity.unhealthy and store.first_xid_report(s.gpu_id, xid):
            # At once: the samples are in Redis, no transaction holds them.
            jobs.task("telemetry.tasks.gpu_failed").delay(s.gpu_id, xid)
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
