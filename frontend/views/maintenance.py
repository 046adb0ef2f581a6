"""A cluster's maintenance page: its time zone, windows and exclusions, the next windows and whether a
driver upgrade may run now. Each form changes one thing; the whole set is checked as the API checks it
(upgrades.api.serializers.MaintenanceSerializer) and written in one go (upgrades.maintenance.replace)."""

from django import forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render

from clusters.models import Cluster
from nvke.tenancy.context import TenantContext
from nvke.tenancy.roles import Action
from upgrades import maintenance
from upgrades.api.serializers import MaintenanceSerializer
from upgrades.models import MaintenanceExclusion

from ..user_words import serializer_error
from .shared import require_change, tenant_view


class TimeZoneForm(forms.Form):
    time_zone = forms.CharField(max_length=64, help_text="IANA time zone, such as Europe/Berlin or UTC.")


class WindowForm(forms.Form):
    recurrence = forms.CharField(
        max_length=500,
        initial="FREQ=WEEKLY;BYDAY=SA",
        help_text="An RFC 5545 recurrence rule: FREQ=DAILY, FREQ=WEEKLY;BYDAY=SA,SU, FREQ=MONTHLY;BYDAY=1SU…",
    )
    start_time = forms.TimeField(initial="02:00", help_text="On the cluster's wall clock.")
    duration_minutes = forms.IntegerField(
        label="Duration (minutes)", min_value=1, max_value=7 * 24 * 60, initial=240
    )


class ExclusionForm(forms.Form):
    first_day = forms.DateField(help_text="YYYY-MM-DD")
    last_day = forms.DateField(help_text="Included.")
    scope = forms.ChoiceField(choices=MaintenanceExclusion.Scope.choices)
    reason = forms.CharField(max_length=200, required=False)


FORMS = {"time_zone": TimeZoneForm, "add_window": WindowForm, "add_exclusion": ExclusionForm}


def _changed(document: dict, action: str, data: dict, index: int | None) -> dict:
    """The whole set with one change made."""
    wanted = {key: list(document[key]) for key in ("windows", "exclusions")}
    wanted["time_zone"] = data.get("time_zone", document["time_zone"])
    if action == "add_window":
        wanted["windows"].append(data)
    elif action == "add_exclusion":
        wanted["exclusions"].append(data)
    elif action in ("remove_window", "remove_exclusion") and index is not None:
        rows = wanted["windows" if action == "remove_window" else "exclusions"]
        if 0 <= index < len(rows):
            del rows[index]
    return wanted


@tenant_view
def cluster_maintenance(request: HttpRequest, context: TenantContext, pk: int) -> HttpResponse:
    cluster = get_object_or_404(Cluster.objects.restrict(context), pk=pk)
    document = maintenance.document(cluster)
    action = request.POST.get("action", "")
    bound = {
        name: form(request.POST if action == name else None, initial={"time_zone": cluster.time_zone})
        for name, form in FORMS.items()
    }
    status = 200
    if request.method == "POST":
        require_change(context)
        form = bound.get(action)
        if form is None or form.is_valid():
            index = request.POST.get("index", "")
            data = form.cleaned_data if form is not None else {}
            checked = MaintenanceSerializer(
                data=_changed(document, action, data, int(index) if index.isdigit() else None)
            )
            if checked.is_valid():
                valid = checked.validated_data
                maintenance.replace(cluster, valid["time_zone"], valid["windows"], valid["exclusions"])
                messages.success(request, "Maintenance settings saved.")
                return redirect("cluster-maintenance", pk=cluster.pk)
            target = form if form is not None else bound["time_zone"]
            target.add_error(*serializer_error(target, checked.errors))
        status = 400
    return render(
        request,
        "frontend/cluster_maintenance.html",
        {
            "cluster": cluster,
            "document": document,
            "next_windows": maintenance.next_windows(cluster),  # shown in the cluster's zone
            "now_text": maintenance.window_now(cluster)[1],
            "form_list": [
                ("add_window", bound["add_window"], "Add a window", "Add window"),
                ("add_exclusion", bound["add_exclusion"], "Add an exclusion", "Add exclusion"),
                ("time_zone", bound["time_zone"], "Cluster time zone", "Save time zone"),
            ],
            "can_change": context.allows(Action.CHANGE),
        },
        status=status,
    )
