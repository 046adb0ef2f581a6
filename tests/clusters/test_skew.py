"""Kubernetes' version skew rules, table by table: each case is an upgrade and the rule that refuses it
(None: allowed), and every refusal's message names the versions it is about."""

import pytest

from clusters.skew import MAX_KUBELET_SKEW, control_plane_refusal, minor_of, pool_refusal


@pytest.mark.parametrize(
    "current, target, pools, rule",
    [
        ("1.34", "1.35", {}, None),
        ("v1.34.2", "v1.35.1", {"gpu": "1.34"}, None),  # releases compare by minor
        ("1.34", "1.34", {}, "same_version"),
        ("1.35", "1.34", {}, "downgrade"),
        ("1.33", "1.35", {}, "skips_minor"),
        ("1.33", "1.36", {}, "skips_minor"),
        ("1.35", "1.36", {"gpu": "1.33"}, None),  # three behind: the most a kubelet may be
        ("1.35", "1.36", {"gpu": "1.33", "old": "1.32"}, "pool_too_far_behind"),
        ("1.35", "2.0", {}, "skips_minor"),
    ],
)
def test_the_control_plane_moves_one_minor_at_a_time_within_its_pools_skew(current, target, pools, rule):
    refusal = control_plane_refusal(current, target, pools)
    assert (refusal.rule if refusal else None) == rule


@pytest.mark.parametrize(
    "control_plane, current, target, rule",
    [
        ("1.35", "1.34", "1.35", None),
        ("1.35", "1.32", "1.35", None),  # machines are replaced, so a pool may move several minors
        ("1.35", "1.32", "1.33", None),
        ("1.35", "1.34", "1.36", "newer_than_control_plane"),
        ("1.35", "1.34", "1.34", "same_version"),
        ("1.35", "1.34", "1.33", "downgrade"),
        ("1.36", "1.31", "1.32", "too_far_behind"),
        ("1.36", "1.31", "1.33", None),
    ],
)
def test_a_pool_is_never_newer_than_its_control_plane_nor_too_far_behind(
    control_plane, current, target, rule
):
    refusal = pool_refusal(control_plane, current, target, "gpu")
    assert (refusal.rule if refusal else None) == rule


def test_refusals_say_which_versions_and_which_rule():
    assert control_plane_refusal("1.33", "1.35", {}).message == (
        "Kubernetes 1.33 → 1.35 skips 1.34: the control plane moves one minor version at a time."
    )
    assert control_plane_refusal("1.35", "1.36", {"train": "1.32"}).message == (
        f"Pool train runs Kubernetes 1.32: with the control plane on 1.36 its kubelets would be 4 minor "
        f"versions older, and at most {MAX_KUBELET_SKEW} are supported. Upgrade the pool first."
    )
    assert "Upgrade the control plane first" in pool_refusal("1.35", "1.35", "1.36", "train").message
    assert "train" in pool_refusal("1.36", "1.31", "1.32", "train").message


@pytest.mark.parametrize("text", ["1", "1.x", "latest", "1.34-rc.1", ""])
def test_what_is_not_a_kubernetes_version_is_an_error(text):
    with pytest.raises(ValueError):
        minor_of(text)
