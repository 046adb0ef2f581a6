"""A GPU's document in `nodes/` built from its rows, apart from the code that writes it: what the
tests hold the API's bytes to."""

from claims.models import GpuShare
from nodepools.models import Gpu


def expected_gpu(gpu: Gpu) -> dict:
    shares = sorted(
        GpuShare.objects.filter(gpu=gpu).select_related("allocation__claim"),
        key=lambda s: (s.mig_start is None, s.mig_start or 0, s.pk),
    )
    return {
        "index": gpu.index,
        "uuid": str(gpu.uuid),
        "memory_mib": gpu.memory_mib,
        "nvlink_domain": gpu.nvlink_domain,
        "healthy": gpu.healthy,
        "memory_allocated_mib": sum(s.memory_mib for s in shares),
        "compute_allocated_percent": sum(s.guaranteed_milli for s in shares) / 10,
        "compute_ceilings_percent": sum(s.compute_milli for s in shares) / 10,
        "shares": [
            {
                "claim": s.allocation.claim_id,
                "namespace": s.allocation.claim.namespace,
                "name": s.allocation.claim.name,
                "memory_mib": s.memory_mib,
                "compute_percent": s.compute_milli / 10,
                "guaranteed_percent": s.guaranteed_milli / 10,
                "exclusive": s.exclusive,
                "mig_profile": s.mig_profile,
                "mig_start": s.mig_start,
                "mig_size": s.mig_size,
            }
            for s in shares
        ],
    }
