"""The GPU allocation snapshot of the pool and node pages: each GPU's memory and compute drawn to scale,
one segment per claim share on each. MIG slices sit at their place on the GPU's 8-slot memory axis; other
memory shares, and every compute share, are laid side by side."""

from dataclasses import dataclass

from nodepools.models import Gpu, GpuShare, Node
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
    compute: str
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


@dataclass(frozen=True)
class GpuBar:
    gpu: Gpu
    mig: bool
    segments: list[Segment]
    compute_segments: list[ComputeSegment]
    figures: str  # "12Gi / 22.5Gi, 75%"
    compute_figure: str  # "75%"

    @property
    def label(self) -> str:
        held = "; ".join(segment.title for segment in self.segments) or "idle"
        return f"GPU {self.gpu.index}: {self.figures} held. {held}."


def gpu_bar(gpu: Gpu, mig: bool = False) -> GpuBar:
    """`mig`: the GPU is cut into MIG slices (its axis shows the slots even when idle). Reads
    gpu.shares.all() with each share's allocation.claim: prefetch them."""
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
                compute=f"{share.compute_milli // 10}%",
                swatch=share.allocation.claim_id % SWATCHES,
            )
        )
    compute_segments = []
    compute_offset = 0
    for segment in segments:
        milli = segment.share.compute_milli
        compute_segments.append(
            ComputeSegment(segment, css_percent(compute_offset / 1000), css_percent(milli / 1000))
        )
        compute_offset += milli
    used = sum(share.memory_mib for share in shares)
    compute = sum(share.compute_milli for share in shares) // 10
    return GpuBar(
        gpu=gpu,
        mig=mig or any(segment.mig for segment in segments),
        segments=segments,
        compute_segments=compute_segments,
        figures=f"{human_mib(used)} / {human_mib(gpu.memory_mib)}, {compute}%",
        compute_figure=f"{compute}%",
    )


@dataclass(frozen=True)
class Usage:
    """One host resource of a node: held by claims out of capacity, as figures and a CSS width."""

    name: str
    figures: str
    width: str


def host_usage(node: Node, cpu_milli: int, memory_mib: int) -> list[Usage]:
    """The node's host CPU and memory held by its allocated claims."""
    return [
        Usage(
            "Host CPU",
            f"{cpu_milli / 1000:g} / {node.cpu_millicores / 1000:g} cores",
            css_percent(cpu_milli / (node.cpu_millicores or 1)),
        ),
        Usage(
            "Host memory",
            f"{human_mib(memory_mib)} / {human_mib(node.memory_mib)}",
            css_percent(memory_mib / (node.memory_mib or 1)),
        ),
    ]
