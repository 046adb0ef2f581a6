"""MIG geometry on 8-memory-slice GPUs (gpu-reference-facts §4.3–4.9)."""

import pytest

from catalog.mig import Profile, place_layout
from catalog.seed import MIG_8_SLICE

PROFILES = {
    name.format(a="10gb", b="20gb", c="40gb", d="80gb"): Profile(
        name.format(a="10gb", b="20gb", c="40gb", d="80gb"), compute, slots, tuple(starts), max_instances
    )
    for name, _, compute, slots, starts, max_instances in MIG_8_SLICE
}


def layout(*names):
    return place_layout([PROFILES[n] for n in names], list(PROFILES.values()))


@pytest.mark.parametrize(
    ("names", "starts"),
    [
        (["7g.80gb"], [0]),
        (["4g.40gb", "3g.40gb"], [0, 4]),
        (["3g.40gb", "3g.40gb"], [0, 4]),
        (["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"], [4, 0, 2, 3]),  # only with the 3g on the right
        (["1g.10gb"] * 7, [0, 1, 2, 3, 4, 5, 6]),
        (["1g.20gb"] * 4, [0, 2, 4, 6]),
        (["2g.20gb", "2g.20gb", "2g.20gb", "1g.10gb"], [0, 2, 4, 6]),
    ],
)
def test_layouts_that_fit(names, starts):
    assert layout(*names) == starts


@pytest.mark.parametrize(
    "names",
    [
        ["7g.80gb", "1g.10gb"],  # the whole GPU is taken
        ["4g.40gb", "4g.40gb"],  # 4g only at 0
        ["3g.40gb", "3g.40gb", "1g.10gb"],  # 7 compute slices, but all 8 memory slots are taken
        ["1g.10gb"] * 8,  # slot 7 takes no 1-slot instance; also 8 compute slices
        ["2g.20gb"] * 4,  # 2g cannot start at 6
        ["1g.10gb+me", "1g.10gb+me"],  # one +me instance per GPU
    ],
)
def test_layouts_that_do_not_fit(names):
    assert layout(*names) is None


def test_3g_with_four_1g_fits_only_on_the_right_half():
    """A 3g at start 0 leaves three 1g starts (4, 5, 6: §4.9's 7/7 → 3/7); at start 4 it leaves four."""
    assert layout("3g.40gb", *["1g.10gb"] * 4) == [4, 0, 1, 2, 3]
    assert layout("3g.40gb", *["1g.10gb"] * 5) is None
