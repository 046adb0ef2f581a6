"""What a placed fractional claim's workload should be started with: vLLM's memory fraction, the MPS
environment on MPS pools, and the pod resources to copy."""

import math

from catalog.models import SharingMode
from claims.models import Allocation, Claim
from nvke.quantity import format_mib, human_mib

VLLM_DOCS = "https://docs.vllm.ai/en/latest/configuration/engine_args.html"


def sizing_hints(claim: Claim, allocation: Allocation | None) -> dict | None:
    """Hints for a placed fraction (None for other claims, or before it is placed). Reads the
    allocation's node, pool, GPU model and shares: select and prefetch them."""
    if claim.kind != Claim.Kind.FRACTION or allocation is None:
        return None
    pool = allocation.node.pool
    return fraction_hints(
        allocation.memory_mib, allocation.compute_milli, pool.gpu_model.memory_mib, pool.sharing_mode
    )


def fraction_hints(memory_mib: int, ceiling_milli: int, card_mib: int, sharing_mode: str) -> dict:
    """The hints of a fraction holding `memory_mib` and a compute ceiling of `ceiling_milli` on a card
    of `card_mib` in a pool of `sharing_mode`."""
    ceiling = ceiling_milli // 10
    hints: dict = {"pod_resources": _pod_resources(memory_mib, ceiling)}
    if memory_mib and card_mib:
        # vLLM sizes its whole instance (weights, KV cache, activations, CUDA context) as this fraction of
        # the card; rounding down keeps it inside the claim.
        utilization = math.floor(memory_mib / card_mib * 100) / 100
        hints["vllm_gpu_memory_utilization"] = utilization
        hints["vllm_explained"] = (
            f"--gpu-memory-utilization {utilization:.2f}: {utilization:.2f} of the card's "
            f"{human_mib(card_mib)} is {human_mib(math.floor(utilization * card_mib))}, within the claim's "
            f"{human_mib(memory_mib)}. vLLM counts everything its instance holds (weights, KV cache, "
            "activations and the CUDA context) against this fraction, so it is rounded down, never up; "
            f"see {VLLM_DOCS}."
        )
    if sharing_mode == SharingMode.MPS:
        hints["mps_environment"] = mps_environment(memory_mib, ceiling)
    return hints


def mps_environment(memory_mib: int, ceiling_percent: int) -> dict[str, str]:
    """The MPS client limits of a fraction: its compute ceiling as active threads, its memory pinned."""
    env = {}
    if ceiling_percent:
        env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(ceiling_percent)
    if memory_mib:
        env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = f"0={memory_mib}M"  # device 0: the one it is given
    return env


def _pod_resources(memory_mib: int, ceiling: int) -> str:
    """Limits for a pod that NVKE schedules (schedulerName: nvke); the compute ceiling is a plain number
    of percent, since a Kubernetes quantity cannot carry "%"."""
    limits = []
    if memory_mib:
        limits.append(f"    nvidia.com/gpu-memory: {format_mib(memory_mib)}")
    if ceiling:
        limits.append(f"    nvidia.com/gpu-utilization: {ceiling}")
    return "schedulerName: nvke\nresources:\n  limits:\n" + "\n".join(limits) + "\n"
