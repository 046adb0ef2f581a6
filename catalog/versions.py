"""Driver and CUDA version strings ("570.133.20", "12.8") compared as versions (packaging), not as text."""

import re

from packaging.version import Version

# packaging also accepts PEP 440 forms that no NVIDIA driver has ("v570.1", "570.1rc1", "1!570.1",
# " 570.1 "), so what a valid version looks like stays ours: numbers joined by dots, at least two.
_DOTTED = re.compile(r"[0-9]+(?:\.[0-9]+)+")


def version_key(version: str) -> Version:
    """What to compare a version by ("570.9" < "570.10"); raises InvalidVersion (a ValueError) if it is
    not a version."""
    return Version(version)


def is_valid_version(version: str) -> bool:
    return _DOTTED.fullmatch(version) is not None
