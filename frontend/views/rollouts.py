"""Fleet rollout pages, for platform operators (staff) only: the list, the new-rollout form with its
preview (which pools match, their waves, which are skipped and why), a rollout's page (waves, each pool's
run with its own retry / approve, skipped pools; pause, resume, abort with a confirmation) and a page of
each of its runs (read-only but for retry / approve; each asks first and goes through the same
upgrades.services.control as the tenant's pages and API, audited as the operator).
Rollouts span every tenant, so they need no tenant context, and to anyone else they do not exist (404).
Pages follow the operators' websocket stream (`ws/events/?rollouts=1`) through live.js."""

from itertools import groupby

from django import forms
from django.contrib import messages
from django.db.models import Count, Q
from django.forms.utils import pretty_name
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render

from catalog.models import DriverRelease, GpuModel
from nodepools.models import NodePool
from nvke.errors import DomainError
from upgrades import maintenance, rollouts, services
from upgrades.models import FleetRollout, UpgradeRun
from upgrades.node_machine import State
from upgrades.run_lifecycle import ControlRefusal, Phase, rollout_move
from upgrades.strategy import STRATEGY_FIELDS

from ..forms import add_domain_error, driver_label
from .shared import live, staff_view
from .upgrades import StrategyForm, offered_controls, run_page

CONTROLS = ("pause", "resume", "abort")
LIVE_STREAM = "rollouts=1"  # nvke/consumers.py: the operators' stream


class RolloutForm(StrategyForm):
    target_release = forms.ModelChoiceField(
        queryset=DriverRelease.objects.filter(enabled=True),
        to_field_name="version",
        empty_label=None,
        label="Target driver release",
    )
    gpu_model = forms.ModelChoiceField(
        queryset=GpuModel.objects.all(),
        to_field_name="name",
        required=False,
        empty_label="Any GPU model",
        label="GPU model",
        help_text="Only pools of this GPU.",
    )
    from_branch = forms.TypedChoiceField(
        coerce=int,
        empty_value=None,
        required=False,
        label="From branch",
        help_text="Only pools whose driver is on this branch.",
    )
    pools_per_wave = forms.IntegerField(
        min_value=1,
        max_value=1000,
        initial=1,
        label="Pools per wave",
        help_text="A wave starts when every run of the one before completed.",
    )
    field_order = ["target_release", "gpu_model", "from_branch", "pools_per_wave"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["target_release"].label_from_instance = driver_label
        branches = DriverRelease.objects.order_by("-branch").values_list("branch", flat=True).distinct()
        self.fields["from_branch"].choices = [("", "Any branch"), *((b, f"R{b}") for b in branches)]


def _with_tenants(skipped: list[dict]) -> list[dict]:
    """Skipped pools as stored ({pool, name, rule, message}) with their tenant, when the pool still exists."""
    pools = NodePool.objects.select_related("cluster__tenant").in_bulk([s["pool"] for s in skipped])
    return [{**s, "tenant": pools[s["pool"]].cluster.tenant if s["pool"] in pools else None} for s in skipped]


def _progress(rollouts_qs):
    """Each rollout with its runs counted by outcome: done, running (paused and aborting too), failed."""
    return rollouts_qs.annotate(
        pools_done=Count("runs", filter=Q(runs__status=Phase.COMPLETED)),
        pools_running=Count("runs", filter=Q(runs__status__in=[Phase.RUNNING, Phase.PAUSED, Phase.ABORTING])),
        pools_failed=Count("runs", filter=Q(runs__status__in=[Phase.FAILED, Phase.ABORTED])),
        pools_total=Count("runs"),
        waves_total=Count("runs__wave", distinct=True),
    )


ROLLOUTS = FleetRollout.objects.select_related("target_release", "gpu_model")


@staff_view
def rollout_list(request: HttpRequest) -> HttpResponse:
    return render(
        request,
        "frontend/rollouts/list.html",
        {"rollouts": _progress(ROLLOUTS)[:100], "live": live(LIVE_STREAM, refresh_on="*")},
    )


@staff_view
def rollout_create(request: HttpRequest) -> HttpResponse:
    """POST without `confirm` previews the plan; the preview's button posts the same fields with
    `confirm` and the plan's digest, and creates the rollout if the plan is still the one shown (else
    it shows the new one, 409). Errors of either go next to their field."""
    form = RolloutForm(request.POST or None)
    plan, status = None, 200
    if request.method == "POST":
        if form.is_valid():
            fields = dict(form.cleaned_data)  # as create_rollout takes them
            try:
                if "confirm" in request.POST:
                    previewed = request.POST.get("plan")
                    rollout = rollouts.create_rollout(user=request.user, previewed=previewed, **fields)
                    messages.success(request, f"Rollout to {rollout.target_release} started.")
                    return redirect("rollout-detail", pk=rollout.pk)
                plan = rollouts.plan_rollout(**fields)
            except rollouts.PlanChanged as changed:
                form.add_error(None, changed.message)
                plan, status = changed.plan, 409
            except DomainError as error:
                add_domain_error(form, error)
        if status != 409:
            status = 200 if plan is not None else 400
    return render(
        request,
        "frontend/rollouts/form.html",
        {
            "form": form,
            "waves": [[{"pool": pool} for pool in wave] for wave in plan.waves] if plan else None,
            "plan_digest": plan.digest() if plan else "",
            "planned": sum(len(wave) for wave in plan.waves) if plan else 0,
            "skipped": _with_tenants(plan.skipped) if plan else None,
        },
        status=status,
    )


@staff_view
def rollout_detail(request: HttpRequest, pk: int) -> HttpResponse:
    rollout = get_object_or_404(_progress(ROLLOUTS), pk=pk)
    runs = (
        rollout.runs.select_related("pool__cluster__tenant", "pool__gpu_model", "previous_release")
        .annotate(failed_nodes_count=Count("nodes", filter=Q(nodes__state=State.FAILED)))
        .order_by("wave", "pool__cluster__name", "pk")
    )
    return render(
        request,
        "frontend/rollouts/detail.html",
        {
            "rollout": rollout,
            "waves": [[_row(r) for r in wave] for _, wave in groupby(runs, by_wave)],
            "strategy": strategy_words(rollout.strategy),
            "skipped": _with_tenants(rollout.skipped),
            "controls": [c for c in CONTROLS if _offered(rollout, c)],
            "live": live(LIVE_STREAM, refresh_on=f"rollout:{rollout.pk}"),
        },
    )


def _row(run: UpgradeRun) -> dict:
    """One pool's row of the rollout's waves (_waves.html)."""
    actions = run_actions(run, run.failed_nodes_count)
    return {"pool": run.pool, "run": run, "actions": actions, "waiting": waiting(run)}


def waiting(run: UpgradeRun) -> str:
    """Why a running run starts no node now (outside its cluster's maintenance windows), or ""."""
    if run.status != Phase.RUNNING:
        return ""
    allowed, words = maintenance.run_window(run)
    return "" if allowed else words


def strategy_words(strategy: dict) -> list[str]:
    """A rollout's strategy as the forms label it ("Max unavailable: 1", "Failed nodes: Keep cordoned")."""
    words = []
    for spec in STRATEGY_FIELDS:
        if spec.name not in strategy:
            continue
        value = strategy[spec.name]
        if spec.kind is bool:
            value = "yes" if value else "no"
        value = dict(spec.choices).get(value, value)
        words.append(f"{spec.label or pretty_name(spec.name)}: {value}")
    return words


def by_wave(run: UpgradeRun) -> int:
    return run.wave


def run_actions(run: UpgradeRun, failed: int) -> list[str]:
    """The run's own controls an operator gets on the rollout's pages: those the tenant's run page would
    offer now, among rollouts.RUN_CONTROLS."""
    return [c for c in offered_controls(run, failed) if c in rollouts.RUN_CONTROLS]


def _offered(rollout: FleetRollout, control: str) -> bool:
    """The buttons worth showing: what the rollout's lifecycle table allows from its phase;
    control_rollout still has the last word (409 when the state moved on)."""
    return not isinstance(rollout_move(control, Phase(rollout.status)), ControlRefusal)


@staff_view
def rollout_control(request: HttpRequest, pk: int, action: str) -> HttpResponse:
    """POST a control; abort shows a confirmation page on GET first."""
    if action not in CONTROLS:
        raise Http404("No such control.")
    rollout = get_object_or_404(ROLLOUTS, pk=pk)
    if request.method != "POST":
        if action != "abort":
            return redirect("rollout-detail", pk=rollout.pk)
        return render(request, "frontend/rollouts/confirm_abort.html", {"rollout": rollout})
    try:
        result = rollouts.control_rollout(rollout, action)
    except DomainError as error:
        messages.error(request, error.message)
    else:
        messages.success(request, f"{action.title()}: rollout is {result.status}.")
    return redirect("rollout-detail", pk=rollout.pk)


@staff_view
def rollout_run(request: HttpRequest, pk: int, run_pk: int) -> HttpResponse:
    """One run of the rollout, whichever tenant's pool it upgrades: the run page, read-only (the
    rollout's controls drive its runs; the tenant's own run page has the run's controls)."""
    runs = UpgradeRun.objects.select_related(
        "pool__cluster__tenant", "target_release", "previous_release", "rollout__target_release"
    )
    run = get_object_or_404(runs, pk=run_pk, rollout_id=pk)
    page = run_page(run)
    return render(
        request,
        "frontend/upgrades/run_detail.html",
        {
            **page,
            "rollout": run.rollout,  # breadcrumbs through the rollout instead of the tenant's pages
            "can_change": False,  # the tenant's controls; an operator gets `operator_actions`
            "operator_actions": run_actions(run, page["failed"]),
            "live": live(LIVE_STREAM, refresh_on=f"rollout:{pk}"),
        },
    )


@staff_view
def rollout_run_control(request: HttpRequest, pk: int, run_pk: int, action: str) -> HttpResponse:
    """An operator's retry or approve of one run of the rollout: GET asks first, POST does it through
    upgrades.services.control (the tenant's own control), then back to the rollout's page or, with
    `back=run`, the run's."""
    if action not in rollouts.RUN_CONTROLS:
        raise Http404("No such control.")
    runs = UpgradeRun.objects.select_related("pool__cluster__tenant", "target_release", "rollout")
    run = get_object_or_404(runs, pk=run_pk, rollout_id=pk)
    if request.method != "POST":
        failed = run.nodes.filter(state=State.FAILED).count()
        return render(
            request,
            "frontend/rollouts/confirm_run.html",
            {"run": run, "action": action, "failed": failed, "back": request.GET.get("back", "")},
        )
    try:
        result = services.control(run, action, user=request.user)
    except DomainError as error:
        messages.error(request, error.message)
    else:
        note = ""
        if run.rollout.status == Phase.PAUSED:
            note = " The rollout stays paused: resume it to go on with its waves."
        messages.success(request, f"{action.title()}: run #{run.pk} is {result.status}.{note}")
    if request.POST.get("back") == "run":
        return redirect("rollout-run", pk=pk, run_pk=run.pk)
    return redirect("rollout-detail", pk=pk)
