"""A placed claim's isolation as its node enforces it (nodepools/preflight.py `enforced_isolation`): on
the scheduler path a fraction holds what its allocation says only where the node's nvke-agent reports
NVKE's device plugin registered and, on MPS pools, its MPS daemons up."""

import pytest

from nodepools.preflight import enforced_isolation

UP = {"device_plugin": True, "mps_daemon": True}


@pytest.mark.parametrize(
    ("isolation", "kind", "source", "mode", "facts", "enforced"),
    [
        ("memory-capped", "fraction", "pod", "mps", {}, "none"),  # nothing reported
        ("memory-capped", "fraction", "pod", "mps", {"device_plugin": True}, "none"),  # no MPS daemon
        ("memory-capped", "fraction", "pod", "mps", {**UP, "device_plugin": False}, "none"),
        ("memory-capped", "fraction", "pod", "mps", UP, "memory-capped"),
        ("memory-capped", "fraction", "pod", "fractional", {"device_plugin": True}, "memory-capped"),
        ("memory-capped", "fraction", "api", "mps", {}, "memory-capped"),  # DRA: the driver's
        ("memory-capped", "fraction", "resourceclaim", "mps", {}, "memory-capped"),
        ("exclusive", "whole", "pod", "exclusive", {}, "exclusive"),  # nvidia.com/gpu: NVIDIA's plugin
        ("hard", "mig", "pod", "mig", {}, "hard"),
    ],
)
def test_isolation_as_enforced(isolation, kind, source, mode, facts, enforced):
    assert enforced_isolation(isolation, kind=kind, source=source, sharing_mode=mode, facts=facts) == enforced
