"""The isolation matrix: every route of nvke/urls.py and nvke/routing.py, and how it is protected.

A route missing here fails tests/security/test_isolation_matrix.py. Adding one is one line: its path
as printed by the failing test (regex and converters folded to `<name>`), and what it is:

    "api/v1/widgets/<pk>/": Api(TENANT, "widget"),   # a tenant-owned object: fill <pk> from a widget

Kinds:
- TENANT: the tenant's own objects. Anonymous, expired or revoked credentials → 401; another tenant's
  object (filled from `obj`) → 404 for every method; a viewer's or a read-only token's write → 403.
- CATALOG: shared, read-only catalog. Anonymous → 401; writes are not offered.
- ACCOUNT: about the caller (me/, tokens/). Like TENANT; `viewer_writes=True` where a viewer may write
  (holding tokens).
- PUBLIC: answers everyone (health, schema, login).
- STAFF: platform operators only (the fleet, fleet rollouts, operator tokens). Anonymous, expired or
  revoked credentials → 401; a user who is not staff → 403 for every method, reads too, and so is a staff
  user's tenant token; a staff user's read-only operator token → 403 on writes.
- MACHINE: machine credentials, never a user's: a node token (`Authorization: Node …`) for ingestion,
  NVKE_METRICS_TOKEN for /metrics. No credentials, and every user credential (session, API token,
  staff) → 401; the right machine credential is accepted (test_machine_routes_take_only_their_credential).
`obj` names an object the tests create in each tenant (see `_objects()` in the test), `manage=True` marks
reads for owners and admins only; `params` fixes other path parameters (`(("action", "abort"),)`),
`obj_path_params` fills them from other objects (`(("run_pk", "upgrade_run"),)`). UI pages (Page) are
checked for a login redirect, 404 on another tenant's object and 403 on a viewer's POST; `staff=True`
pages (fleet rollouts) for a login redirect, 404 to every tenant user for every method, 200 to staff.
Websocket routes (Ws) are checked for refusal (close 4403), also with each of `obj_params` naming another
tenant's object, with a session and with another tenant's API token (and bad tokens: refused at the
handshake), and each of `staff_params` refused to tenant users and open to staff.
"""

from dataclasses import dataclass

TENANT, CATALOG, ACCOUNT, PUBLIC = "tenant", "catalog", "account", "public"
STAFF, MACHINE = "staff", "machine"


@dataclass(frozen=True)
class Api:
    kind: str
    obj: str | None = None
    viewer_writes: bool = False
    manage: bool = False
    params: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Page:
    obj: str | None = None
    post: bool = False  # the page takes POST (a write)
    get: bool = True  # False: POST only (GET is 405)
    public: bool = False
    viewer_writes: bool = False
    manage: bool = False  # owners and admins only, reads too
    params: tuple[tuple[str, str], ...] = ()  # values of path parameters other than the object's
    obj_path_params: tuple[tuple[str, str], ...] = ()  # path parameters filled from other objects
    staff: bool = False  # operators only: invisible (404) to everyone else


@dataclass(frozen=True)
class Ws:
    obj_params: tuple[str, ...] = ()  # query parameters naming a tenant object, each tried alone
    staff_params: tuple[str, ...] = ()  # query parameters of operators' streams (`?<name>=1`)


API_ROUTES: dict[str, Api] = {
    "api/v1/": Api(CATALOG),
    "api/v1/me/": Api(ACCOUNT),
    "api/v1/clusters/": Api(TENANT),
    "api/v1/clusters/attach/": Api(TENANT),
    "api/v1/clusters/rbac-manifest/": Api(TENANT),
    "api/v1/clusters/<pk>/": Api(TENANT, "cluster"),
    "api/v1/clusters/<pk>/defrag/": Api(TENANT, "cluster"),
    "api/v1/clusters/<pk>/agent-manifest/": Api(TENANT, "cluster"),
    "api/v1/clusters/<pk>/defrag-plan/": Api(TENANT, "cluster"),
    "api/v1/clusters/<pk>/maintenance/": Api(TENANT, "cluster"),
    "api/v1/clusters/<pk>/versions/": Api(TENANT, "cluster"),
    "api/v1/clusters/<pk>/kubeconfig/": Api(TENANT, "cluster"),
    "api/v1/node-pools/": Api(TENANT),
    "api/v1/node-pools/<pk>/": Api(TENANT, "pool"),
    "api/v1/nodes/": Api(TENANT),
    "api/v1/nodes/<pk>/": Api(TENANT, "node"),
    "api/v1/claims/": Api(TENANT),
    "api/v1/claims/<pk>/": Api(TENANT, "claim"),
    "api/v1/claim-groups/": Api(TENANT),
    "api/v1/claim-groups/<pk>/": Api(TENANT, "claim_group"),
    "api/v1/queues/": Api(TENANT),
    "api/v1/queues/<pk>/": Api(TENANT, "queue"),
    "api/v1/gpu-models/": Api(CATALOG),
    "api/v1/gpu-models/<name>/": Api(CATALOG, "gpu_model"),
    "api/v1/gpu-models/<name>/drivers/": Api(CATALOG, "gpu_model"),
    "api/v1/driver-releases/": Api(CATALOG),
    "api/v1/driver-releases/<version>/": Api(CATALOG, "driver"),
    "api/v1/kubernetes-versions/": Api(CATALOG),
    "api/v1/kubernetes-versions/<version>/": Api(CATALOG, "kubernetes_version"),
    "api/v1/node-images/": Api(CATALOG),
    "api/v1/node-images/<name>/": Api(CATALOG, "node_image"),
    "api/v1/regions/": Api(CATALOG),
    "api/v1/regions/<name>/": Api(CATALOG, "region"),
    "api/v1/tokens/": Api(ACCOUNT, viewer_writes=True),
    "api/v1/tokens/<pk>/": Api(ACCOUNT, "token", viewer_writes=True),
    "api/v1/members/": Api(TENANT),
    "api/v1/members/<pk>/": Api(TENANT, "membership"),
    # Invitations: the tenant's, for owners and admins; the invitee's own, for anyone they name.
    "api/v1/invitations/": Api(TENANT, manage=True),
    "api/v1/invitations/<pk>/": Api(TENANT, "invitation", manage=True),
    "api/v1/me/invitations/": Api(ACCOUNT, viewer_writes=True),
    "api/v1/me/invitations/<pk>/": Api(ACCOUNT, "invitation", viewer_writes=True),
    "api/v1/me/invitations/<pk>/accept/": Api(ACCOUNT, "invitation", viewer_writes=True),
    "api/v1/me/invitations/<pk>/decline/": Api(ACCOUNT, "invitation", viewer_writes=True),
    "api/v1/quota/": Api(TENANT),
    "api/v1/usage/": Api(TENANT),
    "api/v1/usage/export/": Api(TENANT),
    "api/v1/audit/": Api(TENANT, manage=True),
    "api/v1/audit/<pk>/": Api(TENANT, "audit", manage=True),
    "api/v1/upgrades/": Api(TENANT),
    "api/v1/upgrades/<pk>/": Api(TENANT, "upgrade_run"),
    "api/v1/upgrades/<pk>/history/": Api(TENANT, "upgrade_run"),
    "api/v1/upgrades/<pk>/start/": Api(TENANT, "upgrade_run"),
    "api/v1/upgrades/<pk>/pause/": Api(TENANT, "upgrade_run"),
    "api/v1/upgrades/<pk>/resume/": Api(TENANT, "upgrade_run"),
    "api/v1/upgrades/<pk>/abort/": Api(TENANT, "upgrade_run"),
    "api/v1/upgrades/<pk>/retry/": Api(TENANT, "upgrade_run"),
    "api/v1/upgrades/<pk>/approve/": Api(TENANT, "upgrade_run"),
    "api/v1/upgrades/<pk>/rollback/": Api(TENANT, "upgrade_run"),
    "api/v1/upgrades/<pk>/nodes/<node>/uncordon/": Api(TENANT, "upgrade_run", params=(("node", "n"),)),
    "api/v1/node-pools/<pk>/driver-options/": Api(TENANT, "pool"),
    "api/v1/node-pools/<pk>/autoscaling/": Api(TENANT, "pool"),
    "api/v1/node-pools/<pk>/upgrade-deferral/": Api(TENANT, "pool"),
    # The fleet, its rollouts and the operators' tokens span every tenant: operators only.
    "api/v1/fleet/": Api(STAFF),
    "api/v1/operator-tokens/": Api(STAFF),
    "api/v1/operator-tokens/<pk>/": Api(STAFF, "operator_token"),
    "api/v1/fleet-rollouts/": Api(STAFF),
    "api/v1/fleet-rollouts/<pk>/": Api(STAFF, "fleet_rollout"),
    "api/v1/fleet-rollouts/<pk>/pause/": Api(STAFF, "fleet_rollout"),
    "api/v1/fleet-rollouts/<pk>/resume/": Api(STAFF, "fleet_rollout"),
    "api/v1/fleet-rollouts/<pk>/abort/": Api(STAFF, "fleet_rollout"),
    "api/v1/fleet-rollouts/<pk>/runs/<run_pk>/<control>/": Api(
        STAFF, "fleet_rollout", params=(("run_pk", "0"), ("control", "retry"))
    ),
    "api/v1/telemetry/ingest/": Api(MACHINE),
    "api/v1/telemetry/inventory/": Api(MACHINE),
    "api/v1/telemetry/preflight/": Api(MACHINE),
    # Node tokens: everyone lists them (prefixes only), owners and admins create them.
    "api/v1/telemetry/node-tokens/": Api(TENANT),
    "api/v1/telemetry/gpus/": Api(TENANT),
    "api/v1/telemetry/gpus/<pk>/": Api(TENANT, "gpu"),
    "api/v1/telemetry/gpus/<pk>/history/": Api(TENANT, "gpu"),
    "api/v1/telemetry/events/": Api(TENANT),
    "api/v1/telemetry/events/<pk>/": Api(TENANT, "telemetry_event"),
    "api/v1/telemetry/claim-scaling/": Api(TENANT),
    "api/v1/telemetry/claim-scaling/<pk>/": Api(TENANT, "claim_scaling"),
    "api/v1/telemetry/pool-rescaling/": Api(TENANT),
    "api/v1/telemetry/pool-rescaling/<pk>/": Api(TENANT, "pool"),
    "metrics": Api(MACHINE),
    "api/schema/": Api(PUBLIC),
    "api/docs/": Api(PUBLIC),
}

PAGES: dict[str, Page] = {
    "healthz": Page(public=True),
    "login/": Page(public=True),
    "logout/": Page(public=True),
    "favicon.ico": Page(public=True),
    "": Page(),
    "clusters/": Page(),
    "usage/": Page(),
    "clusters/new/": Page(post=True),
    "clusters/attach/": Page(post=True),
    "clusters/attach/rbac.yaml": Page(),
    "clusters/<pk>/": Page("cluster"),
    "clusters/<pk>/delete/": Page("cluster", post=True),
    "clusters/<pk>/maintenance/": Page("cluster", post=True),
    "clusters/<pk>/versions/": Page("cluster", post=True),
    "clusters/<pk>/pools/new/": Page("cluster", post=True),
    "pools/<pk>/": Page("pool"),
    "pools/<pk>/scale/": Page("pool", post=True, get=False),
    "pools/<pk>/rescaling/": Page("pool", post=True, get=False),
    "pools/<pk>/autoscaling/": Page("pool", post=True, get=False),
    "pools/<pk>/delete/": Page("pool", post=True),
    "clusters/<pk>/claims/": Page("cluster"),
    "clusters/<pk>/claims/new/": Page("cluster", post=True),
    "claims/<pk>/": Page("claim"),
    "claims/<pk>/release/": Page("claim", post=True),
    "clusters/<pk>/groups/": Page("cluster"),
    "groups/<pk>/": Page("claim_group"),
    "clusters/<pk>/queues/": Page("cluster"),
    "queues/<pk>/": Page("queue"),
    # Switching tenants changes nothing in one; anyone may hold tokens.
    "tenant/switch/": Page(post=True, get=False, viewer_writes=True),
    "account/tokens/": Page(post=True, viewer_writes=True),
    "account/tokens/<pk>/revoke/": Page("token", post=True, get=False, viewer_writes=True),
    "account/members/": Page(post=True),
    "account/members/<pk>/role/": Page("membership", post=True, get=False),
    "account/members/<pk>/remove/": Page("membership", post=True, get=False),
    "account/invitations/<pk>/revoke/": Page("invitation", post=True, get=False),
    "account/audit/": Page(manage=True),
    # The invitee's own page: no tenant needed, another tenant's invitation (to someone else) is 404.
    "invitations/": Page(),
    "invitations/<pk>/accept/": Page("invitation", post=True, get=False, viewer_writes=True),
    "invitations/<pk>/decline/": Page("invitation", post=True, get=False, viewer_writes=True),
    "clusters/<pk>/kubeconfig/": Page("cluster"),
    "clusters/<pk>/agent-manifest/": Page("cluster", post=True, get=False),
    "nodes/<pk>/": Page("node"),
    "pools/<pk>/upgrade/": Page("pool", post=True),
    "upgrades/<pk>/": Page("upgrade_run"),
    "upgrades/<pk>/<action>/": Page("upgrade_run", post=True, params=(("action", "abort"),)),
    "upgrades/<pk>/nodes/<node>/uncordon/": Page("upgrade_run", post=True, params=(("node", "n"),)),
    "telemetry/": Page(),
    "getting-started/": Page(),
    "fleet/": Page(staff=True),
    "fleet/tokens/": Page(post=True, staff=True),
    "fleet/tokens/<pk>/revoke/": Page("operator_token", post=True, get=False, staff=True),
    "telemetry/clusters/<pk>/": Page("cluster"),
    "telemetry/pools/<pk>/": Page("pool"),
    "telemetry/gpus/<pk>/": Page("gpu"),
    "fleet-rollouts/": Page(staff=True),
    "fleet-rollouts/new/": Page(post=True, staff=True),
    "fleet-rollouts/<pk>/": Page("fleet_rollout", staff=True),
    "fleet-rollouts/<pk>/runs/<run_pk>/": Page(
        "fleet_rollout", staff=True, obj_path_params=(("run_pk", "upgrade_run"),)
    ),
    "fleet-rollouts/<pk>/runs/<run_pk>/<action>/": Page(
        "fleet_rollout",
        post=True,
        staff=True,
        params=(("action", "retry"),),
        obj_path_params=(("run_pk", "upgrade_run"),),
    ),
    "fleet-rollouts/<pk>/<action>/": Page(
        "fleet_rollout", post=True, staff=True, params=(("action", "abort"),)
    ),
}

WEBSOCKETS: dict[str, Ws] = {
    "ws/events/": Ws(obj_params=("cluster",), staff_params=("rollouts",)),
    "ws/telemetry/": Ws(obj_params=("cluster", "pool", "gpu")),
}

# The admin is Django's: staff only, checked as a whole by test_admin_is_for_operators_only.
SKIPPED_PREFIXES = ("admin/",)
