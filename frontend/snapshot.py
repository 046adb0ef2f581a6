"""The GPU allocation snapshot of the pool page: each GPU's memory drawn to scale, one segment per claim
share. MIG slices sit at their place on the GPU's 8-slot memory axis; other shares are laid side by side."""

from dataclasses import dataclass

from nodepools.models import Gpu, GpuShare
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
class GpuBar:
    gpu: Gpu
    mig: bool
    segments: list[Segment]
    figures: str  # "12Gi / 22.5Gi, 75%"

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
    used = sum(share.memory_mib for share in shares)
    compute = sum(share.compute_milli for share in shares) // 10
    return GpuBar(
        gpu=gpu,
        mig=mig or any(segment.mig for segment in segments),
        segments=segments,
        figures=f"{human_mib(used)} / {human_mib(gpu.memory_mib)}, {compute}%",
    )
