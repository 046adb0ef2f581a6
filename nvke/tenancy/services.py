"""Writes on tokens and memberships. Views (API and UI) check the role, then call these."""

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from nvke.errors import Conflict, DomainError
from nvke.realtime import close_streams, member_group

from .context import TenantContext
from .models import ApiToken, Membership
from .roles import Role


def issue_token(
    *, context: TenantContext, user, name: str, expires_at=None, scope: str = ApiToken.Scope.READ_WRITE
) -> tuple[ApiToken, str]:
    """A new token for `user` in the context's tenant; returns it and its secret (shown once)."""
    if not name.strip():
        raise DomainError("name: Give the token a name.", field="name")
    if expires_at is not None and expires_at <= timezone.now():
        raise DomainError("expires_at: The expiry must lie in the future.", field="expires_at")
    return ApiToken.issue(tenant=context.tenant, user=user, name=name, expires_at=expires_at, scope=scope)


def revoke_token(token: ApiToken) -> ApiToken:
    """Revoke once; the revocation time stays the first one. Saved (not updated) so it is audited."""
    with transaction.atomic():
        token = ApiToken.objects.select_for_update().get(pk=token.pk)
        if token.revoked_at is None:
            token.revoked_at = timezone.now()
            token.save(update_fields=["revoked_at"])
    return token


def _owners(tenant) -> int:
    return Membership.objects.filter(tenant=tenant, role=Role.OWNER).count()


def _may_touch(context: TenantContext, role: str) -> None:
    """Only owners grant, change or take away the owner role."""
    if role == Role.OWNER and context.role != Role.OWNER:
        raise DomainError(
            "Only an owner may grant or change the owner role.", field="role", code="owner_only"
        )


def add_member(*, context: TenantContext, username: str, role: str) -> Membership:
    _may_touch(context, role)
    user = get_user_model().objects.filter(username=username, is_active=True).first()
    if user is None:
        raise DomainError(f"username: No active user {username!r}.", field="username", code="unknown_user")
    with transaction.atomic():
        if Membership.objects.filter(tenant=context.tenant, user=user).exists():
            raise Conflict(f"{username} is already a member.", field="username", code="duplicate")
        return Membership.objects.create(tenant=context.tenant, user=user, role=role)


def change_role(*, context: TenantContext, membership: Membership, role: str) -> Membership:
    _may_touch(context, membership.role)
    _may_touch(context, role)
    with transaction.atomic():
        membership = Membership.objects.select_for_update().get(pk=membership.pk)
        _keep_an_owner(membership, leaving=membership.role == Role.OWNER and role != Role.OWNER)
        membership.role = role
        membership.save(update_fields=["role"])
    return membership


def remove_member(*, context: TenantContext, membership: Membership) -> None:
    """Remove a member; their tokens in this tenant are revoked with them."""
    _may_touch(context, membership.role)
    with transaction.atomic():
        membership = Membership.objects.select_for_update().get(pk=membership.pk)
        _keep_an_owner(membership, leaving=membership.role == Role.OWNER)
        for token in ApiToken.objects.filter(
            tenant=membership.tenant, user=membership.user, revoked_at__isnull=True
        ):
            revoke_token(token)
        membership.delete()
        close_streams(member_group(membership.tenant_id, membership.user_id))


def _keep_an_owner(membership: Membership, *, leaving: bool) -> None:
    # Lock every owner row so two admins demoting the last two owners at once cannot both pass.
    list(Membership.objects.select_for_update().filter(tenant=membership.tenant, role=Role.OWNER))
    if leaving and _owners(membership.tenant) <= 1:
        raise Conflict("A tenant keeps at least one owner.", field="role", code="last_owner")
