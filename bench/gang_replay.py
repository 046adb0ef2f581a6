"""Time-driven gang replay: bench/gangs.py's jobs, arriving and departing on the trace's own clock, with
priorities from the trace's qos, a pending queue retried as GPUs free, and preemption.

    python bench/gang_replay.py --nodes openb_node_list_gpu_node.csv --pods openb_pod_list_default.csv \\
        --seeds 3 [--scale 10] [--compress 100] [--json]

Workload: bench/gangs.py's (pods sampled with replacement to 130% of the GPUs, seeded; each whole-GPU
pod of 2+ GPUs a job of 2 or 4 identical members). Each sampled pod keeps its trace line's times: it
arrives at creation_time / `compress` (the trace's arrivals are sparse: at its own pace at most 65 GPUs
are ever asked at once, so arrivals are made `compress` times denser) and, once fully placed, runs for
deletion_time - creation_time, unchanged; then it departs. Priorities: LS and Guaranteed 2, Burstable 1,
BE 0; only BE (priority 0, all single pods) is preemptible, as a claim's `preemptible` flag would say.

Scheduling, with the pure allocation layer as the allocator's pass does it:
- on arrival a claim is placed with FGD (a job: member by member without groups, all or nothing with
  `place_gang` with groups); what does not fit and has priority above 0 preempts at once with
  `choose_victims` (the fewest lower-priority victims: a claim weighs each node alone, as the service
  does when nothing fits anywhere; a group weighs the fleet), and what still does not fit waits;
- waiting claims are tried again, highest priority then oldest first, whenever GPUs free (a departure,
  a preemption). Only the nodes freed can have room a waiting claim lacked, so a claim is tried there
  (`Fleet.place_on`); a waiting group is tried (`place_gang`) once the member slots freed since its
  shortfall could complete it;
- a preempted claim loses its GPUs, waits again, and runs its whole duration again once placed.

Printed per mode (with and without groups), the mean over seeds: GPU allocation when arrived demand
first reaches 100%; multi-member jobs arrived and fully placed by the last arrival (130%); GPUs held by
part-placed jobs over the arrival window (time-weighted mean and max); median and p99 wait (arrival to
first full placement, simulated seconds) by priority; preemptions (victims, GPUs); single-claim and
gang decisions/s by this process's CPU time, and its CPU per preemption tried (choosing the victims,
lifting them, placing; the placing counts in the decisions/s too). The replay runs on until every job
has departed."""

from __future__ import annotations

import argparse
import bisect
import heapq
import json
import statistics
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import allocator  # noqa: E402
import gangs  # noqa: E402

from claims.allocation.fgd import Workload  # noqa: E402
from claims.allocation.fleet import Fleet, PlacementCache  # noqa: E402
from claims.allocation.gangs import GangPlacement, node_capacity, place_gang  # noqa: E402
from claims.allocation.preemption import Victim, choose_victims  # noqa: E402
from claims.allocation.state import NodeState, Placement  # noqa: E402

PRIORITY = {"LS": 2, "Guaranteed": 2, "Burstable": 1, "BE": 0}
PREEMPTIBLE = 0  # claims of this priority or lower may be preempted
COMPRESS = 4000  # the fleet fills: claims wait and preempt (bench/README.md)
DEPART, ARRIVE = 0, 1  # at one instant departures go first: what leaves frees GPUs for what comes


@dataclass
class Flight:
    """One job in the replay: its members' placements, and when it (first) ran."""

    job: gangs.Job
    priority: int
    arrival: float
    duration: float
    placements: list[Placement] = field(default_factory=list)
    started: float | None = None  # first full placement
    generation: int = 0  # a preemption voids the departure scheduled before it
    slots_bound: int = 0  # a waiting group: member slots it may have now (an upper bound)

    @property
    def gang(self) -> bool:
        return self.job.members > 1

    @property
    def missing(self) -> int:
        return self.job.members - len(self.placements)


@dataclass
class Stats:
    alloc_at_100: float = 0.0
    jobs: int = 0
    jobs_placed: int = 0
    part_held_area: float = 0.0  # GPU-seconds held by part-placed jobs until the last arrival
    part_held_max: float = 0.0
    window: float = 0.0
    waits: dict[int, list[float]] = field(default_factory=lambda: defaultdict(list))
    preemptions: list[tuple[int, int, int]] = field(default_factory=list)  # (preemptor, victim prio, GPUs)
    never_placed: int = 0
    single_decisions: int = 0
    single_seconds: float = 0.0
    gang_decisions: int = 0
    gang_seconds: float = 0.0
    preempt_calls: int = 0  # preemptions tried (a claim that did not fit, or its next member)
    preempt_seconds: float = 0.0  # their CPU: choosing the victims, lifting them, placing
    left_allocated: float = 0.0  # GPUs still allocated when every job has departed: 0
    idle_at_end: bool = False


def flights_of(sample: list[allocator.Pod], seed: int, compress: float) -> list[Flight]:
    """bench/gangs.py's jobs of the sample, on the trace's clock (arrival order)."""
    flights = [
        Flight(
            job, PRIORITY.get(pod.row.qos, 0), pod.row.created / compress, pod.row.deleted - pod.row.created
        )
        for pod, job in zip(sample, gangs.jobs_of(sample, seed), strict=True)
    ]
    return sorted(flights, key=lambda f: f.arrival)


def _part_held(flight: Flight) -> float:
    """GPUs the job holds while part placed: they do it no good until its other members are placed."""
    placed = len(flight.placements)
    return (
        flight.job.gpus / flight.job.members * placed
        if flight.gang and 0 < placed < flight.job.members
        else 0.0
    )


def _binpack(one: Fleet, request) -> Placement | None:
    return one.place(request, "binpack") or None  # a member on its node: as the allocator places gangs


class Replay:
    def __init__(self, nodes: list[NodeState], groups: bool, workload: Workload, cache: PlacementCache):
        self.nodes, self.groups, self.workload = nodes, groups, workload
        self.fleet = Fleet(nodes, cache)
        self.topology = gangs.topology_of(nodes)
        self.capacity = sum(len(n.gpus) for n in nodes)
        self.events: list[tuple[float, int, int, int]] = []
        self.flights: list[Flight] = []
        self.waiting: list[tuple[int, float, int]] = []  # (-priority, arrival, index), sorted
        self.preemptible: set[int] = set()  # placed jobs that may be preempted
        self.allocated = self.part_held = 0.0
        self.stats = Stats()

    def run(self, flights: list[Flight]) -> Stats:
        self.flights = flights
        for i, flight in enumerate(flights):
            heapq.heappush(self.events, (flight.arrival, ARRIVE, i, 0))
        last_arrival = flights[-1].arrival if flights else 0.0
        arrived, clock = 0.0, 0.0
        while self.events:
            now, kind, i, generation = heapq.heappop(self.events)
            if clock < last_arrival:
                self.stats.part_held_area += self.part_held * (min(now, last_arrival) - clock)
            clock = now
            flight = self.flights[i]
            if kind == ARRIVE:
                arrived += flight.job.gpus
                self._arrive(i, now)
                if not self.stats.alloc_at_100 and arrived >= self.capacity:
                    self.stats.alloc_at_100 = self.allocated / self.capacity
                if i == len(flights) - 1:
                    self._count_jobs()
            elif generation == flight.generation:
                self._depart(i, now)
            if now <= last_arrival:
                self.stats.part_held_max = max(self.stats.part_held_max, self.part_held)
        self.stats.window = last_arrival
        self.stats.never_placed = len(self.waiting)
        self.stats.left_allocated = self.allocated
        self.stats.idle_at_end = all(g.idle() for n in self.nodes for g in n.gpus)
        return self.stats

    def _count_jobs(self) -> None:
        multi = [f for f in self.flights if f.gang]
        self.stats.jobs = len(multi)
        self.stats.jobs_placed = sum(f.started is not None for f in multi)

    # --- placing ------------------------------------------------------------------------------------

    def _arrive(self, i: int, now: float) -> None:
        flight = self.flights[i]
        if not self._place(i, now) and flight.priority > PREEMPTIBLE:
            while flight.missing:  # without groups: a member at a time
                start = time.process_time()
                took = self._preempt(i, now)
                self.stats.preempt_calls += 1
                self.stats.preempt_seconds += time.process_time() - start
                if not took:
                    break
        if flight.missing:
            bisect.insort(self.waiting, (-flight.priority, flight.arrival, i))

    def _place(self, i: int, now: float) -> bool:
        """Place what the job still lacks, anywhere (FGD; a group all or nothing); whether it is whole."""
        flight = self.flights[i]
        request = flight.job.request
        start = time.process_time()
        if flight.gang and self.groups:
            found = place_gang(request, flight.missing, flight.missing, self.fleet, self.topology, _binpack)
            self.stats.gang_decisions += 1
            if isinstance(found, GangPlacement):
                for placement in found.placements:
                    self._apply(i, placement)
            else:
                flight.slots_bound = found.fits
            self.stats.gang_seconds += time.process_time() - start
        else:
            while flight.missing:  # identical members: once one fails, the rest would too
                found = self.fleet.place(request, "fgd", self.workload)
                self.stats.single_decisions += 1
                if not isinstance(found, Placement):
                    break
                self._apply(i, found)
            self.stats.single_seconds += time.process_time() - start
        return self._started(i, now)

    def _apply(self, i: int, placement: Placement) -> None:
        flight = self.flights[i]
        self.fleet.apply(placement)
        before = _part_held(flight)
        flight.placements.append(placement)
        self.part_held += _part_held(flight) - before
        self.allocated += flight.job.gpus / flight.job.members
        if flight.priority <= PREEMPTIBLE:
            self.preemptible.add(i)

    def _lift(self, i: int) -> list[Placement]:
        """Take every placement of the job off the fleet (departure or preemption)."""
        flight = self.flights[i]
        self.part_held -= _part_held(flight)
        placements, flight.placements = flight.placements, []
        for placement in placements:
            self.fleet.release(placement)
        self.allocated -= flight.job.gpus / flight.job.members * len(placements)
        self.preemptible.discard(i)
        flight.generation += 1
        return placements

    def _started(self, i: int, now: float) -> bool:
        flight = self.flights[i]
        if flight.missing:
            return False
        if flight.started is None:
            flight.started = now
            self.stats.waits[flight.priority].append(now - flight.arrival)
        heapq.heappush(self.events, (now + flight.duration, DEPART, i, flight.generation))
        return True

    def _depart(self, i: int, now: float) -> None:
        self._retry(self._lift(i), now)

    def _retry(self, freed: list[Placement], now: float) -> None:
        """Waiting jobs, highest priority then oldest first, on the nodes `freed` (only they gained room)."""
        nodes = list(dict.fromkeys(p.node_id for p in freed))
        failed: set[tuple] = set()  # (node, request) that did not fit: placing more only takes room
        for entry in list(self.waiting):
            i = entry[2]
            flight = self.flights[i]
            request = flight.job.request
            if flight.gang and self.groups:
                flight.slots_bound += sum(
                    sum(g.idle() for g in self.fleet.node(n).gpus) // request.gpus for n in nodes
                )
                if flight.slots_bound >= flight.missing:
                    self._place(i, now)
            else:
                start = time.process_time()
                for node in nodes:
                    while flight.missing and (node, request) not in failed:
                        found = self.fleet.place_on(node, request)
                        self.stats.single_decisions += 1
                        if found is None:
                            failed.add((node, request))
                        else:
                            self._apply(i, found)
                self.stats.single_seconds += time.process_time() - start
                self._started(i, now)
            if not flight.missing:
                self.waiting.remove(entry)

    # --- preemption ---------------------------------------------------------------------------------

    def _preempt(self, i: int, now: float) -> bool:
        """Take the fewest lower-priority preemptible claims that make the job (without groups: its next
        member) fit, and place it; whether it took any."""
        flight = self.flights[i]
        request = flight.job.request
        victims = {
            Victim(
                (j,),
                len(self.flights[j].placements[0].gpu_indexes),
                self.flights[j].priority,
                self.flights[j].arrival,
            ): j
            for j in sorted(self.preemptible)
            if self.flights[j].priority < flight.priority
        }
        if not victims:
            return False
        recount = _no_recount
        group = flight.gang and self.groups  # the group's recount reads the nodes: really release them
        lift, put_back = (
            (self.fleet.release, self.fleet.apply) if group else (self.fleet.lift, self.fleet.put_back)
        )

        def take(victim: Victim) -> None:
            for placement in self.flights[victims[victim]].placements:
                lift(placement)
                recount(placement.node_id)

        def give_back(victim: Victim) -> None:
            for placement in self.flights[victims[victim]].placements:
                put_back(placement)
                recount(placement.node_id)

        if group:
            # Whether the group fits is whether the member slots of all nodes reach its count: the
            # first test of place_gang, kept per node here so each victim costs one node's recount.
            cache = PlacementCache()
            slots = {
                n.id: len(node_capacity(n, request, flight.missing, _binpack, cache)) for n in self.nodes
            }
            total = [sum(slots.values())]

            def recount(node_id) -> None:  # noqa: F811 (the group's own, used by take and give_back)
                now_slots = len(
                    node_capacity(self.fleet.node(node_id), request, flight.missing, _binpack, cache)
                )
                total[0] += now_slots - slots[node_id]
                slots[node_id] = now_slots

            chosen = choose_victims(list(victims), lambda: total[0] >= flight.missing, take, give_back)
        else:
            chosen = choose_victims(
                list(victims),
                lambda: isinstance(self.fleet.place(request, "fgd", self.workload), Placement),
                take,
                give_back,
                domains=lambda v: {p.node_id for p in self.flights[victims[v]].placements},
                fits_in=lambda node: self.fleet.place_on(node, request) is not None,
            )
        if not chosen:
            return False
        freed = []
        for victim in chosen:
            j = victims[victim]
            self.stats.preemptions.append((flight.priority, self.flights[j].priority, victim.gpus))
            freed += self._lift(j)
        placed = self._place(i, now)
        assert placed or not (flight.gang and self.groups), "the victims chosen make the group fit"
        for victim in chosen:  # waiting again, tried at once: elsewhere may have room
            j = victims[victim]
            if not self._place(j, now):
                bisect.insort(self.waiting, (-self.flights[j].priority, self.flights[j].arrival, j))
        self._retry(freed, now)
        return True


def _no_recount(node_id) -> None:
    pass


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)


def bench(
    nodes_csv: Path, pods_csv: Path, seeds: int, scale: int, compress: float, first_seed: int = 42
) -> dict:
    pods = allocator.read_pods(pods_csv)
    capacity = sum(len(n.gpus) for n in allocator.read_nodes(nodes_csv, scale))
    workload = Workload((p.request for p in pods), window=len(pods))
    result: dict = {"seeds": seeds, "scale": scale, "compress": compress, "capacity_gpus": capacity}
    for groups in (False, True):
        cache = PlacementCache()
        runs = []
        for seed in range(first_seed, first_seed + seeds):
            flights = flights_of(allocator.arrivals(pods, capacity, 1.3, seed), seed, compress)
            nodes = allocator.read_nodes(nodes_csv, scale)
            runs.append(Replay(nodes, groups, workload, cache).run(flights))
        result["with_groups" if groups else "without_groups"] = summary(runs)
    return result


def summary(runs: list[Stats]) -> dict:
    mean = statistics.mean
    waits = {p: [w for r in runs for w in r.waits.get(p, [])] for p in sorted(set(PRIORITY.values()))}
    return {
        "gpu_alloc_pct_at_100": round(100 * mean(r.alloc_at_100 for r in runs), 2),
        "multi_member_jobs_at_end": round(mean(r.jobs for r in runs), 1),
        "jobs_fully_placed": round(mean(r.jobs_placed for r in runs), 1),
        "gpus_part_held_mean": round(mean(r.part_held_area / (r.window or 1) for r in runs), 1),
        "gpus_part_held_max": round(max(r.part_held_max for r in runs), 1),
        "wait_s_by_priority": {
            p: {"jobs": len(w), "median": _pct(w, 0.5), "p99": _pct(w, 0.99)} for p, w in waits.items()
        },
        "preemptions": round(mean(len(r.preemptions) for r in runs), 1),
        "preempted_gpus": round(mean(sum(g for *_, g in r.preemptions) for r in runs), 1),
        "never_placed": round(mean(r.never_placed for r in runs), 1),
        "single_decisions_per_s": round(
            sum(r.single_decisions for r in runs) / (sum(r.single_seconds for r in runs) or 1), 1
        ),
        "preemption_cpu_ms": round(
            1000 * sum(r.preempt_seconds for r in runs) / (sum(r.preempt_calls for r in runs) or 1), 1
        ),
        "gang_decisions_per_s": (
            round(sum(r.gang_decisions for r in runs) / sum(r.gang_seconds for r in runs), 1)
            if sum(r.gang_seconds for r in runs)
            else None
        ),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=Path, required=True)
    parser.add_argument("--pods", type=Path, required=True)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--scale", type=int, default=1, help="the node list this many times over")
    parser.add_argument("--compress", type=float, default=COMPRESS, help="arrivals this many times denser")
    parser.add_argument("--first-seed", type=int, default=42, help="seeds first-seed, first-seed + 1, …")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = bench(args.nodes, args.pods, args.seeds, args.scale, args.compress, args.first_seed)
    print(json.dumps(result, indent=None if args.json else 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
