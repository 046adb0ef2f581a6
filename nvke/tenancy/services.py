"""Writes on tokens, invitations and memberships. Views (API and UI) check the role, then call these."""

from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from nvke.errors import Conflict, DomainError, NotFound
from nvke.realtime import close_streams, member_group

from .context import TenantContext
from .models import ApiToken, Invitation, Membership, Tenant
from .roles import Action, Role, role_allows


def issue_token(
    *, context: TenantContext | None, user, name: str, expires_at=None, scope: str = ApiToken.Scope.READ_WRITE
) -> tuple[ApiToken, str]:
    """A new token for `user` in the context's tenant; returns it and its secret (shown once). Context
    None: an operator token, in no tenant, for staff only (the views check; this holds the line)."""
    if context is None and not user.is_staff:
        raise DomainError("Only the platform's operators hold operator tokens.", code="operator_only")
    if not name.strip():
        raise DomainError("name: Give the token a name.", field="name")
    if expires_at is not None and expires_at <= timezone.now():
        raise DomainError("expires_at: The expiry must lie in the future.", field="expires_at")
    tenant = context.tenant if context is not None else None
    return ApiToken.issue(tenant=tenant, user=user, name=name, expires_at=expires_at, scope=scope)


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


def invite(*, context: TenantContext, invited_by, username: str, role: str) -> Invitation:
    """Offer `role` in the context's tenant to the user named `username`, for NVKE_INVITATION_TTL_DAYS.
    The answer is the same whether or not such a user exists; only an existing member is refused (the
    inviter sees the members anyway). An expired invitation of the same name is replaced. A username
    no account could have is refused (bidi and other control characters would make the lists lie), and
    a tenant has at most NVKE_MAX_PENDING_INVITATIONS open at once."""
    _may_touch(context, role)
    username = _invitable(username)
    now = timezone.now()
    with transaction.atomic():
        # The tenant's row is the lock that keeps concurrent invites from passing the cap together.
        Tenant.objects.select_for_update().filter(pk=context.tenant.pk).first()
        if Membership.objects.filter(tenant=context.tenant, user__username=username).exists():
            raise Conflict(f"{username} is already a member.", field="username", code="duplicate")
        Invitation.objects.filter(tenant=context.tenant, username=username, expires_at__lte=now).delete()
        limit = settings.NVKE_MAX_PENDING_INVITATIONS
        if Invitation.objects.filter(tenant=context.tenant, expires_at__gt=now).count() >= limit:
            raise Conflict(
                f"{context.tenant.name} already has {limit} open invitations, the most it may "
                "have: revoke some, or wait until they are accepted or expire.",
                field="username",
                code="invitation_limit",
            )
        try:
            with transaction.atomic():
                return Invitation.objects.create(
                    tenant=context.tenant,
                    username=username,
                    role=role,
                    invited_by=invited_by,
                    expires_at=now + timedelta(days=settings.NVKE_INVITATION_TTL_DAYS),
                )
        except IntegrityError:  # a pending one, or a concurrent invite that just committed
            raise Conflict(
                f"{username} is already invited; revoke that invitation to send another.",
                field="username",
                code="duplicate",
            ) from None


def _invitable(username: str) -> str:
    """The username as an account could have it (the user model's own validator: letters, digits and
    @.+-_ only, so no bidi override, zero-width or control character), else a 400 naming the field."""
    username = username.strip()
    if not username:
        raise DomainError("username: Name the user to invite.", field="username")
    try:
        get_user_model().username_validator(username)
    except ValidationError:
        raise DomainError(
            "username: A username has letters, digits and @ . + - _ only.", field="username"
        ) from None
    if len(username) > Invitation._meta.get_field("username").max_length:
        raise DomainError("username: A username has at most 150 characters.", field="username")
    return username


def revoke_invitation(invitation: Invitation) -> None:
    invitation.delete()


def pending_invitations(user):
    """The invitations the user may accept: addressed to their username, not expired."""
    return Invitation.objects.select_related("tenant", "invited_by").filter(
        username=user.get_username(), expires_at__gt=timezone.now()
    )


def _inviter_may_still_grant(invitation: Invitation) -> bool:
    """An invitation stands only while its sender may still grant its role there (a removed or demoted
    admin's invitations lapse with their rights)."""
    sender = Membership.objects.filter(tenant=invitation.tenant_id, user=invitation.invited_by_id).first()
    if sender is None or not role_allows(sender.role, Action.MANAGE):
        return False
    return invitation.role != Role.OWNER or sender.role == Role.OWNER


def accept_invitation(*, user, pk: int) -> Membership:
    """Join the invitation's tenant in its role; the invitation is used up."""
    with transaction.atomic():
        invitation = pending_invitations(user).select_for_update(of=("self",)).filter(pk=pk).first()
        if invitation is None:
            raise NotFound("No such invitation.")
        if not _inviter_may_still_grant(invitation):
            raise Conflict(
                "This invitation was withdrawn: whoever sent it may no longer grant this role.",
                code="invitation_withdrawn",
            )
        if Membership.objects.filter(tenant=invitation.tenant, user=user).exists():
            raise Conflict(f"You are already a member of {invitation.tenant.name}.", code="duplicate")
        invitation.delete()
        return Membership.objects.create(tenant=invitation.tenant, user=user, role=invitation.role)


def decline_invitation(*, user, pk: int) -> None:
    invitation = pending_invitations(user).filter(pk=pk).first()
    if invitation is None:
        raise NotFound("No such invitation.")
    invitation.delete()


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
