"""What Cluster API's status says, read the way its v1beta2 conditions are meant (pure): a cluster serves
once `ControlPlaneAvailable` is True; until then the first of its provisioning conditions that is not
True says what it waits for, and afterwards that condition is the control plane's health. A
MachineDeployment's pool has as many nodes as it has ready replicas. A control plane runs the lowest
version among its machines (`status.versions`), once its controller saw the latest spec."""

import re
from dataclasses import dataclass
from typing import Any

# In the order provisioning passes them, with NVKE's reason while each is not True yet.
CLUSTER_STEPS = (
    ("InfrastructureReady", "WaitingForInfrastructure", "The cluster's infrastructure is being provisioned."),
    ("ControlPlaneInitialized", "WaitingForControlPlane", "The control plane's first machine is starting."),
    ("ControlPlaneAvailable", "WaitingForControlPlane", "The control plane is not available yet."),
)


@dataclass(frozen=True)
class Progress:
    done: bool
    reason: str = ""
    message: str = ""


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in obj.get("status", {}).get("conditions") or [] if c.get("type") == kind), None)


def is_true(obj: dict[str, Any], kind: str) -> bool:
    return (condition(obj, kind) or {}).get("status") == "True"


def cluster_progress(cluster: dict[str, Any]) -> Progress:
    name = cluster["metadata"]["name"]
    if "deletionTimestamp" in cluster["metadata"]:
        return Progress(False, "Deleting", f"Cluster {name} is being deleted in the management cluster.")
    for kind, reason, default in CLUSTER_STEPS:
        if not is_true(cluster, kind):
            found = condition(cluster, kind) or {}
            detail = found.get("message") or default
            return Progress(
                False, reason, f"Cluster {name}: {kind} is {found.get('status', 'not reported')}: {detail}"
            )
    return Progress(True)


def ready_replicas(deployment: dict[str, Any]) -> int:
    return deployment.get("status", {}).get("readyReplicas") or 0


def deployment_message(deployment: dict[str, Any], wanted: int) -> str:
    name = deployment["metadata"]["name"]
    text = f"MachineDeployment {name}: {ready_replicas(deployment)} of {wanted} machines ready"
    available = condition(deployment, "Available") or {}
    if available.get("status") != "True" and available.get("message"):
        text += f" ({available['message']})"
    return text + "."


def control_plane_available(cluster: dict[str, Any] | None) -> tuple[bool, str, str]:
    """(available, reason, message) of a running cluster's control plane: Cluster API's own
    ControlPlaneAvailable condition, or why there is none."""
    if cluster is None:
        return False, "NotFound", "The cluster's Cluster object is gone from the management cluster."
    found = condition(cluster, "ControlPlaneAvailable")
    if found is None:
        return False, "NotReported", "Cluster API reports no ControlPlaneAvailable condition."
    message = found.get("message") or f"Cluster API reports the control plane {found['reason']}."
    return found["status"] == "True", found["reason"], message


def _numbers(release: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", release))


def control_plane_minor(control_plane: dict[str, Any]) -> str:
    """The Kubernetes minor (1.35) every machine of a KubeadmControlPlane runs: the lowest of v1beta2's
    `status.versions` (or the deprecated `status.version`); "" until its controller observed the
    current spec, or while it reports none."""
    status = control_plane.get("status") or {}
    if status.get("observedGeneration", 0) < control_plane["metadata"].get("generation", 0):
        return ""
    releases = [entry["version"] for entry in status.get("versions") or [] if entry.get("version")]
    releases = releases or ([status["version"]] if status.get("version") else [])
    if not releases:
        return ""
    lowest = min(releases, key=_numbers)
    major, minor, *_ = _numbers(lowest) + (0, 0)
    return f"{major}.{minor}"


def release_state(release: dict[str, Any] | None) -> tuple[str, str]:
    """(state, message) of a chart on a cluster from its HelmReleaseProxy: "installed" once its Ready
    condition is True, "failed" once Helm's install or upgrade failed (CAAPH keeps retrying: the state
    follows), else "installing"."""
    if release is None:
        return "installing", "Cluster API's add-on provider has not made its HelmReleaseProxy yet."
    name = release["metadata"]["name"]
    ready = condition(release, "Ready") or {}
    if ready.get("status") == "True":
        return "installed", ""
    helm = release.get("status", {}).get("status") or "not released"
    detail = ready.get("message") or f"Helm release {helm}."
    if ready.get("reason") == "HelmInstallOrUpgradeFailed" or helm == "failed":
        return "failed", f"HelmReleaseProxy {name}: {detail}"
    return "installing", f"HelmReleaseProxy {name}: {detail}"
