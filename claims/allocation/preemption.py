"""Preemption: which placed claims a pending claim (or group) of higher priority takes the GPUs of.

Pure: no Django. The caller lifts and puts back victims on its own fleets (`take`, `give_back`) and says
whether the preemptor fits as things stand (`fits`). As kube-scheduler's preemption does
(kubernetes/kubernetes, pkg/scheduler/framework/plugins/defaultpreemption/default_preemption.go,
SelectVictimsOnNode: remove the lower-priority pods, then reprieve them one by one), victims are taken
until the preemptor fits, then each is given back again if the preemptor still fits without it (after
one victim alone is tried: the fewest there can be). Taken in the order that costs least: fewest GPUs,
lowest priority, newest first; given back in the reverse, so what stays taken is a minimal set of the
cheapest. A group is one unit: taken and given back whole."""

from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from functools import partial


@dataclass(frozen=True)
class Victim:
    """What one preemption takes: a claim, or every placed member of a group."""

    claims: tuple[int, ...]
    gpus: int  # GPUs it holds a share of
    priority: int
    created: float  # a POSIX timestamp: the newest is taken first


def cost(victim: Victim) -> tuple[int, int, float]:
    return (victim.gpus, victim.priority, -victim.created)


def choose_victims(
    victims: list[Victim],
    fits: Callable[[], bool],
    take: Callable[[Victim], None],
    give_back: Callable[[Victim], None],
    domains: Callable[[Victim], Iterable[Hashable]] | None = None,
    fits_in: Callable[[Hashable], bool] | None = None,
) -> list[Victim] | None:
    """The fewest victims whose GPUs make the preemptor fit, then the fewest GPUs, the lowest priority,
    the newest; None when even all of them would not do. Leaves nothing taken. `domains`: where a victim
    is (its nodes), for a preemptor that lands in one place (a claim on one node): each domain's victims
    are tried alone, as kube-scheduler tries each node, and the best domain's set wins. `fits_in`:
    whether the preemptor fits in that one domain, asked instead of `fits` where only the domain's
    victims can make room (nothing else has changed), so one node is weighed, not the fleet."""
    if domains is None:
        return _minimal(victims, fits, take, give_back)
    by_domain: dict[Hashable, list[Victim]] = defaultdict(list)
    for victim in victims:
        for domain in domains(victim):
            by_domain[domain].append(victim)
    found = [
        _minimal(among, fits if fits_in is None else partial(fits_in, domain), take, give_back)
        for domain, among in by_domain.items()
    ]
    return min((f for f in found if f is not None), key=_set_cost, default=None)


def _set_cost(chosen: list[Victim]) -> tuple:
    return (
        len(chosen),
        sum(v.gpus for v in chosen),
        max(v.priority for v in chosen),
        -max(v.created for v in chosen),
    )


def _minimal(
    victims: list[Victim],
    fits: Callable[[], bool],
    take: Callable[[Victim], None],
    give_back: Callable[[Victim], None],
) -> list[Victim] | None:
    for victim in victims:  # all of them first: where even that would not do, nothing will
        take(victim)
    enough = fits()
    for victim in victims:
        give_back(victim)
    if not enough:
        return None
    ordered = sorted(victims, key=cost)
    for victim in ordered:  # one victim is the fewest there can be: the cheapest that does
        take(victim)
        enough = fits()
        give_back(victim)
        if enough:
            return [victim]
    taken: list[Victim] = []
    for victim in ordered:  # all of them do: take the cheapest until enough
        take(victim)
        taken.append(victim)
        if fits():
            break
    for victim in reversed(taken):  # the costliest first: reprieved if the preemptor fits without it
        give_back(victim)
        if fits():
            taken.remove(victim)
        else:
            take(victim)
    for victim in taken:
        give_back(victim)
    return taken
