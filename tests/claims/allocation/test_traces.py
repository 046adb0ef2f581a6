"""bench/traces.py: the FGD paper's workload families generated from one pod list, seeded."""

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[3] / "bench"


@pytest.fixture(scope="module")
def traces():
    spec = importlib.util.spec_from_file_location("bench_traces", BENCH / "traces.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def source(traces):
    pods = (
        [traces.PodRow(f"s{i}", 4000, 8192, 1, 300 + i) for i in range(40)]  # sharing
        + [traces.PodRow(f"w{i}", 8000, 16384, 1, 1000) for i in range(50)]  # one whole GPU
        + [traces.PodRow(f"m{i}", 32000, 65536, 4, 1000) for i in range(10)]  # multi-GPU
        + [traces.PodRow(f"c{i}", 2000 + 100 * i, 4096, 0, 0) for i in range(20)]  # CPU only
    )
    nodes = [
        traces.NodeRow("n0", 64000, 262144, 8, "V100M16"),
        traces.NodeRow("n1", 64000, 262144, 8, "V100M32"),
        traces.NodeRow("n2", 32000, 131072, 2, "T4"),
    ]
    return pods, nodes


def gpu_pods(pods):
    return [p for p in pods if p.num_gpu]


@pytest.mark.parametrize("level", [20, 60, 100])
def test_gpushare_sets_the_share_of_sharing_pods(traces, source, level):
    pods, nodes = source
    out = traces.family(pods, nodes, "gpushare", level, seed=0)
    gpu = gpu_pods(out)
    assert len(gpu) == 100 and sum(p.sharing for p in gpu) == level
    assert sum(not p.num_gpu for p in out) == 20  # CPU-only pods as in the source


@pytest.mark.parametrize("level", [50, 80])  # the source: 39% of its GPUs multi-GPU
def test_multigpu_appends_multi_gpu_pods_until_they_ask_the_level_of_the_gpus(traces, source, level):
    # the dataset's openb_pod_list_multigpu50.csv: the default list's pods in order, then 909 pods drawn
    # from its multi-GPU pods (multi-GPU pods then ask 50.3% of the GPUs)
    pods, nodes = source
    out = traces.family(pods, nodes, "multigpu", level, seed=0)
    assert [(p.cpu_milli, p.num_gpu, p.gpu_milli) for p in out[: len(pods)]] == [
        (p.cpu_milli, p.num_gpu, p.gpu_milli) for p in pods
    ]  # the source unchanged and in order
    added = out[len(pods) :]
    assert added and all(p.num_gpu == 4 for p in added)  # drawn from the source's multi-GPU pods
    gpus = sum(p.gpus for p in out)
    multi = sum(p.gpus for p in out if p.num_gpu > 1)
    assert multi >= gpus * level / 100 > multi - 4  # the last pod drawn crosses the level


def test_gpuspec_constrains_pods_to_models_that_fit_them(traces, source):
    pods, nodes = source
    gpu = gpu_pods(traces.family(pods, nodes, "gpuspec", 25, seed=0))
    constrained = [p for p in gpu if p.gpu_spec]
    assert len(constrained) == 25
    for p in constrained:
        models = p.gpu_spec.split("|")
        assert all(any(n.model == m and traces._fits_node(p, n) for n in nodes) for m in models)
    assert all("T4" not in p.gpu_spec for p in constrained if p.num_gpu > 2)  # T4 nodes have 2 GPUs


@pytest.mark.parametrize(("level", "count"), [(50, 6), (100, 12), (250, 34), (300, 43)])
def test_cpu_sets_the_share_of_cpu_only_pods_as_the_datasets_lists_do(traces, source, level, count):
    # the dataset's openb_pod_list_cpu250.csv: 2,356 CPU-only pods drawn from the default list's, then
    # the default's 7,064 GPU pods in order (25.0% of the pods CPU-only)
    pods, nodes = source
    out = traces.family(pods, nodes, "cpu", level, seed=0)
    cpu_only = [p for p in out if not p.num_gpu]
    assert len(cpu_only) == count  # the least n with n / (n + 100) ≥ level / 1000
    assert count / (count + 100) >= level / 1000 > (count - 1) / (count - 1 + 100)
    assert not out[0].num_gpu and all(p.num_gpu for p in out[count:])  # CPU-only pods first
    source_cpu = {(p.cpu_milli, p.memory_mib) for p in pods if not p.num_gpu}
    assert all((p.cpu_milli, p.memory_mib) in source_cpu for p in cpu_only)
    gpu = [p for p in pods if p.num_gpu]
    assert [(p.cpu_milli, p.num_gpu, p.gpu_milli) for p in gpu_pods(out)] == [
        (p.cpu_milli, p.num_gpu, p.gpu_milli) for p in gpu
    ]  # the source's GPU pods, unchanged and in order


def test_families_are_seeded_and_round_trip_through_csv(traces, source, tmp_path):
    pods, nodes = source
    first = traces.family(pods, nodes, "gpushare", 40, seed=3)
    assert first == traces.family(pods, nodes, "gpushare", 40, seed=3)
    assert first != traces.family(pods, nodes, "gpushare", 40, seed=4)
    path = tmp_path / "out.csv"
    traces.write_pods(path, first)
    assert traces.read_pods(path) == first
