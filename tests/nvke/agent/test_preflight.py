"""nvke-agent's sharing preflight: the facts it reads through NVML, /proc and /sys, the checks each
sharing mode needs, and `nvke-agent preflight` for an operator on the node."""

import sys

import pytest

from nvke.agent import main as agent
from nvke.agent import nvml, preflight

from . import fake_pynvml
from .test_agent import fake_gpus

FIT = {
    "driver_version": "580.105.08",
    "kernel_version": "6.1.0-18-amd64",
    "iommu": True,
    "mps": True,
    "mig_current": True,
    "mig_pending": True,
    "nvml_memory": True,
    "nvml_utilization": True,
}


@pytest.mark.parametrize("mode", preflight.MODES)
def test_a_fit_node_passes_every_mode(mode):
    assert preflight.failures(FIT, mode) == []


@pytest.mark.parametrize(
    ("facts", "mode", "failure"),
    [
        ({"driver_version": "470.57.02"}, "time-slicing", "driver_version 470.57.02 < 470.82.01"),
        ({"kernel_version": "5.4.0-150-generic"}, "mps", "kernel_version 5.4.0-150-generic < 5.10"),
        ({"iommu": False}, "fractional", "the IOMMU is off"),
        ({"mps": False}, "mps", "MPS cannot run"),
        ({"mig_current": False, "mig_pending": False}, "mig", "MIG mode is off"),
        ({"mig_current": False}, "mig", "a MIG mode change waits for a GPU reset"),
        ({"nvml_utilization": False}, "exclusive", "NVML cannot read GPU utilization"),
    ],
)
def test_each_mode_fails_on_what_it_needs(facts, mode, failure):
    assert any(failure in f for f in preflight.failures({**FIT, **facts}, mode))


def test_what_a_mode_does_not_need_never_fails_it():
    assert preflight.failures({**FIT, "iommu": False, "mps": False}, "time-slicing") == []
    assert preflight.failures({**FIT, "driver_version": "460.91.03"}, "exclusive") == []


def test_unknown_facts_are_not_failures():
    assert preflight.failures({}, "mps") == []
    assert all(c.ok is None for c in preflight.checks({}, "mps"))


def test_facts_come_from_nvml(monkeypatch):
    gpus = fake_gpus(["aaaa-1", "bbbb-2"])
    gpus[0]["mig"], gpus[1]["mig"] = (1, 1), (0, 1)  # the second GPU waits for a reset to enter MIG
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml.make(gpus))
    facts = preflight.gather(nvml.load())
    assert facts["driver_version"] == "580.105.08"
    assert facts["nvml_memory"] and facts["nvml_utilization"]
    assert (facts["mig_current"], facts["mig_pending"]) == (False, True)
    assert "a MIG mode change waits for a GPU reset" in preflight.failures(facts, "mig")


def test_nvml_that_cannot_read_utilization_fails(monkeypatch):
    gpus = fake_gpus(["aaaa-1"])
    del gpus[0]["util"]
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml.make(gpus))
    assert preflight.gather(nvml.load())["nvml_utilization"] is False


def test_the_operators_checklist_exits_non_zero_on_a_failure(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml.make([], init_error="Driver Not Loaded"))
    assert agent.main(["preflight", "--mode", "exclusive"]) == 1  # no NVML: nothing reads the GPUs
    out = capsys.readouterr().out
    assert "NVML unavailable" in out and "[FAIL] NVML cannot read GPU memory" in out

    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml.make(fake_gpus(["aaaa-1"])))
    assert agent.main(["preflight", "--mode", "exclusive"]) == 0
    assert "[ok  ] NVML reads GPU memory" in capsys.readouterr().out
