"""A cluster's versions page: the control plane's Kubernetes version with its end of support, every
catalog version with the skew rule that refuses it, the upgrade form; each pool's version and node image
with a form for each, which starts a run replacing the pool's machines (upgrades.services). Thin:
upgrades/ decides."""

from django import forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render

from catalog.models import NodeImage
from clusters.models import Cluster
from nvke.errors import DomainError
from nvke.tenancy.context import TenantContext
from nvke.tenancy.roles import Action
from upgrades import control_plane, services
from upgrades.strategy import STRATEGY

from ..forms import add_domain_error
from .shared import require_change, tenant_view


class VersionForm(forms.Form):
    kubernetes_version = forms.ChoiceField(label="Upgrade to")
    override_window = forms.BooleanField(
        required=False,
        label="Start now even outside the maintenance window",
        help_text="The override is in the audit log.",
    )

    def __init__(self, *args, allowed: list[str], **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["kubernetes_version"].choices = [(v, v) for v in allowed]


class PoolVersionForm(VersionForm):
    max_unavailable = forms.CharField(
        max_length=STRATEGY["max_unavailable"].max_length,
        initial=STRATEGY["max_unavailable"].default,
        help_text="Nodes (or N%) replaced at once; each is drained first. 0 with a surge: the pool never "
        "has fewer nodes in service than its size.",
    )
    max_surge = forms.CharField(
        max_length=STRATEGY["max_surge"].max_length,
        initial=STRATEGY["max_surge"].default,
        help_text="Extra nodes (or N%) on the new version while machines are replaced: each lets one more "
        "node be drained at once; drained away again at the end.",
    )


class PoolImageForm(PoolVersionForm):
    """The same questions about an image (its `kubernetes_version` field holds the image's name)."""

    def __init__(self, *args, allowed: list[str], **kwargs):
        super().__init__(*args, allowed=allowed, **kwargs)
        self.fields["kubernetes_version"].label = "Change image to"


class AutoUpgradeForm(forms.Form):
    auto_upgrade = forms.BooleanField(
        required=False,
        label="Upgrade by itself near end of support",
        help_text="The control plane, then each pool, one minor, inside the maintenance windows.",
    )


def _allowed(options: list[dict], key: str = "version") -> list[str]:
    return [option[key] for option in options if option["allowed"]]


def _start(
    request: HttpRequest, context: TenantContext, cluster: Cluster, action: str, data: dict
) -> HttpResponse:
    """Start what the form asks for, and go where its progress shows."""
    version = data["kubernetes_version"]
    if action == "control-plane":
        control_plane.start(cluster, version, override_window=data["override_window"])
        messages.success(request, f"Control plane upgrade to {version} started.")
        return redirect("cluster-versions", pk=cluster.pk)
    kind, _, pool_id = action.partition("-")
    pool = cluster.node_pools.get(pk=int(pool_id))
    target = (
        {"node_image": NodeImage.objects.get(name=version)}
        if kind == "image"
        else {"kubernetes_version": version}
    )
    run = services.create_run(
        context=context,
        pool=pool,
        max_unavailable=data["max_unavailable"],
        max_surge=data["max_surge"],
        override_window=data["override_window"],
        user=request.user,
        **target,
    )
    messages.success(request, f"Upgrade of {pool.name} to {run.target} started.")
    return redirect("upgrade-detail", pk=run.pk)


@tenant_view
def cluster_versions(request: HttpRequest, context: TenantContext, pk: int) -> HttpResponse:
    clusters = Cluster.objects.restrict(context).select_related("kubernetes_version", "kubernetes_target")
    cluster = get_object_or_404(clusters, pk=pk)
    document = control_plane.document(cluster)
    action = request.POST.get("action", "")
    bound, allowed = {"control-plane": VersionForm}, {"control-plane": _allowed(document["options"])}
    initial: dict[str, dict] = {}
    budgets = cluster.node_pools.values_list("pk", "upgrade_max_unavailable", "upgrade_max_surge")
    defaults = {pk: {"max_unavailable": out, "max_surge": surge} for pk, out, surge in budgets}
    for pool in document["pools"]:
        bound[f"pool-{pool['id']}"], bound[f"image-{pool['id']}"] = PoolVersionForm, PoolImageForm
        allowed[f"pool-{pool['id']}"] = _allowed(pool["options"])
        allowed[f"image-{pool['id']}"] = _allowed(pool["image_options"], "image")
        initial[f"pool-{pool['id']}"] = initial[f"image-{pool['id']}"] = defaults.get(pool["id"], {})
    forms_by_action = {
        name: form(request.POST if action == name else None, allowed=allowed[name], initial=initial.get(name))
        for name, form in bound.items()
    }
    settings_form = AutoUpgradeForm(initial={"auto_upgrade": cluster.auto_upgrade})
    status = 200
    if request.method == "POST" and action == "settings":
        require_change(context)
        cluster.auto_upgrade = request.POST.get("auto_upgrade") == "on"
        cluster.save(update_fields=["auto_upgrade", "updated_at"])
        state = "on" if cluster.auto_upgrade else "off"
        messages.success(request, f"Automatic upgrades of {cluster.name} are {state}.")
        return redirect("cluster-versions", pk=cluster.pk)
    if request.method == "POST":
        require_change(context)
        form = forms_by_action.get(action)
        if form is not None and form.is_valid():
            try:
                return _start(request, context, cluster, action, form.cleaned_data)
            except DomainError as error:
                add_domain_error(form, error)
        status = 400
    return render(
        request,
        "frontend/cluster_versions.html",
        {
            "cluster": cluster,
            "document": document,
            "plane_form": forms_by_action["control-plane"],
            "settings_form": settings_form,
            "pools": [
                (pool, forms_by_action[f"pool-{pool['id']}"], forms_by_action[f"image-{pool['id']}"])
                for pool in document["pools"]
            ],
            "can_change": context.allows(Action.CHANGE),
        },
        status=status,
    )
