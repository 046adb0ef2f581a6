"""The upgrade strategy has one definition, strategy.STRATEGY_FIELDS: the plan's Strategy, the run's
columns, the API's fields and the forms' are made from it, and strategy_error checks every value."""

from dataclasses import fields

import pytest

from frontend.views.upgrades import StrategyForm
from upgrades.api.serializers import UpgradeRunSerializer
from upgrades.models import UpgradeRun
from upgrades.strategy import STRATEGY_FIELDS, FailedNodes, Strategy, strategy_error

NAMES = [spec.name for spec in STRATEGY_FIELDS]


def test_the_plans_strategy_has_the_same_fields_and_defaults():
    assert [f.name for f in fields(Strategy)] == NAMES
    default = Strategy.of({}, nodes=10)
    for spec in STRATEGY_FIELDS[2:]:  # max_unavailable and max_surge are resolved to counts of nodes
        assert getattr(default, spec.name) == spec.default
    assert (default.max_unavailable, default.max_surge) == (1, 0)
    given = {"max_unavailable": "25%", "max_surge": "10%", "failed_nodes": "uncordon"}
    assert Strategy.of(given, nodes=10) == Strategy(
        max_unavailable=3, max_surge=1, failed_nodes=FailedNodes.UNCORDON
    )


def test_the_run_stores_each_field_with_its_default_and_help():
    for spec in STRATEGY_FIELDS:
        column = UpgradeRun._meta.get_field(spec.name)
        assert (column.default, column.help_text) == (spec.default, spec.help)


def test_the_api_and_the_forms_offer_the_same_fields():
    api = UpgradeRunSerializer().fields
    for spec in STRATEGY_FIELDS:
        assert (api[spec.name].default, api[spec.name].help_text) == (spec.default, spec.help)
    form = StrategyForm()
    assert list(form.fields) == [spec.name for spec in STRATEGY_FIELDS if spec.in_form]
    assert form.fields["max_unavailable"].initial == "10%"  # the form suggests more than the default
    assert form.fields["drain_timeout_s"].min_value == 1


@pytest.mark.parametrize(
    ("values", "error"),
    [
        ({}, None),
        ({"failure_budget": "x"}, ("failure_budget", "failure_budget is a whole number of at least 0.")),
        ({"canary_bake_s": -1}, ("canary_bake_s", "canary_bake_s is a whole number of at least 0.")),
        ({"drain_timeout_s": True}, ("drain_timeout_s", "drain_timeout_s is a whole number of at least 0.")),
        ({"canary_approval": "yes"}, ("canary_approval", "canary_approval is true or false.")),
        (
            {"max_unavailable": "0"},
            (
                "max_unavailable",
                "max_unavailable is at least 1 without a max_surge: the run must take some node out.",
            ),
        ),
        (
            {"max_unavailable": "101%"},
            ("max_unavailable", 'max_unavailable is a count ("2") or a percent up to 100% ("10%").'),
        ),
        ({"max_unavailable": "0", "max_surge": "1"}, None),
        ({"canary_nodes": 5}, ("canary_nodes", "canary_nodes 5 is more than the pool's 4 nodes.")),
        ({"failure_budget": 0}, ("failure_budget", "failure_budget is at least 1.")),
        ({"failed_nodes": ""}, ("failed_nodes", "failed_nodes is one of keep-cordoned, uncordon.")),
        ({"validation_timeout_s": 0, "drain_timeout_s": 0}, None),
    ],
)
def test_strategy_error_names_the_first_bad_field(values, error):
    assert strategy_error(values, nodes=4) == error
