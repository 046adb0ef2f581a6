from rest_framework import mixins, viewsets

from nvke.tenancy.context import TenantContext, resolve_tenant


class TenantScopedViewSet(viewsets.GenericViewSet):
    """Starts every query from the request's tenant, so another tenant's object is a 404."""

    queryset = None

    @property
    def tenant_context(self) -> TenantContext | None:
        return resolve_tenant(self.request)

    def get_queryset(self):
        return self.queryset.restrict(self.tenant_context)


class ReadOnlyTenantViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantScopedViewSet):
    pass
