"""Which pod an Allocate is for, and what its container is started with. Pure: pods in, a Grant out.

The kubelet's Allocate names only device IDs (share slots), never the pod. NVKE's scheduler annotates a
pod with what it holds *before* binding it, so every pod on this node that the kubelet may be admitting
is visible with its answer. A container asking for `count` slots is matched to the pods bound here that
the kubelet has not admitted yet (no container status) and that this plugin has not answered for:
- one such pod asks for `count` slots: it is that pod;
- several do, and each would get the very same answer (same GPU, limits and environment): they are
  interchangeable, so the oldest is recorded and nothing can be wrong;
- several do with different answers: the plugin cannot tell them apart and refuses (Ambiguous) rather
  than guess. NVKE's scheduler does not bind a pod while a pod it could not be told from (`ahead`)
  waits for the kubelet on that node, so in a cluster NVKE schedules this is not met.
Callers serialise resolve-and-record (one lock), so two concurrent Allocates never take the same pod."""

from dataclasses import dataclass

from nvke.quantity import parse_mib

from . import mps

RESOURCE = "nvke.io/gpu-share"
# The annotations NVKE's scheduler writes (nvke/providers/kubernetes/scheduler.py; a test keeps them equal).
UUIDS, MEMORY, CEILING, ISOLATION = (
    "nvke.io/gpu-uuids",
    "nvke.io/gpu-memory",
    "nvke.io/gpu-utilization",
    "nvke.io/isolation",
)
ENV_PREFIX = "nvke.io/env."
SLOT_SEPARATOR = "::"


class NoPod(Exception):
    """No pod on this node waits for an Allocate of that many slots."""


class Ambiguous(Exception):
    """Several pods wait for an Allocate of that many slots with different answers."""


@dataclass(frozen=True)
class Grant:
    """What one container is started with."""

    pod: str  # namespace/name
    uid: str
    envs: tuple[tuple[str, str], ...]
    mounts: tuple[tuple[str, str], ...] = ()  # (host path, container path)

    def answer(self) -> tuple:
        return self.envs, self.mounts


def slot_id(uuid: str, slot: int) -> str:
    return f"{uuid}{SLOT_SEPARATOR}{slot}"


def slot_gpu(device_id: str) -> str:
    return device_id.split(SLOT_SEPARATOR, 1)[0]


def slots_asked(pod: dict) -> int:
    """How many share slots the pod's one GPU container asks for (0: none)."""
    for container in pod.get("spec", {}).get("containers") or []:
        resources = container.get("resources") or {}
        asked = {**(resources.get("requests") or {}), **(resources.get("limits") or {})}.get(RESOURCE)
        if asked is not None:
            return int(asked)
    return 0


def waiting(pod: dict, answered: set[str]) -> bool:
    """Bound here and annotated by NVKE, not yet admitted by the kubelet nor answered by this plugin."""
    meta, status = pod["metadata"], pod.get("status") or {}
    return (
        UUIDS in (meta.get("annotations") or {})
        and meta.get("uid") not in answered
        and not meta.get("deletionTimestamp")
        and status.get("phase", "Pending") == "Pending"
        and not status.get("containerStatuses")
    )


def grant(pod: dict, pipe_directory) -> Grant:
    """The answer for the pod's GPU container. `pipe_directory(uuid)`: the MPS pipe directory of a GPU."""
    meta = pod["metadata"]
    held = meta.get("annotations") or {}
    uuids = [u for u in held[UUIDS].split(",") if u]
    envs = {"NVIDIA_VISIBLE_DEVICES": ",".join(uuids)}
    # HAMi-core's names (Project-HAMi/HAMi-core README): an interposed limiter in the container honours
    # them; NVKE_* say the same for anything else.
    memory = held.get(MEMORY, "").split(",")[0]
    if memory:
        envs["CUDA_DEVICE_MEMORY_LIMIT"] = f"{parse_mib(memory)}m"
        envs["NVKE_GPU_MEMORY_LIMIT_MIB"] = str(parse_mib(memory))
    ceiling = held.get(CEILING, "").split(",")[0]
    if ceiling:
        envs["CUDA_DEVICE_SM_LIMIT"] = ceiling
        envs["NVKE_GPU_COMPUTE_PERCENT"] = ceiling
    envs.update({k.removeprefix(ENV_PREFIX): v for k, v in held.items() if k.startswith(ENV_PREFIX)})
    mounts = ()
    if any(name.startswith("CUDA_MPS_") for name in envs):  # an MPS pool: its daemon's pipes and memory
        pipes = pipe_directory(uuids[0])
        envs["CUDA_MPS_PIPE_DIRECTORY"] = pipes
        mounts = ((pipes, pipes), (mps.SHM, mps.SHM_MOUNT))
    return Grant(
        f"{meta['namespace']}/{meta['name']}", meta.get("uid", ""), tuple(sorted(envs.items())), mounts
    )


def resolve(pods: list[dict], count: int, answered: set[str], pipe_directory) -> Grant:
    """The Grant for a container asking `count` slots on this node (see the module's docstring)."""
    candidates = [p for p in pods if waiting(p, answered) and slots_asked(p) == count]
    if not candidates:
        raise NoPod(
            f"No pod bound to this node by NVKE waits for {count} {RESOURCE}: was it scheduled with "
            "schedulerName: nvke?"
        )
    grants = [grant(p, pipe_directory) for p in candidates]
    if len({g.answer() for g in grants}) > 1:
        names = ", ".join(sorted(g.pod for g in grants))
        raise Ambiguous(f"Pods {names} all wait for {count} {RESOURCE} with different GPUs or limits.")
    oldest = min(
        zip(candidates, grants, strict=True),
        key=lambda pair: (pair[0]["metadata"].get("creationTimestamp") or "", pair[1].pod),
    )
    return oldest[1]


def bound(pod: dict, node: str, held: dict[str, str]) -> dict:
    """The pod as binding it to `node` with NVKE's annotations `held` leaves it."""
    meta = {**pod["metadata"], "annotations": {**(pod["metadata"].get("annotations") or {}), **held}}
    return {**pod, "metadata": meta, "spec": {**pod.get("spec", {}), "nodeName": node}}


def ahead(pod: dict, node: str, held: dict[str, str], unadmitted: list[dict]) -> str:
    """The first of `unadmitted` (pods the kubelet has not admitted) on `node` that an Allocate could not
    tell from `pod` bound there with `held` (as many slots, another answer), or ""."""
    if not slots_asked(pod):
        return ""  # no slot asked: the device plugin never answers for it
    wanted = grant(bound(pod, node, held), str).answer()
    for other in unadmitted:
        same_slots = slots_asked(other) == slots_asked(pod)
        if other["spec"].get("nodeName") == node and same_slots and grant(other, str).answer() != wanted:
            return f"{other['metadata']['namespace']}/{other['metadata']['name']}"
    return ""
