"""The upgrade strategy, pure: STRATEGY_FIELDS, each field's name, default, bounds and help, from which
the run's model, the API and the forms make their fields; strategy_error checks values as given, and
Strategy is what the plan (node_machine.plan) follows, its budgets resolved for the pool
(nvke.node_counts reads "N or N%")."""

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from nvke.node_counts import budget_error, nodes_of


class FailedNodes(StrEnum):
    """What happens to a node that fails after its driver was touched."""

    KEEP_CORDONED = "keep-cordoned"  # out of service until a retry or rollback validates a driver
    UNCORDON = "uncordon"  # back into service at once, whatever its driver


@dataclass(frozen=True)
class StrategyField:
    """One field of the upgrade strategy as people set it (the run API, the start and rollout forms, a
    rollout's JSON) and a run stores it. The run's model fields (models.strategy_field), the API
    serializer's, the forms' (frontend/views/upgrades.py) and the validation (strategy_error) are made
    from STRATEGY_FIELDS."""

    name: str
    default: bool | int | str  # its type is the field's: a flag, a whole number or a text
    help: str
    minimum: int = 0  # a whole number: the least value
    max_length: int = 0  # a text: the longest
    choices: tuple[tuple[str, str], ...] = ()  # a text: its values, with their labels in the forms
    label: str = ""  # in the forms; empty: from the name
    suggested: int | str | None = None  # what the forms start from, where it is not the default
    form_minimum: int | None = None  # the forms' least value, where they ask for more than `minimum`
    in_form: bool = True  # the forms offer it

    @property
    def kind(self) -> type:
        """bool, int or str: what its default is."""
        return bool if isinstance(self.default, bool) else int if isinstance(self.default, int) else str


STRATEGY_FIELDS: tuple[StrategyField, ...] = (
    StrategyField(
        "max_unavailable",
        "1",
        'Nodes out of service at once: a count ("2") or a percent of the pool ("10%", rounded up); 0 only '
        "with a max_surge.",
        max_length=8,
        suggested="10%",
    ),
    StrategyField(
        "max_surge",
        "0",
        "Kubernetes and node image upgrades: extra nodes, on the new version, the pool gets while its "
        'machines are replaced: a count ("1") or a percent of the pool ("10%", rounded up). Each lets one '
        "more node be drained at once; the run drains them away again at its end.",
        max_length=8,
        in_form=False,  # a driver is installed in place: only the versions page's pool forms offer it
    ),
    StrategyField("canary_nodes", 0, "Upgrade this many nodes first."),
    StrategyField(
        "canary_bake_s", 0, "Wait this long after the canary nodes.", label="Canary bake (s)", suggested=300
    ),
    StrategyField("canary_approval", False, "Wait for an approval after the canary instead."),
    StrategyField(
        "drain_timeout_s",
        600,
        "A node whose claims are not evicted by then fails.",
        label="Drain timeout (s)",
        form_minimum=1,
    ),
    StrategyField(
        "validation_timeout_s",
        900,
        "A node not reporting the target driver with every GPU healthy by then fails.",
        label="Validation timeout (s)",
        in_form=False,
    ),
    StrategyField("failure_budget", 1, "Pause after this many failed nodes.", minimum=1),
    StrategyField(
        "failed_nodes",
        FailedNodes.KEEP_CORDONED,
        "A node whose new driver fails to install or validate: keep it out of service until a retry or "
        "rollback validates a driver, or put it back into service at once.",
        max_length=16,
        choices=((FailedNodes.KEEP_CORDONED, "Keep cordoned"), (FailedNodes.UNCORDON, "Uncordon at once")),
    ),
)
STRATEGY = {spec.name: spec for spec in STRATEGY_FIELDS}


def strategy_error(values: Mapping[str, object], nodes: int) -> tuple[str, str] | None:
    """The first bad value of a strategy as given (a field left out takes its default), as (field,
    message); None when all are good. Fleet rollouts pass their JSON as it came, so the types are
    checked here too, not only by the run API's serializer. `nodes`: the pool's, for canary_nodes."""
    given = {spec.name: values.get(spec.name, spec.default) for spec in STRATEGY_FIELDS}
    for spec in STRATEGY_FIELDS:
        value = given[spec.name]
        if spec.kind is int and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            return spec.name, f"{spec.name} is a whole number of at least 0."
    for spec in STRATEGY_FIELDS:
        if spec.kind is bool and not isinstance(given[spec.name], bool):
            return spec.name, f"{spec.name} is true or false."
    if error := budget_error(given["max_unavailable"], given["max_surge"]):
        return error
    if given["canary_nodes"] > nodes:
        return "canary_nodes", f"canary_nodes {given['canary_nodes']} is more than the pool's {nodes} nodes."
    for spec in STRATEGY_FIELDS:
        if spec.kind is int and given[spec.name] < spec.minimum:
            return spec.name, f"{spec.name} is at least {spec.minimum}."
        if spec.choices and given[spec.name] not in [value for value, _ in spec.choices]:
            return spec.name, f"{spec.name} is one of {', '.join(value for value, _ in spec.choices)}."
    return None


@dataclass(frozen=True)
class Strategy:
    """The strategy the plan follows: STRATEGY_FIELDS, max_unavailable resolved for the pool."""

    max_unavailable: int  # already resolved from a count or a percent of the pool
    max_surge: int = 0  # the same; a replacement run's extra nodes (the shell adds and removes them)
    canary_nodes: int = STRATEGY["canary_nodes"].default  # the first N nodes go alone
    canary_bake_s: float = STRATEGY["canary_bake_s"].default  # then wait this long ...
    canary_approval: bool = STRATEGY["canary_approval"].default  # ... or for an operator's approval
    drain_timeout_s: float = STRATEGY["drain_timeout_s"].default
    validation_timeout_s: float = STRATEGY["validation_timeout_s"].default
    failure_budget: int = STRATEGY["failure_budget"].default  # pause once this many nodes have failed
    failed_nodes: FailedNodes = STRATEGY["failed_nodes"].default

    @classmethod
    def of(cls, values: Mapping[str, object], nodes: int) -> "Strategy":
        """The strategy of a run as stored (each of STRATEGY_FIELDS; max_unavailable as written) for a
        pool of `nodes`."""
        given = {spec.name: values.get(spec.name, spec.default) for spec in STRATEGY_FIELDS}
        for name in ("max_unavailable", "max_surge"):
            given[name] = nodes_of(given[name], nodes)
        given["failed_nodes"] = FailedNodes(given["failed_nodes"])
        return cls(**given)
