"""The queue pages: a cluster's queues with their figures, a queue's page, and another tenant's queues
and clusters a 404."""

import pytest

from claims.models import Queue

pytestmark = pytest.mark.django_db

H100 = "h100-sxm5-80gb"


@pytest.fixture
def cluster(tenant, make_cluster):
    return make_cluster(tenant, "prod")


def test_the_list_and_a_queues_page(ui, tenant, cluster):
    queue = Queue.objects.create(
        tenant=tenant, cluster=cluster, name="train", cohort="lab", quotas=[{"gpu_model": H100, "gpus": 8}]
    )
    Queue.objects.create(tenant=tenant, cluster=cluster, name="idle")
    page = ui.get(f"/clusters/{cluster.pk}/queues/").content.decode()
    assert f'href="/queues/{queue.pk}/">train</a>' in page and "No quota yet" in page
    assert f'href="/clusters/{cluster.pk}/queues/"' in ui.get(f"/clusters/{cluster.pk}/").content.decode()
    page = ui.get(f"/queues/{queue.pk}/").content.decode()
    assert "Queue train" in page and f'data-queue-model="{H100}"' in page and "Nothing waits" in page


def test_another_tenants_queues_are_404(ui, cluster, make_member, make_cluster):
    other = make_member("globex", "owner").memberships.get().tenant
    theirs = make_cluster(other, "theirs")
    queue = Queue.objects.create(tenant=other, cluster=theirs, name="secret")
    assert ui.get(f"/queues/{queue.pk}/").status_code == 404
    assert ui.get(f"/clusters/{theirs.pk}/queues/").status_code == 404
