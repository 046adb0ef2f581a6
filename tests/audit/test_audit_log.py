"""The audit log: who, what, before/after, when, from where; readable by owners and admins only, for
their tenant; not writable through the API."""

import pytest
from rest_framework.test import APIClient

from audit.models import AuditEntry
from catalog.models import DriverRelease
from clusters.models import Cluster
from nodepools.services import reconcile, update_pool
from nvke.tenancy.models import ApiToken
from telemetry.models import NodeToken

pytestmark = pytest.mark.django_db

CLUSTER = {"name": "prod", "kubernetes_version": "1.35", "region": "us-east-1", "control_plane_nodes": 1}


def test_a_token_create_is_logged_with_token_ip_and_fields(owner, catalog):
    token, raw = ApiToken.issue(tenant=owner.memberships.get().tenant, user=owner, name="ci")
    client = APIClient(REMOTE_ADDR="203.0.113.7")
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert client.post("/api/v1/clusters/", CLUSTER).status_code == 201
    entry = AuditEntry.objects.get(object_type="clusters.cluster", action="create")
    assert entry.actor_user_id == owner.pk and entry.actor_token_id == token.pk
    assert entry.actor == f"{owner.username} (token ci {token.key_prefix}…)"
    assert entry.ip == "203.0.113.7"
    assert entry.tenant_id == token.tenant_id
    assert entry.changes["name"] == [None, "prod"]
    assert "status" not in entry.changes  # control-loop fields are not the actor's change


def test_update_records_only_changed_fields_before_and_after(api, owner, make_cluster, make_pool):
    pool = make_pool(make_cluster(owner.memberships.get().tenant))
    response = api.patch(f"/api/v1/node-pools/{pool.pk}/", {"node_count": 3})
    assert response.status_code == 200, response.data
    entry = AuditEntry.objects.get(object_type="nodepools.nodepool", action="update")
    assert entry.changes == {"node_count": [2, 3]}
    assert entry.actor == owner.username and entry.actor_token_id is None


def test_system_changes_and_deletes_are_logged_without_a_request(owner, make_cluster, make_pool):
    pool = make_pool(make_cluster(owner.memberships.get().tenant))
    update_pool(pool, max_nodes=9)
    entry = AuditEntry.objects.get(action="update")
    assert entry.actor == "system" and entry.ip is None and entry.changes == {"max_nodes": [8, 9]}
    cluster_pk = pool.cluster_id
    Cluster.objects.filter(pk=cluster_pk).delete()
    deleted = set(AuditEntry.objects.filter(action="delete").values_list("object_type", "object_id"))
    assert deleted >= {("clusters.cluster", str(cluster_pk)), ("nodepools.nodepool", str(pool.pk))}


def test_secrets_are_never_logged(api):
    created = api.post("/api/v1/tokens/", {"name": "ci"})
    entry = AuditEntry.objects.get(object_type="tenancy.apitoken")
    assert entry.changes["key_hash"] == [None, "[secret]"]
    stored = ApiToken.objects.get(pk=created.data["id"])
    text = str(list(AuditEntry.objects.values()))
    assert stored.key_hash not in text and created.data["token"] not in text
    api.delete(f"/api/v1/tokens/{stored.pk}/")
    revoked = AuditEntry.objects.get(object_type="tenancy.apitoken", action="update")
    assert revoked.changes["revoked_at"][0] is None and revoked.changes["revoked_at"][1]


def test_owners_and_admins_read_their_tenants_log_others_do_not(make_member, client_for, make_cluster):
    owner = make_member("acme", "owner")
    stranger = make_member("globex", "owner")
    client_for(owner).post("/api/v1/clusters/", CLUSTER)
    client_for(stranger).post("/api/v1/clusters/", {**CLUSTER, "name": "theirs"})
    for role in ("owner", "admin"):
        listed = client_for(make_member("acme", role) if role != "owner" else owner).get("/api/v1/audit/")
        assert listed.status_code == 200
        names = {e["object_repr"] for e in listed.data["results"] if e["object_type"] == "clusters.cluster"}
        assert names == {"prod"}
    for role in ("member", "viewer"):
        assert client_for(make_member("acme", role)).get("/api/v1/audit/").status_code == 403
    foreign = AuditEntry.objects.filter(tenant=stranger.memberships.get().tenant).first()
    assert client_for(owner).get(f"/api/v1/audit/{foreign.pk}/").status_code == 404


def test_the_log_cannot_be_written_through_the_api(api, owner):
    api.post("/api/v1/tokens/", {"name": "ci"})
    entry = AuditEntry.objects.get(object_type="tenancy.apitoken")
    for response in (
        api.post("/api/v1/audit/", {"action": "delete"}),
        api.patch(f"/api/v1/audit/{entry.pk}/", {"actor": "nobody"}),
        api.delete(f"/api/v1/audit/{entry.pk}/"),
    ):
        assert response.status_code == 405
    assert AuditEntry.objects.get(pk=entry.pk).actor == owner.username


def test_the_admin_shows_the_log_read_only(client, django_user_model, api):
    api.post("/api/v1/tokens/", {"name": "ci"})
    entry = AuditEntry.objects.get(object_type="tenancy.apitoken")
    client.force_login(django_user_model.objects.create_superuser("op", "op@example.com", "pw-secret-123"))
    assert client.get("/admin/audit/auditentry/").status_code == 200
    page = client.get(f"/admin/audit/auditentry/{entry.pk}/change/")
    assert page.status_code == 200 and b'name="_save"' not in page.content
    assert client.post(f"/admin/audit/auditentry/{entry.pk}/delete/", {"post": "yes"}).status_code == 403
    assert AuditEntry.objects.filter(pk=entry.pk).exists()


@pytest.mark.django_db(transaction=True)
def test_deleting_a_tenant_commits_and_its_log_stays(
    make_member, make_cluster, make_pool, client, django_user_model
):
    owner = make_member("acme", "owner")
    tenant = owner.memberships.get().tenant
    make_pool(make_cluster(tenant))
    tenant_pk = tenant.pk
    tenant.delete()  # autocommit: deferred foreign keys are checked right here
    deleted = set(
        AuditEntry.objects.filter(tenant_id=tenant_pk, action="delete").values_list("object_type", flat=True)
    )
    assert {"clusters.cluster", "nodepools.nodepool", "tenancy.membership"} <= deleted
    client.force_login(django_user_model.objects.create_superuser("op", "op@example.com", "pw-secret-123"))
    assert client.get("/admin/audit/auditentry/").status_code == 200
    entry = AuditEntry.objects.filter(tenant_id=tenant_pk).first()
    assert client.get(f"/admin/audit/auditentry/{entry.pk}/change/").status_code == 200


def test_ui_and_admin_changes_are_logged_as_their_users(owner, catalog, django_user_model):
    from django.test import Client

    ui = Client(REMOTE_ADDR="198.51.100.4")
    ui.force_login(owner)
    form = {"name": "web", "kubernetes_version": "1.35", "region": "us-east-1", "control_plane_nodes": 1}
    assert ui.post("/clusters/new/", form).status_code == 302
    entry = AuditEntry.objects.get(object_type="clusters.cluster", action="create")
    assert (entry.actor, entry.ip, entry.actor_user_id) == (owner.username, "198.51.100.4", owner.pk)
    operator = django_user_model.objects.create_superuser("op", "op@example.com", "pw-secret-123")
    admin = Client()
    admin.force_login(operator)
    membership = owner.memberships.get()
    response = admin.post(
        f"/admin/tenancy/membership/{membership.pk}/change/",
        {"tenant": membership.tenant_id, "user": owner.pk, "role": "admin"},
    )
    assert response.status_code == 302, response.content[:500]
    changed = AuditEntry.objects.get(object_type="tenancy.membership", action="update")
    assert changed.actor == "op" and changed.changes == {"role": ["owner", "admin"]}


def test_account_changes_are_logged_for_operators_without_the_password(django_user_model, client):
    user = django_user_model.objects.create_user("mallory", password="pw-secret-123")
    user.is_staff = True
    user.save()
    created = AuditEntry.objects.get(object_type="auth.user", action="create")
    assert created.tenant_id is None and created.changes["password"] == [None, "[secret]"]
    assert client.login(username="mallory", password="pw-secret-123")  # writes last_login: not logged
    granted = AuditEntry.objects.get(object_type="auth.user", action="update")
    assert granted.changes == {"is_staff": [False, True]}
    assert "pw-secret" not in str(list(AuditEntry.objects.values())) and user.password not in str(
        list(AuditEntry.objects.values())
    )


def test_upgrade_controls_and_node_tokens_are_logged_with_the_hash_as_secret(
    api, owner, make_cluster, make_pool
):
    tenant = owner.memberships.get().tenant
    pool = make_pool(make_cluster(tenant))
    reconcile(pool.pk)
    body = {"pool": pool.pk, "target_release": "595.71.05", "start": False}
    run = api.post("/api/v1/upgrades/", body, format="json").data
    assert api.post(f"/api/v1/upgrades/{run['id']}/abort/").status_code == 200
    runs = AuditEntry.objects.filter(object_type="upgrades.upgraderun", object_id=str(run["id"]))
    created, aborted = runs.get(action="create"), runs.get(action="update")
    target = DriverRelease.objects.get(version="595.71.05")
    assert created.tenant_id == tenant.pk and created.changes["target_release_id"] == [None, target.pk]
    assert aborted.changes == {"status": ["pending", "aborted"]}
    assert aborted.actor == owner.username and aborted.tenant_id == tenant.pk

    node = pool.nodes.first()
    first = api.post("/api/v1/telemetry/node-tokens/", {"node": node.pk}, format="json")
    second = api.post("/api/v1/telemetry/node-tokens/", {"node": node.pk}, format="json")  # replaces it
    assert (first.status_code, second.status_code) == (201, 201)
    issued = AuditEntry.objects.get(object_type="telemetry.nodetoken", action="create")
    replaced = AuditEntry.objects.get(object_type="telemetry.nodetoken", action="update")
    assert issued.tenant_id == tenant.pk and issued.actor == owner.username
    assert issued.changes["key_hash"] == [None, "[secret]"]
    assert replaced.changes["key_hash"] == ["[secret]", "[secret]"]
    text = str(list(AuditEntry.objects.values()))
    assert NodeToken.objects.get(node=node).key_hash not in text
    assert first.data["token"] not in text and second.data["token"] not in text


@pytest.mark.django_db
def test_entries_past_the_retention_are_pruned_in_batches(owner, settings, monkeypatch):
    import datetime

    from django.utils import timezone

    from audit import retention
    from audit.tasks import prune_audit_log

    now = timezone.now()
    tenant = owner.memberships.get().tenant
    ages = [400, 366, 364, 1]  # days
    for days in ages:
        entry = AuditEntry.objects.create(
            tenant=tenant, actor="system", action="update", object_type="x.y", object_id="1", object_repr="y"
        )
        AuditEntry.objects.filter(pk=entry.pk).update(created_at=now - datetime.timedelta(days=days))
    year_ago = now - datetime.timedelta(days=365)
    kept = set(AuditEntry.objects.filter(created_at__gte=year_ago).values_list("pk"))
    monkeypatch.setattr(retention, "BATCH", 1)  # two old entries: two batches, then an empty one
    settings.NVKE_AUDIT_RETENTION_DAYS = 365
    assert prune_audit_log() == 2
    assert set(AuditEntry.objects.values_list("pk")) == kept
    settings.NVKE_AUDIT_RETENTION_DAYS = 0  # keep forever
    assert retention.prune(now + datetime.timedelta(days=10_000)) == 0
    assert set(AuditEntry.objects.values_list("pk")) == kept


def test_the_audit_ip_is_the_proxys_peer_not_what_the_client_wrote(owner, catalog, settings):
    settings.NVKE_TRUST_PROXY = 1
    settings.NVKE_TRUSTED_PROXIES = []
    _, raw = ApiToken.issue(tenant=owner.memberships.get().tenant, user=owner, name="ci")
    client = APIClient(REMOTE_ADDR="10.0.0.2", HTTP_X_FORWARDED_FOR="6.6.6.6, 127.0.0.1, 203.0.113.7")
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert client.post("/api/v1/clusters/", CLUSTER).status_code == 201
    assert AuditEntry.objects.get(object_type="clusters.cluster").ip == "203.0.113.7"
    # A hop that is no address is not written to the address column (PostgreSQL would refuse it).
    client = APIClient(REMOTE_ADDR="10.0.0.2", HTTP_X_FORWARDED_FOR="<script>")
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert client.post("/api/v1/clusters/", {**CLUSTER, "name": "dev"}).status_code == 201
    assert AuditEntry.objects.get(object_type="clusters.cluster", object_repr="dev").ip == "10.0.0.2"


def test_a_claim_and_its_entry_in_one_statement_are_what_save_and_the_signals_write(
    owner, make_cluster, django_assert_num_queries
):
    """recorder.insert (the claim path's one statement) writes the row and the entry that save() and
    the signals write, from a request with a token and an address as well as from the system."""
    from django.db import connection

    from audit.context import acting_as
    from audit.recorder import insert
    from claims.models import Claim

    tenant = owner.memberships.get().tenant
    cluster = make_cluster(tenant)
    _, raw = ApiToken.issue(tenant=tenant, user=owner, name="ci")
    client = APIClient(REMOTE_ADDR="203.0.113.7")
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    body = {"cluster": cluster.pk, "name": "api", "kind": "fraction", "gpu_memory": "1Gi", "priority": 3}
    assert client.post("/api/v1/claims/", body, format="json").status_code == 201
    fields = {"tenant": tenant, "cluster": cluster, "kind": "fraction", "gpu_memory_mib": 1024, "priority": 3}
    with acting_as("system test"):
        saved = Claim(name="saved", **fields)
        saved.save()
        inserted = Claim(name="inserted", **fields)
        with django_assert_num_queries(1 if connection.vendor == "postgresql" else 2):
            insert(inserted)
    assert not inserted._state.adding and inserted.created_at is not None
    assert Claim.objects.filter(pk=inserted.pk, name="inserted", created_at=inserted.created_at).exists()

    def entry(name: str) -> dict:
        row = AuditEntry.objects.filter(object_type="claims.claim", object_repr=f"default/{name}").values()
        found = dict(row.get())
        assert found["object_id"] == str(Claim.objects.get(name=name).pk)
        assert found["changes"].pop("name") == [None, name]
        return {k: v for k, v in found.items() if k not in ("id", "object_id", "object_repr", "created_at")}

    assert entry("inserted") == entry("saved")
    by_api = entry("api")
    assert (by_api["ip"], by_api["actor_user_id"], by_api["changes"]["priority"]) == (
        "203.0.113.7",
        owner.pk,
        [None, 3],
    )
