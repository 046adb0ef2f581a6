"""The claim form offers what the API does: a guaranteed share, training, the GPU models to place it
on; each kind reads only its own section; refusals speak the form's labels, not the API's fields."""

import pytest

from claims.models import Claim
from nodepools.services import reconcile

from .helpers import field_block, field_errors, text
from .test_claims import create

pytestmark = pytest.mark.django_db


@pytest.fixture
def cluster(tenant, make_cluster):
    return make_cluster(tenant, "prod")


@pytest.fixture
def a10(cluster, make_pool):
    """One time-slicing A10 guaranteeing 10% to a claim that names no guaranteed share."""
    pool = make_pool(
        cluster, name="a10", gpu_model="a10", nodes=1, gpus_per_node=1, sharing_mode="time-slicing",
        compute_oversubscription_percent=200, default_guaranteed_percent=10,
    )  # fmt: skip
    reconcile(pool.pk)
    return pool


def test_the_form_renders_guaranteed_compute_training_and_the_cluster_gpu_models(ui, cluster, a10):
    page = ui.get(f"/clusters/{cluster.pk}/claims/new/")
    assert "Guaranteed compute %" in field_block(page, "guaranteed_percent")
    assert "Training job" in field_block(page, "training")
    assert 'value="a10"' in field_block(page, "allowed_models")  # the models of the cluster's pools
    # Each kind's section is marked, so the page shows only the chosen kind's.
    for kind in ("whole", "mig", "fraction"):
        assert f'data-kind="{kind}"' in text(page)


def test_a_training_claim_gets_the_guarantee_it_asks_for(ui, cluster, a10):
    response = create(
        ui, cluster, name="train", gpu_memory="8Gi", compute_percent="70", guaranteed_percent="70",
        training="on", allowed_models="a10",
    )  # fmt: skip
    assert response.status_code == 302
    claim = Claim.objects.get(name="train")
    assert (claim.guaranteed_percent, claim.training, claim.allowed_models) == (70, True, ["a10"])
    assert claim.allocation.guaranteed_milli == 700  # not the pool's default 10%


def test_fields_of_another_kind_left_in_the_form_are_not_sent(ui, cluster, make_pool):
    reconcile(make_pool(cluster, name="whole", gpu_model="l4", nodes=1, gpus_per_node=2).pk)
    # A whole-GPU claim whose fraction fields still hold what was typed before the kind changed.
    response = create(ui, cluster, name="two", kind="whole", gpus="2", guaranteed_percent="20")
    assert response.status_code == 302
    claim = Claim.objects.get(name="two")
    assert (claim.gpus, claim.gpu_memory_mib, claim.compute_percent) == (2, None, None)


def test_refusals_name_the_form_labels_not_the_api_fields(ui, cluster, a10):
    response = create(ui, cluster, gpu_memory="", compute_percent="")
    assert response.status_code == 400
    assert field_errors(response, "gpu_memory") == [
        "A fraction asks for “GPU memory” and/or “Compute ceiling %”."
    ]
    response = create(ui, cluster, compute_percent="20", guaranteed_percent="30")
    (error,) = field_errors(response, "guaranteed_percent")
    assert error.startswith("“Guaranteed compute %” 30 is above the claim's ceiling, “Compute ceiling %” 20")
    assert not Claim.objects.exists()


def test_a_refused_attach_keeps_the_token_typed(ui):
    response = ui.post(
        "/clusters/attach/", {"name": "on-prem", "endpoint": "https://127.0.0.1:1", "token": "s3cret"}
    )
    assert response.status_code == 400
    assert 'value="s3cret"' in field_block(response, "token")
