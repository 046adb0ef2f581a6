"""Record a telemetry decision and tell the tenant's live pages about it (after commit)."""

from nvke.realtime import broadcast

from .models import TelemetryEvent


def record(kind: str, *, tenant_id: int, cluster_id: int, message: str, **refs) -> TelemetryEvent:
    event = TelemetryEvent.objects.create(
        tenant_id=tenant_id, cluster_id=cluster_id, kind=kind, message=message, **refs
    )
    broadcast(
        tenant_id,
        {
            "type": "telemetry.event",
            "kind": kind,
            "cluster": cluster_id,
            "claim": event.claim_id,
            "gpu": event.gpu_id,
            "node": event.node_id,
            "message": message,
        },
        cluster_id=cluster_id,
    )
    return event
