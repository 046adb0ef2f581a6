"""NVKE as the scheduler of pods that set `schedulerName: nvke` (clusters without DRA, or pods written the
device-plugin way). A pending pod in a namespace NVKE manages is read as a request from its containers'
limits — `nvidia.com/gpu: N` (whole GPUs), `nvidia.com/mig-<profile>: 1` (a MIG slice), or
`nvidia.com/gpu-memory: 4Gi` and/or `nvidia.com/gpu-utilization: 50` (a fraction: memory and the compute
ceiling in percent; a quantity cannot carry "%") — and adopted as a claim named after the pod, with the
priority of its `nvke.io/priority` annotation. Once the
allocator has placed it, the pod is annotated with what it holds (GPU UUIDs, memory, compute ceiling and
guarantee, isolation, and on MPS pools the MPS limits) and bound through `pods/binding`, once its node
will take it as the kubelet checks (fit.py); a pod that cannot be placed or does not fit gets a
`FailedScheduling` Event with the reason. A pod the kubelet refused anyway releases its claim, and no
pod of the same owner is bound to that node for a while, so a controller's replacements do not loop.
A pod whose claim the allocator moved or took back (a drain, a failed GPU, a defrag) is evicted through
the Eviction API, so its PodDisruptionBudget holds; its controller makes a new pod, which NVKE places. A
pod that finished or was deleted releases its claim.

Only the node choice is enforced by Kubernetes here: the GPU, memory and compute in the annotations
hold only where a node component honours them (see docs/operations.md)."""

import datetime
import re

from kubernetes import client

from nvke import quantity
from nvke.agent import allocation
from nvke.providers.base import FoundWorkload, ProviderError, WorkloadClaim, WorkloadState

from . import dra, fit, gangs
from .client import call

SCHEDULER = "nvke"
MERGE = "application/merge-patch+json"
WHOLE, MEMORY, COMPUTE = "nvidia.com/gpu", "nvidia.com/gpu-memory", "nvidia.com/gpu-utilization"
MIG = re.compile(r"nvidia\.com/mig-(\d+g\.\d+gb)")
ANNOTATIONS = {
    "uuids": "nvke.io/gpu-uuids",
    "memory": "nvke.io/gpu-memory",
    "ceiling": "nvke.io/gpu-utilization",
    "guaranteed": "nvke.io/gpu-guaranteed",
    "isolation": "nvke.io/isolation",
}
FINISHED = ("Succeeded", "Failed")


def found_pod(pod: dict) -> FoundWorkload:
    """A pending pod's GPU request, from the sum of its containers' limits (requests where no limit)."""
    meta = pod["metadata"]
    found = FoundWorkload(namespace=meta["namespace"], name=meta["name"], source="pod")
    try:
        found = FoundWorkload(**{**found.__dict__, "priority": dra.priority(meta)})
    except ValueError as error:
        return _refused(found, str(error))
    asked: dict[str, str] = {}
    for container in pod.get("spec", {}).get("containers") or []:
        resources = container.get("resources") or {}
        for key, value in {**(resources.get("requests") or {}), **(resources.get("limits") or {})}.items():
            if key.startswith("nvidia.com/"):
                if key in asked:
                    return _refused(found, f"Only one container may ask for {key}.")
                asked[key] = str(value)
    migs = [(MIG.fullmatch(key), value) for key, value in asked.items() if MIG.fullmatch(key)]
    fraction = {k: v for k, v in asked.items() if k in (MEMORY, COMPUTE)}
    if sum(map(bool, (WHOLE in asked, migs, fraction))) != 1:
        return _refused(
            found, f"Ask for one of {WHOLE}, nvidia.com/mig-<profile>, or {MEMORY} and/or {COMPUTE}."
        )
    try:
        if WHOLE in asked:
            return FoundWorkload(**{**found.__dict__, "kind": "whole", "gpus": int(asked[WHOLE])})
        if migs:
            (match, count), *rest = migs
            if rest or int(count) != 1:
                return _refused(found, "A pod takes one MIG slice.")
            return FoundWorkload(**{**found.__dict__, "kind": "mig", "mig_profile": match.group(1)})
        memory = quantity.parse_mib(fraction[MEMORY]) if MEMORY in fraction else None
        compute = int(fraction[COMPUTE].rstrip("%")) if COMPUTE in fraction else None
    except ValueError as error:
        return _refused(found, f"Cannot read the pod's GPU request: {error}")
    return FoundWorkload(
        **{**found.__dict__, "kind": "fraction", "gpu_memory_mib": memory, "compute_percent": compute}
    )


def _refused(found: FoundWorkload, why: str) -> FoundWorkload:
    return FoundWorkload(**{**found.__dict__, "refusal": why})


def annotations(claim: WorkloadClaim) -> dict[str, str]:
    """What a bound pod carries: its GPUs and what it may use of them."""
    shares = claim.shares
    held = {
        ANNOTATIONS["uuids"]: uuids(claim),
        ANNOTATIONS["memory"]: ",".join(quantity.format_mib(share.memory_mib) for share in shares),
        ANNOTATIONS["ceiling"]: ",".join(str(share.ceiling_percent) for share in shares),
        ANNOTATIONS["guaranteed"]: ",".join(str(share.guaranteed_percent) for share in shares),
        ANNOTATIONS["isolation"]: claim.isolation,
    }
    held.update({f"nvke.io/env.{name}": value for name, value in claim.environment})
    if claim.group:  # the gang it belongs to, and who last preempted it (claims.allocator.preemption)
        held[gangs.GROUP_ANNOTATION] = claim.group
    if claim.preempted_by:
        held[gangs.PREEMPTED_ANNOTATION] = claim.preempted_by
    return held


class PodScheduler:
    """One pass over the pods that name NVKE as their scheduler. `say(obj, kind, reason, message)`
    records an Event on a pod once per change."""

    def __init__(self, ops, say, managed: set[str], nodes: list[dict] | None = None):
        self.ops, self.core, self.say, self.managed = ops, ops.core, say, managed
        self.nodes = {n["metadata"]["name"]: n for n in nodes or []}  # NVKE's pool nodes, as listed
        self.held: dict[tuple[str, str], str] = {}  # pods of gangs below their minimum: not bound yet, why

    def run(
        self, claims: list[WorkloadClaim], pods: list[dict], refused: dict[tuple[str, str], str]
    ) -> tuple[list[WorkloadState], list[FoundWorkload]]:
        mine = {
            (p["metadata"]["namespace"], p["metadata"]["name"]): p
            for p in pods
            if p.get("spec", {}).get("schedulerName") == SCHEDULER
        }
        self.unadmitted = [p for p in mine.values() if allocation.waiting(p, set())]  # + those bound now
        self.bound: dict[str, list[dict]] = {}  # active pods by node (+ those bound now), for the fit
        for pod in pods:
            if (node := pod.get("spec", {}).get("nodeName")) and fit.active(pod):
                self.bound.setdefault(node, []).append(pod)
        self.refusals = fit.refusals(pods, self.nodes, datetime.datetime.now(datetime.UTC))
        states = [self._claim(claim, mine.get((claim.namespace, claim.name))) for claim in claims]
        known = {(c.namespace, c.name) for c in claims}
        found = []
        for key, pod in mine.items():
            if key in known or not self._adoptable(pod):
                continue
            found.append(found_pod(pod))
            if why := found[-1].refusal or refused.get(key):
                self.say(pod, "Warning", "FailedScheduling", why)
        return states, found

    def _adoptable(self, pod: dict) -> bool:
        meta, spec = pod["metadata"], pod.get("spec", {})
        return (
            meta["namespace"] in self.managed
            and not spec.get("nodeName")
            and not meta.get("deletionTimestamp")
            and pod.get("status", {}).get("phase") not in FINISHED
        )

    def _claim(self, claim: WorkloadClaim, pod: dict | None) -> WorkloadState:
        state = lambda kind, message="": WorkloadState(claim.namespace, claim.name, kind, message)  # noqa: E731
        if pod is not None and fit.refused_by_kubelet(pod):
            return state("gone", self._refused(pod))
        if (
            pod is None
            or pod["metadata"].get("deletionTimestamp")
            or pod.get("status", {}).get("phase") in FINISHED
        ):
            return state("gone", "The pod finished or was deleted.")
        bound = pod.get("spec", {}).get("nodeName")
        held = pod["metadata"].get("annotations") or {}
        if bound and (bound != claim.node or held.get(ANNOTATIONS["uuids"]) != uuids(claim)):
            # moved (another node or GPU) or taken back: its controller makes it again, NVKE places that
            evict(self.core, self.say, pod, *moved(claim, f"{held.get(ANNOTATIONS['uuids'])} on {bound}"))
            return state("waiting", f"Evicted from node {bound}: its GPU claim was moved or taken back.")
        if bound:
            refresh(self.core, self.say, pod, annotations(claim))
            return state("allocated")
        if why := self.held.get((claim.namespace, claim.name)):
            self.say(pod, "Warning", "FailedScheduling", why)
            return state("waiting", why)
        if not claim.node:
            self.say(pod, "Warning", "FailedScheduling", claim.pending_reason or "Waiting for NVKE.")
            return state("waiting", claim.pending_reason)
        if ahead := allocation.ahead(pod, claim.node, annotations(claim), self.unadmitted):
            return state("waiting", f"Waiting for the kubelet on {claim.node} to admit {ahead} first.")
        if why := self._unfit(pod, claim):
            self.say(pod, "Warning", "FailedScheduling", why)
            return state("waiting", why)
        meta = pod["metadata"]
        patch = {"metadata": {"resourceVersion": meta["resourceVersion"], "annotations": annotations(claim)}}
        try:
            call(self.core.patch_namespaced_pod, meta["name"], meta["namespace"], patch, _content_type=MERGE)
            binding = client.V1Binding(
                metadata=client.V1ObjectMeta(name=meta["name"], namespace=meta["namespace"]),
                target=client.V1ObjectReference(api_version="v1", kind="Node", name=claim.node),
            )
            call(
                self.core.create_namespaced_pod_binding,
                meta["name"],
                meta["namespace"],
                binding,
                _preload_content=False,
            )
        except ProviderError as error:
            if error.status in (404, 409):  # gone, changed or bound meanwhile: the next pass sees it
                return state("waiting", error.message)
            raise
        self.unadmitted.append(allocation.bound(pod, claim.node, annotations(claim)))
        self.bound.setdefault(claim.node, []).append(pod)
        devices = ", ".join(f"GPU {share.index}" for share in claim.shares)
        self.say(
            pod,
            "Normal",
            "Scheduled",
            f"Successfully assigned {meta['namespace']}/{meta['name']} to {claim.node} ({devices}).",
        )
        return state("allocated")

    def _unfit(self, pod: dict, claim: WorkloadClaim) -> str:
        """Why the kubelet of the node holding the pod's claim would refuse the pod now, or has refused
        its predecessor lately (the pod then waits, its claim held there, rather than fail in a loop)."""
        where = holding(claim)
        if refused := self.refusals.get(fit.owner(pod), {}).get(claim.node):
            return (
                f"NVKE placed its GPU claim on {where}, but the kubelet there refused {refused}: NVKE "
                f"binds no pod of the same owner to {claim.node} for {fit.HOLD_S // 60} minutes after that, "
                "or until the node changes."
            )
        node = self.nodes.get(claim.node)
        if node is None:
            return ""  # not listed as NVKE's (a test's partial view): the kubelet is the judge
        if why := fit.misfit(pod, node, self.bound.get(claim.node, [])):
            return f"NVKE placed its GPU claim on {where}, but the node cannot take the pod: {why}."
        return ""

    def _refused(self, pod: dict) -> str:
        """The claim of a pod the kubelet refused is released; the pod says so and records its node's
        state, and its replacement is kept off that node for a while or until the node changes
        (`_unfit`)."""
        meta, status, node = pod["metadata"], pod["status"], pod["spec"].get("nodeName", "its node")
        message = (
            f"The kubelet on {node} refused the pod ({status['reason']}: {status.get('message', '')}); "
            f"NVKE released its GPU claim and binds no pod of the same owner to {node} for "
            f"{fit.HOLD_S // 60} minutes, or until the node changes."
        )
        if node in self.nodes and fit.NODE_STATE not in (meta.get("annotations") or {}):
            seen = {"metadata": {"annotations": {fit.NODE_STATE: fit.node_state(self.nodes[node])}}}
            try:
                call(
                    self.core.patch_namespaced_pod, meta["name"], meta["namespace"], seen, _content_type=MERGE
                )
            except ProviderError as error:
                if error.status != 404:  # gone: nothing to remember it by
                    raise
        self.say(pod, "Warning", "GPUClaimReleased", message)
        return message


def uuids(claim: WorkloadClaim) -> str:
    return ",".join(share.uuid for share in claim.shares)


def share_words(memory: str, guaranteed: object, ceiling: object) -> str:
    """A fraction's share as NVKE's events say it: "8Gi of GPU memory, compute 10% guaranteed up to 40%"."""
    return f"{memory} of GPU memory, compute {guaranteed}% guaranteed up to {ceiling}%"


def fraction_words(claim: WorkloadClaim) -> str:
    share = claim.shares[0]
    return share_words(quantity.format_mib(share.memory_mib), share.guaranteed_percent, share.ceiling_percent)


def holding(claim: WorkloadClaim) -> str:
    """What a placed claim holds, in words: its GPUs and node, and for a fraction memory and compute."""
    text = f"{uuids(claim)} on node {claim.node}"
    return text + (f" ({fraction_words(claim)})" if claim.kind == "fraction" else "")


def moved(claim: WorkloadClaim, was: str) -> tuple[str, str]:
    """The event (reason, message) for a pod evicted because its claim left `was` (GPUs on a node)."""
    if claim.node:
        return "Moved", f"NVKE moved its GPU claim from {was} to {holding(claim)}: the pod is evicted."
    why = claim.pending_reason or "waiting for GPUs"
    return "TakenBack", f"NVKE took its GPU claim back from {was} ({why}): the pod is evicted."


def refresh(core, say, pod: dict, wanted: dict[str, str]) -> None:
    """A running pod whose claim was resized on the same GPUs: its annotations say the new memory and
    compute, and a Resized event says so (a node component honouring them applies it). Its group and
    its preemptor (told during a grace period) are brought up to date the same way, silently."""
    meta = pod["metadata"]
    held = meta.get("annotations") or {}
    if held.get(ANNOTATIONS["uuids"]) != wanted[ANNOTATIONS["uuids"]]:
        return  # not yet annotated, or moved: eviction is the way there
    if all(held.get(key) == value for key, value in wanted.items()):
        return
    patch = {"metadata": {"resourceVersion": meta["resourceVersion"], "annotations": wanted}}
    try:
        call(core.patch_namespaced_pod, meta["name"], meta["namespace"], patch, _content_type=MERGE)
    except ProviderError as error:
        if error.status in (404, 409):  # gone or changed: the next pass sees it as it is
            return
        raise
    if all(held.get(ANNOTATIONS[k]) == wanted[ANNOTATIONS[k]] for k in ("memory", "ceiling", "guaranteed")):
        return  # only its group or preemptor was written: nothing was resized
    memory, guaranteed = wanted[ANNOTATIONS["memory"]], wanted[ANNOTATIONS["guaranteed"]]
    share = share_words(memory, guaranteed, wanted[ANNOTATIONS["ceiling"]])
    say(pod, "Normal", "Resized", f"NVKE resized its GPU claim: {share}.")


def evict(core, say, pod: dict, reason: str, message: str) -> None:
    """Evict a pod whose GPUs were moved or taken back, through the Eviction API so its budget holds,
    and say `reason`/`message` on it (a 429 is said as EvictionBlocked; the next pass asks again). Only
    that pod: the UID precondition spares a new pod of the same name."""
    meta = pod["metadata"]
    eviction = client.V1Eviction(
        api_version="policy/v1",
        kind="Eviction",
        metadata=client.V1ObjectMeta(name=meta["name"], namespace=meta["namespace"]),
        delete_options=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=meta.get("uid"))),
    )
    try:
        call(core.create_namespaced_pod_eviction, meta["name"], meta["namespace"], eviction)
    except ProviderError as error:
        if error.status == 429:
            say(pod, "Warning", "EvictionBlocked", f"{message} Held back: {error.message}")
        elif error.status not in (404, 409):  # gone, or another pod of that name now
            raise
        return
    say(pod, "Normal" if reason == "Moved" else "Warning", reason, message)
