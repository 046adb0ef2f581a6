"""Queues' books: what each queue of a cluster may still admit, per GPU model, with borrowing and lending
in a cohort, and the dominant share of what it borrows. Pure: no Django.

Kueue's semantics, flattened to one cohort level (kubernetes-sigs/kueue, pkg/cache/scheduler/
resource_node.go: `localQuota`, `available`, `potentialAvailable`; pkg/cache/scheduler/fair_sharing.go:
`dominantResourceShare`). A resource is (GPU model, "gpus" | "memory"). A queue's nominal quota is
its own; what it lends is its nominal less what it keeps (a lending limit keeps nominal − limit, no
limit lends all of it); the cohort's pool is what its queues lend, and each queue's usage past what it
keeps counts against that pool. A queue may take what it keeps and has not used, plus what the pool
has left, but no more than nominal + borrowing limit in all (no limit: whatever the pool has). A queue
without a cohort has its nominal and nothing else."""

from collections import defaultdict
from dataclasses import dataclass, field

RESOURCES = ("gpus", "memory")


@dataclass(frozen=True)
class Use:
    """What a claim holds (or asks for) of one GPU model: whole GPUs, and GPU memory in MiB (whole GPUs
    count their memory too; fractions and MIG slices count memory only)."""

    gpus: int = 0
    memory: int = 0

    def of(self, resource: str) -> int:
        return self.gpus if resource == "gpus" else self.memory

    def __add__(self, other: "Use") -> "Use":
        return Use(self.gpus + other.gpus, self.memory + other.memory)

    def __mul__(self, times: int) -> "Use":
        return Use(self.gpus * times, self.memory * times)


@dataclass(frozen=True)
class Quota:
    """One queue's quota of one GPU model. Limits are in GPUs; on memory they are GPUs × the model's
    memory per GPU (`memory_per_gpu`). None: no limit."""

    nominal: Use
    memory_per_gpu: int
    borrowing_limit: int | None = None
    lending_limit: int | None = None

    def limit(self, which: int | None, resource: str) -> int | None:
        if which is None:
            return None
        return which if resource == "gpus" else which * self.memory_per_gpu


@dataclass
class Book:
    """A cluster's queues: quotas, cohorts and usage, kept as a placement pass admits and takes."""

    quotas: dict[int, dict[str, Quota]]  # queue → GPU model → quota
    cohort_of: dict[int, str]  # queue → its cohort ("" none)
    usage: dict[int, dict[tuple[str, str], int]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(int))
    )

    def members(self, queue: int) -> list[int]:
        cohort = self.cohort_of[queue]
        return [q for q, c in self.cohort_of.items() if c and c == cohort] if cohort else [queue]

    def nominal(self, queue: int, model: str, resource: str) -> int:
        quota = self.quotas[queue].get(model)
        return quota.nominal.of(resource) if quota else 0

    def kept(self, queue: int, model: str, resource: str) -> int:
        """What the queue keeps for itself (lends to no one): Kueue's localQuota."""
        if not self.cohort_of[queue]:
            return self.nominal(queue, model, resource)
        quota = self.quotas[queue].get(model)
        if quota is None or quota.lending_limit is None:
            return 0
        return max(0, quota.nominal.of(resource) - quota.limit(quota.lending_limit, resource))

    def used(self, queue: int, model: str, resource: str) -> int:
        return self.usage[queue][model, resource]

    def pool_left(self, queue: int, model: str, resource: str) -> int:
        """What the cohort's pool has left: what its queues lend, less their usage past what they keep."""
        lent = used = 0
        for member in self.members(queue):
            kept = self.kept(member, model, resource)
            lent += self.nominal(member, model, resource) - kept
            used += max(0, self.used(member, model, resource) - kept)
        return lent - used

    def available(self, queue: int, model: str, resource: str) -> int:
        """What the queue may still take of the resource: Kueue's `available` for one cohort level."""
        used = self.used(queue, model, resource)
        if not self.cohort_of[queue]:
            return max(0, self.nominal(queue, model, resource) - used)
        kept = self.kept(queue, model, resource)
        from_pool = self.pool_left(queue, model, resource)
        quota = self.quotas[queue].get(model)
        limit = quota.limit(quota.borrowing_limit, resource) if quota else 0
        if limit is not None:
            stored = self.nominal(queue, model, resource) - kept
            from_pool = min(from_pool, stored - max(0, used - kept) + limit)
        return max(0, kept - used) + max(0, from_pool)

    def refusal(self, queue: int, model: str, use: Use) -> str:
        """Why the queue cannot admit `use` of the model now; "" when it can."""
        for resource in RESOURCES:
            asked = use.of(resource)
            left = self.available(queue, model, resource)
            if asked > left:
                unit = "GPUs" if resource == "gpus" else "MiB of GPU memory"
                return (
                    f"its queue has {left} {model} {unit} left to admit (nominal "
                    f"{self.nominal(queue, model, resource)}, in use {self.used(queue, model, resource)}"
                    f"{', with what its cohort lends' if self.cohort_of[queue] else ''}) and it asks {asked}"
                )
        return ""

    def charge(self, queue: int, model: str, use: Use, times: int = 1) -> None:
        for resource in RESOURCES:
            self.usage[queue][model, resource] += use.of(resource) * times

    def refund(self, queue: int, model: str, use: Use) -> None:
        self.charge(queue, model, use, -1)

    def borrowing(self, queue: int, model: str) -> bool:
        return any(self.used(queue, model, r) > self.nominal(queue, model, r) for r in RESOURCES)

    def within_nominal(self, queue: int, model: str, use: Use) -> bool:
        """Whether admitting `use` keeps the queue within its own nominal quota (it borrows nothing)."""
        return all(self.used(queue, model, r) + use.of(r) <= self.nominal(queue, model, r) for r in RESOURCES)

    def share(self, queue: int, adding: tuple[str, Use] | None = None) -> float:
        """The dominant share of what the queue borrows: over GPUs and GPU memory, what it uses past its
        nominal over what it could reach in its cohort, the larger of the two (0 when it borrows
        nothing); with `adding` (model, use), as it would be once that is admitted too. Kueue's
        dominantResourceShare (which counts the workload asking) with every weight 1."""
        if not self.cohort_of[queue]:
            return 0.0
        if adding is not None:
            self.charge(queue, *adding)
            try:
                return self.share(queue)
            finally:
                self.refund(queue, *adding)
        borrowed: dict[str, int] = defaultdict(int)
        reach: dict[str, int] = defaultdict(int)
        models = {m for member in self.members(queue) for m in self.quotas[member]}
        for model in models:
            for resource in RESOURCES:
                borrowed[resource] += max(
                    0, self.used(queue, model, resource) - self.nominal(queue, model, resource)
                )
                reach[resource] += self.potential(queue, model, resource)
        return max((borrowed[r] / reach[r] for r in RESOURCES if reach[r] > 0), default=0.0)

    def potential(self, queue: int, model: str, resource: str) -> int:
        """The most the queue could ever hold of the resource: Kueue's potentialAvailable."""
        lent = sum(
            self.nominal(m, model, resource) - self.kept(m, model, resource) for m in self.members(queue)
        )
        reach = self.kept(queue, model, resource) + lent
        quota = self.quotas[queue].get(model)
        limit = quota.limit(quota.borrowing_limit, resource) if quota else 0
        if limit is not None:
            reach = min(reach, self.nominal(queue, model, resource) + limit)
        return reach

    def lent(self, queue: int, model: str, resource: str) -> int:
        """What of the queue's nominal others use now: the cohort's borrowing, spread over its lenders in
        proportion to what each lends and leaves unused (Kueue does not say whose quota a borrower uses)."""
        if not self.cohort_of[queue]:
            return 0
        spare = {
            m: max(
                0,
                self.nominal(m, model, resource)
                - self.kept(m, model, resource)
                - self.used(m, model, resource),
            )
            for m in self.members(queue)
        }
        borrowed = sum(
            max(0, self.used(m, model, resource) - self.nominal(m, model, resource))
            for m in self.members(queue)
        )
        total = sum(spare.values())
        return 0 if total == 0 else min(spare[queue], borrowed * spare[queue] // total)
