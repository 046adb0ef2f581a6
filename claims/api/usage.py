"""`GET /api/v1/usage/`: the tenant's metered GPU usage over a time range, grouped (claims/usage.py);
`usage/export/` gives the same rows as CSV."""

import csv
import datetime
import io

from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.decorators import api_view
from rest_framework.response import Response

from claims import usage
from nvke.tenancy.context import resolve_tenant

COLUMNS = (
    "key",
    "claims",
    "memory_gib_seconds",
    "guaranteed_percent_seconds",
    "ceiling_percent_seconds",
    "gpu_hours",
    "whole_card_gpu_hours",
    "cost",
)


CSV_DECIMALS = 4  # a spreadsheet reads 0.3333, not 0.33333333333333337


class UsageQuerySerializer(serializers.Serializer):
    since = serializers.DateTimeField(required=False, help_text="Default: 7 days before until")
    until = serializers.DateTimeField(required=False, help_text="Default: now")
    group_by = serializers.ChoiceField(choices=usage.GROUPS, default="pool")


class UsageRowSerializer(serializers.Serializer):
    key = serializers.CharField(help_text="The group: cluster/namespace/claim, cluster/pool, a day, …")
    claims = serializers.IntegerField(source="claim_count", help_text="Claims that held capacity in it")
    memory_gib_seconds = serializers.FloatField()
    guaranteed_percent_seconds = serializers.FloatField(help_text="Guaranteed compute, %·s of one GPU")
    ceiling_percent_seconds = serializers.FloatField(help_text="Compute ceilings, %·s of one GPU")
    gpu_hours = serializers.FloatField(help_text="Whole-GPU equivalents held, in hours")
    whole_card_gpu_hours = serializers.FloatField(
        help_text="GPU-hours whole-card allocation would have held for the same claims (a card per GPU share)"
    )
    cost = serializers.DecimalField(max_digits=14, decimal_places=4, allow_null=True)


class UsageReportSerializer(serializers.Serializer):
    since = serializers.DateTimeField()
    until = serializers.DateTimeField()
    group_by = serializers.ChoiceField(choices=usage.GROUPS)
    results = UsageRowSerializer(many=True)


def _report(request) -> tuple[dict, list]:
    # A plain dict, not the QueryDict: DRF reads an empty form value as "not given", so `until=` passed.
    query = UsageQuerySerializer(data=request.query_params.dict())
    query.is_valid(raise_exception=True)
    since, until = usage.check_range(query.validated_data.get("since"), query.validated_data.get("until"))
    group_by = query.validated_data["group_by"]
    rows = usage.report(resolve_tenant(request).tenant, since, until, group_by)
    for row in rows:
        row.claim_count = len(row.claims)
    return {"since": since, "until": until, "group_by": group_by}, UsageRowSerializer(rows, many=True).data


@extend_schema(parameters=[UsageQuerySerializer], responses=UsageReportSerializer)
@api_view(["GET"])
def usage_report(request):
    """The tenant's GPU usage from the allocation history: memory GiB·s, guaranteed and ceiling
    compute %·s, whole-GPU-equivalent hours and (where the catalog prices the model) cost, per group."""
    head, rows = _report(request)
    return Response({**head, "results": rows})


@extend_schema(parameters=[UsageQuerySerializer], responses={(200, "text/csv"): OpenApiTypes.STR})
@api_view(["GET"])
def usage_export(request):
    """The same report as CSV, one line per group (bad parameters: a JSON error, as everywhere)."""
    head, rows = _report(request)
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=COLUMNS)
    writer.writeheader()
    writer.writerows(
        {k: round(v, CSV_DECIMALS) if isinstance(v, float) else v for k, v in row.items()} for row in rows
    )
    response = HttpResponse(out.getvalue(), content_type="text/csv")
    # The days it covers: an `until` at midnight ends the day before, which the name says.
    last_day = head["until"] - datetime.timedelta(microseconds=1)
    name = f"nvke-usage-{head['group_by']}-{head['since']:%Y%m%d}-{last_day:%Y%m%d}.csv"
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response
