"""The seed catalog, from ../shared/reference/gpu-reference-facts.md (§1–§4). Operators edit it in the
admin afterwards; `manage.py seed_catalog` re-applies these rows without touching other rows.

Memory figures are what nvidia-smi reports in MiB on current drivers; MIG sizes are approximated as the
profile's share of memory slices (real sizes vary slightly by driver — the agent reads them from NVML)."""

import datetime

from django.db import transaction

from catalog.models import (
    Architecture,
    DriverRelease,
    GpuModel,
    KubernetesVersion,
    MigProfile,
    NodeImage,
    Region,
    RegionInventory,
)

ARCHITECTURES = {
    "Maxwell": "5.0, 5.2, 5.3",
    "Pascal": "6.0, 6.1",
    "Volta": "7.0",
    "Turing": "7.5",
    "Ampere": "8.0, 8.6",
    "Ada": "8.9",
    "Hopper": "9.0",
    "Blackwell": "10.0, 10.3, 12.0",
}

UP_TO_HOPPER = ["Maxwell", "Pascal", "Volta", "Turing", "Ampere", "Ada", "Hopper"]
ALL_TO_BLACKWELL = [*UP_TO_HOPPER, "Blackwell"]
TURING_ON = ["Turing", "Ampere", "Ada", "Hopper", "Blackwell"]  # R580 was the last for Maxwell–Volta


def _d(text: str | None) -> datetime.date | None:
    return datetime.date.fromisoformat(text) if text else None


# version, branch type, branch end of life, release date, highest CUDA, architectures
DRIVERS = [
    ("535.230.02", "ltsb", "2026-06-30", "2025-01-16", "12.2", UP_TO_HOPPER),
    ("535.309.01", "ltsb", "2026-06-30", "2026-04-28", "12.2", UP_TO_HOPPER),
    ("550.90.07", "pb", "2025-04-17", "2024-06-04", "12.4", UP_TO_HOPPER),
    ("550.163.01", "pb", "2025-04-17", "2025-04-17", "12.4", UP_TO_HOPPER),
    ("570.133.20", "pb", "2026-02-28", "2025-04-17", "12.8", ALL_TO_BLACKWELL),
    ("570.172.08", "pb", "2026-02-28", "2025-07-17", "12.8", ALL_TO_BLACKWELL),
    ("580.105.08", "ltsb", "2028-06-30", "2025-11-06", "13.0", ALL_TO_BLACKWELL),
    ("580.126.09", "ltsb", "2028-06-30", None, "13.0", ALL_TO_BLACKWELL),
    ("595.71.05", "pb", "2027-03-31", None, "13.2", TURING_ON),
    ("620.70.06", "ltsb", "2029-09-30", "2026-11-04", "13.5", TURING_ON),
]

# MIG geometry of the 8-memory-slice GPUs (§4.3–4.7): name template, id, compute, memory slots,
# starts, max instances. {a}..{d} are the 1-, 2-, 4- and 8-slot memory sizes in the profile names.
MIG_8_SLICE = [
    ("1g.{a}", 19, 1, 1, [0, 1, 2, 3, 4, 5, 6], 7),
    ("1g.{a}+me", 20, 1, 1, [0, 1, 2, 3, 4, 5, 6], 1),
    ("1g.{b}", 15, 1, 2, [0, 2, 4, 6], 4),
    ("2g.{b}", 14, 2, 2, [0, 2, 4], 3),
    ("3g.{c}", 9, 3, 4, [0, 4], 2),
    ("4g.{c}", 5, 4, 4, [0], 1),
    ("7g.{d}", 0, 7, 8, [0], 1),
]

GPU_MODELS = [
    # name, display, NVML product name, arch, CC, MiB, GB/s, W, form, NVLink GB/s, MIG sizes, driver floor,
    # MIG driver floor, host vCPUs per GPU, host GiB per GPU
    ("t4", "T4 16GB", "Tesla T4", "Turing", "7.5", 15360, 320, 70, "pcie", 0, None, "410.48", "", 8, 32),
    (
        "a10",
        "A10 24GB",
        "NVIDIA A10",
        "Ampere",
        "8.6",
        23028,
        600,
        150,
        "pcie",
        0,
        None,
        "470.42.01",
        "",
        8,
        64,
    ),
    ("l4", "L4 24GB", "NVIDIA L4", "Ada", "8.9", 23034, 300, 72, "pcie", 0, None, "520.61.05", "", 8, 64),
    (
        "l40s",
        "L40S 48GB",
        "NVIDIA L40S",
        "Ada",
        "8.9",
        46068,
        864,
        350,
        "pcie",
        0,
        None,
        "520.61.05",
        "",
        16,
        128,
    ),
    (
        "a100-sxm4-40gb",
        "A100 SXM4 40GB",
        "NVIDIA A100-SXM4-40GB",
        "Ampere",
        "8.0",
        40960,
        1555,
        400,
        "sxm",
        600,
        ("5gb", "10gb", "20gb", "40gb"),
        "450.80.02",
        "450.80.02",
        12,
        128,
    ),
    (
        "a100-sxm4-80gb",
        "A100 SXM4 80GB",
        "NVIDIA A100-SXM4-80GB",
        "Ampere",
        "8.0",
        81920,
        2039,
        400,
        "sxm",
        600,
        ("10gb", "20gb", "40gb", "80gb"),
        "450.80.02",
        "450.80.02",
        12,
        256,
    ),
    (
        "h100-sxm5-80gb",
        "H100 SXM5 80GB",
        "NVIDIA H100 80GB HBM3",
        "Hopper",
        "9.0",
        81559,
        3350,
        700,
        "sxm",
        900,
        ("10gb", "20gb", "40gb", "80gb"),
        "520.61.05",
        "525.85.12",
        24,
        256,
    ),
    (
        "h200-sxm-141gb",
        "H200 SXM 141GB",
        "NVIDIA H200",
        "Hopper",
        "9.0",
        143771,
        4800,
        700,
        "sxm",
        900,
        ("18gb", "35gb", "71gb", "141gb"),
        "525.60.13",
        "550.90.07",
        24,
        256,
    ),
    (
        "b200-sxm-180gb",
        "B200 SXM 180GB",
        "NVIDIA B200",
        "Blackwell",
        "10.0",
        184320,
        8000,
        1000,
        "sxm",
        1800,
        ("23gb", "45gb", "90gb", "180gb"),
        "570.133.20",
        "570.133.20",
        28,
        256,
    ),
]

REGIONS = {
    "us-east-1": (
        "US East (Virginia)",
        {
            "t4": 64,
            "a10": 64,
            "l4": 128,
            "l40s": 64,
            "a100-sxm4-40gb": 64,
            "a100-sxm4-80gb": 128,
            "h100-sxm5-80gb": 256,
            "h200-sxm-141gb": 128,
            "b200-sxm-180gb": 64,
        },
    ),
    "eu-west-1": (
        "EU West (Ireland)",
        {
            "l4": 32,
            "l40s": 32,
            "a100-sxm4-80gb": 32,
            "h100-sxm5-80gb": 64,
            "h200-sxm-141gb": 16,
        },
    ),
}

# (minor, offered for new clusters, the default, end of upstream patch support: kubernetes.io/releases)
KUBERNETES_VERSIONS = [
    ("1.33", False, False, "2026-06-28"),
    ("1.34", True, False, "2026-10-27"),
    ("1.35", True, True, "2027-02-28"),
    ("1.36", True, False, "2027-06-28"),
]


# (name, OS, kernel, NVIDIA Container Toolkit, preinstalled driver or None, released, the default).
# Without a preinstalled driver the GPU Operator installs the pool's; GPU sharing needs kernel 5.10+.
NODE_IMAGES = [
    ("ubuntu-2004-gpu-2023-04", "Ubuntu 20.04", "5.4.0-148-generic", "1.13.1", None, "2023-04-20", False),
    ("ubuntu-2204-gpu-2025-06", "Ubuntu 22.04", "5.15.0-141-generic", "1.17.8", None, "2025-06-12", False),
    ("ubuntu-2404-gpu-2026-10", "Ubuntu 24.04", "6.8.0-85-generic", "1.18.0", None, "2026-10-08", True),
    (
        "ubuntu-2404-gpu-580-2026-10",
        "Ubuntu 24.04",
        "6.8.0-85-generic",
        "1.18.0",
        "580.105.08",
        "2026-10-08",
        False,
    ),
]


@transaction.atomic
def seed_catalog() -> None:
    """Create or refresh the seed rows. Idempotent."""
    archs = {
        name: Architecture.objects.update_or_create(name=name, defaults={"compute_capabilities": ccs})[0]
        for name, ccs in ARCHITECTURES.items()
    }
    for version, kind, eol, released, cuda, supported in DRIVERS:
        driver, _ = DriverRelease.objects.update_or_create(
            version=version,
            defaults={
                "branch": int(version.split(".")[0]),
                "branch_type": kind,
                "branch_end_of_life": _d(eol),
                "release_date": _d(released),
                "cuda_version": cuda,
            },
        )
        driver.architectures.set([archs[a] for a in supported])
    for (
        name,
        display,
        product,
        arch,
        cc,
        mib,
        bw,
        watts,
        form,
        nvlink_bw,
        mig_sizes,
        floor,
        mig_floor,
        cpus,
        host_gib,
    ) in GPU_MODELS:
        model, _ = GpuModel.objects.update_or_create(
            name=name,
            defaults={
                "display_name": display,
                "product_name": product,
                "architecture": archs[arch],
                "compute_capability": cc,
                "memory_mib": mib,
                "memory_bandwidth_gbps": bw,
                "max_power_w": watts,
                "form_factor": form,
                "nvlink": nvlink_bw > 0,
                "nvlink_bandwidth_gbps": nvlink_bw,
                "max_gpus_per_node": 8,
                "mig_max_instances": 7 if mig_sizes else 0,
                "min_driver_version": floor,
                "mig_min_driver_version": mig_floor,
                "host_cpus_per_gpu": cpus,
                "host_memory_gib_per_gpu": host_gib,
            },
        )
        if mig_sizes:
            sizes = dict(zip("abcd", mig_sizes, strict=True))
            for template, profile_id, compute, slots, starts, max_instances in MIG_8_SLICE:
                MigProfile.objects.update_or_create(
                    gpu_model=model,
                    name=template.format(**sizes),
                    defaults={
                        "profile_id": profile_id,
                        "compute_slices": compute,
                        "memory_slices": slots,
                        "memory_mib": mib * slots // 8,
                        "max_instances": max_instances,
                        "placements": starts,
                    },
                )
    for region_name, (display, inventory) in REGIONS.items():
        region, _ = Region.objects.update_or_create(name=region_name, defaults={"display_name": display})
        for model_name, total in inventory.items():
            RegionInventory.objects.update_or_create(
                region=region, gpu_model=GpuModel.objects.get(name=model_name), defaults={"total_gpus": total}
            )
    for name, os_name, kernel, toolkit, driver, released, default in NODE_IMAGES:
        NodeImage.objects.update_or_create(
            name=name,
            defaults={
                "os": os_name,
                "kernel_version": kernel,
                "container_toolkit_version": toolkit,
                "driver_release": DriverRelease.objects.get(version=driver) if driver else None,
                "release_date": _d(released),
                "is_default": default,
            },
        )
    for version, enabled, default, end in KUBERNETES_VERSIONS:
        KubernetesVersion.objects.update_or_create(
            version=version, defaults={"enabled": enabled, "is_default": default, "end_of_support": _d(end)}
        )
