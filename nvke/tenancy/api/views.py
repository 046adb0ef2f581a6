from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action, api_view
from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.response import Response

from nvke.api.permissions import READ_ONLY_TOKEN, IsOperator, read_only_token
from nvke.api.viewsets import TenantScopedViewSet
from nvke.tenancy import services
from nvke.tenancy.api.serializers import (
    ApiTokenSerializer,
    InvitationSerializer,
    JoinedTenantSerializer,
    MembershipRoleSerializer,
    MembershipSerializer,
    MeSerializer,
    MyInvitationSerializer,
    NewApiTokenSerializer,
)
from nvke.tenancy.context import resolve_tenant
from nvke.tenancy.models import ApiToken, Invitation, Membership
from nvke.tenancy.roles import Action


class ApiTokenViewSet(
    mixins.ListModelMixin, mixins.CreateModelMixin, mixins.DestroyModelMixin, TenantScopedViewSet
):
    """API tokens in this tenant: your own, or everyone's for owners and admins. The secret appears
    once, in the create response; DELETE revokes. A `read-only` token gets 403 on every write."""

    queryset = ApiToken.objects.all()
    serializer_class = ApiTokenSerializer
    write_action = Action.VIEW  # everyone may hold tokens; a token acts with its owner's role

    def get_queryset(self):
        context = self.tenant_context
        if context is None:
            return ApiToken.objects.none()
        tokens = ApiToken.objects.select_related("user").filter(
            tenant=context.tenant, revoked_at__isnull=True
        )
        return tokens if context.allows(Action.MANAGE) else tokens.filter(user=self.request.user)

    @extend_schema(request=ApiTokenSerializer, responses={201: NewApiTokenSerializer})
    def create(self, request, *args, **kwargs):
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        token, raw = services.issue_token(
            context=self.tenant_context, user=request.user, **serializer.validated_data
        )
        token.token = raw
        return Response(NewApiTokenSerializer(token).data, status=status.HTTP_201_CREATED)

    def perform_destroy(self, instance):
        services.revoke_token(instance)


class OperatorTokenViewSet(
    mixins.ListModelMixin, mixins.CreateModelMixin, mixins.DestroyModelMixin, viewsets.GenericViewSet
):
    """Operator tokens (operators only): tokens in no tenant with the operator's reach, the fleet
    endpoints (`fleet/`, `fleet-rollouts/`); on a tenant's endpoints they act as no member (a tenant's
    object is a 404). Every operator sees and revokes all of them. The secret appears once; DELETE
    revokes; a token stops working when its user is no longer staff."""

    queryset = ApiToken.objects.select_related("user").filter(tenant=None, revoked_at__isnull=True)
    serializer_class = ApiTokenSerializer
    permission_classes = [IsOperator]

    @extend_schema(request=ApiTokenSerializer, responses={201: NewApiTokenSerializer})
    def create(self, request, *args, **kwargs):
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        token, raw = services.issue_token(context=None, user=request.user, **serializer.validated_data)
        token.token = raw
        return Response(NewApiTokenSerializer(token).data, status=status.HTTP_201_CREATED)

    def perform_destroy(self, instance):
        services.revoke_token(instance)


class MembershipViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.DestroyModelMixin,
    TenantScopedViewSet,
):
    """The tenant's members and their roles. Every member reads the list; owners and admins change roles
    and remove members (people join by accepting an invitation, `invitations/`); only owners touch the
    owner role, and a tenant keeps at least one owner."""

    queryset = Membership.objects.all()
    serializer_class = MembershipSerializer
    write_action = Action.MANAGE

    def get_queryset(self):
        context = self.tenant_context
        if context is None:
            return Membership.objects.none()
        return Membership.objects.select_related("user").filter(tenant=context.tenant)

    def get_serializer_class(self):
        return MembershipRoleSerializer if self.action == "partial_update" else MembershipSerializer

    @extend_schema(request=MembershipRoleSerializer, responses=MembershipSerializer)
    def partial_update(self, request, *args, **kwargs):
        """Change a member's role."""
        membership = self.get_object()
        serializer = MembershipRoleSerializer(data=request.data, partial=True)
        serializer.is_valid(raise_exception=True)
        if "role" in serializer.validated_data:  # a PATCH that names nothing changes nothing
            membership = services.change_role(
                context=self.tenant_context, membership=membership, role=serializer.validated_data["role"]
            )
        return Response(MembershipSerializer(membership).data)

    def perform_destroy(self, instance):
        services.remove_member(context=self.tenant_context, membership=instance)


class InvitationViewSet(
    mixins.ListModelMixin,
    mixins.CreateModelMixin,
    mixins.RetrieveModelMixin,
    mixins.DestroyModelMixin,
    TenantScopedViewSet,
):
    """Invitations to this tenant (owners and admins): invite a username in a role; the user of that
    name accepts or declines at `me/invitations/`. The answer is the same whether or not the user
    exists. Invitations expire after NVKE_INVITATION_TTL_DAYS; DELETE revokes one."""

    queryset = Invitation.objects.all()
    serializer_class = InvitationSerializer
    read_action = Action.MANAGE
    write_action = Action.MANAGE

    def get_queryset(self):
        return (
            Invitation.objects.restrict(self.tenant_context)
            .select_related("invited_by")
            .filter(expires_at__gt=timezone.now())
        )

    def perform_create(self, serializer):
        serializer.instance = services.invite(
            context=self.tenant_context, invited_by=self.request.user, **serializer.validated_data
        )

    def perform_destroy(self, instance):
        services.revoke_invitation(instance)


class SignedIn(BasePermission):
    """Any signed-in user, in a tenant or not (invitations are how one joins a first tenant); writes not
    with a read-only token."""

    def has_permission(self, request, view) -> bool:
        if not request.user or not request.user.is_authenticated:
            return False
        if request.method not in SAFE_METHODS and read_only_token(request):
            self.message = READ_ONLY_TOKEN
            return False
        return True


class MyInvitationViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Invitations addressed to you, from any tenant: `accept` joins the tenant in the invitation's role,
    `decline` drops it."""

    serializer_class = MyInvitationSerializer
    permission_classes = [SignedIn]
    queryset = Invitation.objects.none()  # for the schema; get_queryset is the user's

    def get_queryset(self):
        return services.pending_invitations(self.request.user)

    @extend_schema(request=None, responses=JoinedTenantSerializer)
    @action(detail=True, methods=["post"])
    def accept(self, request, pk=None):
        membership = services.accept_invitation(user=request.user, pk=self._pk())
        return Response(JoinedTenantSerializer(membership).data)

    @extend_schema(request=None, responses={204: None})
    @action(detail=True, methods=["post"])
    def decline(self, request, pk=None):
        services.decline_invitation(user=request.user, pk=self._pk())
        return Response(status=status.HTTP_204_NO_CONTENT)

    def _pk(self) -> int:
        return self.get_object().pk  # 404 for anything not addressed to this user


@extend_schema(responses=MeSerializer)
@api_view(["GET"])
def me(request):
    """Who you are, the tenant this request acts in, your role there, and your other tenants."""
    context = resolve_tenant(request)
    tenants = [
        {"id": m.tenant_id, "name": m.tenant.name, "role": m.role}
        for m in Membership.objects.filter(user=request.user).select_related("tenant")
    ]
    return Response(
        MeSerializer(
            {
                "username": request.user.get_username(),
                "tenant": context.tenant.name,
                "role": context.role,
                "tenants": tenants,
            }
        ).data
    )
