"""Operators' console: every model is registered, with search and filters, and its pages render."""

import pytest
from django.apps import apps
from django.contrib import admin
from django.urls import reverse

pytestmark = pytest.mark.django_db

PROJECT_APPS = {
    "tenancy",
    "simulator",
    "clusterapi",
    "clusters",
    "nodepools",
    "audit",
    "upgrades",
    "telemetry",
}


def test_every_project_model_is_registered():
    models = {m for m in apps.get_models() if m._meta.app_label in PROJECT_APPS}
    missing = sorted(m.__name__ for m in models if m not in admin.site._registry)
    assert missing == []


@pytest.fixture
def operator(client, django_user_model):
    user = django_user_model.objects.create_superuser("operator", "op@example.com", "pw-secret-123")
    client.force_login(user)
    return client


def test_changelists_search_and_change_pages_render(operator, make_member, make_cluster, make_pool):
    from nodepools.services import reconcile

    cluster = make_cluster(make_member("acme", "owner").memberships.get().tenant, "prod")
    reconcile(make_pool(cluster, name="gpu").pk)
    for model, model_admin in admin.site._registry.items():
        if model._meta.app_label not in PROJECT_APPS:
            continue
        info = (model._meta.app_label, model._meta.model_name)
        changelist = reverse("admin:{}_{}_changelist".format(*info))
        assert operator.get(changelist).status_code == 200, changelist
        if model_admin.search_fields:
            assert operator.get(changelist, {"q": "a"}).status_code == 200, changelist
        obj = model.objects.first()
        if obj is not None:
            assert operator.get(reverse("admin:{}_{}_change".format(*info), args=[obj.pk])).status_code == 200


def test_operator_disables_a_kubernetes_version_and_tenants_can_no_longer_pick_it(operator, api, catalog):
    from catalog.models import KubernetesVersion

    version = KubernetesVersion.objects.get(version="1.34")
    url = reverse("admin:catalog_kubernetesversion_change", args=[version.pk])
    response = operator.post(url, {"version": "1.34", "is_default": "", "end_of_support": ""})  # enabled off
    assert response.status_code == 302
    version.refresh_from_db()
    assert version.enabled is False
    refused = api.post(
        "/api/v1/clusters/",
        {"name": "old", "kubernetes_version": "1.34", "region": "us-east-1", "control_plane_nodes": 1},
    )
    assert refused.status_code == 400 and refused.data["message"].startswith("kubernetes_version:")


def test_driver_list_filters_by_branch(operator, catalog):
    page = operator.get(reverse("admin:catalog_driverrelease_changelist"), {"branch": 580}).content.decode()
    assert "580.105.08" in page and "535.230.02" not in page


def test_tenant_users_cannot_reach_the_admin(client, make_member):
    client.force_login(make_member("acme", "owner"))
    response = client.get("/admin/")
    assert response.status_code == 302 and "/admin/login/" in response["Location"]


def test_a_tokens_user_and_tenant_cannot_be_changed_in_the_admin(operator, make_member):
    from nvke.tenancy.models import ApiToken

    owner, stranger = make_member("acme", "owner"), make_member("globex", "owner")
    token, _ = ApiToken.issue(tenant=owner.memberships.get().tenant, user=owner, name="ci")
    globex = stranger.memberships.get().tenant
    page = reverse("admin:tenancy_apitoken_change", args=[token.pk])
    form = {"name": "renamed", "scope": token.scope, "user": stranger.pk, "tenant": globex.pk}
    assert operator.post(page, form).status_code == 302
    token.refresh_from_db()
    assert (token.name, token.user, token.tenant) == ("renamed", owner, owner.memberships.get().tenant)


def test_operators_change_a_pools_sharing_policy_within_its_modes_rules(
    rf, operator, django_user_model, make_member, make_cluster, make_pool
):
    from django.forms.models import model_to_dict

    from nodepools.models import NodePool

    cluster = make_cluster(make_member("acme", "owner").memberships.get().tenant, "prod")
    pool = make_pool(cluster, name="gpu", sharing_mode="time-slicing")
    request = rf.get("/")
    request.user = django_user_model.objects.get(username="operator")
    form_class = admin.site._registry[NodePool].get_form(request, obj=pool)
    data = {k: v for k, v in model_to_dict(pool).items() if v is not None}
    assert form_class({**data, "compute_oversubscription_percent": 300}, instance=pool).is_valid()
    exclusive = form_class(
        {**data, "sharing_mode": "exclusive", "compute_oversubscription_percent": 200}, instance=pool
    )
    assert not exclusive.is_valid() and "never oversubscribes" in str(exclusive.errors)
