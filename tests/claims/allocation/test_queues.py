"""Queues' books (claims.allocation.queues): Kueue's borrowing and lending within a cohort, limits, and
the dominant share of what a queue borrows."""

from claims.allocation.queues import Book, Quota, Use

H100 = "h100"
MIB = 81920  # one H100's memory


def quota(gpus: int, borrowing: int | None = None, lending: int | None = None) -> Quota:
    return Quota(Use(gpus, gpus * MIB), MIB, borrowing, lending)


def book(*queues: tuple[int, str, Quota]) -> Book:
    return Book({q: {H100: qt} for q, _, qt in queues}, {q: cohort for q, cohort, _ in queues})


def gpus(n: int) -> Use:
    return Use(n, n * MIB)


def test_a_queue_without_a_cohort_has_its_nominal_and_nothing_else():
    b = book((1, "", quota(8)), (2, "", quota(8)))
    b.charge(1, H100, gpus(8))
    assert b.refusal(1, H100, gpus(1)).startswith("its queue has 0 h100 GPUs left")
    assert b.available(2, H100, "gpus") == 8  # another queue's idle quota is not lendable without a cohort
    assert b.share(1) == 0.0


def test_a_queue_borrows_what_its_cohort_leaves_unused_up_to_its_borrowing_limit():
    b = book((1, "team", quota(8, borrowing=4)), (2, "team", quota(8)), (3, "team", quota(8)))
    assert b.available(1, H100, "gpus") == 12  # nominal 8 + borrowing limit 4, the cohort has 24
    assert b.available(2, H100, "gpus") == 24  # no limit: all the cohort has
    b.charge(1, H100, gpus(12))
    assert b.refusal(1, H100, gpus(1))
    assert b.borrowing(1, H100) and not b.borrowing(2, H100)
    assert b.available(2, H100, "gpus") == 12  # what queue 1 borrowed is taken from the others' room
    assert b.lent(2, H100, "gpus") + b.lent(3, H100, "gpus") == 4


def test_a_lending_limit_keeps_the_rest_of_the_nominal_for_its_queue():
    b = book((1, "team", quota(8)), (2, "team", quota(8, lending=2)))
    assert b.available(1, H100, "gpus") == 10  # its 8 and the 2 queue 2 lends
    b.charge(1, H100, gpus(10))
    assert b.available(2, H100, "gpus") == 6  # the 6 it keeps, whatever queue 1 does
    assert b.refusal(1, H100, gpus(1))


def test_memory_bounds_fractions_where_gpus_do_not():
    b = Book({1: {H100: Quota(Use(0, 40960), MIB)}}, {1: ""})
    b.charge(1, H100, Use(0, 30720))
    assert not b.refusal(1, H100, Use(0, 10240))
    assert "MiB of GPU memory" in b.refusal(1, H100, Use(0, 10241))


def test_within_nominal_and_the_dominant_share_of_what_is_borrowed():
    b = book((1, "team", quota(8)), (2, "team", quota(8)), (3, "team", quota(8)))
    b.charge(1, H100, gpus(12))
    b.charge(2, H100, gpus(10))
    assert b.share(1) == 4 / 24 and b.share(2) == 2 / 24 and b.share(3) == 0.0
    assert b.within_nominal(3, H100, gpus(2)) and not b.within_nominal(3, H100, gpus(9))
    b.refund(1, H100, gpus(4))
    assert b.share(1) == 0.0 and not b.borrowing(1, H100)
    # Fair order asks what the share would be with the claim: at its nominal, one more GPU borrows.
    assert b.share(1, (H100, gpus(2))) == 2 / 24 and b.share(3, (H100, gpus(2))) == 0.0
    assert b.share(1) == 0.0  # asking changes nothing
