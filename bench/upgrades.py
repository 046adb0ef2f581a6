"""Driver-upgrade benchmark.

1. Makespan (virtual clock, no database): a 1,000-node pool, maxUnavailable 10%, fixed step durations
   (cordon 5 s, eviction 30 s, driver install 120 s), one tick a second, through the real state machine
   (upgrades/node_machine.py) and the simulated fleet of upgrades/virtual_fleet.py. The critical-path
   lower bound is ceil(nodes / maxUnavailable) waves of one node's operations back to back. Floor:
   makespan within 10% of it. Also the CPU time of the planner per node step.

2. The control plane's CPU per node step on the real path (--db-nodes N): the Celery tick function
   (upgrades/controller.py) run in this process against PostgreSQL and the simulator provider, steps taking
   no simulated time, so the figure is the tick's own cost: ORM reads and writes, provider calls,
   history rows and websocket events (in-memory channel layer).

    python bench/upgrades.py [--nodes 1000] [--json]
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/nvke_bench_up python bench/upgrades.py --db-nodes 1000

The database mode empties the database it is given (flush)."""

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "nvke.settings")


def makespan(nodes: int, percent: int) -> dict:
    from upgrades.strategy import Strategy
    from upgrades.virtual_fleet import Durations, run_simulation

    durations = Durations(cordon=5, evict=30, install=120)
    max_unavailable = math.ceil(nodes * percent / 100)
    started = time.process_time()
    outcome = run_simulation(nodes, Strategy(max_unavailable=max_unavailable), durations, tick_s=1.0)
    cpu = time.process_time() - started
    lower_bound = math.ceil(nodes / max_unavailable) * durations.per_node
    return {
        "nodes": nodes,
        "max_unavailable": max_unavailable,
        "phase": outcome.phase.value,
        "makespan_s": outcome.makespan,
        "lower_bound_s": lower_bound,
        "over_lower_bound_pct": round(100 * (outcome.makespan / lower_bound - 1), 2),
        "ticks": outcome.ticks,
        "node_steps": outcome.node_steps,
        "max_unavailable_seen": outcome.max_unavailable_seen,
        "violations": len(outcome.violations),
        "plan_cpu_us_per_node_step": round(1e6 * outcome.plan_cpu_s / outcome.node_steps, 1),
        "sim_cpu_s_total": round(cpu, 2),
    }


def database_ticks(nodes: int, percent: int) -> dict:
    from bench_db import bench_pool, ensure_database

    os.environ.pop("REDIS_URL", None)  # in-memory channel layer: measure the tick, not Redis
    os.environ["NVKE_SIM_UPGRADE_STEP_S"] = ""
    ensure_database(os.environ["DATABASE_URL"])
    import django

    django.setup()

    from catalog.models import DriverRelease
    from nvke.tenancy.context import TenantContext
    from upgrades import services
    from upgrades.controller import tick
    from upgrades.models import UpgradeRun
    from upgrades.services import create_run

    # This loop is the run's only chain of ticks: the embedded default's timer thread, which create_run
    # would start on commit, races it for the first tick.
    services.schedule_tick = lambda *args, **kwargs: None

    tenant, _, pool = bench_pool("l4", "l4", 1, nodes)
    run = create_run(
        context=TenantContext(tenant, "owner"),
        pool=pool,
        target_release=DriverRelease.objects.get(version="595.71.05"),
        max_unavailable=f"{percent}%",
    )
    ticks, cpu, wall = 0, time.process_time(), time.perf_counter()
    seq = run.tick_seq
    while seq is not None:
        seq = tick(run.pk, seq)
        ticks += 1
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    run = UpgradeRun.objects.get(pk=run.pk)
    steps = run.history.filter(type="NodeState").count()
    return {
        "nodes": nodes,
        "status": run.status,
        "ticks": ticks,
        "node_steps": steps,
        "max_unavailable_seen": run.max_unavailable_seen,
        "cpu_ms_per_node_step": round(1000 * cpu / steps, 2),
        "cpu_ms_per_tick": round(1000 * cpu / ticks, 1),
        "wall_s": round(wall, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--percent", type=int, default=10, help="maxUnavailable as a percent of the pool")
    parser.add_argument("--db-nodes", type=int, default=0, help="also time real ticks on PostgreSQL")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = {"makespan": makespan(args.nodes, args.percent)}
    if args.db_nodes:
        if not os.environ.get("DATABASE_URL", "").startswith("postgres"):
            sys.exit("Set DATABASE_URL to a PostgreSQL database this benchmark may empty.")
        results["database"] = database_ticks(args.db_nodes, args.percent)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    m = results["makespan"]
    print(
        f"{m['nodes']} nodes, maxUnavailable {m['max_unavailable']}: makespan {m['makespan_s']:.0f} s, "
        f"lower bound {m['lower_bound_s']:.0f} s (+{m['over_lower_bound_pct']}%), {m['ticks']} ticks, "
        f"{m['violations']} invariant violations; "
        f"planner {m['plan_cpu_us_per_node_step']} µs CPU per node step"
    )
    if "database" in results:
        d = results["database"]
        print(
            f"real ticks, {d['nodes']} nodes on PostgreSQL: {d['status']} in {d['ticks']} ticks, "
            f"{d['cpu_ms_per_node_step']} ms CPU per node step ({d['cpu_ms_per_tick']} ms per tick), "
            f"{d['wall_s']} s wall"
        )


if __name__ == "__main__":
    main()
