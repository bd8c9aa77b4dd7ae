"""``sph`` — the shortest-path heuristic (SPH) baseline of SCALE-CCL §5 (Xiong, Zhang,
Medagliani, Ferrero, Liu and Lian, "SCALE-CCL: A Scalable Collective Communication Library for
Wide-Area Distributed Training", ACM 2025, doi:10.1145/3769695.3771677).

The paper's §5 compares SCALE-CCL against "a shortest-path heuristic (SPH) that routes each
subchunk along a minimum-latency path (Dijkstra over per-link delays) and serves packets in FIFO
order without duplicate elimination or load-aware re-routing". Here:

* every chunk goes from its source to **each** destination separately, along the path of least
  total alpha (per-link delay) over *all* links of the topology, through GPUs too; ties are
  broken by fewer links, then by the lowest id of the last link (deterministic);
* the path is cut at every intermediate GPU into store-and-forward operations (a GPU relays a
  chunk only after it has fully arrived): each operation depends on the previous one of the same
  path, and nothing else;
* no duplicate elimination: a GPU may receive the same chunk several times (as a relay and as a
  destination, or on several paths), and two paths sharing a link each carry their own copy;
* no load awareness and no steps: links serve operations first come, first served (the
  simulator's FCFS policy when a schedule has no plan).

Supports the non-reducing collectives: AllGather, Broadcast, Gather, Scatter, AllToAll and
custom. Departure from the paper: the paper's SPH works on its own event simulator with
subchunks; here the collective's chunks are the subchunks (use ``chunks_per_rank``).
"""

from __future__ import annotations

import heapq

from ...collective import Collective, CollKind
from ...schedule.ir import Schedule
from ...topology.model import Topology
from .. import register
from ._common import COPY, Ops


def _delay_tree(topology: Topology, source_node: int) -> dict[int, int]:
    """Last link of the least-alpha path (ties: fewer links, lower last link id) to every
    node reachable from ``source_node`` over all links."""
    links = topology.links
    best: dict[int, tuple[float, int]] = {source_node: (0.0, 0)}
    via: dict[int, int] = {}
    heap = [(0.0, 0, -1, source_node)]
    done: set[int] = set()
    while heap:
        alpha, hops, _, u = heapq.heappop(heap)
        if u in done:
            continue
        done.add(u)
        for lid in topology.out_links[u]:
            l = links[lid]
            v = l.dst
            if v in done:
                continue
            key = (alpha + l.alpha, hops + 1)
            old = best.get(v)
            if old is None or key < old or (key == old and lid < via[v]):
                best[v] = key
                via[v] = lid
                heapq.heappush(heap, (key[0], key[1], lid, v))
    return via


@register(
    "sph",
    collectives={
        CollKind.ALLGATHER,
        CollKind.BROADCAST,
        CollKind.GATHER,
        CollKind.SCATTER,
        CollKind.ALLTOALL,
        CollKind.CUSTOM,
    },
    summary="SCALE-CCL's shortest-path heuristic baseline: each chunk to each "
    "destination along its least-delay path, FIFO, no duplicate elimination",
    reference="Xiong, Zhang, Medagliani, Ferrero, Liu and Lian, 'SCALE-CCL: A Scalable "
    "Collective Communication Library for Wide-Area Distributed Training', "
    "ACM, 2025, doi:10.1145/3769695.3771677",
)
def sph(topology: Topology, collective: Collective) -> Schedule:
    """SCALE-CCL §5's shortest-path heuristic (SPH)."""
    t = topology
    ops = Ops(t, collective, meta={})
    trees: dict[int, dict[int, int]] = {}
    segments_cache: dict[tuple[int, int], list[tuple[int, tuple[int, ...]]]] = {}

    def segments(s: int, d: int) -> list[tuple[int, tuple[int, ...]]]:
        """(receiver rank, route) of every store-and-forward hop from rank s to rank d."""
        key = (s, d)
        if key in segments_cache:
            return segments_cache[key]
        src_node = t.node_of_rank(s)
        via = trees.get(s)
        if via is None:
            via = trees[s] = _delay_tree(t, src_node)
        links = []
        cur = t.node_of_rank(d)
        while cur != src_node:
            lid = via[cur]
            links.append(lid)
            cur = t.links[lid].src
        links.reverse()
        out = []
        seg: list[int] = []
        for lid in links:
            seg.append(lid)
            node = t.links[lid].dst
            if t.kind_codes[node] == 0:
                out.append((int(t.rank_of_node[node]), tuple(seg)))
                seg = []
        segments_cache[key] = out
        return out

    src = collective.chunk_source
    relays = 0
    for c in range(collective.num_chunks):
        s = int(src[c])
        for d in collective.destinations(c):
            if d == s:
                continue
            prev_rank, prev_op = s, None
            segs = segments(s, d)
            relays += len(segs) - 1
            for rank, route in segs:
                prev_op = ops.add(
                    prev_rank,
                    rank,
                    c,
                    route=route,
                    kind=COPY,
                    deps=() if prev_op is None else (prev_op,),
                )
                prev_rank = rank
    ops.meta["relay_hops"] = relays
    return ops.build()
