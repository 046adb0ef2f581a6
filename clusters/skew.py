"""Kubernetes' version skew rules for upgrades (pure): what an upgrade of a cluster's control plane or
of one node pool may do, each refusal with its rule and a message saying which rule and why.

From Kubernetes' version skew policy: kube-apiserver moves one minor version at a time (1.33 → 1.34,
never 1.33 → 1.35); a kubelet must never be newer than kube-apiserver and may be up to three minor
versions older (since 1.28). A node pool's kubelets follow that rule. A pool may move several minors at
once, since a pool's upgrade replaces its machines (fresh kubelets join) rather than upgrading them in
place. Upgrading the control plane must keep every pool within the skew, so a pool too far behind is
upgraded first."""

import re

from catalog.compatibility import Refusal

MAX_KUBELET_SKEW = 3  # minor versions a kubelet may lag kube-apiserver

_VERSION = re.compile(r"v?(\d+)\.(\d+)(?:\.\d+)?")


def minor_of(version: str) -> tuple[int, int]:
    """(major, minor) of "1.34", "v1.34.2" or "1.34.2"; ValueError for anything else."""
    if not (match := _VERSION.fullmatch(version)):
        raise ValueError(f"{version!r} is not a Kubernetes version")
    return int(match[1]), int(match[2])


def _name(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"


def _behind(newer: tuple[int, int], older: tuple[int, int]) -> int:
    """Minor versions between two versions of one major (Kubernetes 1.x)."""
    return newer[1] - older[1] if newer[0] == older[0] else 1000 * (newer[0] - older[0])


def _direction(current: tuple[int, int], target: tuple[int, int], what: str) -> Refusal | None:
    if target == current:
        return Refusal("same_version", f"{what} already runs Kubernetes {_name(current)}.")
    if target < current:
        return Refusal(
            "downgrade",
            f"{what} runs Kubernetes {_name(current)}: it cannot go back to {_name(target)} (Kubernetes "
            "supports no downgrades).",
        )
    return None


def control_plane_refusal(current: str, target: str, pools: dict[str, str]) -> Refusal | None:
    """Why the control plane cannot move from `current` to `target` with the pools at their versions
    ({name: version}); None when it can."""
    now, to = minor_of(current), minor_of(target)
    if refusal := _direction(now, to, "The control plane"):
        return refusal
    if _behind(to, now) > 1:
        skipped = (
            ", ".join(f"{now[0]}.{m}" for m in range(now[1] + 1, to[1])) if to[0] == now[0] else "a major"
        )
        return Refusal(
            "skips_minor",
            f"Kubernetes {_name(now)} → {_name(to)} skips {skipped}: the control plane moves one minor "
            "version at a time.",
        )
    for pool, version in sorted(pools.items()):
        lag = _behind(to, minor_of(version))
        if lag > MAX_KUBELET_SKEW:
            return Refusal(
                "pool_too_far_behind",
                f"Pool {pool} runs Kubernetes {_name(minor_of(version))}: with the control plane on "
                f"{_name(to)} its kubelets would be {lag} minor versions older, and at most "
                f"{MAX_KUBELET_SKEW} are supported. Upgrade the pool first.",
            )
    return None


def pool_refusal(control_plane: str, current: str, target: str, pool: str) -> Refusal | None:
    """Why pool `pool` cannot move from `current` to `target` under a control plane on `control_plane`;
    None when it can."""
    plane, now, to = minor_of(control_plane), minor_of(current), minor_of(target)
    if refusal := _direction(now, to, f"Pool {pool}"):
        return refusal
    if to > plane:
        return Refusal(
            "newer_than_control_plane",
            f"Pool {pool} cannot run Kubernetes {_name(to)} under a control plane on {_name(plane)}: a "
            "kubelet is never newer than kube-apiserver. Upgrade the control plane first.",
        )
    if (lag := _behind(plane, to)) > MAX_KUBELET_SKEW:
        return Refusal(
            "too_far_behind",
            f"Pool {pool} on Kubernetes {_name(to)} would be {lag} minor versions behind the control plane "
            f"({_name(plane)}); at most {MAX_KUBELET_SKEW} are supported.",
        )
    return None
