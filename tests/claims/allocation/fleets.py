"""Small hand-made fleets for the allocator tests."""

from claims.allocation import GpuState, NodeState, Profile

# H100-80GB MIG profiles (gpu-reference-facts §4.5): name, compute slices, memory slots, starts, max.
H100_MIG = [
    Profile("1g.10gb", 1, 1, (0, 1, 2, 3, 4, 5, 6), 7),
    Profile("1g.10gb+me", 1, 1, (0, 1, 2, 3, 4, 5, 6), 1),
    Profile("1g.20gb", 1, 2, (0, 2, 4, 6), 4),
    Profile("2g.20gb", 2, 2, (0, 2, 4), 3),
    Profile("3g.40gb", 3, 4, (0, 4), 2),
    Profile("4g.40gb", 4, 4, (0,), 1),
    Profile("7g.80gb", 7, 8, (0,), 1),
]

H100_MIB = 81920


def node(
    node_id: str,
    mode: str = "fractional",
    gpus: int = 2,
    model: str = "H100",
    cpu: int = 64_000,
    memory: int = 262_144,
    domains: list[str] | None = None,
    gpu_memory: int = H100_MIB,
    **fields,
) -> NodeState:
    """A node with idle GPUs; `domains` gives each GPU's NVLink domain ('' = PCIe only)."""
    domains = domains or [""] * gpus
    return NodeState(
        id=node_id,
        gpu_model=model,
        sharing_mode=mode,
        gpus=[GpuState(i, gpu_memory, nvlink_domain=domains[i]) for i in range(gpus)],
        cpu_milli_total=cpu,
        memory_mib_total=memory,
        mig_profiles=list(H100_MIG) if mode == "mig" else [],
        **fields,
    )
