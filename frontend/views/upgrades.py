"""Driver upgrade pages: a pool's driver options with the start form, and a run's page (node grid and
history, refreshed live from the websocket by live.js; controls, with a confirmation for abort and
rollback; returning a node the run keeps cordoned to service, with a confirmation). Thin, like the
package's other views: the services in upgrades/ do the work."""

from django import forms
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse

from catalog.models import DriverRelease
from claims import allocator
from nodepools.models import Node, NodePool
from nvke.errors import DomainError
from nvke.tenancy.context import TenantContext
from nvke.tenancy.roles import Action
from upgrades import maintenance, services
from upgrades.api.serializers import UpgradeDeferralSerializer
from upgrades.compatibility import driver_options
from upgrades.controller import kick_if_stale
from upgrades.models import UpgradeDeferral, UpgradeRun
from upgrades.node_machine import State
from upgrades.run_lifecycle import FINISHED, Phase
from upgrades.strategy import STRATEGY_FIELDS, StrategyField

from ..forms import add_domain_error
from .shared import live, require_change, tenant_view

CONFIRMED_CONTROLS = {"abort", "rollback"}  # these ask first


# Help that would name a field these forms do not have (a driver is installed in place: no max_surge).
FORM_HELP = {
    "max_unavailable": 'Nodes out of service at once: a count ("2") or a percent of the pool ("10%", rounded '
    "up); at least one.",
}


def strategy_form_field(spec: StrategyField) -> forms.Field:
    """The form field of one strategy field of upgrades.strategy.STRATEGY_FIELDS."""
    initial = spec.default if spec.suggested is None else spec.suggested
    help_text = FORM_HELP.get(spec.name, spec.help)
    common = {"label": spec.label or None, "help_text": help_text, "initial": initial}
    if spec.kind is bool:
        return forms.BooleanField(required=False, **common)
    if spec.kind is int:
        minimum = spec.minimum if spec.form_minimum is None else spec.form_minimum
        return forms.IntegerField(min_value=minimum, **common)
    if spec.choices:
        return forms.ChoiceField(choices=spec.choices, **common)
    return forms.CharField(max_length=spec.max_length, **common)


# A class with a field per strategy field the forms offer; the start and rollout forms add theirs.
StrategyForm = type(
    "StrategyForm",
    (forms.Form,),
    {spec.name: strategy_form_field(spec) for spec in STRATEGY_FIELDS if spec.in_form}
    | {
        "__module__": __name__,
        "__doc__": "How a run goes: the fields of upgrades.strategy.STRATEGY_FIELDS that people set.",
    },
)


class UpgradeStartForm(StrategyForm):
    target_release = forms.ChoiceField(label="Target driver release")
    override_window = forms.BooleanField(
        required=False,
        label="Start now even outside the maintenance window",
        help_text="The run then ignores the cluster's windows; the override is in the audit log.",
    )
    field_order = ["target_release"]

    def __init__(self, *args, allowed: list[str], **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["target_release"].choices = [(v, v) for v in allowed]


class DeferralForm(forms.ModelForm):
    """A pool's deferral policy; its bounds are the API's (UpgradeDeferralSerializer checks them)."""

    class Meta:
        model = UpgradeDeferral
        fields = [
            "training_claims",
            "claims_older_than_s",
            "utilization_above_percent",
            "deadline_s",
            "after_deadline",
        ]
        labels = {
            "claims_older_than_s": "Also claims running longer than (s)",
            "utilization_above_percent": "Also while the pool's GPU utilization is above (%)",
            "deadline_s": "Wait at most (s)",
        }


def _save_deferral(request: HttpRequest, pool: NodePool, form: DeferralForm) -> HttpResponse | None:
    """Save or remove the pool's policy as the API would; None when the form is refused (its errors set)."""
    if request.POST.get("remove"):
        UpgradeDeferral.objects.filter(pool=pool).delete()
        messages.success(request, f"Node pool {pool.name} no longer defers upgrades.")
        return redirect(reverse("pool-upgrade", args=[pool.pk]) + "#deferral")
    if not form.is_valid():
        return None
    checked = UpgradeDeferralSerializer(form.instance, data=form.cleaned_data)
    if not checked.is_valid():
        for field, problems in checked.errors.items():
            form.add_error(field if field in form.fields else None, problems[0])
        return None
    checked.save(tenant_id=pool.tenant_id, pool=pool)
    messages.success(request, f"Node pool {pool.name}'s deferral policy is saved.")
    return redirect(reverse("pool-upgrade", args=[pool.pk]) + "#deferral")


def _pool(context: TenantContext, pk: int) -> NodePool:
    pools = NodePool.objects.restrict(context).select_related("cluster", "gpu_model", "driver_release")
    return get_object_or_404(pools, pk=pk)


def _run(context: TenantContext, pk: int) -> UpgradeRun:
    runs = UpgradeRun.objects.restrict(context).select_related(
        "pool__cluster", "target_release", "previous_release"
    )
    return get_object_or_404(runs, pk=pk)


@tenant_view
def pool_upgrade(request: HttpRequest, context: TenantContext, pk: int) -> HttpResponse:
    """The pool's driver options (each refused one with its rules), its runs, and the start form."""
    pool = _pool(context, pk)
    options = driver_options(pool)
    allowed = [driver.version for driver, refusals in options if not refusals]
    deferring = request.POST.get("action") == "deferral"
    form = UpgradeStartForm(
        request.POST if request.method == "POST" and not deferring else None, allowed=allowed
    )
    policy = UpgradeDeferral.objects.filter(pool=pool).first()
    deferral_form = DeferralForm(
        request.POST if deferring else None, instance=policy or UpgradeDeferral(pool=pool)
    )
    status = 200
    if request.method == "POST" and deferring:
        require_change(context)
        if response := _save_deferral(request, pool, deferral_form):
            return response
        status = 400
    elif request.method == "POST":
        require_change(context)
        if form.is_valid():
            data = dict(form.cleaned_data)
            target = DriverRelease.objects.get(version=data.pop("target_release"))
            try:
                run = services.create_run(
                    context=context, pool=pool, target_release=target, user=request.user, **data
                )
            except DomainError as error:
                add_domain_error(form, error)
            else:
                messages.success(request, f"Upgrade of {pool.name} to {target.version} started.")
                return redirect("upgrade-detail", pk=run.pk)
        status = 400
    nodes = dict(pool.nodes.values_list("pk", "name"))
    moves = allocator.drain_preview(pool.cluster_id, list(nodes))
    changes = move_changes(pool, [o.to_node for outcomes in moves.values() for o in outcomes if o.to_node])
    return render(
        request,
        "frontend/upgrades/pool_upgrade.html",
        {
            "pool": pool,
            "drain_preview": [
                (nodes[pk], [(outcome, changes.get(outcome.to_node, "")) for outcome in outcomes])
                for pk, outcomes in moves.items()
                if outcomes
            ],
            "options": options,
            "form": form,
            "deferral_form": deferral_form,
            "deferral_set": policy is not None,
            "runs": pool.upgrade_runs.select_related("target_release", "node_image")[:20],
            "can_change": context.allows(Action.CHANGE),
            "window": maintenance.window_now(pool.cluster),
        },
        status=status,
    )


def move_changes(pool: NodePool, to_nodes: list[str]) -> dict[str, str]:
    """Node name -> what a claim moved there from `pool` would change: another GPU model, another
    sharing mode (its isolation), or both, in words; nodes of the same model and mode are left out."""
    targets = Node.objects.filter(pool__cluster_id=pool.cluster_id, name__in=to_nodes).select_related(
        "pool__gpu_model"
    )
    changes = {}
    for node in targets:
        other = node.pool
        parts = []
        if other.gpu_model_id != pool.gpu_model_id:
            parts.append(f"GPU model {pool.gpu_model.display_name} → {other.gpu_model.display_name}")
        if other.sharing_mode != pool.sharing_mode:
            parts.append(f"sharing {pool.sharing_mode} → {other.sharing_mode} (another isolation)")
        if parts:
            changes[node.name] = ", ".join(parts)
    return changes


def run_page(run: UpgradeRun) -> dict:
    """What run_detail.html shows of a run: its node grid, counts, offered controls and history."""
    kick_if_stale(run)
    nodes = list(run.nodes.select_related("node"))
    failed = sum(n.state == State.FAILED for n in nodes)
    # still out of service because of this run (a later run may have taken the node over since)
    kept = {n.name for n in nodes if n.kept_cordoned and n.node is not None and n.node.cordoned}
    return {
        "run": run,
        "nodes": nodes,
        "done": sum(n.state == State.DONE for n in nodes),
        "failed": failed,
        "kept": kept,
        "returnable": services.returnable_nodes(run, nodes),
        "returned": sum(n.returned_at is not None for n in nodes),
        "controls": offered_controls(run, failed),
        "history": run.history.order_by("-id")[:200],
    }


@tenant_view
def upgrade_detail(request: HttpRequest, context: TenantContext, pk: int) -> HttpResponse:
    run = _run(context, pk)
    return render(
        request,
        "frontend/upgrades/run_detail.html",
        {
            **run_page(run),
            "can_change": context.allows(Action.CHANGE),
            "live": live(f"cluster={run.pool.cluster_id}", refresh_on=f"pool:{run.pool_id}"),
        },
    )


def offered_controls(run: UpgradeRun, failed: int) -> list[str]:
    """The buttons worth showing; the service still has the last word (409 when the state moved on)."""
    offered = {
        "start": run.status == Phase.PENDING,
        "pause": run.status == Phase.RUNNING,
        "resume": run.status == Phase.PAUSED,
        "approve": run.canary_approval
        and not run.approved_at
        and run.status in (Phase.RUNNING, Phase.PAUSED),
        "retry": failed > 0 and run.status in (Phase.RUNNING, Phase.PAUSED, Phase.FAILED),
        "abort": run.status in (Phase.PENDING, Phase.RUNNING, Phase.PAUSED),
        "rollback": run.status in FINISHED and run.kind == UpgradeRun.Kind.DRIVER,  # the others: a new run
    }
    return [name for name, shown in offered.items() if shown]


@tenant_view
def upgrade_control(request: HttpRequest, context: TenantContext, pk: int, action: str) -> HttpResponse:
    """POST a control; abort and rollback show a confirmation page on GET first."""
    if action not in services.CONTROLS:
        raise Http404("No such control.")
    run = _run(context, pk)
    require_change(context)
    if request.method != "POST":
        if action not in CONFIRMED_CONTROLS:
            return redirect("upgrade-detail", pk=run.pk)
        return render(request, "frontend/upgrades/confirm.html", {"run": run, "action": action})
    try:
        result = services.control(run, action, context=context, user=request.user)
    except DomainError as error:
        messages.error(request, error.message)
        return redirect("upgrade-detail", pk=run.pk)
    messages.success(request, f"{action.title()}: run is {result.status}.")
    return redirect("upgrade-detail", pk=result.pk)


@tenant_view
def upgrade_node_uncordon(request: HttpRequest, context: TenantContext, pk: int, node: str) -> HttpResponse:
    """Return one node the run keeps cordoned to service: GET asks first (what it means), POST does it."""
    run = _run(context, pk)
    require_change(context)
    row = get_object_or_404(run.nodes.select_related("node"), name=node)
    if request.method != "POST":
        return render(request, "frontend/upgrades/confirm_uncordon.html", {"run": run, "row": row})
    try:
        services.return_to_service(run, row.name, user=request.user)
    except DomainError as error:
        messages.error(request, error.message)
    else:
        messages.success(request, f"Node {row.name} is back in service; its driver was not validated.")
    return redirect("upgrade-detail", pk=run.pk)
