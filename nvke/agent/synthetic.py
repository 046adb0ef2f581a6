"""`nvke-agent --simulate`: plausible metrics for given GPU UUIDs, for development without a GPU."""

import math
import os
import random


class SimulatedCollector:
    def __init__(self, uuids: list[str], memory_mib: int = 81559) -> None:
        self.uuids = [u.removeprefix("GPU-").lower() for u in uuids]
        self.memory_mib = memory_mib
        self.random = random.Random(42)

    def facts(self) -> dict:
        """A node fit for every sharing mode (preflight.py), on this machine's kernel."""
        return {
            "driver_version": "580.105.08",
            "kernel_version": os.uname().release,
            "iommu": True,
            "mps": True,
            "mig_current": False,
            "mig_pending": False,
            "nvml_memory": True,
            "nvml_utilization": True,
        }

    def health(self) -> dict[str, bool]:
        return dict.fromkeys(self.uuids, True)

    def sample(self, now: float) -> list[dict]:
        samples = []
        for i, uuid in enumerate(self.uuids):
            util = 50 + 40 * math.sin(now / 30 + i) + self.random.uniform(-5, 5)
            util = max(0.0, min(100.0, util))
            samples.append(
                {
                    "gpu": uuid,
                    "ts": now,
                    "metrics": {
                        "DCGM_FI_DEV_GPU_UTIL": round(util, 1),
                        "DCGM_FI_DEV_FB_USED": int(self.memory_mib * (0.2 + 0.6 * util / 100)),
                        "DCGM_FI_DEV_GPU_TEMP": round(35 + 0.45 * util, 1),
                        "DCGM_FI_DEV_POWER_USAGE": round(70 + 6.3 * util, 1),
                        "DCGM_FI_DEV_SM_CLOCK": int(1100 + 8.8 * util),
                        "DCGM_FI_DEV_XID_ERRORS": 0,
                    },
                }
            )
        return samples

    def close(self) -> None:
        pass
