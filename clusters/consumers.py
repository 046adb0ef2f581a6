"""The events stream, one websocket per page. `ws/events/` streams the tenant's events;
`ws/events/?cluster=<id>` only one cluster's; `ws/events/?rollouts=1` fleet rollouts' events, to the
platform's operators only (rollouts span every tenant, so that stream needs no tenant): a staff user's
session or operator token, never a tenant token, whoever holds it (as on the fleet endpoints). A socket
acts in its API token's tenant (nvke.websocket_auth) or its session's. Access is checked before joining
a group, and again once the stream has joined the groups that close it when access ends (so a
revocation in between cannot slip past). A refused stream (signed out, another tenant's cluster, not an
operator) is accepted and closed at once with code 4403, so a client can tell a refusal from an outage
and stop retrying."""

from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from clusters.models import Cluster
from nvke.consumers import StreamAccess, object_id, stream_context
from nvke.realtime import OPERATORS_GROUP, cluster_group, tenant_group
from nvke.tenancy.context import acts_as_operator


@database_sync_to_async
def _group_for(scope: dict, query: dict) -> tuple[str, int | None] | None:
    """The group this connection may join and its tenant (None for the operators' stream), or None."""
    if "rollouts" in query:  # decided as for the API's fleet endpoints
        operator = acts_as_operator(scope.get("user"), scope.get("token"))
        return (OPERATORS_GROUP, None) if operator else None
    context = stream_context(scope)
    if context is None:
        return None
    tenant_id = context.tenant.pk
    cluster = query.get("cluster", [None])[0]
    if cluster is None:
        return tenant_group(tenant_id), tenant_id
    pk = object_id(cluster)
    if pk is None or not Cluster.objects.filter(pk=pk, tenant=context.tenant).exists():
        return None
    return cluster_group(tenant_id, pk), tenant_id


class EventsConsumer(StreamAccess, AsyncJsonWebsocketConsumer):
    group: str | None = None

    async def connect(self):
        query = parse_qs(self.scope.get("query_string", b"").decode())
        resolved = await _group_for(self.scope, query)
        if resolved is None:
            await self.refuse()
            return
        self.group, tenant_id = resolved
        # Join before accepting: once the client is connected, no event of its group can pass it by.
        await self.channel_layer.group_add(self.group, self.channel_name)
        if not await self.watch_access(tenant_id):
            await self.refuse()
            return
        await self.accept()

    async def disconnect(self, code):
        if self.group:
            await self.channel_layer.group_discard(self.group, self.channel_name)
        await self.stop_watching_access()

    async def nvke_events(self, message):
        """Events that were broadcast together arrive as one message: one frame each."""
        for event in message["events"]:
            await self.send_json(event)
