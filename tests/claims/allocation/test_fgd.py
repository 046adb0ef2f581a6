"""Fragmentation measure and workload model (FGD)."""

import pytest

from claims.allocation import Request, Workload
from claims.allocation.fgd import FragModel, distribution_of
from claims.allocation.keys import Interner

from .fleets import node


def frac(compute, cpu=0):
    return Request("fraction", compute_milli=compute, cpu_milli=cpu)


def frag(n, *shapes):
    interner = Interner()
    model = FragModel(Workload(shapes).distribution())
    return model.frag(interner.signature(n)[0])


def with_used(n, *compute):
    for g, c in zip(n.gpus, compute, strict=True):
        g.compute_used = c
    return n


@pytest.mark.parametrize(
    ("used", "shapes", "expected"),
    [
        ((0,), [frac(500)], 0),  # an idle GPU serves the shape
        ((400,), [frac(500)], 0),  # 600 free still serves a 500
        ((600,), [frac(500)], 400),  # 400 free < 500: all of it is a fragment
        ((600, 0), [frac(500)], 400),  # the idle GPU serves it; the 400 left on the other one is stranded
        ((600, 0), [frac(500), frac(300)], 200),  # half the claims (300s) can use the 400
        ((0, 0), [Request("whole", gpus=2)], 0),
        ((100, 0), [Request("whole", gpus=2)], 1900),  # no two idle GPUs: everything free is stranded
        ((1000,), [frac(500)], 0),  # nothing free, nothing fragmented
    ],
)
def test_fragmentation_against_the_workload(used, shapes, expected):
    n = with_used(node("n", gpus=len(used)), *used)
    assert frag(n, *shapes) == pytest.approx(expected)


def test_a_node_without_cpu_for_the_workload_strands_its_gpus():
    """20-core claims on a 10-core node: the paper's measure counts all its free GPU (1000), and NVKE's
    stranding term adds what 10 cores cannot feed at 40 milli-CPU per milli-GPU: 1000 - 250."""
    shapes = [frac(500, cpu=20_000)]
    assert frag(node("fed", gpus=1, cpu=64_000), *shapes) == pytest.approx(0)
    assert frag(node("starved", gpus=1, cpu=10_000), *shapes) == pytest.approx(1000 + 750)


def test_distribution_covers_the_most_frequent_shapes_and_drops_cpu_only():
    common, rare, cpu = frac(500), frac(100), Request("cpu", cpu_milli=1000)
    counts = {common: 90, cpu: 8, rare: 2}
    d = distribution_of(counts, coverage=0.95)
    assert d.shapes == (common,)  # 90 + 8 cover 98%; the CPU-only shape carries no GPU fragment
    assert d.weights == (1.0,)
    assert d.cpu_only_cpu == pytest.approx(8 * 1000 / 90)  # but its CPU is kept, per GPU claim
    assert d.cpu_per_gpu == pytest.approx(d.cpu_only_cpu / 500)  # the 500s ask no CPU themselves
    d = distribution_of(counts, coverage=1.0)
    assert d.shapes == (common, rare)
    assert d.weights == pytest.approx((90 / 92, 2 / 92))


def test_fgd_measures_against_the_rare_multi_gpu_shapes_unless_cpu_binds():
    """A rare 8-GPU shape (4% of the claims, outside the 95% typical set) still counts where CPU does
    not bind: a node that can no longer take it strands its free GPU for it (the default list: 263.15 ->
    260.3 unallocated GPUs). Where CPU binds fleet-wide the typical shapes alone are measured, as before
    (cpu300: measuring every shape there left 828.7 instead of 762.3). Rare one-GPU shapes stay out."""
    common, rare, odd = frac(500), Request("whole", gpus=8), frac(900)
    d = distribution_of({common: 95, rare: 4, odd: 1}, coverage=0.95)
    assert d.shapes == (common,)  # the typical set is unchanged
    assert odd not in d.extended_shapes
    broken = Interner().signature(with_used(node("n", gpus=8), 500, 0, 0, 0, 0, 0, 0, 0))[0]
    assert FragModel(d, cpu_bound=True).frag(broken) == pytest.approx(0)  # every GPU can take a 500
    assert FragModel(d, cpu_bound=False).frag(broken) == pytest.approx(4 / 99 * 7500)  # but not the 8
    whole = Interner().signature(node("m", gpus=8))[0]
    assert FragModel(d, cpu_bound=False).frag(whole) == pytest.approx(0)
    paper = distribution_of({common: 95, rare: 4, odd: 1}, coverage=0.95, extensions=False)
    assert FragModel(paper).frag(broken) == pytest.approx(0)  # the paper's measure: typical shapes only


def test_workload_keeps_a_window_and_refreshes_its_snapshot():
    w = Workload(window=3, refresh_every=2)
    w.record(frac(100))
    first = w.distribution()
    assert first.shapes == (frac(100),)
    w.record(frac(200))
    assert w.distribution() is first  # one record since the snapshot: not refreshed yet
    w.record(frac(200))
    w.record(frac(200))  # the window now holds three 200s
    assert w.distribution().shapes == (frac(200),)
