"""The cluster's workloads made to agree with NVKE's claims, one level-triggered pass at a time.

DRA (resource.k8s.io/v1, the primary path): every claim has a ResourceClaim in its namespace, NVKE's own
(labelled `nvke.io/claim`) or a user's that NVKE adopted (annotated `nvke.io/adopted`). For a placed
claim NVKE writes the allocation itself, as kube-scheduler would: its own finalizer (`nvke.io/allocation`)
first, then `status.allocation`, each under the object's resourceVersion; a 409 reads the claim again and
decides again. Then, for each pod that waits on the claim (its `nvke.io/placement` scheduling gate, which
NVKE's admission sets with the pool's toleration: dra.admitted_pod_fields), it reserves the claim for the
pod (`reservedFor`, as a scheduler must before the kubelet starts the pod) and lifts the gate;
kube-scheduler binds it to the node the allocation selects and leaves the claim as it is. A pod that does
not tolerate that node's taints keeps its gate and is told why: released, kube-scheduler's DRA plugin
would find no node for it and clear NVKE's allocation. A claim released or moved has its allocation
withdrawn once no pod holds it (`reservedFor` empty). An allocation NVKE did not write (no NVKE finalizer:
kube-scheduler's, say, for a pod that slipped past the gate) is never overwritten, and the devices it
holds are never written into another claim: it is reported.

Every change is said on the object it concerns as an Event (reason Allocated, FailedScheduling,
NotPlaceable or OtherDriver), once per change: the reason last said is kept in the object's `nvke.io/reason`
annotation."""

import datetime
import hashlib
import logging

from nvke.providers.base import FoundWorkload, ProviderError, WorkloadClaim, WorkloadReport, WorkloadState

from . import dra, gangs, gpus, records
from .client import call, read
from .namespaces import Namespaces
from .scheduler import SCHEDULER, PodScheduler, annotations, evict, fraction_words, holding, moved, refresh

log = logging.getLogger(__name__)
MERGE = "application/merge-patch+json"
REASON = "nvke.io/reason"  # annotation: the last reason NVKE gave on the object (events only on a change)
CONFLICT_RETRIES = 3
SHARED = (
    "Its GPU is shared with other claims through the DRA driver's consumable shares: memory is accounted, "
    "nothing is enforced between the claims (isolation none, whatever the pool's mode)."
)
NO_DRA = (
    "The cluster serves no DRA (resource.k8s.io/v1, Kubernetes 1.34 and later), so no pod can use a claim "
    "made through NVKE: pods ask for GPUs themselves with schedulerName: nvke."
)


def now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC).replace(microsecond=0)


class WorkloadSync:
    """One pass over a cluster's ResourceClaims and pods. `ops` is the cluster's KubernetesOperations."""

    def __init__(self, ops, tenant: str):
        self.ops, self.core, self.resource, self.tenant = ops, ops.core, ops.resource, tenant
        self.devices: dict[str, dict[str, dict]] = {}

    def run(self, claims: list[WorkloadClaim], refused: dict[tuple[str, str], str]) -> WorkloadReport:
        self.tenancy = Namespaces(self.core, self.tenant)
        self.managed = self.tenancy.own
        self.pool_nodes = self.ops.nodes(gpus.POOL_LABEL)
        pods = listed(read(self.core.list_pod_for_all_namespaces), "Pod")
        ours = [p for p in pods if p["metadata"]["namespace"] in self.managed]
        self.gangs = gangs.Gangs(self.ops.custom)
        scheduler = PodScheduler(self.ops, self._say, self.managed, self.pool_nodes)
        scheduled = [p for p in ours if p.get("spec", {}).get("schedulerName") == SCHEDULER]
        pod_claims = [c for c in claims if c.source == "pod"]
        scheduler.held = gangs.binding_holds(self.gangs, scheduled, pod_claims)
        states, found = scheduler.run(pod_claims, pods, refused)
        found = self._in_gangs(found, {gangs.key_of(p): p for p in scheduled}, scheduler.held, refused)
        dra_claims = [c for c in claims if c.source != "pod"]
        try:
            listed_claims = read(self.resource.list_resource_claim_for_all_namespaces)
        except ProviderError as error:
            if error.status != 404:
                raise
            states += [WorkloadState(c.namespace, c.name, "waiting", NO_DRA) for c in dra_claims]
            self._publish_records(claims, states, {})
            return WorkloadReport(states=tuple(states), found=tuple(found))
        everywhere = {
            (rc["metadata"]["namespace"], rc["metadata"]["name"]): rc
            for rc in listed(listed_claims, "ResourceClaim")
        }
        existing = {key: rc for key, rc in everywhere.items() if key[0] in self.managed}
        dra_states, dra_found = self._resource_claims(dra_claims, existing, everywhere, refused)
        enforced = {
            (c.namespace, c.name): dra.as_enforced(c, self.devices.get(c.node, {})) for c in dra_claims
        }
        users = gangs.pods_by_claim(ours, claim_names)
        dra_found = [self.gangs.tag(f, users.get((f.namespace, f.name))) for f in dra_found]
        held = self._gang_gates(ours, dra_states, enforced)
        self._lift_gates([p for p in pods if gangs.key_of(p) not in held], dra_states, enforced, existing)
        states += dra_states
        self._publish_records(claims, states, existing)
        return WorkloadReport(states=tuple(states), found=tuple(found + dra_found))

    def _resource_claims(
        self, claims: list[WorkloadClaim], existing: dict, everywhere: dict, refused: dict
    ) -> tuple[list[WorkloadState], list[FoundWorkload]]:
        """`existing`: the ResourceClaims in this tenant's namespaces, the only ones NVKE writes here;
        `everywhere`: all of them, whose devices another tenant's NVKE or another scheduler holds."""
        self.devices = {node: dra.published_devices(slices) for node, slices in self.ops.slices().items()}
        wanted = {(c.namespace, c.name): c for c in claims}
        # Devices held by allocations NVKE did not write here: never to be written into another claim.
        self.foreign = {
            (r["pool"], r["device"]): f"{key[0]}/{key[1]}"
            for key, rc in everywhere.items()
            if key not in existing or not allocated_by_nvke(rc)
            for r in results_of(rc)
        }
        # Devices NVKE's claims hold whole (no shareID): one claim each, whatever NVKE's rows share.
        self.held = {
            (r["pool"], r["device"]): key
            for key, rc in existing.items()
            if allocated_by_nvke(rc)
            for r in results_of(rc)
            if "shareID" not in r
        }
        states = [self._claim(claim, existing.get(key)) for key, claim in wanted.items()]
        pools = {node["metadata"]["name"] for node in self.pool_nodes}
        found = []
        for key, rc in existing.items():
            if key in wanted:
                continue
            if self._ours(rc):
                self._withdraw(rc, delete=dra.CLAIM_LABEL in (rc["metadata"].get("labels") or {}))
            elif self._adoptable(rc):
                found.append(dra.found_claim(rc))
                if why := found[-1].refusal or refused.get(key):
                    self._say(rc, "Warning", "NotPlaceable", why)
            elif held := [r for r in results_of(rc) if r["pool"] in pools and r["driver"] == gpus.DRA_DRIVER]:
                where = ", ".join(f"{r['device']} on node {r['pool']}" for r in held)
                message = (
                    f"Allocated by another scheduler ({where}), GPUs of an NVKE pool: NVKE does not account "
                    "it and writes no claim of its own onto these devices while it holds them."
                )
                self._say(rc, "Warning", "ForeignAllocation", message)
        return states, found

    def _publish_records(
        self, claims: list[WorkloadClaim], states: list[WorkloadState], existing: dict
    ) -> None:
        allocated = {(s.namespace, s.name) for s in states if s.state == "allocated"}
        placed = []
        for claim in claims:
            key = (claim.namespace, claim.name)
            if key not in allocated:
                continue
            rc = existing.get(key) or {}
            node_devices = self.devices.get(claim.node, {})
            devices = [r["device"] for r in results_of(rc)] or [
                dra.device_name(share, node_devices) or f"gpu-{share.index}" for share in claim.shares
            ]
            reserved = [r["name"] for r in (rc.get("status") or {}).get("reservedFor") or []]
            if claim.source != "pod":  # the scheduler path's pods use no DRA device
                claim = dra.as_enforced(claim, node_devices)
            placed.append((claim, devices, [claim.name] if claim.source == "pod" else reserved))

        def say(rc: dict | None, kind: str, reason: str, message: str) -> None:
            if rc:
                self._say(rc, kind, reason, message)

        records.RecordSync(self.ops, say, self.managed).run(placed, existing, self.pool_nodes)

    # --- gangs ------------------------------------------------------------------------------------

    def _in_gangs(
        self, found: list[FoundWorkload], pods: dict, held: dict, refused: dict
    ) -> list[FoundWorkload]:
        """The scheduler path's found pods as members of their gangs; a gang's pods not adopted yet (below
        its minimum, or no minimum known) are told why here, as no claim speaks for them."""
        tagged = [self.gangs.tag(f, pods.get((f.namespace, f.name))) for f in found]
        for f in tagged:
            if (why := held.get(key := (f.namespace, f.name))) and key not in refused:
                self._say(pods[key], "Warning", "FailedScheduling", why)
        return tagged

    def _gang_gates(self, pods: list[dict], states: list[WorkloadState], claims: dict) -> dict:
        """Gated pods of gangs below their minimum keep NVKE's gate, each told why."""

        def blocked(pod: dict) -> str:
            namespace = pod["metadata"]["namespace"]
            return self._taints_in_the_way(pod, {claims[(namespace, n)].node for n in claim_names(pod)})

        held = gangs.gate_holds(self.gangs, pods, states, claim_names, gated, blocked)
        for pod in pods:
            if why := held.get(gangs.key_of(pod)):
                self._say(pod, "Warning", "FailedScheduling", why)
        return held

    # --- one claim --------------------------------------------------------------------------------

    def _claim(self, claim: WorkloadClaim, rc: dict | None) -> WorkloadState:
        state = lambda kind, message="": WorkloadState(claim.namespace, claim.name, kind, message)  # noqa: E731
        if rc is not None and rc["metadata"].get("deletionTimestamp"):
            self._withdraw(rc, delete=False)
            rc = None if claim.source == "resourceclaim" else rc
            if rc is not None:
                return state("waiting", "The ResourceClaim is being deleted; NVKE makes it again after.")
        if rc is None:
            if claim.source == "resourceclaim":
                return state("gone", "The ResourceClaim was deleted.")
            if why := self.tenancy.unusable(claim.namespace):
                return state("waiting", why)
            rc = self._create(claim)
        for _ in range(CONFLICT_RETRIES):
            try:
                return self._settle(claim, rc, state)
            except ProviderError as error:
                if error.status != 409:
                    raise
                rc = read(self.resource.read_namespaced_resource_claim, claim.name, claim.namespace)
        return state("waiting", "The ResourceClaim kept changing under NVKE's writes; trying again.")

    def _settle(self, claim: WorkloadClaim, rc: dict, state) -> WorkloadState:
        written = (rc.get("status") or {}).get("allocation")
        reserved = (rc.get("status") or {}).get("reservedFor") or []
        if written and not allocated_by_nvke(rc):
            holders = ", ".join(f"{r['pool']}/{r['device']}" for r in results_of(rc))
            message = f"Allocated by another scheduler ({holders}); NVKE leaves it as it is."
            self._say(rc, "Warning", "ForeignAllocation", message)
            return state("conflict", message)
        if not claim.node:
            if written and reserved:  # taken back (a drain, a failed GPU): its pods leave first
                self._evict_holders(rc, claim)
            elif written:
                rc = self._deallocate(rc)
            self._say(rc, "Warning", "FailedScheduling", claim.pending_reason or "Waiting for NVKE.")
            return state("waiting", claim.pending_reason)
        request = dra.request_name(rc)
        wanted = dra.allocation(claim, self.devices.get(claim.node, {}), request, now())
        results = wanted["devices"]["results"]
        if any(not r["device"] for r in results):
            message = f"Node {claim.node} publishes no MIG device {claim.shares[0].mig_profile} yet."
            self._say(rc, "Warning", "FailedScheduling", message)
            return state("waiting", message)
        if taken := [self.foreign[k] for r in results if (k := (r["pool"], r["device"])) in self.foreign]:
            message = f"Its GPU is allocated to {', '.join(taken)} by another scheduler, unshared."
            self._say(rc, "Warning", "FailedScheduling", message)
            return state("conflict", message)
        key = (claim.namespace, claim.name)
        if others := sorted(
            {
                f"{holder[0]}/{holder[1]}"
                for r in results
                if "shareID" not in r and (holder := self.held.get((r["pool"], r["device"]), key)) != key
            }
        ):
            message = (
                f"NVKE shares its GPU with {', '.join(others)}, but the cluster's DRA driver offers no "
                "consumable shares of it (--consumable-shares=memory): one claim's pods at a time."
            )
            self._say(rc, "Warning", "FailedScheduling", message)
            return state("waiting", message)
        shared = SHARED if any("shareID" in r for r in results) else ""
        if written and dra.same_placement(written, wanted):
            return state("allocated", shared)
        if written:
            if reserved:
                self._evict_holders(rc, claim)
                names = ", ".join(r["name"] for r in reserved)
                return state("waiting", f"Moving: pods {names} are evicted from the previous allocation.")
            rc = self._deallocate(rc)
        rc = self._write_allocation(self._protect(rc, claim), wanted)
        self.held.update({(r["pool"], r["device"]): key for r in results if "shareID" not in r})
        self._say(
            rc,
            "Normal",
            "Allocated",
            describe(dra.as_enforced(claim, self.devices.get(claim.node, {})), results),
        )
        return state("allocated", shared)

    def _create(self, claim: WorkloadClaim) -> dict:
        body = dra.resource_claim(claim)
        try:
            return read(self.resource.create_namespaced_resource_claim, claim.namespace, body)
        except ProviderError as error:
            if error.status != 409:
                raise
            return read(self.resource.read_namespaced_resource_claim, claim.name, claim.namespace)

    def _protect(self, rc: dict, claim: WorkloadClaim) -> dict:
        """The finalizer (and, on a user's claim, NVKE's adoption mark) before any allocation."""
        meta = rc["metadata"]
        finalizers = meta.get("finalizers") or []
        adopted = claim.source == "resourceclaim" and dra.ADOPTED not in (meta.get("annotations") or {})
        if dra.FINALIZER in finalizers and not adopted:
            return rc
        patch: dict = {"resourceVersion": meta["resourceVersion"]}
        if dra.FINALIZER not in finalizers:
            patch["finalizers"] = [*finalizers, dra.FINALIZER]
        if adopted:
            patch["annotations"] = {dra.ADOPTED: "true"}
        return read(
            self.resource.patch_namespaced_resource_claim,
            meta["name"],
            meta["namespace"],
            {"metadata": patch},
            _content_type=MERGE,
        )

    def _deallocate(self, rc: dict) -> dict:
        return self._write_allocation(rc, None)

    def _evict_holders(self, rc: dict, claim: WorkloadClaim) -> None:
        """Evict the pods that hold a claim NVKE moved or took back (its `reservedFor`), saying where the
        claim went; their controllers make new ones."""
        namespace = rc["metadata"]["namespace"]
        was = ", ".join(f"{r['device']} on node {r['pool']}" for r in results_of(rc))
        reason, message = moved(claim, was)
        for holder in rc["status"]["reservedFor"]:
            if holder.get("resource") == "pods":
                pod = {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": holder["name"], "namespace": namespace, "uid": holder["uid"]},
                }
                evict(self.core, self._say, pod, reason, message)

    def _write_allocation(self, rc: dict, allocation: dict | None) -> dict:
        """Set (or, None, withdraw) `status.allocation` under the claim's resourceVersion."""
        meta = rc["metadata"]
        version = {"resourceVersion": meta["resourceVersion"]}
        body = {"metadata": version, "status": {"allocation": allocation}}
        return read(
            self.resource.patch_namespaced_resource_claim_status,
            meta["name"],
            meta["namespace"],
            body,
            _content_type=MERGE,
        )

    def _withdraw(self, rc: dict, *, delete: bool) -> None:
        """A claim NVKE no longer has: its allocation withdrawn once no pod holds it, then the finalizer
        (and adoption mark) removed; NVKE's own ResourceClaim is deleted."""
        status, meta = rc.get("status") or {}, rc["metadata"]
        if status.get("reservedFor"):
            return  # pods still use it: the next pass after they stop
        try:
            if status.get("allocation"):
                rc = self._deallocate(rc)
            finalizers = [f for f in rc["metadata"].get("finalizers") or [] if f != dra.FINALIZER]
            patch = {
                "resourceVersion": rc["metadata"]["resourceVersion"],
                "finalizers": finalizers or None,
                "annotations": {dra.ADOPTED: None, REASON: None},
            }
            call(
                self.resource.patch_namespaced_resource_claim,
                meta["name"],
                meta["namespace"],
                {"metadata": patch},
                _content_type=MERGE,
            )
            if delete:
                call(self.resource.delete_namespaced_resource_claim, meta["name"], meta["namespace"])
        except ProviderError as error:
            if error.status not in (404, 409):  # gone, or changed: the next pass sees it as it is now
                raise

    # --- ownership ---------------------------------------------------------------------------------

    def _adoptable(self, rc: dict) -> bool:
        """A user's ResourceClaim for NVIDIA GPUs, unallocated, in a namespace of this tenant's."""
        meta = rc["metadata"]
        return (
            meta["namespace"] in self.managed
            and not (rc.get("status") or {}).get("allocation")
            and not meta.get("deletionTimestamp")
            and dra.asks_nvidia_gpus(rc)
        )

    @staticmethod
    def _ours(rc: dict, claim: WorkloadClaim | None = None) -> bool:
        """Whether NVKE stands for the ResourceClaim: made by it, or adopted (or being adopted)."""
        meta = rc["metadata"]
        if dra.CLAIM_LABEL in (meta.get("labels") or {}) or dra.ADOPTED in (meta.get("annotations") or {}):
            return True
        return (
            claim is not None
            and claim.source == "resourceclaim"
            and not (rc.get("status") or {}).get("allocation")
        )

    # --- pods ---------------------------------------------------------------------------------------

    def _lift_gates(
        self, pods: list[dict], states: list[WorkloadState], claims: dict, existing: dict
    ) -> None:
        """Remove `nvke.io/placement` from pods whose NVIDIA claims are all allocated by NVKE, once each
        claim is reserved for the pod, annotating them with what they hold (as the scheduler path does)
        and saying it in an Allocated Event; say the reason on pods that still wait (among them those
        that do not tolerate their claims' nodes' taints).
        Pods already released have their annotations brought up to date when a claim is resized.
        NVKE's admission gates every pod with claims in a managed namespace (it cannot read the claims):
        a pod none of whose claims asks an NVIDIA DeviceClass (another DRA driver's) is released as it
        is, for kube-scheduler to allocate and bind, and told so in an OtherDriver Event.
        `existing`: the ResourceClaims of the managed namespaces."""
        by_claim = {(s.namespace, s.name): s for s in states}
        for pod in pods:
            gates = pod.get("spec", {}).get("schedulingGates") or []
            namespace = pod["metadata"]["namespace"]
            if namespace not in self.managed:
                continue
            names = claim_names(pod)
            if any(g["name"] == dra.GATE for g in gates) and other_drivers_only(pod, names, existing):
                if self._ungate(pod, gates, {}):
                    message = (
                        f"None of its ResourceClaims ({', '.join(names)}) asks an NVIDIA DeviceClass "
                        f"({dra.DEVICE_CLASS}, {dra.MIG_DEVICE_CLASS}): NVKE lifted its scheduling gate "
                        f"{dra.GATE}, for kube-scheduler to place it."
                    )
                    self._say(pod, "Normal", "OtherDriver", message)
                continue
            blocking = [
                by_claim.get((namespace, name))
                for name in names
                if (state := by_claim.get((namespace, name))) is None or state.state != "allocated"
            ]
            if not any(g["name"] == dra.GATE for g in gates):
                if names and not blocking:
                    refresh(self.core, self._say, pod, held(namespace, names, claims))
                continue
            if blocking:
                reasons = "; ".join(s.message for s in blocking if s and s.message)
                self._say(pod, "Warning", "FailedScheduling", reasons or "Waiting for its GPU claims.")
                continue
            if why := self._taints_in_the_way(pod, {claims[(namespace, name)].node for name in names}):
                self._say(pod, "Warning", "FailedScheduling", why)
                continue
            if not all(self._reserve(pod, name) for name in names):
                continue  # a claim changed or went meanwhile: the next pass decides again
            holds = "; ".join(f"{name}: {holding(claims[(namespace, name)])}" for name in names)
            said = ("Allocated", f"NVKE allocated its GPU claims ({holds}).")
            # What NVKE said goes in with the ungating patch: one patch a pod, not two.
            if self._ungate(pod, gates, {**held(namespace, names, claims), REASON: ": ".join(said)}):
                record_event(self.core, pod, "Normal", *said)

    def _ungate(self, pod: dict, gates: list[dict], annotations: dict[str, str]) -> bool:
        """Remove NVKE's gate from the pod (and add `annotations`) under its resourceVersion; False where
        the pod changed or went meanwhile (the next pass decides again)."""
        meta = pod["metadata"]
        patch = {
            "metadata": {"resourceVersion": meta["resourceVersion"], "annotations": annotations},
            "spec": {"schedulingGates": [g for g in gates if g["name"] != dra.GATE] or None},
        }
        try:
            call(self.core.patch_namespaced_pod, meta["name"], meta["namespace"], patch, _content_type=MERGE)
        except ProviderError as error:
            if error.status not in (404, 409):
                raise
            return False
        return True

    def _taints_in_the_way(self, pod: dict, nodes: set[str]) -> str:
        """Why kube-scheduler could not bind the pod to its claims' nodes (taints it does not tolerate),
        or "" when it can."""
        found = [
            f"{n['metadata']['name']} ({', '.join(taint_words(t) for t in taints)})"
            for n in self.pool_nodes
            if n["metadata"]["name"] in nodes and (taints := dra.untolerated(pod, n))
        ]
        if not found:
            return ""
        toleration = taint_words(dra.POOL_TOLERATION)
        return (
            "The pod does not tolerate the taints of the node its GPU claims are allocated on: "
            f"{'; '.join(found)}. NVKE keeps its gate: kube-scheduler would find no node for it and clear "
            f"the allocation. Pods in a namespace NVKE manages get the toleration {toleration} from NVKE's "
            "admission."
        )

    def _reserve(self, pod: dict, name: str) -> bool:
        """Add the pod to its claim's `reservedFor`, as a scheduler does before binding (the kubelet starts
        no pod a claim is not reserved for); False when the claim changed or went meanwhile."""
        meta = pod["metadata"]
        try:
            rc = read(self.resource.read_namespaced_resource_claim, name, meta["namespace"])
            reserved = (rc.get("status") or {}).get("reservedFor") or []
            if any(r.get("uid") == meta["uid"] for r in reserved):
                return True
            entry = {"resource": "pods", "name": meta["name"], "uid": meta["uid"]}
            body = {
                "metadata": {"resourceVersion": rc["metadata"]["resourceVersion"]},
                "status": {"reservedFor": [*reserved, entry]},
            }
            call(
                self.resource.patch_namespaced_resource_claim_status,
                name,
                meta["namespace"],
                body,
                _content_type=MERGE,
            )
        except ProviderError as error:
            if error.status not in (404, 409):
                raise
            return False
        return True

    # --- events -------------------------------------------------------------------------------------

    def _say(self, obj: dict, kind: str, reason: str, message: str) -> None:
        """An Event on `obj`, unless it is what NVKE said last on it (kept in its annotation)."""
        meta = obj["metadata"]
        said = f"{reason}: {message}"
        if (meta.get("annotations") or {}).get(REASON) == said:
            return
        record_event(self.core, obj, kind, reason, message)
        patch = {"metadata": {"annotations": {REASON: said}}}
        method = (
            self.core.patch_namespaced_pod
            if obj["kind"] == "Pod"
            else self.resource.patch_namespaced_resource_claim
        )
        try:
            call(method, meta["name"], meta["namespace"], patch, _content_type=MERGE)
        except ProviderError as error:
            if error.status != 404:
                raise


KINDS = {"Pod": "v1", "ResourceClaim": dra.GROUP_VERSION}


def listed(body: dict, kind: str) -> list[dict]:
    """A list's items with their kind and apiVersion, which the API leaves out of list items."""
    return [{**item, "apiVersion": KINDS[kind], "kind": kind} for item in body["items"]]


def claim_names(pod: dict) -> list[str]:
    """The ResourceClaims a pod uses: named ones, and those generated from its templates (which the
    resource claim controller lists in the pod's status)."""
    statuses = pod.get("status", {}).get("resourceClaimStatuses") or []
    generated = {s["name"]: s.get("resourceClaimName") for s in statuses}
    names = []
    for ref in pod.get("spec", {}).get("resourceClaims") or []:
        name = ref.get("resourceClaimName") or generated.get(ref["name"])
        if name:
            names.append(name)
    return names


def other_drivers_only(pod: dict, names: list[str], existing: dict) -> bool:
    """Whether every ResourceClaim of the pod exists (templates' generated) and none asks an NVIDIA
    DeviceClass. `names`: claim_names(pod); `existing`: the ResourceClaims by (namespace, name)."""
    namespace = pod["metadata"]["namespace"]
    found = [existing.get((namespace, name)) for name in names]
    return (
        len(names) == len(pod["spec"].get("resourceClaims") or [])
        and bool(found)
        and all(rc is not None and not dra.asks_nvidia_gpus(rc) for rc in found)
    )


def held(namespace: str, names: list[str], claims: dict) -> dict[str, str]:
    """A DRA pod's annotations: what each of its claims holds, claim after claim (separated by ";")."""
    joined: dict[str, str] = {}
    for name in names:
        for key, value in annotations(claims[(namespace, name)]).items():
            joined[key] = f"{joined[key]};{value}" if key in joined else value
    return joined


def gated(pod: dict) -> bool:
    return any(g["name"] == dra.GATE for g in pod.get("spec", {}).get("schedulingGates") or [])


def allocated_by_nvke(rc: dict) -> bool:
    """Whether NVKE wrote the claim's allocation: it sets its finalizer before it allocates."""
    return dra.FINALIZER in (rc["metadata"].get("finalizers") or [])


def taint_words(taint: dict) -> str:
    value = f"={taint['value']}" if taint.get("value") else ""
    return f"{taint['key']}{value}:{taint['effect']}"


def results_of(rc: dict) -> list[dict]:
    """The devices a ResourceClaim's allocation holds (none when unallocated)."""
    allocation = (rc.get("status") or {}).get("allocation") or {}
    return allocation.get("devices", {}).get("results") or []


def describe(claim: WorkloadClaim, results: list[dict]) -> str:
    devices = ", ".join(r["device"] for r in results)
    text = f"NVKE allocated {devices} on node {claim.node}"
    if claim.kind == "fraction":
        text += f": {fraction_words(claim)} ({claim.sharing_mode}, isolation {claim.isolation})"
    return text + "."


def record_event(core, obj: dict, kind: str, reason: str, message: str) -> None:
    """A core/v1 Event about `obj` from NVKE, as `kubectl describe` shows it."""
    meta = obj["metadata"]
    stamp = now().strftime("%Y-%m-%dT%H:%M:%SZ")
    digest = hashlib.sha1(f"{meta.get('uid')}{reason}{message}{stamp}".encode()).hexdigest()[:10]
    body = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{meta['name']}.{digest}", "namespace": meta["namespace"]},
        "involvedObject": {
            "apiVersion": obj["apiVersion"],
            "kind": obj["kind"],
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta.get("uid", ""),
            "resourceVersion": meta.get("resourceVersion", ""),
        },
        "reason": reason,
        "message": message[:1024],
        "type": kind,
        "source": {"component": "nvke"},
        "reportingComponent": "nvke.io/allocator",
        "reportingInstance": "nvke",
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }
    try:
        call(core.create_namespaced_event, meta["namespace"], body)
    except ProviderError as error:  # an event is worth a log line, never a failed pass
        log.warning("event %s on %s/%s not recorded: %s", reason, meta["namespace"], meta["name"], error)
