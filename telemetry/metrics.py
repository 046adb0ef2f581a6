"""Metric names as the DCGM exporter publishes them, and the short keys NVKE stores them under."""

# DCGM field → (short key, unit). FB_USED is MiB and POWER_USAGE watts, as in dcgm-exporter.
FIELDS: dict[str, tuple[str, str]] = {
    "DCGM_FI_DEV_GPU_UTIL": ("util", "%"),
    "DCGM_FI_DEV_FB_USED": ("mem", "MiB"),
    "DCGM_FI_DEV_GPU_TEMP": ("temp", "C"),
    "DCGM_FI_DEV_POWER_USAGE": ("power", "W"),
    "DCGM_FI_DEV_SM_CLOCK": ("sm", "MHz"),
    "DCGM_FI_DEV_XID_ERRORS": ("xid", ""),  # the last XID seen in the interval, 0 = none
}
SHORT = {field: key for field, (key, _) in FIELDS.items()}
# What history keeps (averages per bucket); XIDs act at once (health) and are not averaged.
HISTORY_KEYS = ("util", "mem", "temp", "power", "sm")
UTIL = "DCGM_FI_DEV_GPU_UTIL"
FB_USED = "DCGM_FI_DEV_FB_USED"
XID = "DCGM_FI_DEV_XID_ERRORS"
