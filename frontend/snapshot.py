"""The GPU allocation snapshot of the pool and node pages: each GPU's memory and compute drawn to scale,
one segment per claim share on each. MIG slices sit at their place on the GPU's 8-slot memory axis; other
memory shares, and every compute share, are laid side by side. Compute is drawn twice: the guaranteed
shares on the GPU's 100%, and the ceilings on the pool's oversubscription budget (which may pass 100%,
marked where the GPU ends)."""

from dataclasses import dataclass

from claims.models import GpuShare
from nodepools.models import Gpu, Node
from nvke.quantity import human_mib

MIG_SLOTS = 8  # memory slices of every MIG-capable GPU in the catalog
SWATCHES = 6  # segment colours in app.css (.seg-0 .. .seg-5): one per claim, the same on every GPU


def css_percent(fraction: float) -> str:
    return f"{round(min(max(fraction, 0.0), 1.0) * 100, 2):g}%"


@dataclass(frozen=True)
class Segment:
    share: GpuShare
    left: str  # CSS percentages
    width: str
    memory: str
    compute: str  # "20%", or "10% of 20%" when the guaranteed share is less than the ceiling
    swatch: int

    @property
    def claim(self):
        return self.share.allocation.claim

    @property
    def title(self) -> str:
        where = f", {self.share.mig_profile} at slice {self.share.mig_start}" if self.mig else ""
        return f"{self.claim}: {self.memory}, {self.compute} compute{where}"

    @property
    def mig(self) -> bool:
        return self.share.mig_start is not None


@dataclass(frozen=True)
class ComputeSegment:
    segment: Segment  # the same claim's memory segment
    left: str
    width: str
    figure: str  # its guaranteed share or its ceiling


@dataclass(frozen=True)
class GpuBar:
    gpu: Gpu
    mig: bool
    segments: list[Segment]
    compute_segments: list[ComputeSegment]  # guaranteed shares, on the GPU's 100%
    ceiling_segments: list[ComputeSegment]  # ceilings, on the budget
    figures: str  # "12Gi / 22.5Gi (53%)": the memory held, never the compute
    compute_figure: str  # "40% guaranteed"
    ceiling_figure: str  # "130% of 200%"
    gpu_end: str  # where 100% of the GPU lies on the ceilings' scale (CSS %)

    @property
    def label(self) -> str:
        held = "; ".join(segment.title for segment in self.segments) or "idle"
        return f"GPU {self.gpu.index}: {self.figures} held. {held}."


def _compute(share: GpuShare) -> str:
    ceiling, guaranteed = share.compute_milli // 10, share.guaranteed_milli // 10
    return f"{ceiling}%" if guaranteed == ceiling else f"{guaranteed}% of {ceiling}%"


def _side_by_side(segments: list[Segment], milli_of, scale: int) -> list[ComputeSegment]:
    parts, offset = [], 0
    for segment in segments:
        milli = milli_of(segment.share)
        left, width = css_percent(offset / scale), css_percent(milli / scale)
        parts.append(ComputeSegment(segment, left, width, f"{milli // 10}%"))
        offset += milli
    return parts


def gpu_bar(gpu: Gpu, mig: bool = False, budget_percent: int = 100) -> GpuBar:
    """`mig`: the GPU is cut into MIG slices (its axis shows the slots even when idle); `budget_percent`:
    how far the pool lets ceilings add up. Reads gpu.shares.all() with each share's allocation.claim:
    prefetch them."""
    shares = list(gpu.shares.all())
    total = gpu.memory_mib or 1
    segments = []
    offset = 0
    for share in shares:
        if share.mig_start is not None:
            left, width = share.mig_start / MIG_SLOTS, (share.mig_size or 0) / MIG_SLOTS
        else:
            left, width = offset / total, share.memory_mib / total
            offset += share.memory_mib
        segments.append(
            Segment(
                share=share,
                left=css_percent(left),
                width=css_percent(width),
                memory=human_mib(share.memory_mib),
                compute=_compute(share),
                swatch=share.allocation.claim_id % SWATCHES,
            )
        )
    used = sum(share.memory_mib for share in shares)
    guaranteed = sum(share.guaranteed_milli for share in shares) // 10
    ceilings = sum(share.compute_milli for share in shares) // 10
    # A whole GPU's share is all of it; its ceiling takes all of the budget, as in the allocator.
    scale = max(budget_percent, ceilings, 100) * 10
    return GpuBar(
        gpu=gpu,
        mig=mig or any(segment.mig for segment in segments),
        segments=segments,
        compute_segments=_side_by_side(segments, lambda s: s.guaranteed_milli, 1000),
        ceiling_segments=_side_by_side(segments, lambda s: s.compute_milli, scale),
        figures=f"{human_mib(used)} / {human_mib(gpu.memory_mib)} ({round(100 * used / total)}%)",
        compute_figure=f"{guaranteed}% guaranteed",
        ceiling_figure=f"{ceilings}% of {budget_percent}%",
        gpu_end=css_percent(1000 / scale),
    )


@dataclass(frozen=True)
class HostUsage:
    """One host resource of a node: held by claims out of capacity, as figures and a CSS width."""

    name: str
    figures: str
    width: str


def host_usage(node: Node, cpu_milli: int, memory_mib: int) -> list[HostUsage]:
    """The node's host CPU and memory held by its allocated claims."""
    return [
        HostUsage(
            "Host CPU",
            f"{cpu_milli / 1000:g} / {node.cpu_millicores / 1000:g} cores",
            css_percent(cpu_milli / (node.cpu_millicores or 1)),
        ),
        HostUsage(
            "Host memory",
            f"{human_mib(memory_mib)} / {human_mib(node.memory_mib)}",
            css_percent(memory_mib / (node.memory_mib or 1)),
        ),
    ]
