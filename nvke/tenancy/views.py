from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import api_view
from rest_framework.response import Response

from nvke.api.viewsets import TenantScopedViewSet

from .context import resolve_tenant
from .models import ApiToken, Membership
from .roles import Action
from .serializers import ApiTokenSerializer, MeSerializer, NewApiTokenSerializer


class ApiTokenViewSet(
    mixins.ListModelMixin, mixins.CreateModelMixin, mixins.DestroyModelMixin, TenantScopedViewSet
):
    """Your API tokens in this tenant. The secret appears once, in the create response; delete revokes."""

    queryset = ApiToken.objects.all()
    serializer_class = ApiTokenSerializer
    write_action = Action.VIEW  # everyone may hold tokens; a token acts with its owner's role

    def get_queryset(self):
        context = self.tenant_context
        if context is None:
            return ApiToken.objects.none()
        return ApiToken.objects.filter(tenant=context.tenant, user=self.request.user, revoked_at__isnull=True)

    @extend_schema(request=ApiTokenSerializer, responses={201: NewApiTokenSerializer})
    def create(self, request, *args, **kwargs):
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        token, raw = ApiToken.issue(
            tenant=self.tenant_context.tenant, user=request.user, **serializer.validated_data
        )
        token.token = raw
        return Response(NewApiTokenSerializer(token).data, status=status.HTTP_201_CREATED)

    def perform_destroy(self, instance):
        ApiToken.objects.filter(pk=instance.pk).update(revoked_at=timezone.now())


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
