"""Pod lists in the layout of Alibaba cluster-trace-gpu-v2023: read any of them, and generate the workload
families of the FGD paper's evaluation (Weng et al., USENIX ATC '23, §6) from one of them.

    python bench/traces.py --pods openb_pod_list_default.csv --nodes openb_node_list_gpu_node.csv \\
        --family gpushare --level 40 --seed 0 --out gpushare40.csv
    python bench/traces.py --pods … --nodes … --all DIR      # every family at every level, seed 0

Reading: the columns `name,cpu_milli,memory_mib,num_gpu,gpu_milli` are required; `gpu_spec`, `qos`,
`pod_phase`, `creation_time`, `deletion_time`, `scheduled_time` are optional (the dataset's lists differ).
A malformed file stops with the file, line and column named (`TraceError`), never a traceback.

Families (the dataset's own variants are "sampled from the default one, emphasizing certain types of
workloads", and the gpuspec ones "augment tasks with GPU type requirements"); each draws with replacement
from the source's pods of each kind and is seeded:
- `gpushare` L (20–100): L% of the GPU pods share a GPU (num_gpu 1, gpu_milli < 1000), the rest are
  whole-GPU pods; as many GPU pods as the source, CPU-only pods as in the source.
- `multigpu` L (20–50): the source unchanged, then multi-GPU pods drawn from the source's until
  multi-GPU pods ask L% of the GPUs that the GPU pods ask. The dataset's `openb_pod_list_multigpu50.csv`
  (read whole) is the default list's 8,152 pods in order (first five columns), then 909 pods drawn from
  the default's 75 multi-GPU pods (5,272 GPUs: multi-GPU pods then ask 50.3% of the GPUs); the sizes
  of `multigpu20`–`multigpu40` fit the same rule (172, 355, 593 pods appended; ours 3–8% fewer).
  Until the evening of 4 December 2026, L% of the GPU pods by count asked 2–8 GPUs instead: about 85%
  of the GPUs at 50, far more multi-GPU demand than the dataset's list.
- `gpuspec` L (5–33): L% of the GPU pods may run only on some GPU models: one model, or with a third's
  chance two models of the same memory family (V100M16|V100M32), drawn in proportion to the GPUs each
  model has, among the models with a node that fits the pod whole (GPUs, CPU, memory).
- `cpu` L (50–300, in ‰ of the list's pods): CPU-only pods drawn from the source's until they are
  L/10 % of all pods (L 250: 2,355 beside the 7,064 GPU pods), listed first, then the source's GPU pods
  unchanged and in order. The dataset's `openb_pod_list_cpu250.csv` (read whole) is 2,356 pods drawn from
  the default list's CPU-only pods (timestamps and all), then the default's 7,064 GPU pods in order; the
  sizes of `cpu050`–`cpu300` fit 5–30% CPU-only pods to within 5 pods. Until the evening of 4 December
  2026 the level scaled the CPU-only pods' CPU to L% of the source's instead: 2,727 CPU-only pods at
  250, harsher than the dataset's list at every level.
"""

from __future__ import annotations

import argparse
import csv
import random
import sys
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

REQUIRED = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
OPTIONAL = ("gpu_spec", "qos", "pod_phase", "creation_time", "deletion_time", "scheduled_time")
FAMILIES = {
    "gpushare": (20, 40, 60, 80, 100),
    "multigpu": (20, 30, 40, 50),
    "gpuspec": (5, 10, 20, 25, 33),
    "cpu": (50, 100, 200, 250, 300),
}


class TraceError(ValueError):
    """A pod or node list that is not in the dataset's layout; the message names file, line, column."""


@dataclass(frozen=True)
class PodRow:
    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int
    gpu_spec: str = ""  # "" = any model, else models separated by '|'
    qos: str = ""  # LS, Burstable, BE, Guaranteed; "" where the list has no such column
    created: int = 0  # creation_time and deletion_time, seconds (0 where the list has none)
    deleted: int = 0

    @property
    def sharing(self) -> bool:
        return self.num_gpu == 1 and self.gpu_milli < 1000

    @property
    def gpus(self) -> float:
        """GPUs requested: a share of one, or whole GPUs."""
        return self.gpu_milli / 1000 if self.sharing else float(self.num_gpu)


@dataclass(frozen=True)
class NodeRow:
    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    model: str


def _rows(path: Path, required: Iterable[str]) -> Iterable[tuple[int, dict[str, str]]]:
    try:
        f = path.open(newline="")
    except OSError as error:
        raise TraceError(f"{path}: {error.strerror}") from None
    with f:
        reader = csv.DictReader(f)
        missing = [c for c in required if c not in (reader.fieldnames or [])]
        if missing:
            raise TraceError(
                f"{path}:1: no column {missing[0]!r} (the header has {', '.join(reader.fieldnames or [])})"
            )
        for row in reader:
            yield reader.line_num, row


def _whole(path: Path, line: int, row: dict[str, str], column: str) -> int:
    text = (row.get(column) or "").strip()
    if not text.isdigit():
        raise TraceError(f"{path}:{line}: column {column}: {text!r} is not a whole number ≥ 0")
    return int(text)


def read_pods(path: Path) -> list[PodRow]:
    pods = []
    for line, row in _rows(path, REQUIRED):
        num_gpu, gpu_milli = _whole(path, line, row, "num_gpu"), _whole(path, line, row, "gpu_milli")
        if num_gpu > 1 and gpu_milli < 1000 or gpu_milli > 1000:
            raise TraceError(
                f"{path}:{line}: column gpu_milli: {gpu_milli} with num_gpu {num_gpu} (a share of one GPU, "
                "0–1000, is for num_gpu 1; whole GPUs are 1000)"
            )
        spec = (row.get("gpu_spec") or "").strip()
        pods.append(
            PodRow(
                name=row["name"],
                cpu_milli=_whole(path, line, row, "cpu_milli"),
                memory_mib=_whole(path, line, row, "memory_mib"),
                num_gpu=num_gpu,
                gpu_milli=gpu_milli,
                gpu_spec="" if spec in ("", "nan") else spec,
                qos=(row.get("qos") or "").strip(),
                created=_whole(path, line, row, "creation_time") if row.get("creation_time") else 0,
                deleted=_whole(path, line, row, "deletion_time") if row.get("deletion_time") else 0,
            )
        )
    return pods


def read_nodes(path: Path) -> list[NodeRow]:
    return [
        NodeRow(
            name=row["sn"],
            cpu_milli=_whole(path, line, row, "cpu_milli"),
            memory_mib=_whole(path, line, row, "memory_mib"),
            gpus=_whole(path, line, row, "gpu"),
            model=row["model"],
        )
        for line, row in _rows(path, ("sn", "cpu_milli", "memory_mib", "gpu", "model"))
    ]


def write_pods(path: Path, pods: list[PodRow]) -> None:
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow([*REQUIRED, "gpu_spec"])
        for p in pods:
            writer.writerow([p.name, p.cpu_milli, p.memory_mib, p.num_gpu, p.gpu_milli, p.gpu_spec or "nan"])


# --- families ------------------------------------------------------------------------------------------


def family(pods: list[PodRow], nodes: list[NodeRow], name: str, level: int, seed: int) -> list[PodRow]:
    """The source `pods` reshaped into family `name` at `level` (see the module's docstring)."""
    if name not in FAMILIES:
        raise ValueError(f"unknown family {name!r}; one of {', '.join(FAMILIES)}")
    rng = random.Random(f"{name}-{level}-{seed}")
    gpu = [p for p in pods if p.num_gpu]
    cpu_only = [p for p in pods if not p.num_gpu]
    if name == "gpushare":
        mixed = _mix(rng, len(gpu), level, [p for p in gpu if p.sharing], [p for p in gpu if not p.sharing])
        out = mixed + cpu_only
    elif name == "multigpu":
        out = list(pods) + _multi_share(rng, gpu, level)
    elif name == "gpuspec":
        out = _constrain(rng, gpu, nodes, level) + cpu_only
    else:
        out = _cpu_share(rng, cpu_only, len(gpu), level) + gpu
    return [replace(p, name=f"{name}{level}-pod-{i:05d}") for i, p in enumerate(out)]


def _mix(
    rng: random.Random, total: int, level: int, picked: list[PodRow], rest: list[PodRow]
) -> list[PodRow]:
    if not picked or (level < 100 and not rest):
        raise ValueError("the source has none of the pods this family needs")
    wanted = round(total * level / 100)
    return [rng.choice(picked) for _ in range(wanted)] + [rng.choice(rest) for _ in range(total - wanted)]


def _multi_share(rng: random.Random, gpu: list[PodRow], level: int) -> list[PodRow]:
    """Multi-GPU pods drawn with replacement until multi-GPU pods ask `level`% of the GPUs asked."""
    multi = [p for p in gpu if p.num_gpu > 1]
    if not multi:
        raise ValueError("the source has none of the pods this family needs")
    if not 0 <= level < 100:
        raise ValueError(f"multigpu level {level}: multi-GPU pods must ask 0–99% of the GPUs")
    asked, asked_multi = sum(p.gpus for p in gpu), sum(p.gpus for p in multi)
    out: list[PodRow] = []
    while asked_multi < asked * level / 100:
        pod = rng.choice(multi)
        out.append(pod)
        asked, asked_multi = asked + pod.gpus, asked_multi + pod.gpus
    return out


def _constrain(rng: random.Random, gpu: list[PodRow], nodes: list[NodeRow], level: int) -> list[PodRow]:
    gpus_of: dict[str, int] = {}
    for n in nodes:
        gpus_of[n.model] = gpus_of.get(n.model, 0) + n.gpus
    chosen = set(rng.sample(range(len(gpu)), round(len(gpu) * level / 100)))
    out = []
    for i, pod in enumerate(gpu):
        if i in chosen and not pod.gpu_spec:
            fits = sorted({n.model for n in nodes if _fits_node(pod, n)}, key=lambda m: (-gpus_of[m], m))
            if fits:
                model = rng.choices(fits, weights=[gpus_of[m] for m in fits])[0]
                kin = [m for m in fits if m != model and m[:4] == model[:4]]  # V100M16 | V100M32
                spec = "|".join(sorted([model, rng.choice(kin)])) if kin and rng.random() < 1 / 3 else model
                pod = replace(pod, gpu_spec=spec)
        out.append(pod)
    return out


def _fits_node(pod: PodRow, node: NodeRow) -> bool:
    return node.gpus >= pod.num_gpu and node.cpu_milli >= pod.cpu_milli and node.memory_mib >= pod.memory_mib


def _cpu_share(rng: random.Random, cpu_only: list[PodRow], gpu_pods: int, level: int) -> list[PodRow]:
    """CPU-only pods drawn with replacement until they are `level` ‰ of the pods, `gpu_pods` beside them."""
    if not 0 <= level < 1000:
        raise ValueError(f"cpu level {level}: CPU-only pods must be 0–999 ‰ of the pods")
    if not cpu_only:
        raise ValueError("the source has none of the pods this family needs")
    count = -(-gpu_pods * level // (1000 - level))  # the least n with n / (n + gpu_pods) ≥ level / 1000
    return [rng.choice(cpu_only) for _ in range(count)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=Path, required=True, help="the source pod list (e.g. the default)")
    parser.add_argument("--nodes", type=Path, required=True, help="the node list (for gpuspec's models)")
    parser.add_argument("--family", choices=FAMILIES)
    parser.add_argument("--level", type=int)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="where to write the family's pod list")
    parser.add_argument("--all", type=Path, metavar="DIR", help="write every family at every level there")
    args = parser.parse_args(argv)
    try:
        pods, nodes = read_pods(args.pods), read_nodes(args.nodes)
    except TraceError as error:
        print(f"traces: {error}", file=sys.stderr)
        return 2
    if args.all:
        args.all.mkdir(parents=True, exist_ok=True)
        for name, levels in FAMILIES.items():
            for level in levels:
                write_pods(
                    args.all / f"openb_pod_list_{name}{level}.csv",
                    family(pods, nodes, name, level, args.seed),
                )
        return 0
    if not (args.family and args.level and args.out):
        parser.error("give --family, --level and --out, or --all DIR")
    write_pods(args.out, family(pods, nodes, args.family, args.level, args.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
