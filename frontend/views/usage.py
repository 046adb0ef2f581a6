"""The usage page: the tenant's metered GPU usage (claims/usage.py) over the last days, by day as a
chart and by a chosen group as a table, with the API's CSV export one click away."""

import datetime

from django import forms
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import urlencode

from claims import usage
from nvke.tenancy.context import TenantContext

from ..snapshot import css_percent
from .shared import tenant_view

GROUP_LABELS = {
    "pool": "Pool",
    "namespace": "Namespace",
    "claim": "Claim",
    "gpu_model": "GPU model",
    "cluster": "Cluster",
    "day": "Day",
}


class UsageForm(forms.Form):
    days = forms.TypedChoiceField(
        choices=[(7, "7 days"), (30, "30 days"), (90, "90 days")], coerce=int, initial=7
    )
    group_by = forms.ChoiceField(choices=list(GROUP_LABELS.items()), initial="pool", label="Group by")


@tenant_view
def usage_page(request: HttpRequest, context: TenantContext) -> HttpResponse:
    form = UsageForm(request.GET or None)
    days, group_by = (
        (form.cleaned_data["days"], form.cleaned_data["group_by"]) if form.is_valid() else (7, "pool")
    )
    until = timezone.now()
    since = (until - datetime.timedelta(days=days - 1)).replace(hour=0, minute=0, second=0, microsecond=0)
    rows = usage.report(context.tenant, since, until, group_by)
    metered = {
        day.key: day
        for day in (rows if group_by == "day" else usage.report(context.tenant, since, until, "day"))
    }
    dates = [(since + datetime.timedelta(days=n)).date().isoformat() for n in range(days)]
    by_day = [metered.get(date) or usage.Usage(date) for date in dates]  # every day, idle ones too
    tallest = max(day.gpu_hours for day in by_day) or 1
    query = {"since": since.isoformat(), "until": until.isoformat(), "group_by": group_by}
    return render(
        request,
        "frontend/usage.html",
        {
            "form": form if form.is_bound else UsageForm(),
            "rows": rows,
            "group_label": GROUP_LABELS[group_by],
            "days": [(day, css_percent(day.gpu_hours / tallest)) for day in by_day],
            "total_gpu_hours": sum(row.gpu_hours for row in rows),
            "priced": any(row.cost is not None for row in rows),
            "total_cost": sum(row.cost for row in rows if row.cost is not None),
            "csv_url": f"{reverse('usage-export')}?{urlencode(query)}",
            "since": since,
            "until": until,
        },
    )
