"""One websocket per page. `ws/events/` streams the tenant's events; `ws/events/?cluster=<id>` only one
cluster's. Access is checked before joining a group. A refused stream (signed out, another tenant's
cluster) is accepted and closed at once with code 4403, so a client can tell a refusal from an outage
and stop retrying."""

from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from clusters.models import Cluster
from nvke.realtime import cluster_group, tenant_group
from nvke.tenancy.context import find_context

FORBIDDEN = 4403


@database_sync_to_async
def _group_for(user, session, query: dict) -> str | None:
    """The group this connection may join, or None."""
    context = find_context(user, session=session)
    if context is None:
        return None
    cluster = query.get("cluster", [None])[0]
    if cluster is None:
        return tenant_group(context.tenant.pk)
    if not cluster.isdigit() or not Cluster.objects.filter(pk=cluster, tenant=context.tenant).exists():
        return None
    return cluster_group(context.tenant.pk, int(cluster))


class EventsConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self):
        user = self.scope.get("user")
        query = parse_qs(self.scope.get("query_string", b"").decode())
        authenticated = user is not None and user.is_authenticated
        self.group = await _group_for(user, self.scope.get("session"), query) if authenticated else None
        if self.group is None:
            await self.accept()
            await self.close(code=FORBIDDEN)
            return
        # Join before accepting: once the client is connected, no event of its group can pass it by.
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()

    async def disconnect(self, code):
        if getattr(self, "group", None):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def nvke_events(self, message):
        """Events that were broadcast together arrive as one message: one frame each."""
        for event in message["events"]:
            await self.send_json(event)
