"""The time-driven gang replay (bench/gang_replay.py) keeps its invariants on a small fleet: no GPUs held
by part-placed jobs with groups, every departure frees its GPUs, preemption only of lower priority."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))

import gang_replay  # noqa: E402
import gangs  # noqa: E402

from claims.allocation.fgd import Workload  # noqa: E402
from claims.allocation.fleet import PlacementCache  # noqa: E402
from claims.allocation.state import Request  # noqa: E402


@pytest.fixture
def nodes(tmp_path):
    path = tmp_path / "nodes.csv"
    path.write_text(
        "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,4,V100M32\nn1,64000,262144,4,V100M32\n"
    )
    return lambda: gang_replay.allocator.read_nodes(path)


def flight(gpus: int, members: int, priority: int, arrival: float, duration: float) -> gang_replay.Flight:
    request = Request("whole", gpus=gpus, cpu_milli=1000, host_memory_mib=1024)
    return gang_replay.Flight(gangs.Job(request, members, gpus * members), priority, arrival, duration)


def replay(nodes, groups: bool, flights: list) -> gang_replay.Stats:
    workload = Workload([f.job.request for f in flights], window=len(flights))
    stats = gang_replay.Replay(nodes(), groups, workload, PlacementCache()).run(flights)
    assert stats.idle_at_end and stats.left_allocated == pytest.approx(0)  # every departure freed its GPUs
    assert stats.never_placed == 0
    return stats


@pytest.mark.parametrize("groups, held", [(False, 4.0), (True, 0.0)])
def test_a_job_part_placed_only_without_groups(nodes, groups, held):
    # A 2-GPU claim on n0 until t=50; a job of two 4-GPU members at t=1 fits whole only after it leaves.
    flights = [flight(2, 1, 2, 0, 50), flight(4, 2, 2, 1, 10), flight(1, 1, 2, 100, 1)]
    stats = replay(nodes, groups, flights)
    assert stats.part_held_max == held
    assert stats.part_held_area == pytest.approx(held * 49)  # from t=1 to t=50
    assert sorted(stats.waits[2]) == [0, 0, 49]
    assert not stats.preemptions


@pytest.mark.parametrize("groups, held", [(False, 4.0), (True, 0.0)])
def test_preemption_takes_only_lower_priority(nodes, groups, held):
    # Seven BE claims and one LS claim fill the fleet. An LS job of two 4-GPU members can free only the
    # node without the LS claim: without groups one member takes it (and holds it, part placed, until
    # the LS claim leaves at t=100), with groups none preempts. A Burstable 1-GPU claim takes a BE one.
    flights = [flight(1, 1, 0, 0, 100) for _ in range(7)]
    flights += [flight(1, 1, 2, 0, 100), flight(4, 2, 2, 1, 10), flight(1, 1, 1, 2, 5)]
    stats = replay(nodes, groups, flights)
    assert stats.preemptions
    assert all(victim < preemptor for preemptor, victim, _ in stats.preemptions)
    assert stats.waits[1] == [0]  # the Burstable claim ran at once, on a BE claim's GPU
    assert stats.part_held_max == held
    assert sum(p == 2 for p, *_ in stats.preemptions) == (0 if groups else 4)


def test_the_bench_runs_on_a_small_trace(tmp_path, nodes):
    pods = tmp_path / "pods.csv"
    rows = [
        f"p{i},1000,1024,{1 + i % 2},1000,,{('LS', 'BE', 'Burstable')[i % 3]},Running,{i},{i + 40}"
        for i in range(12)
    ]
    pods.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time\n"
        + "\n".join(rows)
        + "\n"
    )
    result = gang_replay.bench(tmp_path / "nodes.csv", pods, seeds=1, scale=2, compress=2)
    for mode in ("without_groups", "with_groups"):
        assert result[mode]["never_placed"] == 0
    assert result["with_groups"]["gpus_part_held_max"] == 0
