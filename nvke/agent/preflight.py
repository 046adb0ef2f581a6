"""Node preflight for GPU sharing: the facts that decide whether a sharing mode is safe on a node, how
nvke-agent reads them, and the checks each mode needs. No Django: the control plane runs the same checks
on the facts agents (or the provider) report.

    nvke-agent preflight [--mode mps]   # a checklist for the operator on the node; non-zero if one fails

Facts (every one optional: a fact nobody reported is "unknown", never a failure):
  driver_version  "580.105.08"      kernel_version  "6.1.0-18-amd64"
  iommu           true/false        mps             true/false (the MPS control daemon can run)
  mig_current     true/false (MIG mode enabled on every GPU)   mig_pending  true/false (after a reset)
  nvml_memory     true/false        nvml_utilization  true/false (NVML can read them)
  mps_daemon      true/false (the agent's MPS control daemons answer on every GPU; mps pools need it)
  device_plugin   true/false (the kubelet registered NVKE's device plugin: on the scheduler path a
                  claim's isolation holds only then, nodepools/preflight.py `enforced_isolation`)"""

import os
import re
import shutil
from dataclasses import dataclass
from types import ModuleType

from packaging.version import InvalidVersion, Version

MIN_SHARING_DRIVER = "470.82.01"  # fractional sharing (time-slicing, MPS, fractions) needs at least this
MIN_KERNEL = "5.10"
FACTS = (
    "driver_version",
    "kernel_version",
    "iommu",
    "mps",
    "mig_current",
    "mig_pending",
    "nvml_memory",
    "nvml_utilization",
    "mps_daemon",
    "device_plugin",
)
SHARING = ("time-slicing", "mps", "fractional")
MODES = ("exclusive", "mig", *SHARING)


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool | None  # None: the fact is unknown
    detail: str


def _version(text: str) -> Version | None:
    match = re.match(r"\d+(\.\d+)*", text or "")
    try:
        return Version(match.group(0)) if match else None
    except InvalidVersion:
        return None


def _at_least(fact: str, text: str | None, minimum: str, why: str) -> Check:
    found = _version(text or "")
    if found is None:
        return Check(fact, None, f"{fact} unknown; {why} needs at least {minimum}")
    ok = found >= Version(minimum)
    return Check(fact, ok, f"{fact} {text} {'≥' if ok else '<'} {minimum} ({why})")


def _flag(facts: dict, fact: str, yes: str, no: str) -> Check:
    value = facts.get(fact)
    if value is None:
        return Check(fact, None, f"{fact} unknown ({yes})")
    return Check(fact, bool(value), yes if value else no)


def checklist(facts: dict, modes: list[str]) -> tuple[str, bool]:
    """The operator's checklist for `modes`, and whether a check failed."""
    lines, failed = [], False
    for mode in modes:
        lines.append(f"{mode}:")
        for check in checks(facts, mode):
            lines.append(f"  [{ {True: 'ok  ', False: 'FAIL', None: '??  '}[check.ok] }] {check.detail}")
            failed |= check.ok is False
    return "\n".join(lines), failed


def checks(facts: dict, mode: str) -> list[Check]:
    """The checks `mode` needs on a node with these facts."""
    if mode not in MODES:
        raise ValueError(f"unknown sharing mode {mode!r}")
    result = [
        _flag(facts, "nvml_memory", "NVML reads GPU memory", "NVML cannot read GPU memory"),
        _flag(facts, "nvml_utilization", "NVML reads GPU utilization", "NVML cannot read GPU utilization"),
    ]
    if mode in SHARING:
        result.append(
            _at_least("driver_version", facts.get("driver_version"), MIN_SHARING_DRIVER, "fractional sharing")
        )
        result.append(_at_least("kernel_version", facts.get("kernel_version"), MIN_KERNEL, "GPU sharing"))
    if mode in ("mps", "fractional"):  # the modes that claim to hold a fraction's memory
        result.append(
            _flag(
                facts, "iommu", "the IOMMU is on (memory isolation)", "the IOMMU is off: no memory isolation"
            )
        )
    if mode == "mps":
        result.append(_flag(facts, "mps", "the MPS control daemon can run", "MPS cannot run on this node"))
        result.append(
            _flag(
                facts,
                "mps_daemon",
                "the MPS control daemon runs on every GPU",
                "the MPS control daemon is not running on every GPU (nvke-agent --mps starts it; its log "
                "says why)",
            )
        )
    if mode == "mig":
        result.append(_flag(facts, "mig_current", "MIG mode is on", "MIG mode is off"))
        pending = facts.get("mig_pending")
        if pending is not None and pending != facts.get("mig_current"):
            result.append(Check("mig_pending", False, "a MIG mode change waits for a GPU reset"))
    return result


def failures(facts: dict, mode: str) -> list[str]:
    """What fails for `mode`, in words (unknown facts do not fail)."""
    return [c.detail for c in checks(facts, mode) if c.ok is False]


def gather(nvml: ModuleType | None) -> dict:
    """Read this node's facts: NVML (when loaded), /proc and /sys."""
    facts: dict = {"kernel_version": os.uname().release}
    iommu = "/sys/class/iommu"
    facts["iommu"] = os.path.isdir(iommu) and bool(os.listdir(iommu))
    facts["mps"] = shutil.which("nvidia-cuda-mps-control") is not None
    if nvml is None:  # on the node itself, no NVML means nothing reads the GPUs
        return {**facts, "nvml_memory": False, "nvml_utilization": False}
    facts["driver_version"] = _text(nvml.nvmlSystemGetDriverVersion())
    handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
    facts["nvml_memory"] = _all(lambda h: nvml.nvmlDeviceGetMemoryInfo(h), handles, nvml)
    facts["nvml_utilization"] = _all(lambda h: nvml.nvmlDeviceGetUtilizationRates(h), handles, nvml)
    try:
        modes = [nvml.nvmlDeviceGetMigMode(h) for h in handles]  # (current, pending) per GPU
        facts["mig_current"] = bool(modes) and all(current for current, _ in modes)
        facts["mig_pending"] = bool(modes) and all(pending for _, pending in modes)
    except nvml.NVMLError:  # not a MIG-capable GPU
        facts["mig_current"] = facts["mig_pending"] = False
    return facts


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _all(read, handles: list, nvml: ModuleType) -> bool:
    try:
        for handle in handles:
            read(handle)
    except nvml.NVMLError:
        return False
    return bool(handles)
