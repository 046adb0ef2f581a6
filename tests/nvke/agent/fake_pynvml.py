"""A stand-in for nvidia-ml-py's `pynvml` module: the calls nvke-agent makes, with the same names,
units and error classes, over GPUs described in plain dicts."""

from types import ModuleType, SimpleNamespace


def make(gpus: list[dict], xids: list[tuple[int, int]] = (), init_error: str | None = None) -> ModuleType:
    """gpus: [{"uuid": "GPU-…", "util": %, "used": bytes, "temp": °C, "power_mw": mW, "sm": MHz,
    "mig": (current, pending), "lost": True}]; a missing key raises NVMLError_NotSupported for that call,
    "lost" NVMLError for every call. xids: pending (gpu index, XID) events. The driver is 580.105.08."""
    nvml = ModuleType("pynvml")

    class NVMLError(Exception):
        pass

    class NVMLError_NotSupported(NVMLError):  # noqa: N801 (pynvml's own name)
        pass

    class NVMLError_Timeout(NVMLError):  # noqa: N801
        pass

    pending = [SimpleNamespace(device=index, eventType=0x8, eventData=xid) for index, xid in xids]
    state = {"initialised": False, "shut_down": False, "registered": []}

    def field(index: int, key: str):
        if gpus[index].get("lost"):  # fallen off the bus: every call fails
            raise NVMLError("GPU is lost")
        if key not in gpus[index]:
            raise NVMLError_NotSupported("Not Supported")
        return gpus[index][key]

    def init():
        if init_error:
            raise NVMLError(init_error)
        state["initialised"] = True

    def wait(event_set, timeout_ms):
        if not pending:
            raise NVMLError_Timeout("Timeout")
        return pending.pop(0)

    nvml.__dict__.update(
        NVMLError=NVMLError,
        NVMLError_NotSupported=NVMLError_NotSupported,
        NVMLError_Timeout=NVMLError_Timeout,
        NVML_TEMPERATURE_GPU=0,
        NVML_CLOCK_SM=1,
        nvmlEventTypeXidCriticalError=0x8,
        state=state,
        nvmlInit=init,
        nvmlShutdown=lambda: state.update(shut_down=True),
        nvmlDeviceGetCount=lambda: len(gpus),
        nvmlSystemGetDriverVersion=lambda: "580.105.08",
        nvmlDeviceGetMigMode=lambda h: list(field(h, "mig")),
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetUUID=lambda h: gpus[h]["uuid"],
        nvmlDeviceGetUtilizationRates=lambda h: SimpleNamespace(gpu=field(h, "util"), memory=0),
        nvmlDeviceGetMemoryInfo=lambda h: SimpleNamespace(used=field(h, "used"), total=0, free=0),
        nvmlDeviceGetTemperature=lambda h, sensor: field(h, "temp"),
        nvmlDeviceGetPowerUsage=lambda h: field(h, "power_mw"),
        nvmlDeviceGetClockInfo=lambda h, clock: field(h, "sm"),
        nvmlEventSetCreate=lambda: "event-set",
        nvmlDeviceRegisterEvents=lambda h, types, es: state["registered"].append((h, types)),
        nvmlEventSetWait_v2=wait,
        nvmlEventSetFree=lambda es: None,
    )
    return nvml
