"""Websocket events of upgrades, sent after commit through nvke.realtime to the tenant's and the
cluster's groups (the ws/events/ consumer forwards them). Fleet rollouts and the runs they own are also
told to the operators' group, whose rollout pages follow them."""

from nvke.realtime import broadcast, broadcast_operators

from .models import FleetRollout, UpgradeNode, UpgradeRun


def publish_run(run: UpgradeRun, counts: dict[str, int] | None = None) -> None:
    event = {
        "type": "upgrade.run",
        "run": run.pk,
        "pool": run.pool_id,
        "cluster": run.pool.cluster_id,
        "status": run.status,
        "reason": run.reason,
        "message": run.message,
        "target": run.target_release.version,
    }
    if counts is not None:
        event["counts"] = counts
    broadcast(run.tenant_id, event, cluster_id=run.pool.cluster_id)
    if run.rollout_id:
        broadcast_operators({**event, "type": "rollout.run", "rollout": run.rollout_id, "wave": run.wave})


def publish_rollout(rollout: FleetRollout) -> None:
    broadcast_operators(
        {"type": "rollout.status", "rollout": rollout.pk, "status": rollout.status, "wave": rollout.wave}
    )


def publish_node(run: UpgradeRun, row: UpgradeNode) -> None:
    broadcast(
        run.tenant_id,
        {
            "type": "upgrade.node",
            "run": run.pk,
            "pool": run.pool_id,
            "cluster": run.pool.cluster_id,
            "node": row.name,
            "state": row.state,
            "reason": row.reason,
            "message": row.message,
        },
        cluster_id=run.pool.cluster_id,
    )
