"""MIG geometry, pure: does a set of GPU-instance profiles fit one GPU, and where.

Placements are start indexes on the memory-slice axis (gpu-reference-facts §4.9); a profile of size s
at start k takes slots k..k+s-1. Compute slices are a second budget (7 on A100/H100, 4 on A30)."""

from collections import Counter
from dataclasses import dataclass


@dataclass(frozen=True)
class Profile:
    name: str
    compute_slices: int
    memory_slices: int
    placements: tuple[int, ...]
    max_instances: int


def gpu_geometry(profiles: list[Profile]) -> tuple[int, int]:
    """(compute slices, memory slots) of a GPU: those of its largest profile."""
    largest = max(profiles, key=lambda p: p.memory_slices)
    return largest.compute_slices, largest.memory_slices


def place_layout(requested: list[Profile], profiles: list[Profile]) -> list[int] | None:
    """Start index for each requested profile (in the given order), or None when they do not fit."""
    compute, slots = gpu_geometry(profiles)
    if sum(p.compute_slices for p in requested) > compute:
        return None
    counts = Counter(p.name for p in requested)
    if any(counts[p.name] > p.max_instances for p in requested):
        return None
    # Place big profiles first: they have the fewest valid starts.
    order = sorted(range(len(requested)), key=lambda i: -requested[i].memory_slices)
    starts: dict[int, int] = {}
    used = [False] * slots

    def place(position: int) -> bool:
        if position == len(order):
            return True
        index = order[position]
        profile = requested[index]
        for start in profile.placements:
            span = range(start, start + profile.memory_slices)
            if span.stop <= slots and not any(used[s] for s in span):
                for s in span:
                    used[s] = True
                starts[index] = start
                if place(position + 1):
                    return True
                for s in span:
                    used[s] = False
        return False

    return [starts[i] for i in range(len(requested))] if place(0) else None
