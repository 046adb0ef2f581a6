"""Driver version strings ("570.133.20") compared as numbers, not text."""


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def is_valid_version(version: str) -> bool:
    try:
        return bool(version) and len(version_key(version)) >= 2
    except ValueError:
        return False
