"""What every websocket of a tenant's data shares: the stream's tenant and role (`stream_context`), and
`StreamAccess` — accepting, refusing (accepted and closed at once with 4403, so a client can tell a
refusal from an outage and stop retrying) and closing the stream when access ends. Access is checked
before joining a group, and again once the stream has joined the groups that close it when access ends
(so a revocation in between cannot slip past). The streams themselves are the apps': clusters' events
(`clusters/consumers.py`) and telemetry's (`telemetry/consumers.py`)."""

import asyncio
import datetime

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.contrib.auth import get_user_model
from django.utils import timezone

from nvke.realtime import (
    member_group,
    staff_group,
    token_group,
    user_group,
)
from nvke.tenancy.context import TenantContext, find_context
from nvke.tenancy.models import ApiToken

FORBIDDEN = 4403  # refused, or access ended (membership, token): final, do not retry
THROTTLED = 4429  # too many handshakes with this token or its user: retry after a while
SUBPROTOCOL = "nvke"  # answered when offered, e.g. beside `nvke.bearer.<token>`


MAX_ID = 2**63 - 1  # PostgreSQL bigint


def object_id(value: str | None) -> int | None:
    """A query parameter naming an object by id, or None when it is not one: ASCII digits only
    ('²'.isdigit() is true, and int() refuses it) and within bigint."""
    if not value or not value.isascii() or not value.isdecimal():
        return None
    number = int(value)
    return number if number <= MAX_ID else None


def stream_context(scope: dict) -> TenantContext | None:
    """The tenant and role a socket acts in: its token's, else its session's (as on the API)."""
    user = scope.get("user")
    if user is None:
        return None
    return find_context(user, session=scope.get("session"), token=scope.get("token"))


@database_sync_to_async
def _access_holds(user_id: int, tenant_id: int | None, token_id: int | None) -> bool:
    """Whether the account, its membership of the tenant (its staff flag, for the operators' stream) and
    the stream's token still hold."""
    users = get_user_model().objects.filter(pk=user_id, is_active=True)
    if tenant_id is None:
        users = users.filter(is_staff=True)
    else:
        users = users.filter(memberships__tenant_id=tenant_id)
    if not users.exists():
        return False
    if token_id is None:
        return True
    token = ApiToken.objects.filter(pk=token_id).first()
    return token is not None and token.is_active


class StreamAccess:
    """For consumers of a tenant's data: how they accept and refuse, and closing the socket (4403) when
    access ends — the user's membership of the tenant (or staff flag, for the operators' stream), the
    account (deactivated or deleted), or the API token it was opened with (revoked, deleted or expired)
    — instead of streaming on until the client disconnects."""

    access_groups: tuple[str, ...] = ()
    expiry: asyncio.Task | None = None

    async def accept(self, subprotocol: str | None = None, headers=None) -> None:
        # A browser drops a connection whose answer names none of the subprotocols it offered.
        if SUBPROTOCOL in self.scope.get("subprotocols", ()):
            subprotocol = SUBPROTOCOL
        await super().accept(subprotocol, headers)

    async def refuse(self, code: int = FORBIDDEN) -> None:
        """Accept, then close with `code`: a browser sees a close code only on an accepted socket."""
        await self.accept()
        await self.close(code=code)

    async def watch_access(self, tenant_id: int | None) -> bool:
        """Join the groups that close this stream when access ends; False if it already has.
        `tenant_id` None: the operators' stream, which ends with the user's staff flag instead."""
        user_id = self.scope["user"].pk
        scoped = member_group(tenant_id, user_id) if tenant_id is not None else staff_group(user_id)
        self.access_groups = (user_group(user_id), scoped)
        token = self.scope.get("token")
        if token is not None:
            self.access_groups += (token_group(token.pk),)
            if token.expires_at is not None:
                self.expiry = asyncio.create_task(self._close_at(token.expires_at))
        for group in self.access_groups:
            await self.channel_layer.group_add(group, self.channel_name)
        # Access that ended after the handshake's check but before these joins sent its close to no one.
        return await _access_holds(user_id, tenant_id, token.pk if token is not None else None)

    async def stop_watching_access(self) -> None:
        if self.expiry:
            self.expiry.cancel()
        for group in self.access_groups:
            await self.channel_layer.group_discard(group, self.channel_name)

    async def _close_at(self, moment: datetime.datetime) -> None:
        await asyncio.sleep((moment - timezone.now()).total_seconds())
        await self.close(code=FORBIDDEN)

    async def nvke_access_revoked(self, message) -> None:
        await self.close(code=FORBIDDEN)


class ThrottledConsumer(StreamAccess, AsyncWebsocketConsumer):
    """Every route's answer to a handshake over its token's or user's rate limit."""

    async def connect(self):
        await self.refuse(THROTTLED)
