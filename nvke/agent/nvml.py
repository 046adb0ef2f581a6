"""Read a node's GPUs through NVML (nvidia-ml-py, imported as pynvml), as DCGM-named metrics.

Only the agent imports this; nothing here touches Django."""

import importlib
from types import ModuleType

from . import preflight

MIB = 1024 * 1024
# XIDs an application causes (NVIDIA/k8s-device-plugin internal/rm/health.go skips the same): the GPU is fine.
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})


class NvmlUnavailable(RuntimeError):
    """No NVML library, no driver, or no GPU: the agent cannot read anything here."""


def load() -> ModuleType:
    """Import pynvml and initialise NVML, or raise NvmlUnavailable saying why."""
    try:
        pynvml = importlib.import_module("pynvml")
    except ImportError as error:
        raise NvmlUnavailable(f"the pynvml module is missing ({error}); install nvidia-ml-py") from None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as error:
        raise NvmlUnavailable(f"NVML failed to initialise: {error} (is the NVIDIA driver loaded?)") from None
    return pynvml


def normalise_uuid(uuid: str) -> str:
    """NVML says `GPU-<uuid>`; the control plane stores the bare UUID."""
    return uuid.removeprefix("GPU-").lower()


class NvmlCollector:
    """One sample per GPU per call; fatal XIDs come from an NVML event set, drained without waiting."""

    def __init__(self, pynvml: ModuleType) -> None:
        self.nvml = pynvml
        count = pynvml.nvmlDeviceGetCount()
        if count == 0:
            raise NvmlUnavailable("NVML sees no GPU on this node")
        self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        self.uuids = [normalise_uuid(pynvml.nvmlDeviceGetUUID(h)) for h in self.handles]
        self.failed: set[str] = set()  # GPUs that raised a fatal XID: unhealthy until the agent restarts
        self.events = pynvml.nvmlEventSetCreate()
        for handle in self.handles:
            try:
                pynvml.nvmlDeviceRegisterEvents(handle, pynvml.nvmlEventTypeXidCriticalError, self.events)
            except pynvml.NVMLError:  # not supported on this GPU: its XIDs are not reported
                pass

    def facts(self) -> dict:
        """The node's sharing preflight facts (preflight.py)."""
        return preflight.gather(self.nvml)

    def _xids(self) -> dict[str, int]:
        """GPU uuid → the last critical XID since the previous sample."""
        seen: dict[str, int] = {}
        while True:
            try:
                data = self.nvml.nvmlEventSetWait_v2(self.events, 0)
            except self.nvml.NVMLError:  # timeout: nothing (more) pending
                return seen
            if data.eventType == self.nvml.nvmlEventTypeXidCriticalError:
                uuid = normalise_uuid(self.nvml.nvmlDeviceGetUUID(data.device))
                seen[uuid] = int(data.eventData)
                if int(data.eventData) not in APPLICATION_XIDS:
                    self.failed.add(uuid)

    def health(self) -> dict[str, bool]:
        """GPU uuid → healthy: NVML still reads it (a lost GPU answers with an error) and it raised no
        fatal XID (read by `sample`)."""
        healthy = {}
        for handle, uuid in zip(self.handles, self.uuids, strict=True):
            try:
                self.nvml.nvmlDeviceGetMemoryInfo(handle)
                healthy[uuid] = uuid not in self.failed
            except self.nvml.NVMLError_NotSupported:
                healthy[uuid] = uuid not in self.failed
            except self.nvml.NVMLError:
                healthy[uuid] = False
        return healthy

    def _read(self, name: str, call, *args):
        try:
            return name, call(*args)
        except self.nvml.NVMLError:  # NotSupported and the like: leave the field out
            return name, None

    def sample(self, now: float) -> list[dict]:
        nvml = self.nvml
        xids = self._xids()
        samples = []
        for handle, uuid in zip(self.handles, self.uuids, strict=True):
            reads = dict(
                [
                    self._read("util", lambda h: nvml.nvmlDeviceGetUtilizationRates(h).gpu, handle),
                    self._read("mem", lambda h: nvml.nvmlDeviceGetMemoryInfo(h).used // MIB, handle),
                    self._read("temp", nvml.nvmlDeviceGetTemperature, handle, nvml.NVML_TEMPERATURE_GPU),
                    self._read("power", lambda h: nvml.nvmlDeviceGetPowerUsage(h) / 1000, handle),  # mW → W
                    self._read("sm", nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_SM),
                ]
            )
            metrics = {
                "DCGM_FI_DEV_GPU_UTIL": reads["util"],
                "DCGM_FI_DEV_FB_USED": reads["mem"],
                "DCGM_FI_DEV_GPU_TEMP": reads["temp"],
                "DCGM_FI_DEV_POWER_USAGE": reads["power"],
                "DCGM_FI_DEV_SM_CLOCK": reads["sm"],
                "DCGM_FI_DEV_XID_ERRORS": xids.get(uuid, 0),
            }
            samples.append(
                {"gpu": uuid, "ts": now, "metrics": {k: v for k, v in metrics.items() if v is not None}}
            )
        return samples

    def close(self) -> None:
        self.nvml.nvmlEventSetFree(self.events)
        self.nvml.nvmlShutdown()
