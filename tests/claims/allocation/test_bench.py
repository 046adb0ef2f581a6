"""The trace-replay benchmark runs end to end on a tiny trace in the Alibaba CSV format."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[3] / "bench" / "allocator.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_allocator", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def trace(tmp_path):
    nodes = tmp_path / "nodes.csv"
    nodes.write_text(
        "sn,cpu_milli,memory_mib,gpu,model\n"
        "node-0,32000,131072,2,T4\n"
        "node-1,32000,131072,2,T4\n"
        "node-2,64000,262144,4,V100M32\n"
    )
    pods = tmp_path / "pods.csv"
    header = (
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
        "creation_time,deletion_time,scheduled_time\n"
    )
    rows = [
        "pod-0,4000,8192,1,1000,,LS,Running,0,1,0",
        "pod-1,2000,4096,1,500,,LS,Running,0,1,0",
        "pod-2,2000,4096,1,300,T4,LS,Running,0,1,0",
        "pod-3,8000,16384,2,1000,V100M32|V100M16,LS,Running,0,1,0",
        "pod-4,4000,8192,0,0,nan,BE,Running,0,1,0",
    ]
    pods.write_text(header + "\n".join(rows) + "\n")
    return nodes, pods


def test_reads_the_trace_format(bench, trace):
    nodes, pods = trace
    fleet = bench.read_nodes(nodes)
    assert [len(n.gpus) for n in fleet] == [2, 2, 4]
    assert {n.sharing_mode for n in fleet} == {"fractional"}
    parsed = bench.read_pods(pods)
    assert [p.request.kind for p in parsed] == ["whole", "fraction", "fraction", "whole", "cpu"]
    assert [p.gpus for p in parsed] == [1.0, 0.5, 0.3, 2.0, 0.0]
    assert parsed[2].request.allowed_models == {"T4"}
    assert parsed[3].request.allowed_models == {"V100M32", "V100M16"}
    assert parsed[4].request.allowed_models == frozenset()


def test_arrivals_reach_the_target_demand(bench, trace):
    _, pods = trace
    sample = bench.arrivals(bench.read_pods(pods), capacity=8, ratio=1.3, seed=1)
    total = sum(p.gpus for p in sample)
    assert total >= 1.3 * 8
    assert total - max(p.gpus for p in sample) < 1.3 * 8  # stops at the first pod past the target


@pytest.mark.parametrize("policy", ["fgd", "binpack", "spread", "best-fit"])
def test_json_output(bench, trace, policy, capsys):
    nodes, pods = trace
    assert (
        bench.main(["--nodes", str(nodes), "--pods", str(pods), "--policy", policy, "--seeds", "2", "--json"])
        == 0
    )
    result = json.loads(capsys.readouterr().out)
    assert result["policy"] == policy
    assert result["seeds"] == 2
    assert 0 < result["gpu_alloc_pct_at_100"] <= 100
    assert result["unallocated_gpus_at_100"] == pytest.approx(
        (1 - result["gpu_alloc_pct_at_100"] / 100) * 8, abs=0.1
    )
    assert result["placements_per_s"] > 0


def test_scale_repeats_the_fleet(bench, trace, capsys):
    nodes, pods = trace
    fleet = bench.read_nodes(nodes, scale=3)
    assert len(fleet) == 9 and len({n.id for n in fleet}) == 9
    args = ["--nodes", str(nodes), "--pods", str(pods), "--seeds", "1", "--scale", "2", "--json"]
    assert bench.main(args) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["capacity_gpus"], result["scale"]) == (16, 2)
    assert result["cpu_us_per_placement"] > 0
    assert result["max_rss_mib"] > 0


def test_sliver_lower_bound(bench):
    def pod(milli):
        return bench.Pod(bench.Request("fraction", compute_milli=milli), milli / 1000)

    # Three 810s leave 190 each that only a pod of <= 190 can use: one 160 fills one of them.
    assert bench.sliver_lower_bound([pod(810)] * 3 + [pod(160)]) == pytest.approx(0.41)
    # 500s pair up perfectly: no bound.
    assert bench.sliver_lower_bound([pod(500)] * 4) == 0


def test_a_pod_list_with_only_the_required_columns_loads(bench, trace, tmp_path):
    nodes, _ = trace
    short = tmp_path / "short.csv"
    short.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,4000,8192,1,500\np1,4000,8192,2,1000\n")
    parsed = bench.read_pods(short)
    assert [p.request.kind for p in parsed] == ["fraction", "whole"]
    assert all(not p.request.allowed_models for p in parsed)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("name,cpu_milli,memory_mib,num_gpu\np0,1,1,1\n", ":1: no column 'gpu_milli'"),
        ("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,4000,8192,one,1000\n", ":2: column num_gpu: 'one'"),
        ("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,4000,8192,2,500\n", ":2: column gpu_milli: 500"),
    ],
)
def test_a_malformed_pod_list_names_its_line_and_column(bench, trace, tmp_path, capsys, text, message):
    nodes, _ = trace
    bad = tmp_path / "bad.csv"
    bad.write_text(text)
    assert bench.main(["--nodes", str(nodes), "--pods", str(bad), "--seeds", "1", "--json"]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_defrag_bench_compares_bounded_moves_with_a_full_repack(trace, capsys):
    spec = importlib.util.spec_from_file_location("bench_defrag", BENCH.parent / "defrag.py")
    defrag = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = defrag
    spec.loader.exec_module(defrag)
    nodes, pods = trace
    args = ["--nodes", str(nodes), "--pods", str(pods), "--moves", "0,5", "--depart", "0.5", "--json"]
    assert defrag.main(args) == 0
    result = json.loads(capsys.readouterr().out)
    none, some = result["bounded"]
    assert (none["max_moves"], none["moves"], none["gpus_freed"]) == (0, 0, 0)
    assert some["moves"] <= 5 and some["gpus_freed"] >= 0
    assert result["repack_claims"] == result["claims"]
    assert (
        some["gpus_freed"] <= result["bound_gpus_freed"]
        and result["repack_gpus_freed"] <= result["bound_gpus_freed"]
    )
