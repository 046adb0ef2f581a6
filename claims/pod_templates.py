"""How a workload uses a claim, as a pod to copy. Where the cluster serves DRA (and on a simulated
cluster, whose attached twin would), the pod references the claim's ResourceClaim and waits on NVKE's
scheduling gate; without DRA a pod cannot use a claim made elsewhere: it asks for the same with
`schedulerName: nvke` and becomes its own claim; a fraction's container also holds one slot of NVKE's
device plugin (`nvke.io/gpu-share`), through which its GPU and limits reach it. Either way it
tolerates NVKE's pool taint, as NVKE's admission policies require in a managed namespace."""

import yaml

from claims.models import Claim
from nvke.providers.kubernetes import admission, dra, scheduler
from nvke.quantity import format_mib

IMAGE = "nvcr.io/nvidia/pytorch:25.01-py3"


def serves_dra(claim: Claim) -> bool:
    cluster = claim.cluster
    return not cluster.attached or bool(cluster.observed.get("features", {}).get("dra"))


def pod_template(claim: Claim) -> str:
    """A pod that runs on what the claim holds (see the module's docstring), as YAML."""
    container: dict = {"name": "main", "image": IMAGE}
    spec: dict = {}
    if serves_dra(claim):
        spec["schedulingGates"] = [{"name": dra.GATE}]
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim.name}]
        container["resources"] = {"claims": [{"name": "gpu"}]}
    else:
        spec["schedulerName"] = scheduler.SCHEDULER
        container["resources"] = {"limits": limits(claim)}
    spec["tolerations"] = [admission.TOLERATION]  # NVKE's pool taint; its admission asks for it
    spec["containers"] = [container]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{claim.name}-worker", "namespace": claim.namespace},
        "spec": spec,
    }
    return yaml.safe_dump(pod, sort_keys=False)


def limits(claim: Claim) -> dict[str, str]:
    """The claim's request in the limits NVKE's scheduler reads."""
    if claim.kind == Claim.Kind.WHOLE:
        return {scheduler.WHOLE: str(claim.gpus)}
    if claim.kind == Claim.Kind.MIG:
        return {f"nvidia.com/mig-{claim.mig_profile}": "1"}
    asked = {}
    if claim.gpu_memory_mib:
        asked[scheduler.MEMORY] = format_mib(claim.gpu_memory_mib)
    if claim.compute_percent:
        asked[scheduler.COMPUTE] = str(claim.compute_percent)
    return {**asked, admission.SLOT: "1"}
