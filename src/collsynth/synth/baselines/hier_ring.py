"""``hier_ring`` — hierarchical rings: intra-node rings plus inter-node rings (the "2D ring" of
NCCL's early multi-node AllReduce, Horovod's hierarchical AllReduce, BlueConnect).

Ranks are grouped into nodes by the compute-node attribute ``chassis`` (servers, chassis),
else ``dc`` (datacenters of the WAN model), or the attribute named by option ``group``. Every
group must have the same size g; the member with local index j (attribute ``local`` when every
compute node has it, else the j-th rank of the group) of every group forms inter-node ring j.
*Slice j* is the set of chunks owned by ranks with local index j (G*C chunks for G groups).

* **AllReduce**: (1) inside every group a ring ReduceScatter over the whole buffer leaves member
  j with the group's partial sum of slice j; (2) the G members with local index j run a ring
  AllReduce (ReduceScatter then AllGather) on slice j; (3) inside every group a ring AllGather
  spreads each member's reduced slice to the others.
* **AllGather**: (1) the members with local index j run a ring AllGather of their own chunks, so
  member j of every group holds slice j; (2) an intra-group ring AllGather of the slices.

Rings are found by :mod:`.ring`'s search restricted to the ranks of the group (or of inter ring
j), one ring per level (no channels). Ring steps move one chunk per operation; steps are the
dependency depth (every operation one step after the latest operation it depends on).

Where it departs from NCCL/Horovod: they run the intra-node phases over NVLink rings or
NCCL's own channels and the inter-node phase over one NIC per GPU; here every level is a single
ring found on the compute graph, and the phases are not separated by barriers (a chunk moves on
to the next phase as soon as it is ready).

Relays: a ring hop without a direct route relays through GPUs along the shortest path of the
compute graph. Partial sums may only pass GPUs whose buffer for that chunk is free: ring members
that already passed the chunk on and, in the inter-node phase, GPUs of other local indices
(they passed that chunk on in their intra-group ReduceScatter). Final values may pass any GPU.
A missing safe path raises a CollsynthError, as do a missing grouping attribute and unequal
groups.
"""

from __future__ import annotations

from typing import Any

from ...collective import Collective, CollKind
from ...errors import CollsynthError
from ...schedule.ir import Schedule
from ...topology.model import Topology
from .. import register
from ..options import Option
from ._common import COPY, REDUCE, ComputeGraph, Ops, Tracker, _sortable
from .ring_search import Ring, RingFinder


def groups_of(topology: Topology, attr: str | None) -> tuple[str, list[list[int]]]:
    """(attribute, groups of ranks in local-index order); CollsynthError if impossible."""
    nodes = [topology.nodes[topology.node_of_rank(r)] for r in range(topology.num_ranks)]
    attrs = [attr] if attr else ["chassis", "dc"]
    use = next((a for a in attrs if all(a in nd.attrs for nd in nodes)), None)
    if use is None:
        raise CollsynthError(
            f"hier_ring: topology {topology.name!r} has no grouping attribute "
            f"({' or '.join(attrs)}) on every compute node; hierarchical rings need nodes grouped "
            f"into servers (use ring)"
        )
    groups: dict[Any, list[int]] = {}
    for r, nd in enumerate(nodes):
        groups.setdefault(nd.attrs[use], []).append(r)
    keys = sorted(groups, key=_sortable)
    with_local = all("local" in nd.attrs for nd in nodes)
    out = []
    for k in keys:
        members = groups[k]
        if with_local:
            members = sorted(members, key=lambda r: (_sortable(nodes[r].attrs["local"]), r))
        out.append(members)
    sizes = sorted({len(g) for g in out})
    if len(sizes) > 1:
        raise CollsynthError(
            f"hier_ring: groups by {use!r} have unequal sizes {sizes}; "
            f"hierarchical rings need equal groups"
        )
    return use, out


class _Passes:
    """Ring ReduceScatter / AllGather passes over a ring, per chunk, with safe relays."""

    def __init__(self, ops: Ops, graph: ComputeGraph, reducing: bool):
        self.ops = ops
        self.graph = graph
        self.tr = Tracker(ops, reducing)

    def _path(self, ring: Ring, pos: int, allowed: set[int] | None, chunk: int) -> list[int]:
        n = len(ring.order)
        a, b = ring.order[pos], ring.order[(pos + 1) % n]
        if len(ring.hops[pos]) == 2 or allowed is None:
            return ring.hops[pos]
        path = self.graph.relay_path(a, b, allowed)
        if path is None:
            t = self.ops.topology
            raise CollsynthError(
                f"hier_ring: ring hop {t.rank_name(a)} -> {t.rank_name(b)} has no relay path "
                f"through GPUs whose buffer of chunk {chunk} is free; use another algorithm"
            )
        return path

    def reduce_scatter(
        self, ring: Ring, owned: dict[int, list[int]], extra_free: set[int] | None = None
    ) -> None:
        """``owned[i]``: chunks that ring position i must end with, fully reduced over the ring."""
        n = len(ring.order)
        if n < 2:
            return
        for i, chunks in owned.items():
            for c in chunks:
                done: set[int] = set(extra_free or ())
                for j in range(n - 1):
                    pos = (i + 1 + j) % n
                    path = self._path(ring, pos, done, c)
                    self.tr.send_path(path, c, kind=REDUCE)
                    done.add(ring.order[pos])

    def allgather(self, ring: Ring, owned: dict[int, list[int]]) -> None:
        """``owned[i]``: chunks position i holds and every other position must receive."""
        n = len(ring.order)
        if n < 2:
            return
        for i, chunks in owned.items():
            for c in chunks:
                for j in range(n - 1):
                    self.tr.send_path(self._path(ring, (i + j) % n, None, c), c, kind=COPY)


@register(
    "hier_ring",
    collectives={CollKind.ALLREDUCE, CollKind.ALLGATHER},
    summary="hierarchical rings: intra-node rings + inter-node rings of same-local-index "
    "GPUs (AllReduce, AllGather)",
    options=(
        Option(
            "group",
            "text",
            "auto",
            help="compute-node attribute grouping ranks into nodes (auto: chassis, else dc)",
        ),
    ),
)
def hier_ring(topology: Topology, collective: Collective, group=None) -> Schedule:
    """Hierarchical (2D) rings."""
    attr, groups = groups_of(topology, None if group in (None, "auto") else str(group))
    G, g = len(groups), len(groups[0])
    C = collective.chunks_per_rank
    graph = ComputeGraph(topology)
    local = {r: j for grp in groups for j, r in enumerate(grp)}
    intra = [RingFinder(topology, graph, ranks=grp).first() if g > 1 else None for grp in groups]
    inter = [
        RingFinder(topology, graph, ranks=[grp[j] for grp in groups]).first() if G > 1 else None
        for j in range(g)
    ]
    meta = {
        "group_attr": attr,
        "groups": G,
        "group_size": g,
        "intra_orders": [r.order if r else [grp[0]] for r, grp in zip(intra, groups)],
        "inter_orders": [r.order if r else [groups[0][j]] for j, r in enumerate(inter)],
    }
    ops = Ops(topology, collective, graph.routes, meta)
    ps = _Passes(ops, graph, collective.reduces)

    def own(r: int) -> list[int]:
        return list(range(r * C, (r + 1) * C))

    slice_of = [[c for grp in groups for c in own(grp[j])] for j in range(g)]
    if collective.kind is CollKind.ALLREDUCE:
        for ring in intra:
            if ring is None:
                continue
            ps.reduce_scatter(ring, {i: slice_of[local[r]] for i, r in enumerate(ring.order)})
        for j, ring in enumerate(inter):
            if ring is None:
                continue
            others = {r for r in range(topology.num_ranks) if local[r] != j}
            ps.reduce_scatter(ring, {i: own(r) for i, r in enumerate(ring.order)}, others)
            ps.allgather(ring, {i: own(r) for i, r in enumerate(ring.order)})
        for ring in intra:
            if ring is None:
                continue
            ps.allgather(ring, {i: slice_of[local[r]] for i, r in enumerate(ring.order)})
    else:
        for ring in inter:
            if ring is None:
                continue
            ps.allgather(ring, {i: own(r) for i, r in enumerate(ring.order)})
        for ring in intra:
            if ring is None:
                continue
            ps.allgather(ring, {i: slice_of[local[r]] for i, r in enumerate(ring.order)})
    return ops.build()
