"""`ws/telemetry/?view=fleet`, `?cluster=<id>`, `?pool=<id>`, `?gpu=<id>`: live telemetry of the
tenant's GPUs, one coalesced frame per interval (telemetry.hub), plus the tenant's (or the cluster's)
events, which carry the rescaling and health decisions. Access (API token or session) and refusals as
in nvke.consumers: accepted, then closed with 4403."""

import json
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer

from nodepools.models import Gpu, NodePool
from nvke.consumers import FORBIDDEN, StreamAccess, object_id, stream_context
from nvke.realtime import cluster_group, tenant_group

from .hub import COLUMNS, hub

KINDS = ("cluster", "pool", "gpu")


@database_sync_to_async
def resolve_view(scope: dict, query: dict) -> tuple[str, dict, str, int] | None:
    """(view key, GPU filter, events group, tenant) for what the socket's tenant may see; None if refused."""
    context = stream_context(scope)
    if context is None:
        return None
    tenant_id = context.tenant.pk
    asked = [(kind, query[kind][0]) for kind in KINDS if kind in query]
    if not asked:
        return f"tenant-{tenant_id}.fleet", {"tenant_id": tenant_id}, tenant_group(tenant_id), tenant_id
    if len(asked) > 1 or (pk := object_id(asked[0][1])) is None:
        return None
    kind = asked[0][0]
    if kind == "cluster":
        cluster_id = pk if context.tenant.clusters.filter(pk=pk).exists() else None
        gpu_filter = {"node__pool__cluster_id": pk}
    elif kind == "pool":
        cluster_id = (
            NodePool.objects.filter(pk=pk, tenant_id=tenant_id).values_list("cluster_id", flat=True).first()
        )
        gpu_filter = {"node__pool_id": pk}
    else:
        cluster_id = (
            Gpu.objects.filter(pk=pk, tenant_id=tenant_id)
            .values_list("node__pool__cluster_id", flat=True)
            .first()
        )
        gpu_filter = {"pk": pk}
    if cluster_id is None:
        return None
    return (
        f"tenant-{tenant_id}.{kind}-{pk}",
        {"tenant_id": tenant_id, **gpu_filter},
        cluster_group(tenant_id, cluster_id),
        tenant_id,
    )


class TelemetryConsumer(StreamAccess, AsyncWebsocketConsumer):
    async def connect(self):
        self.view_key = self.group = None
        query = parse_qs(self.scope.get("query_string", b"").decode())
        resolved = await resolve_view(self.scope, query)
        if resolved is None:
            await self.refuse()
            return
        await self.accept()
        key, gpu_filter, self.group, tenant_id = resolved
        await self.channel_layer.group_add(self.group, self.channel_name)
        if not await self.watch_access(tenant_id):
            await self.close(code=FORBIDDEN)
            return
        view = await hub.view(key, gpu_filter)
        hello = {
            "type": "telemetry.hello",
            "view": key,
            "gpus": view.gpus,
            "columns": COLUMNS,
            "latest": await hub.current(view),
        }
        await self.send(text_data=json.dumps(hello))
        hub.join(view, id(self), lambda text: self.send(text_data=text), self.close)
        self.view_key = key

    async def disconnect(self, code):
        if self.view_key:
            hub.leave(self.view_key, id(self))
        if self.group:
            await self.channel_layer.group_discard(self.group, self.channel_name)
        await self.stop_watching_access()

    async def nvke_events(self, message):
        """Events broadcast together (nvke.realtime) arrive as one message: one frame each."""
        for event in message["events"]:
            await self.send(text_data=json.dumps(event))
