"""The simulator's telemetry follows the claims on each GPU and their usage profiles."""

import datetime
import time

import pytest
from django.core.management import call_command

from claims.models import Claim
from telemetry import rescale, store, synthetic_load
from telemetry.models import ClaimScaling

from .conftest import gpu_of

pytestmark = pytest.mark.django_db


def test_gpu_load_follows_its_claims(add_pool, claim_in):
    add_pool("only", gpus_per_node=2)
    steady, busy = claim_in("steady", 40), claim_in("busy", 50)
    ClaimScaling.objects.create(
        tenant=busy.tenant, claim=busy, profile="bursty", requested_compute_percent=50
    )
    now = (time.time() // 60) * 60 + 5  # inside a burst
    synthetic_load.tick(now)

    loads = store.latest([gpu_of(steady).pk, gpu_of(busy).pk])
    usage = store.claim_states([steady.pk, busy.pk])
    assert usage[steady.pk]["usage"] == 60 and usage[busy.pk]["usage"] == 100  # capped at its share
    if gpu_of(steady) == gpu_of(busy):
        assert loads[gpu_of(steady).pk]["util"] == pytest.approx(0.4 * 60 + 0.5 * 100, abs=2)
    else:
        assert loads[gpu_of(steady).pk]["util"] == pytest.approx(0.4 * 60, abs=2)
    synthetic_load.tick(now + 20)  # between bursts
    assert store.claim_states([busy.pk])[busy.pk]["usage"] == 40


def test_a_growing_claim_is_grown_and_a_bursty_one_is_not(add_pool, claim_in):
    add_pool("only", gpus_per_node=2)
    growing, bursty = claim_in("growing", 30), claim_in("bursty", 30)
    for claim, profile in ((growing, "growing"), (bursty, "bursty")):
        ClaimScaling.objects.create(
            tenant=claim.tenant, claim=claim, profile=profile, requested_compute_percent=30
        )
    start = (time.time() // 60) * 60 - 60  # on a whole minute: a burst starts there
    Claim.objects.filter(pk=growing.pk).update(
        allocated_at=datetime.datetime.fromtimestamp(start - 300, datetime.UTC)
    )
    gpus = synthetic_load.layout()
    for second in range(45):  # growing is past 100 % of its request; bursty bursts for 10 s
        synthetic_load.tick(start + second, gpus)
    assert rescale.rescale() == [(growing.pk, "claim.grown")]


def test_command_plays_ticks(add_pool, claim_in):
    add_pool("only")
    claim = claim_in("c", 40)
    call_command("simulate_telemetry", ticks=2, interval=0)
    assert store.latest([gpu_of(claim).pk])
