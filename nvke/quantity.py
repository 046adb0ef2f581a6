"""Kubernetes quantities: memory ("4Gi", "512Mi", "1.5Gi", "8G", "1073741824") to and from MiB, and
any quantity ("63500m" CPUs, "527Gi" bytes) as a plain number."""

import math
import re

_UNITS = {
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
}
_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|k|M|G|T|m)?$")


def parse(text: str) -> float:
    """A quantity as a number: cores for CPU ("63500m" is 63.5), bytes for memory. ValueError if malformed."""
    match = _QUANTITY.match(str(text).strip())
    if not match:
        raise ValueError(f"{text!r} is not a quantity like 4Gi, 512Mi or 500m.")
    number, unit = match.groups()
    return float(number) / 1000 if unit == "m" else float(number) * _UNITS[unit or ""]


def parse_mib(text: str) -> int:
    """MiB in a memory quantity, rounded up (a claim gets at least what it asked for). ValueError if
    malformed."""
    refused = ValueError(f"{text!r} is not a memory quantity like 4Gi or 512Mi.")
    if str(text).strip().endswith("m"):  # milli-bytes: a CPU quantity given for memory
        raise refused
    try:
        return math.ceil(parse(text) / 2**20)
    except ValueError:
        raise refused from None


def format_mib(mib: int) -> str:
    return f"{mib // 1024}Gi" if mib % 1024 == 0 else f"{mib}Mi"


def human_mib(mib: int) -> str:
    """For reading, not round-tripping: '12Gi', or one decimal where the figure is not whole: '22.5Gi'."""
    return format_mib(mib) if mib % 1024 == 0 or mib < 1024 else f"{mib / 1024:.1f}Gi"
