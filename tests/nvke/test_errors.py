"""Errors cross processes (Celery results and task exceptions are pickled): they come back whole."""

import pickle

from nvke.errors import Conflict
from nvke.providers.base import ProviderError, ProvisioningInProgress
from upgrades.rollouts import PlanChanged


def test_provider_errors_survive_a_pickle_round_trip():
    for error in (
        ProviderError("ServerError", "The API server answered 503.", status=503),
        ProvisioningInProgress("Provisioning", "The control plane is coming up."),
    ):
        back = pickle.loads(pickle.dumps(error))
        assert type(back) is type(error)
        assert (back.reason, back.message, back.status, str(back)) == (
            error.reason,
            error.message,
            error.status,
            str(error),
        )


def test_domain_errors_survive_a_pickle_round_trip_with_field_code_and_details():
    error = Conflict("Taken.", field="name", code="name_taken", existing=3)
    back = pickle.loads(pickle.dumps(error))
    assert (type(back), back.message, back.field, back.code, back.details, back.status) == (
        Conflict,
        "Taken.",
        "name",
        "name_taken",
        {"field": "name", "existing": 3},
        409,
    )
    changed = pickle.loads(pickle.dumps(PlanChanged(plan={"waves": []})))  # __init__ takes a plan
    assert (changed.plan, changed.field, changed.code) == ({"waves": []}, "plan", "plan_changed")
