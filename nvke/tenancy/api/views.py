from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import api_view
from rest_framework.response import Response

from nvke.api.viewsets import TenantScopedViewSet
from nvke.tenancy import services
from nvke.tenancy.api.serializers import (
    ApiTokenSerializer,
    MembershipRoleSerializer,
    MembershipSerializer,
    MeSerializer,
    NewApiTokenSerializer,
)
from nvke.tenancy.context import resolve_tenant
from nvke.tenancy.models import ApiToken, Membership
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


class MembershipViewSet(
    mixins.ListModelMixin,
    mixins.CreateModelMixin,
    mixins.RetrieveModelMixin,
    mixins.DestroyModelMixin,
    TenantScopedViewSet,
):
    """The tenant's members and their roles. Every member reads the list; owners and admins add members
    (existing users, by username), change roles and remove members; only owners touch the owner role,
    and a tenant keeps at least one owner."""

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

    def perform_create(self, serializer):
        serializer.instance = services.add_member(
            context=self.tenant_context,
            username=serializer.validated_data["user"]["username"],
            role=serializer.validated_data["role"],
        )

    @extend_schema(request=MembershipRoleSerializer, responses=MembershipSerializer)
    def partial_update(self, request, *args, **kwargs):
        """Change a member's role."""
        membership = self.get_object()
        serializer = MembershipRoleSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        membership = services.change_role(
            context=self.tenant_context, membership=membership, role=serializer.validated_data["role"]
        )
        return Response(MembershipSerializer(membership).data)

    def perform_destroy(self, instance):
        services.remove_member(context=self.tenant_context, membership=instance)


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
