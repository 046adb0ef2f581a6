"""The nodes' documents (`nodes/` list and detail): Structs of the fields `NodeSerializer`,
`GpuSerializer` and `GpuSnapshotShareSerializer` declare (`nvke.api.documents`), filled from plain rows
and encoded by msgspec. A page of 20 nodes is 160 GPUs and ~900 shares: DRF's walk and `json.dumps` of
them were most of the request."""

from nodepools import preflight, selectors
from nodepools.api.serializers import GpuSerializer, GpuSnapshotShareSerializer, NodeSerializer
from nodepools.models import Node
from nvke import caches
from nvke.api.documents import document_type, json_field

NodeDocument = document_type(NodeSerializer)
GpuDocument = document_type(GpuSerializer)
ShareDocument = document_type(GpuSnapshotShareSerializer)

# A page's ~900 shares and 160 GPUs are filled by position (8x as fast as by keyword: 0.08 against
# 0.63 µs a Struct), in this order, held to the declared one here.
SHARE_FIELDS = ("claim", "namespace", "name", "memory_mib", "compute_percent", "guaranteed_percent")
SHARE_FIELDS += ("exclusive", "mig_profile", "mig_start", "mig_size")
GPU_FIELDS = ("index", "uuid", "memory_mib", "nvlink_domain", "healthy", "memory_allocated_mib")
GPU_FIELDS += ("compute_allocated_percent", "compute_ceilings_percent", "shares")
assert ShareDocument.__struct_fields__ == SHARE_FIELDS and GpuDocument.__struct_fields__ == GPU_FIELDS


def node_documents(nodes: list[Node]) -> list[NodeDocument]:
    """Each node's document (its pool's cluster and sharing mode read with it: the viewset's queryset);
    the GPUs of all of them in one query, their shares in another, and the claims of the shares this
    process has not seen yet in a third (`_claims_of`)."""
    gpus = selectors.node_gpus([node.pk for node in nodes])
    shares = selectors.gpu_shares([gpu[1] for gpu in gpus])
    claims = _claims_of({share[-1] for share in shares})
    held: dict[int, list] = {}  # GPU id: [its shares, memory, guaranteed, ceilings]
    for gpu, memory_mib, compute, guaranteed, exclusive, profile, start, size, allocation in shares:
        claim = claims.get(allocation)
        if claim is None:  # released since the shares were read: as if they were read a moment later
            continue
        totals = held.setdefault(gpu, [[], 0, 0, 0])
        totals[0].append(
            ShareDocument(*claim, memory_mib, compute / 10, guaranteed / 10, exclusive, profile, start, size)
        )
        totals[1] += memory_mib
        totals[2] += guaranteed
        totals[3] += compute
    gpus_of: dict[int, list[GpuDocument]] = {node.pk: [] for node in nodes}
    for node_id, gpu, index, uuid, memory_mib, nvlink_domain, healthy in gpus:
        documents, memory, guaranteed, ceilings = held.get(gpu, _NOTHING_HELD)
        gpus_of[node_id].append(
            GpuDocument(
                *(index, uuid, memory_mib, nvlink_domain, healthy),  # a UUID written hyphenated, as UUIDField
                *(memory, guaranteed / 10, ceilings / 10, documents),
            )
        )
    return [
        NodeDocument(
            id=node.pk,
            name=node.name,
            cluster=node.pool.cluster_id,
            pool=node.pool_id,
            status=node.status,
            cordoned=node.cordoned,
            driver_version=node.driver_version,
            cpu_millicores=node.cpu_millicores,
            memory_mib=node.memory_mib,
            labels=json_field(node.labels),
            preflight=json_field(node.preflight),
            preflight_failures=preflight.failures(node, node.pool),
            gpus=gpus_of[node.pk],
            created_at=node.created_at,  # UTC from the database: msgspec writes it as DateTimeField does
        )
        for node in nodes
    ]


_NOTHING_HELD = ((), 0, 0, 0)

# What a share says of its claim (id, namespace, name), by allocation. An allocation's claim never
# changes, nor does a claim's namespace or name, so each web process keeps what it has read and a page
# looks up only the allocations new to it: looking up every share's claim through its allocation was
# half the page's reading (bench/README.md). Emptied when it outgrows CLAIMS_KEPT (~10 MB).
CLAIMS_KEPT = 50_000
_claims_seen = caches.emptied_when_full("nodepools.api.claims_seen", CLAIMS_KEPT)


def _claims_of(allocations: set[int]) -> dict[int, tuple[int, str, str]]:
    """What the shares of each allocation say of its claim; an allocation released since is left out."""
    found = {a: claim for a in allocations if (claim := _claims_seen.get(a)) is not None}
    missing = allocations - found.keys()
    if missing:
        for allocation, claim, namespace, name in selectors.allocation_claims(missing):
            found[allocation] = _claims_seen.put(allocation, (claim, namespace, name))
    return found
