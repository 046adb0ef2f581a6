"""/api/docs/ groups its operations by resource: each operation's tag is its path's first part after
/api/v1/, not one "v1" group of every operation."""

import pytest

pytestmark = pytest.mark.django_db


def test_operations_are_tagged_by_resource(client):
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    tags = {
        path: {tag for operation in item.values() for tag in operation.get("tags", [])}
        for path, item in schema["paths"].items()
    }
    assert tags["/api/v1/clusters/"] == {"clusters"}
    assert tags["/api/v1/claims/{id}/"] == {"claims"}
    assert tags["/api/v1/fleet/"] == {"fleet"}
    assert len(set().union(*tags.values())) >= 15 and "v1" not in set().union(*tags.values())
