"""`GET /api/v1/quota/`: the tenant's quotas and their use, counted by claims/quotas.py."""

from drf_spectacular.utils import extend_schema
from rest_framework.decorators import api_view
from rest_framework.response import Response

from claims import quotas
from nvke.tenancy.api.serializers import QuotaSerializer
from nvke.tenancy.context import resolve_tenant


@extend_schema(responses=QuotaSerializer)
@api_view(["GET"])
def quota(request):
    """The tenant's quotas and what it uses of each (operators set them in the admin)."""
    return Response(QuotaSerializer(quotas.usage(resolve_tenant(request).tenant)).data)
