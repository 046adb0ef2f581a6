"""One websocket per page. `ws/events/` streams the tenant's events; `ws/events/?cluster=<id>` only one
cluster's; `ws/events/?rollouts=1` fleet rollouts' events, to staff users only (rollouts span every
tenant, so that stream needs no tenant). Access is checked before joining a group. A refused stream
(signed out, another tenant's cluster, not staff) is accepted and closed at once with code 4403, so a
client can tell a refusal from an outage and stop retrying."""

from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from clusters.models import Cluster
from nvke.realtime import OPERATORS_GROUP, cluster_group, member_group, tenant_group
from nvke.tenancy.context import find_context

FORBIDDEN = 4403


@database_sync_to_async
def _group_for(user, session, query: dict) -> tuple[str, int | None] | None:
    """The group this connection may join and its tenant (None for the operators' stream), or None."""
    if "rollouts" in query:
        return (OPERATORS_GROUP, None) if user.is_staff else None
    context = find_context(user, session=session)
    if context is None:
        return None
    tenant_id = context.tenant.pk
    cluster = query.get("cluster", [None])[0]
    if cluster is None:
        return tenant_group(tenant_id), tenant_id
    if not cluster.isdigit() or not Cluster.objects.filter(pk=cluster, tenant=context.tenant).exists():
        return None
    return cluster_group(tenant_id, int(cluster)), tenant_id


class MembershipWatch:
    """For consumers of a tenant's data: the socket closes (4403) when the user's membership of that
    tenant ends, instead of streaming on until the user disconnects."""

    member_group: str | None = None

    async def watch_membership(self, tenant_id: int) -> None:
        self.member_group = member_group(tenant_id, self.scope["user"].pk)
        await self.channel_layer.group_add(self.member_group, self.channel_name)

    async def stop_watching_membership(self) -> None:
        if self.member_group:
            await self.channel_layer.group_discard(self.member_group, self.channel_name)

    async def nvke_access_revoked(self, message) -> None:
        await self.close(code=FORBIDDEN)


class EventsConsumer(MembershipWatch, AsyncJsonWebsocketConsumer):
    group: str | None = None

    async def connect(self):
        user = self.scope.get("user")
        query = parse_qs(self.scope.get("query_string", b"").decode())
        authenticated = user is not None and user.is_authenticated
        resolved = await _group_for(user, self.scope.get("session"), query) if authenticated else None
        if resolved is None:
            await self.accept()
            await self.close(code=FORBIDDEN)
            return
        self.group, tenant_id = resolved
        # Join before accepting: once the client is connected, no event of its group can pass it by.
        await self.channel_layer.group_add(self.group, self.channel_name)
        if tenant_id is not None:
            await self.watch_membership(tenant_id)
        await self.accept()

    async def disconnect(self, code):
        if self.group:
            await self.channel_layer.group_discard(self.group, self.channel_name)
        await self.stop_watching_membership()

    async def nvke_events(self, message):
        """Events that were broadcast together arrive as one message: one frame each."""
        for event in message["events"]:
            await self.send_json(event)
