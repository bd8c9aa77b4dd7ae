"""``direct`` and ``bruck`` — the classic AllToAll algorithms (and direct AllGather, Gather and
Scatter).

``direct`` (NCCL's AllToAll, MPI's pairwise exchange): every chunk is sent straight from its
source to each destination. Transfers are ordered by the pairwise-exchange shift: the transfer
from rank s to rank d has step ``(d - s) mod n - 1`` (Gather: step 0 for all; Scatter: the
root's shift order), so on a switch every rank sends to one rank and receives from one rank per
step. Supports AllToAll, AllGather, Gather and Scatter. Where no direct route exists the chunk
relays through GPUs along the shortest path of the compute graph (fewest transfers, then least
alpha, then lowest ranks): store-and-forward copies, each depending on the previous hop, one step
later.

``bruck`` (Bruck et al. 1997): ceil(log2 n) phases; at phase k every position i sends to
position i + 2^k the chunks it currently holds whose remaining offset to their destination has
bit k set, so a chunk from position s to d travels ``d - s`` in hops of powers of two (through
intermediate GPUs, which only relay it). All sends of a rank at phase k depend on what it
received at phase k-1 (one message per phase). Positions follow the rank order or the ring order
of :mod:`.ring` (whichever needs fewer relay hops for the 2^k partners; ties: rank order). No
local rotation is needed: chunks are named, not stored by offset. Where a partner has no direct
route the message relays through GPUs (shortest path).

Where they depart from NCCL/MPI: NCCL's AllToAll posts all sends at once (here the shift order
is a plan the simulator follows per link) and MPI's Bruck packs blocks into one buffer per phase
(here one operation per chunk per hop).
"""

from __future__ import annotations

from ...collective import Collective, CollKind
from ...schedule.ir import Schedule
from ...topology.model import Topology
from .. import register
from ._common import COPY, ComputeGraph, Ops, Tracker
from .ring_search import RingFinder


@register(
    "direct",
    collectives={CollKind.ALLTOALL, CollKind.ALLGATHER, CollKind.GATHER, CollKind.SCATTER},
    summary="direct sends from each source to each destination (pairwise-exchange order), "
    "relaying along shortest paths where no direct route exists",
)
def direct(topology: Topology, collective: Collective) -> Schedule:
    """Direct sends (NCCL AllToAll / pairwise exchange)."""
    graph = ComputeGraph(topology)
    ops = Ops(topology, collective, graph.routes, {})
    tr = Tracker(ops, False)
    n = collective.num_ranks
    src = collective.chunk_source
    sends = []
    for c in range(collective.num_chunks):
        s = int(src[c])
        for d in collective.destinations(c):
            if d == s:
                continue
            shift = 0 if collective.kind is CollKind.GATHER else (d - s) % n - 1
            sends.append((shift, s, d, c))
    sends.sort()
    relays = 0
    for shift, s, d, c in sends:
        path = graph.relay_path(s, d)
        if path is None:  # pragma: no cover - topologies are strongly connected
            path = graph.path_or_fail(s, d)
        relays += len(path) - 2
        tr.send_path(path, c, base=shift)
    if relays:
        ops.meta["note"] = f"{relays} relay hop(s) through GPUs where no direct route exists"
    return ops.build()


@register(
    "bruck",
    collectives={CollKind.ALLTOALL},
    summary="Bruck's log n-phase AllToAll (relays through intermediate positions)",
)
def bruck(topology: Topology, collective: Collective) -> Schedule:
    """Bruck's AllToAll."""
    graph = ComputeGraph(topology)
    n = collective.num_ranks
    C = collective.chunks_per_rank
    cands = [("rank order", list(range(n)))]
    cands.append(("ring order", list(RingFinder(topology, graph).first().order)))

    def relay_hops(order: list[int]) -> int:
        total = 0
        k = 1
        while k < n:
            for i in range(n):
                total += len(graph.path_or_fail(order[i], order[(i + k) % n])) - 2
            k <<= 1
        return total

    name, order = min(cands, key=lambda nc: relay_hops(nc[1]))
    pos = {r: i for i, r in enumerate(order)}
    ops = Ops(topology, collective, graph.routes, {"numbering": name, "order": order})
    tr = Tracker(ops, False)
    # holder position of every chunk (its current position) and its destination position
    holder = {}
    for c in range(collective.num_chunks):
        s, d = (c // C) // n, (c // C) % n
        if s != d:
            holder[c] = (pos[s], pos[d])
    arrived: dict[int, list[int]] = {i: [] for i in range(n)}
    k = 0
    while (1 << k) < n:
        step = 1 << k
        new: dict[int, list[int]] = {i: [] for i in range(n)}
        outgoing: dict[int, list[int]] = {i: [] for i in range(n)}
        for c in sorted(holder):
            h, d = holder[c]
            if ((d - h) % n) >> k & 1:
                outgoing[h].append(c)
        for i in range(n):
            if not outgoing[i]:
                continue
            j = (i + step) % n
            path = graph.path_or_fail(order[i], order[j])
            for c in outgoing[i]:
                op = tr.send_path(path, c, kind=COPY, deps=arrived[i])
                new[j].append(op)
                holder[c] = (j, holder[c][1])
        arrived = new
        k += 1
    return ops.build()
