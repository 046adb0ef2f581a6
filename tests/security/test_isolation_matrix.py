"""Every route of the URL configuration and the websocket routing, tried with no credentials, expired
and revoked tokens, another tenant's objects, a viewer's writes and a read-only token's writes;
operator routes with tenant users and a staff user's read-only token; machine routes (node ingestion,
/metrics) with user credentials. The routes come from walking the resolvers; matrix.py says what each
one is, and a route missing there fails test_every_route_is_in_the_matrix."""

import datetime
import json
import re
import time
from collections.abc import Iterator

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils import timezone
from rest_framework.test import APIClient

from audit.models import AuditEntry
from catalog.models import DriverRelease
from claims.models import Claim, ClaimGroup, Queue
from nodepools.models import Gpu, Node
from nodepools.services import reconcile
from nvke.routing import websocket_urlpatterns
from nvke.tenancy.context import TenantContext
from nvke.tenancy.models import ApiToken, Invitation
from telemetry.models import ClaimScaling, NodeToken, TelemetryEvent
from upgrades import services as upgrade_services
from upgrades.models import FleetRollout, UpgradeRun

from .matrix import (
    ACCOUNT,
    API_ROUTES,
    MACHINE,
    PAGES,
    PUBLIC,
    SKIPPED_PREFIXES,
    STAFF,
    TENANT,
    WEBSOCKETS,
)

WRITES = ("post", "put", "patch", "delete")
SECRET = "globex-secret"  # every name of the other tenant's objects contains it
METRICS_TOKEN = "metrics-secret-for-the-matrix"
UPGRADE_TARGET = "595.71.05"


def route_key(route: str) -> str:
    """`api/v1/^clusters/(?P<pk>[^/.]+)/$` and `clusters/<int:pk>/` → `…clusters/<pk>/`."""
    route = re.sub(r"\(\?P<(\w+)>[^)]*\)", r"<\1>", route)
    route = re.sub(r"<\w+:(\w+)>", r"<\1>", route)
    return route.replace("^", "").replace("$", "")


def walk(patterns, prefix: str = "") -> Iterator[tuple[str, URLPattern]]:
    for pattern in patterns:
        route = prefix + str(pattern.pattern)
        if route.startswith(SKIPPED_PREFIXES):
            continue
        if isinstance(pattern, URLResolver):
            yield from walk(pattern.url_patterns, route)
        elif "<format>" not in route_key(route):  # DRF's `.json` suffix twins behave as their route
            yield route_key(route), pattern


def methods_of(pattern: URLPattern) -> list[str]:
    callback = pattern.callback
    if actions := getattr(callback, "actions", None):
        return list(actions)
    cls = getattr(callback, "cls", None) or getattr(callback, "view_class", None)
    if cls is not None:
        return [m for m in cls.http_method_names if m not in ("head", "options") and hasattr(cls, m)]
    return ["get"]


def fill(route: str, value, params: tuple[tuple[str, str], ...] = ()) -> str:
    fixed = dict(params)
    return "/" + re.sub(r"<(\w+)>", lambda m: str(fixed.get(m[1], value)), route)


def api_routes() -> list[tuple[str, list[str]]]:
    return [(key, methods_of(p)) for key, p in walk(get_resolver().url_patterns) if key in API_ROUTES]


def request(client, method: str, url: str):
    return client.generic(method.upper(), url, data=json.dumps({}), content_type="application/json")


def test_every_route_is_in_the_matrix():
    walked = {key for key, _ in walk(get_resolver().url_patterns)}
    declared = set(API_ROUTES) | set(PAGES)
    assert sorted(walked - declared) == [], "add these routes to tests/security/matrix.py"
    assert sorted(declared - walked) == [], "these matrix entries match no route any more"
    sockets = {route_key(str(p.pattern)) for p in websocket_urlpatterns}
    assert sockets == set(WEBSOCKETS), "add websocket routes to WEBSOCKETS in tests/security/matrix.py"


# --- the world: two tenants with one object of each kind ----------------------------------------------


def _objects(owner, make_cluster, make_pool, prefix: str) -> dict:
    tenant = owner.memberships.get().tenant
    cluster = make_cluster(tenant, f"{prefix}-cluster")
    pool = make_pool(cluster, name=f"{prefix}-pool")
    reconcile(pool.pk)
    claim = Claim.objects.create(
        tenant=tenant, cluster=cluster, name=f"{prefix}-claim", kind="fraction", compute_percent=10
    )
    group = ClaimGroup.objects.create(
        tenant=tenant, cluster=cluster, name=f"{prefix}-group", members=1, min_members=1
    )
    queue = Queue.objects.create(tenant=tenant, cluster=cluster, name=f"{prefix}-queue")
    token, _ = ApiToken.issue(tenant=tenant, user=owner, name=f"{prefix}-token")
    operator = get_user_model().objects.create_user(f"{prefix}-operator", is_staff=True)
    operator_token, _ = ApiToken.issue(tenant=None, user=operator, name=f"{prefix}-ops")
    node = pool.nodes.order_by("pk").first()
    target = DriverRelease.objects.get(version=UPGRADE_TARGET)
    rollout = FleetRollout.objects.create(target_release=target, pools_per_wave=1)
    run = upgrade_services.create_run(
        context=TenantContext(tenant, "owner"), pool=pool, target_release=target, start=False, rollout=rollout
    )
    NodeToken.issue(node)
    event = TelemetryEvent.objects.create(
        tenant=tenant, cluster=cluster, kind="node.ready", node=node, message=f"{prefix}-node ready"
    )
    week = timezone.now() + datetime.timedelta(days=7)
    scaling = ClaimScaling.objects.create(
        tenant=tenant, claim=claim, requested_compute_percent=10, reason=f"{prefix}-scaling"
    )
    return {
        "cluster": cluster.pk,
        "pool": pool.pk,
        "node": node.pk,
        "gpu": node.gpus.order_by("pk").first().pk,
        "claim": claim.pk,
        "claim_group": group.pk,
        "queue": queue.pk,
        "upgrade_run": run.pk,
        "telemetry_event": event.pk,
        "claim_scaling": scaling.pk,
        "fleet_rollout": rollout.pk,
        "token": token.pk,
        "operator_token": operator_token.pk,
        "membership": owner.memberships.get().pk,
        # Addressed to nobody of either tenant, so only its tenant's owners and admins see it.
        "invitation": Invitation.objects.create(
            tenant=tenant, username=f"{prefix}-invitee", role="viewer", invited_by=owner, expires_at=week
        ).pk,
        "audit": AuditEntry.objects.filter(tenant=tenant).first().pk,
        "gpu_model": "l4",
        "driver": "580.105.08",
        "kubernetes_version": "1.35",
        "node_image": "ubuntu-2404-gpu-2026-10",
        "region": "us-east-1",
    }


@pytest.fixture
def world(make_member, make_cluster, make_pool, settings):
    settings.METRICS_TOKEN = METRICS_TOKEN  # /metrics is off (404) without one
    acme_owner = make_member("acme", "owner")
    globex_owner = make_member("globex", "owner", username=f"{SECRET}-owner")
    return {
        "owner": acme_owner,
        "globex_owner": globex_owner,
        "viewer": make_member("acme", "viewer"),
        "member": make_member("acme", "member"),
        "acme": _objects(acme_owner, make_cluster, make_pool, "acme"),
        "globex": _objects(globex_owner, make_cluster, make_pool, SECRET),
    }


def url_for(key: str, entry, objects: dict) -> str:
    from_objects = tuple((name, objects[obj]) for name, obj in getattr(entry, "obj_path_params", ()))
    return fill(key, objects[entry.obj] if entry.obj else "", entry.params + from_objects)


def api_client(user=None, raw_token: str | None = None) -> APIClient:
    client = APIClient()
    if raw_token:
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw_token}")
    elif user is not None:
        client.force_authenticate(user)
    return client


def _failures(checks) -> list[str]:
    return [
        f"{method.upper()} {url}: {got} (want {want})" for method, url, got, want in checks if got not in want
    ]


# --- API -------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_no_credentials_expired_and_revoked_tokens_are_401(world):
    tenant = world["owner"].memberships.get().tenant
    _, expired = ApiToken.issue(
        tenant=tenant,
        user=world["owner"],
        name="old",
        expires_at=timezone.now() - datetime.timedelta(seconds=1),
    )
    revoked_token, revoked = ApiToken.issue(tenant=tenant, user=world["owner"], name="gone")
    ApiToken.objects.filter(pk=revoked_token.pk).update(revoked_at=timezone.now())
    clients = {
        "anonymous": api_client(),
        "expired": api_client(raw_token=expired),
        "revoked": api_client(raw_token=revoked),
    }
    checks = []
    for key, methods in api_routes():
        entry = API_ROUTES[key]
        if entry.kind == PUBLIC:
            continue
        url = url_for(key, entry, world["acme"])
        for who, client in clients.items():
            for method in methods:
                checks.append((method, f"{url} as {who}", request(client, method, url).status_code, {401}))
    assert _failures(checks) == []


@pytest.mark.django_db
def test_another_tenants_objects_are_404_and_never_listed(world):
    client = api_client(world["owner"])
    checks = []
    for key, methods in api_routes():
        entry = API_ROUTES[key]
        if entry.kind not in (TENANT, ACCOUNT):
            continue
        if entry.obj:
            url = url_for(key, entry, world["globex"])
            checks += [(m, url, request(client, m, url).status_code, {404}) for m in methods]
        elif "get" in methods:
            url = url_for(key, entry, {})
            response = client.get(url)
            leaked = SECRET.encode() in response.content
            checks.append(("get", url, f"{response.status_code}, leaks={leaked}", {"200, leaks=False"}))
    assert _failures(checks) == []


@pytest.mark.django_db
def test_viewers_and_read_only_tokens_cannot_write(world):
    tenant = world["owner"].memberships.get().tenant
    _, read_only = ApiToken.issue(tenant=tenant, user=world["owner"], name="ro", scope="read-only")
    viewer, token = api_client(world["viewer"]), api_client(raw_token=read_only)
    checks = []
    for key, methods in api_routes():
        entry = API_ROUTES[key]
        if entry.kind in (PUBLIC, MACHINE):  # user credentials never pass: see the machine test
            continue
        url = url_for(key, entry, world["acme"])
        for method in (m for m in methods if m in WRITES):
            checks.append(
                (method, f"{url} with a read-only token", request(token, method, url).status_code, {403})
            )
            if not entry.viewer_writes:
                checks.append((method, f"{url} as viewer", request(viewer, method, url).status_code, {403}))
    assert _failures(checks) == []
    tenant_tokens = ApiToken.objects.filter(revoked_at__isnull=True, tenant__isnull=False)
    assert Claim.objects.count() == 2 and tenant_tokens.count() == 3
    assert set(UpgradeRun.objects.values_list("status", flat=True)) == {"pending"}
    assert NodeToken.objects.count() == 2 and FleetRollout.objects.filter(status="running").count() == 2


@pytest.mark.django_db
def test_owner_and_admin_reads_are_refused_to_members(world):
    member = api_client(world["member"])
    checks = []
    for key, methods in api_routes():
        entry = API_ROUTES[key]
        if entry.manage and "get" in methods:
            url = url_for(key, entry, world["acme"])
            checks.append(("get", url, member.get(url).status_code, {403}))
    assert checks and _failures(checks) == []


@pytest.mark.django_db
def test_operator_routes_refuse_tenant_users_and_a_staff_read_only_token(world, django_user_model):
    operator = django_user_model.objects.create_user("operator", password="pw-secret-123", is_staff=True)
    tenant = world["owner"].memberships.get().tenant
    tenant.memberships.create(user=operator, role="owner")
    _, read_only = ApiToken.issue(tenant=None, user=operator, name="ro", scope="read-only")
    _, in_tenant = ApiToken.issue(tenant=tenant, user=operator, name="acme")
    owner, viewer = api_client(world["owner"]), api_client(world["viewer"])
    token, staff = api_client(raw_token=read_only), api_client(operator)
    tenant_token = api_client(raw_token=in_tenant)  # acts in its tenant only, whoever holds it
    checks = []
    for key, methods in api_routes():
        entry = API_ROUTES[key]
        if entry.kind != STAFF:
            continue
        url = url_for(key, entry, world["acme"])
        for method in methods:
            checks.append((method, f"{url} as owner", request(owner, method, url).status_code, {403}))
            checks.append((method, f"{url} as viewer", request(viewer, method, url).status_code, {403}))
            got = request(tenant_token, method, url).status_code
            checks.append((method, f"{url} with a staff user's tenant token", got, {403}))
            if method in WRITES:
                got = request(token, method, url).status_code
                checks.append((method, f"{url} with a staff read-only token", got, {403}))
            else:
                checks.append((method, f"{url} as staff", staff.get(url).status_code, {200}))
    assert checks and _failures(checks) == []
    assert FleetRollout.objects.filter(status="running").count() == 2


def machine_credentials(world) -> dict[str, dict]:
    """The right credential of each machine route: a node token of the tenant's node, the metrics token."""
    _, node_token = NodeToken.issue(Node.objects.get(pk=world["acme"]["node"]))
    return {
        "api/v1/telemetry/ingest/": {"HTTP_AUTHORIZATION": f"Node {node_token}"},
        "api/v1/telemetry/inventory/": {"HTTP_AUTHORIZATION": f"Node {node_token}"},
        "api/v1/telemetry/preflight/": {"HTTP_AUTHORIZATION": f"Node {node_token}"},
        "metrics": {"HTTP_AUTHORIZATION": f"Bearer {METRICS_TOKEN}"},
    }


@pytest.mark.django_db
def test_machine_routes_take_only_their_credential(world, django_user_model):
    operator = django_user_model.objects.create_superuser("operator", "op@example.com", "pw-secret-123")
    tenant = world["owner"].memberships.get().tenant
    _, read_write = ApiToken.issue(tenant=tenant, user=world["owner"], name="rw")
    users = {
        "owner": api_client(world["owner"]),
        "owner's token": api_client(raw_token=read_write),
        "operator": api_client(operator),
    }
    wrong = {
        "an unknown node token": "Node nvkenode_not-a-token",
        "the metrics token as a node token": f"Node {METRICS_TOKEN}",
        "a wrong metrics token": f"Bearer {METRICS_TOKEN}x",
        "a user token as a node token": f"Node {read_write}",
    }
    credentials = machine_credentials(world)
    machine = [(key, methods) for key, methods in api_routes() if API_ROUTES[key].kind == MACHINE]
    checks = []
    for key, methods in machine:
        url = url_for(key, API_ROUTES[key], world["acme"])
        for method in methods:
            for who, client in users.items():
                checks.append((method, f"{url} as {who}", request(client, method, url).status_code, {401}))
            for what, header in wrong.items():
                response = APIClient().generic(method.upper(), url, HTTP_AUTHORIZATION=header)
                checks.append((method, f"{url} with {what}", response.status_code, {401}))
            # The right one gets past authentication: an empty batch is a 400, the metrics a 200.
            response = APIClient().generic(
                method.upper(), url, data="{}", content_type="application/json", **credentials[key]
            )
            checks.append((method, f"{url} with its credential", response.status_code, {200, 400}))
    assert {key for key, _ in machine} == set(credentials) and _failures(checks) == []


@pytest.mark.django_db
def test_a_node_token_posts_only_for_its_own_node(world):
    """Another tenant's node token is refused for this tenant's GPUs, and nothing is stored."""
    from telemetry import store

    gpu = Gpu.objects.get(pk=world["acme"]["gpu"])
    _, foreign = NodeToken.issue(Node.objects.get(pk=world["globex"]["node"]))
    sample = {"gpu": str(gpu.uuid), "ts": time.time(), "metrics": {"DCGM_FI_DEV_GPU_UTIL": 50}}
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Node {foreign}")
    before = store.latest([gpu.pk])
    response = client.post("/api/v1/telemetry/ingest/", {"samples": [sample]}, format="json")
    assert (response.status_code, response.data["code"]) == (400, "unknown_gpu")
    assert store.latest([gpu.pk]) == before


@pytest.mark.django_db
@pytest.mark.parametrize(
    "url, field, obj",
    [
        ("/api/v1/upgrades/", "pool", "pool"),
        ("/api/v1/telemetry/node-tokens/", "node", "node"),
        ("/api/v1/telemetry/claim-scaling/", "claim", "claim"),
    ],
)
def test_creates_naming_another_tenants_object_are_refused(world, url, field, obj):
    body = {field: world["globex"][obj], "target_release": UPGRADE_TARGET}
    response = api_client(world["owner"]).post(url, body, format="json")
    assert (response.status_code, response.data["details"]["fields"][field][0]["code"]) == (
        400,
        "does_not_exist",
    )
    assert SECRET.encode() not in response.content


# --- UI pages and the admin ------------------------------------------------------------------------


def page_client(user=None) -> Client:
    client = Client()
    if user is not None:
        client.force_login(user)
    return client


@pytest.mark.django_db
def test_pages_redirect_strangers_hide_other_tenants_and_refuse_viewers_writes(world):
    anonymous, owner, viewer = page_client(), page_client(world["owner"]), page_client(world["viewer"])
    member = page_client(world["member"])
    checks = []
    for key, page in PAGES.items():
        if page.public:
            continue
        url = url_for(key, page, world["acme"])
        methods = [m for m, offered in (("get", page.get), ("post", page.post)) if offered]
        for method in methods:
            response = getattr(anonymous, method)(url)
            location = response.headers.get("Location", "")
            checks.append(
                (
                    method,
                    f"{url} as anonymous",
                    f"{response.status_code} {location.split('?')[0]}",
                    {"302 /login/"},
                )
            )
        if page.staff:  # test_operator_pages_do_not_exist_for_tenant_users
            continue
        if page.obj:
            foreign = url_for(key, page, world["globex"])
            for method in methods:
                checks.append((method, foreign, getattr(owner, method)(foreign).status_code, {404}))
        elif not page.post:
            leaked = SECRET.encode() in owner.get(url).content
            checks.append(("get", url, f"leaks={leaked}", {"leaks=False"}))
        if page.post and not page.viewer_writes:
            checks.append(("post", f"{url} as viewer", viewer.post(url).status_code, {403}))
        if page.manage:
            checks.append(("get", f"{url} as member", member.get(url).status_code, {403}))
    assert _failures(checks) == []


@pytest.mark.django_db
def test_operator_pages_do_not_exist_for_tenant_users(world, django_user_model):
    operator = django_user_model.objects.create_user("operator", password="pw-secret-123", is_staff=True)
    staff = page_client(operator)
    users = {who: page_client(world[who]) for who in ("owner", "member", "viewer")}
    checks = []
    for key, page in PAGES.items():
        if not page.staff:
            continue
        url = url_for(key, page, world["acme"])
        methods = [m for m, offered in (("get", page.get), ("post", page.post)) if offered]
        for method in methods:
            for who, client in users.items():
                checks.append((method, f"{url} as {who}", getattr(client, method)(url).status_code, {404}))
        if page.get:
            checks.append(("get", f"{url} as staff", staff.get(url).status_code, {200}))
    assert checks and _failures(checks) == []
    assert FleetRollout.objects.filter(status="running").count() == 2


@pytest.mark.django_db
def test_admin_is_for_operators_only(world, django_user_model):
    operator = django_user_model.objects.create_superuser("operator", "op@example.com", "pw-secret-123")
    for client in (page_client(), page_client(world["owner"])):
        response = client.get("/admin/")
        assert response.status_code == 302 and response["Location"].startswith("/admin/login/")
    assert page_client(operator).get("/admin/").status_code == 200


# --- websockets ------------------------------------------------------------------------------------


def ws_outcome(path: str, user=None, token: str | None = None) -> str:
    """'open', 'closed <code>', or 'refused' (at the handshake) for a websocket connection through the
    full ASGI stack: with the session cookie of `user` and the browser's Origin, or with an API token
    and no Origin, as clients that are not browsers connect (a `user` with it adds their cookie)."""
    from nvke.asgi import application
    from telemetry.hub import hub

    # Each attempt runs in an event loop of its own; the telemetry hub (one per server process, bound to
    # the process's loop) starts afresh in each.
    hub.views.clear()
    hub.task = hub.redis = None
    headers = [(b"host", b"localhost")]
    if token is None:
        headers.append((b"origin", b"http://localhost"))
    else:
        headers.append((b"authorization", f"Bearer {token}".encode()))
    if user is not None:
        client = page_client(user)
        cookie = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"
        headers.append((b"cookie", cookie.encode()))

    async def attempt() -> str:
        communicator = WebsocketCommunicator(application, path, headers=headers)
        connected, _ = await communicator.connect()
        if not connected:
            return "refused"
        output = (
            await communicator.receive_output(timeout=2)
            if not await communicator.receive_nothing(0.2)
            else None
        )
        await communicator.disconnect()
        return f"closed {output.get('code')}" if output and output["type"] == "websocket.close" else "open"

    return async_to_sync(attempt)()


@pytest.mark.django_db(transaction=True)
def test_websockets_refuse_strangers_and_other_tenants(world, django_user_model):
    operator = django_user_model.objects.create_user("operator", password="pw-secret-123", is_staff=True)
    for route, ws in WEBSOCKETS.items():
        path = "/" + route
        assert ws_outcome(path) == "closed 4403"
        assert ws_outcome(path, world["owner"]) == "open"
        for param in ws.obj_params:
            foreign = f"{path}?{param}={world['globex'][param]}"
            own = f"{path}?{param}={world['acme'][param]}"
            assert ws_outcome(foreign, world["owner"]) == "closed 4403", foreign
            assert ws_outcome(own, world["owner"]) == "open", own
        for param in ws.staff_params:
            operators = f"{path}?{param}=1"
            assert ws_outcome(operators) == "closed 4403", operators
            assert ws_outcome(operators, world["owner"]) == "closed 4403", operators
            assert ws_outcome(operators, operator) == "open", operators


@pytest.mark.django_db(transaction=True)
def test_websockets_take_tokens_of_their_own_tenant_only(world):
    """Every route with API tokens: a token fixes the tenant (another tenant's objects: 4403, even with a
    session cookie of that tenant's owner beside it); a read-only token may stream; expired, revoked
    and unknown tokens are refused at the handshake."""
    acme = world["owner"].memberships.get().tenant
    _, theirs = ApiToken.issue(
        tenant=world["globex_owner"].memberships.get().tenant,
        user=world["globex_owner"],
        name="stream",
        scope=ApiToken.Scope.READ_ONLY,
    )
    _, expired = ApiToken.issue(
        tenant=acme,
        user=world["owner"],
        name="old",
        expires_at=timezone.now() - datetime.timedelta(seconds=1),
    )
    revoked_token, revoked = ApiToken.issue(tenant=acme, user=world["owner"], name="gone")
    ApiToken.objects.filter(pk=revoked_token.pk).update(revoked_at=timezone.now())
    for route, ws in WEBSOCKETS.items():
        path = "/" + route
        assert ws_outcome(path, token=theirs) == "open", path
        for bad in (expired, revoked, "nvke_unknown"):
            assert ws_outcome(path, token=bad) == "refused", path
        for param in ws.obj_params:
            foreign = f"{path}?{param}={world['acme'][param]}"
            own = f"{path}?{param}={world['globex'][param]}"
            assert ws_outcome(foreign, token=theirs) == "closed 4403", foreign
            assert ws_outcome(foreign, world["owner"], token=theirs) == "closed 4403", foreign
            assert ws_outcome(own, token=theirs) == "open", own
        for param in ws.staff_params:  # a tenant user's token: no operators' stream either
            assert ws_outcome(f"{path}?{param}=1", token=theirs) == "closed 4403", path
