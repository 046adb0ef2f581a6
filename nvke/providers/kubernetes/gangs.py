"""Pods that belong together (a gang) become one NVKE claim group, on both Kubernetes paths.

A pod names its gang the way the ecosystem does:
- Kubernetes' own Workload API (KEP-4671/KEP-5832, scheduling.k8s.io/v1alpha2, served from 1.36 where the
  GenericWorkload gate and the API group are on): the pod's `spec.schedulingGroup.podGroupName` names a
  PodGroup whose `spec.schedulingPolicy.gang.minCount` is the minimum (a `basic` policy is no gang).
  1.35's v1alpha1 (`spec.workloadRef`) was replaced by it and is not read.
- scheduler-plugins' coscheduling (any minor): the label `scheduling.x-k8s.io/pod-group` names a PodGroup
  (scheduling.x-k8s.io/v1alpha1) whose `spec.minMember` is the minimum; where that CRD is not installed
  (or the object is missing) NVKE's label `nvke.io/min-member` on the pods gives it instead.

The pods' requests are adopted as the members of one claim group named after the gang (claims.workloads);
the allocator places at least the minimum of them at once or none. NVKE keeps every member's scheduling
gate (DRA) or binding (scheduler path) until at least the minimum of the gang's pods have their GPUs,
then releases them in the same pass; until then each says why, naming the gang and what it lacks."""

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from nvke.providers.base import FoundWorkload, ProviderError, WorkloadClaim, WorkloadState

from .client import read

POD_GROUP_LABEL = (
    "scheduling.x-k8s.io/pod-group"  # kubernetes-sigs/scheduler-plugins apis/scheduling/v1alpha1
)
MIN_MEMBER_LABEL = "nvke.io/min-member"  # NVKE's half of the label pair where no PodGroup CRD serves
GROUP_ANNOTATION = "nvke.io/claim-group"  # on a placed pod: the claim group it is a member of
PREEMPTED_ANNOTATION = "nvke.io/preempted-by"  # on a placed pod: the claim that last took its GPUs
COSCHEDULING = ("scheduling.x-k8s.io", "v1alpha1", "podgroups")
WORKLOAD_API = ("scheduling.k8s.io", "v1alpha2", "podgroups")
FINISHED = ("Succeeded", "Failed")


@dataclass(frozen=True)
class Gang:
    """A gang as its pods and PodGroup say it: `minimum` members at once; `problem` says why NVKE cannot
    place it yet (no PodGroup and no minimum label, a bad minimum)."""

    namespace: str
    name: str
    minimum: int = 0
    problem: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def key_of(obj: dict) -> tuple[str, str]:
    return obj["metadata"]["namespace"], obj["metadata"]["name"]


class Gangs:
    """The gangs of one pass: the PodGroups of both APIs the cluster serves, read once (a 404: the API or
    CRD is not served there, so none)."""

    def __init__(self, custom) -> None:
        self.workload = _pod_groups(custom, WORKLOAD_API)
        self.coscheduling = _pod_groups(custom, COSCHEDULING)

    def of(self, pod: dict) -> Gang | None:
        meta, spec = pod["metadata"], pod.get("spec") or {}
        namespace = meta["namespace"]
        if name := (spec.get("schedulingGroup") or {}).get("podGroupName"):
            group = self.workload.get((namespace, name))
            if group is None:
                return Gang(namespace, name, problem=f"Its PodGroup {namespace}/{name} does not exist (yet).")
            gang = ((group.get("spec") or {}).get("schedulingPolicy") or {}).get("gang")
            return Gang(namespace, name, int(gang["minCount"])) if gang else None
        labels = meta.get("labels") or {}
        if not (name := labels.get(POD_GROUP_LABEL)):
            return None
        if (group := self.coscheduling.get((namespace, name))) is not None:
            return Gang(namespace, name, max(1, int((group.get("spec") or {}).get("minMember") or 1)))
        wanted = labels.get(MIN_MEMBER_LABEL, "")
        if not wanted.isdigit() or int(wanted) < 1:
            problem = (
                f"Its pod group {namespace}/{name} has no PodGroup (scheduling.x-k8s.io/v1alpha1) and the "
                f"pod no {MIN_MEMBER_LABEL} label of a count from 1: NVKE does not know its minimum."
            )
            return Gang(namespace, name, problem=problem)
        return Gang(namespace, name, int(wanted))

    def tag(self, found: FoundWorkload, pod: dict | None) -> FoundWorkload:
        """A found request as a member of its pod's gang (refused with the gang's problem, if any)."""
        gang = self.of(pod) if pod else None
        if gang is None or found.refusal:
            return found
        if gang.problem:
            return replace(found, refusal=gang.problem)
        return replace(found, group=gang.name, group_min=gang.minimum)


def _pod_groups(custom, api: tuple[str, str, str]) -> dict[tuple[str, str], dict]:
    try:
        listed = read(custom.list_cluster_custom_object, *api)
    except ProviderError as error:
        if error.status == 404:
            return {}
        raise
    return {key_of(item): item for item in listed.get("items") or []}


def pods_by_claim(pods: Iterable[dict], names: Callable[[dict], list[str]]) -> dict[tuple[str, str], dict]:
    """(namespace, ResourceClaim name) -> the pod that uses it (the DRA path's requests are claims)."""
    return {(pod["metadata"]["namespace"], name): pod for pod in pods for name in names(pod)}


def held_back(
    gangs: Gangs,
    pods: Iterable[dict],
    has_gpus: Callable[[dict], bool],
    ready: Callable[[dict], bool],
    states: dict[tuple[str, str], WorkloadState],
) -> dict[tuple[str, str], str]:
    """The pods of gangs not yet placed, (namespace, pod name) -> why they wait: `has_gpus(pod)` (released
    already, its GPUs held) and `ready(pod)` (its GPUs are allocated, to be released now) count toward
    the minimum; below it, every pod of the gang waits. `states`: the pods' claims' states (their
    allocator reasons name what the group lacks)."""
    members: dict[Gang, list[dict]] = defaultdict(list)
    for pod in pods:
        if (gang := gangs.of(pod)) is not None:
            members[gang].append(pod)
    waiting = {}
    for gang, its_pods in members.items():
        placed = sum(1 for pod in its_pods if has_gpus(pod) or ready(pod))
        if not gang.problem and placed >= gang.minimum:
            continue
        why = gang.problem or (
            f"Pod group {gang.key} has {placed} of its minimum {gang.minimum} pods placed ({len(its_pods)} "
            "found): NVKE keeps every member waiting until the minimum can start together."
        )
        reasons = sorted({s.message for p in its_pods if (s := states.get(key_of(p))) and s.message})
        if reasons:
            why += f" {reasons[0]}"
        waiting.update({key_of(pod): why for pod in its_pods if not has_gpus(pod)})
    return waiting


def binding_holds(
    gangs: Gangs, pods: Iterable[dict], claims: Iterable[WorkloadClaim]
) -> dict[tuple[str, str], str]:
    """The scheduler path: which of NVKE's pending pods it must not bind yet, and why. A pod counts
    toward its gang's minimum when bound, or when its claim (named after it) is placed."""
    placed = {(c.namespace, c.name): c for c in claims}
    waiting = {
        key: WorkloadState(*key, "waiting", claim.pending_reason)
        for key, claim in placed.items()
        if not claim.node
    }
    return held_back(
        gangs,
        [pod for pod in pods if (pod.get("status") or {}).get("phase") not in FINISHED],
        has_gpus=lambda pod: bool((pod.get("spec") or {}).get("nodeName")),
        ready=lambda pod: bool((claim := placed.get(key_of(pod))) and claim.node),
        states=waiting,
    )


def gate_holds(
    gangs: Gangs,
    pods: Iterable[dict],
    states: Iterable[WorkloadState],
    names: Callable[[dict], list[str]],
    gated: Callable[[dict], bool],
    blocked: Callable[[dict], str],
) -> dict[tuple[str, str], str]:
    """The DRA path: which gated pods keep NVKE's gate for their gang, and why. A pod counts toward its
    gang's minimum when all its claims are allocated and it is released already, or would be now (gated,
    and nothing else, `blocked(pod)`'s taints say, holds it back)."""
    by_claim = {(s.namespace, s.name): s for s in states}

    def allocated(pod: dict) -> bool:
        namespace = pod["metadata"]["namespace"]
        found = [by_claim.get((namespace, name)) for name in names(pod)]
        return bool(found) and all(s is not None and s.state == "allocated" for s in found)

    def reason(pod: dict) -> WorkloadState | None:
        namespace = pod["metadata"]["namespace"]
        return next(
            (s for n in names(pod) if (s := by_claim.get((namespace, n))) and s.state != "allocated"), None
        )

    live = [pod for pod in pods if (pod.get("status") or {}).get("phase") not in FINISHED]
    return held_back(
        gangs,
        live,
        has_gpus=lambda pod: not gated(pod) and allocated(pod),
        ready=lambda pod: gated(pod) and allocated(pod) and not blocked(pod),
        states={key_of(pod): s for pod in live if (s := reason(pod))},
    )
