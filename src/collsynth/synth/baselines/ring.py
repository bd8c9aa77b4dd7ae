"""``ring`` — NCCL-style rings (channels): AllGather, ReduceScatter, AllReduce, Broadcast, Reduce.

What it implements (NCCL's ring algorithms; Patarasuk & Yuan's bandwidth-optimal ring):

* **AllGather**: n-1 steps; at step j every rank forwards to its ring successor the chunk it
  received at step j-1 (its own chunk at step 0).
* **ReduceScatter**: the chunk owned by ring position i starts at position i+1 and is reduced
  into each successor in turn (``reduce`` operations); after n-1 steps its owner holds the sum
  of every contribution exactly once.
* **AllReduce**: that ReduceScatter, then the AllGather of the reduced chunks (2(n-1) steps).
* **Broadcast** / **Reduce**: a pipelined chain along the ring starting at the root (broadcast)
  or ending at it (reduce); chunk k of the chain moves one hop per step, so chunk k crosses hop h
  at step k + h.

Several rings ("channels") run side by side, each carrying its own share of every rank's data,
to use parallel links and several NICs. Ring ``r`` carries chunks ``rank*C + k`` with
``k mod R == r`` (broadcast/reduce: chunk ``k`` with ``k mod R == r``); ``k div R`` is the
pipeline index.

Chunking: the collective's ``chunks_per_rank`` C is the pipelining depth the user asked for. With
C = 1 the schedule is for ``collective.with_chunks(R)`` (one chunk per rank per ring); an explicit
C > 1 that is not a multiple of R is rounded up to the next multiple (``meta['note']`` says so).

Rings come from :mod:`.ring_search` (how they are found is described there).

Where it departs from NCCL: NCCL searches rings over its own topology graph with NIC/PCI
heuristics, uses 2x as many channels and splits buffers into slices and steps. Here a ring step
moves one chunk and the simulator models the transfers.

Fallback: when the search finds no Hamiltonian cycle (e.g. a line), the ring is the
chassis-then-rank order and hops without a direct route relay through GPUs along the shortest
path of the compute graph (extra copy operations). Reductions cannot simply relay through a GPU
that still holds its own contribution (a copy would overwrite it), so a relay for a partial
reduction may only pass GPUs that have already passed that chunk on (its buffer is then free);
if no such path exists a CollsynthError says so. Broadcast and AllGather relays may pass any GPU.
"""

from __future__ import annotations

import numpy as np

from ...collective import Collective, CollKind
from ...errors import CollsynthError
from ...schedule.ir import Schedule
from ...topology.model import Topology
from .. import register
from ..options import Option
from ._common import COPY, REDUCE, ComputeGraph, Ops, Tracker, round_up_chunks
from .ring_search import MAX_RINGS, TSP_MAX, Ring, RingFinder

__all__ = ["MAX_RINGS", "TSP_MAX", "Ring", "RingFinder", "ring"]


# ---------------------------------------------------------------------------------- schedules
def _ring_chunks(order: list[int], C: int, R: int, r: int, P: int) -> np.ndarray:
    """chunk[p, i] carried by ring r for pipeline index p and the rank at ring position i."""
    o = np.asarray(order, dtype=np.int64)
    k = np.arange(P, dtype=np.int64) * R + r
    return o[None, :] * C + k[:, None]


def _route_ids(ops: Ops, ring: Ring) -> np.ndarray:
    """Route id of hop i (position i -> i+1); -1 for a relayed hop."""
    return np.array(
        [ops.route_id(ops.direct_route(h[0], h[1])) if len(h) == 2 else -1 for h in ring.hops],
        dtype=np.int64,
    )


def _pass_block(
    ops: Ops,
    rings: list[Ring],
    C: int,
    P: int,
    shift: int,
    kind: int,
    step0: int,
    rs: np.ndarray | None,
) -> np.ndarray:
    """Every ring carries chunk (r, p, i) along n-1 hops starting at position i+shift.

    Returns op ids shaped (n-1, R, P, n). ``rs``: the ReduceScatter ops (same shape) an
    AllGather pass (shift 0) follows: its first hop depends on the last reduction, and every
    copy also directly on the ReduceScatter read and write of the buffer it overwrites (implied
    already; explicit so that the verifier's race check finds them at once).
    """
    R = len(rings)
    n = len(rings[0].order)
    chunks = np.stack([_ring_chunks(rg.order, C, R, r, P) for r, rg in enumerate(rings)])
    orders = np.array([rg.order for rg in rings], dtype=np.int64)  # (R, n)
    rids = np.stack([_route_ids(ops, rg) for rg in rings])  # (R, n)
    steps = n - 1
    shape = (steps, R, P, n)
    j = np.arange(steps)[:, None, None, None]
    i = np.arange(n)[None, None, None, :]
    rr = np.arange(R)[None, :, None, None]
    spos = (i + shift + j) % n
    src = np.broadcast_to(orders[rr, spos], shape)
    dst = np.broadcast_to(orders[rr, (spos + 1) % n], shape)
    rid = np.broadcast_to(rids[rr, spos], shape)
    assert (rid >= 0).all()
    chunk = np.broadcast_to(chunks[None, :, :, :], shape)
    step = np.broadcast_to(step0 + j, shape)
    base = ops.count
    ids = base + np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
    if rs is None:
        deps = np.full(shape, -1, dtype=np.int64)
        deps[1:] = ids[:-1]
        deps = deps[..., None]
    else:
        # AllGather hop j writes position i+j+1, which the ReduceScatter read at its step j
        # and wrote at its step j-1
        deps = np.full(shape + (3,), -1, dtype=np.int64)
        deps[1:, ..., 0] = ids[:-1]
        deps[0, ..., 0] = rs[-1]
        deps[..., 1] = rs
        deps[1:, ..., 2] = rs[:-1]
    ops.add_block(src, dst, chunk, rid, kind, step, deps.reshape(len(src.reshape(-1)), -1))
    return ids


def _chain_block(ops: Ops, rings: list[Ring], P: int, kind: int) -> None:
    """Pipelined chains along each ring (already rotated): chunk p*R+r crosses hop h at p+h."""
    R = len(rings)
    n = len(rings[0].order)
    orders = np.array([rg.order for rg in rings], dtype=np.int64)
    rids = np.stack([_route_ids(ops, rg) for rg in rings])
    shape = (n - 1, R, P)
    h = np.arange(n - 1)[:, None, None]
    rr = np.arange(R)[None, :, None]
    p = np.arange(P)[None, None, :]
    src = np.broadcast_to(orders[rr, h], shape)
    dst = np.broadcast_to(orders[rr, h + 1], shape)
    rid = np.broadcast_to(rids[rr, h], shape)
    assert (rid >= 0).all()
    chunk = np.broadcast_to(p * R + rr, shape)
    step = np.broadcast_to(p + h, shape)
    base = ops.count
    ids = base + np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
    deps = np.full(shape, -1, dtype=np.int64)
    deps[1:] = ids[:-1]
    ops.add_block(src, dst, chunk, rid, kind, step, deps.reshape(-1, 1))


class _Relayed:
    """Per-operation ring schedules for rings with relayed hops (the fallback)."""

    def __init__(self, ops: Ops, graph: ComputeGraph, reducing: bool):
        self.ops = ops
        self.graph = graph
        self.tr = Tracker(ops, reducing)

    def hop(
        self, ring: Ring, pos: int, chunk: int, kind: int, base: int, done: list[int] | None
    ) -> int:
        """Send chunk over ring hop ``pos``; ``done``: GPUs whose buffer of the chunk is free
        (None: any GPU may relay)."""
        n = len(ring.order)
        a, b = ring.order[pos], ring.order[(pos + 1) % n]
        path: list[int] | None
        if done is None or len(ring.hops[pos]) == 2:
            path = ring.hops[pos]
        else:
            path = self.graph.relay_path(a, b, allowed=done)
            if path is None:
                t = self.ops.topology
                raise CollsynthError(
                    f"ring: no Hamiltonian cycle, and the ring hop {t.rank_name(a)} -> "
                    f"{t.rank_name(b)} has no relay path through GPUs that no longer need chunk "
                    f"{chunk} (a relay would overwrite a contribution); use another algorithm"
                )
        return self.tr.send_path(path, chunk, kind=kind, base=base)


def _relayed_schedule(
    ops: Ops, graph: ComputeGraph, rings: list[Ring], coll: Collective, C: int, P: int
) -> None:
    kind = coll.kind
    R = len(rings)
    n = len(rings[0].order)
    rel = _Relayed(ops, graph, coll.reduces)
    if kind in (CollKind.ALLGATHER, CollKind.REDUCESCATTER, CollKind.ALLREDUCE):
        if kind in (CollKind.REDUCESCATTER, CollKind.ALLREDUCE):
            for r, rg in enumerate(rings):
                ch = _ring_chunks(rg.order, C, R, r, P)
                for p in range(P):
                    for i in range(n):
                        chunk = int(ch[p, i])
                        done: list[int] = []
                        for j in range(n - 1):
                            pos = (i + 1 + j) % n
                            done.append(rg.order[pos])
                            rel.hop(rg, pos, chunk, REDUCE, j, done[:-1])
        if kind in (CollKind.ALLGATHER, CollKind.ALLREDUCE):
            off = n - 1 if kind is CollKind.ALLREDUCE else 0
            for r, rg in enumerate(rings):
                ch = _ring_chunks(rg.order, C, R, r, P)
                for p in range(P):
                    for i in range(n):
                        for j in range(n - 1):
                            rel.hop(rg, (i + j) % n, int(ch[p, i]), COPY, off + j, None)
        return
    # broadcast / reduce chains (rings already rotated)
    for r, rg in enumerate(rings):
        for p in range(P):
            chunk = p * R + r
            done = []
            for h in range(n - 1):
                done.append(rg.order[h])
                if kind is CollKind.BROADCAST:
                    rel.hop(rg, h, chunk, COPY, p + h, None)
                else:
                    rel.hop(rg, h, chunk, REDUCE, p + h, done[:-1])


@register(
    "ring",
    collectives={
        CollKind.ALLGATHER,
        CollKind.REDUCESCATTER,
        CollKind.ALLREDUCE,
        CollKind.BROADCAST,
        CollKind.REDUCE,
    },
    summary="NCCL-style rings (channels): AllGather, ReduceScatter, AllReduce, "
    "pipelined Broadcast/Reduce chains",
    options=(
        Option(
            "rings",
            "int",
            "auto",
            words=("auto",),
            minimum=1,
            maximum=64,
            unit="rings",
            help="rings (channels); auto: up to 8, the fewest with the best estimated throughput",
        ),
    ),
    reference="NVIDIA NCCL ring algorithms (Patarasuk and Yuan, 'Bandwidth optimal "
    "all-reduce algorithms for clusters of workstations', JPDC 2009)",
)
def ring(topology: Topology, collective: Collective, rings: int | str = "auto") -> Schedule:
    """NCCL-style ring algorithms over Hamiltonian cycles of the compute graph."""
    count = None if rings in (None, "auto") else int(rings)
    graph = ComputeGraph(topology)
    finder = RingFinder(topology, graph)
    found = finder.find(count)
    R = len(found)
    coll, note = round_up_chunks(collective, R)
    C = coll.chunks_per_rank
    P = C // R
    meta = {"num_rings": R, "ring_orders": [rg.order for rg in found]}
    notes = list(finder.notes) + ([note] if note else [])
    if notes:
        meta["note"] = "; ".join(notes)
    ops = Ops(topology, coll, graph.routes, meta)
    kind = coll.kind
    if kind in (CollKind.BROADCAST, CollKind.REDUCE):
        assert coll.root is not None  # Collective requires a root for rooted kinds
        root = int(coll.root)
        if kind is CollKind.BROADCAST:
            chains = [rg.rotated(root) for rg in found]
        else:
            # the chain ends at the root: start at the root's ring successor
            chains = []
            for rg in found:
                i = rg.order.index(root)
                chains.append(rg.rotated(rg.order[(i + 1) % len(rg.order)]))
        if all(len(h) == 2 for c in chains for h in c.hops[:-1]):
            _chain_block(ops, chains, P, COPY if kind is CollKind.BROADCAST else REDUCE)
        else:
            _relayed_schedule(ops, graph, chains, coll, C, P)
        return ops.build()
    if not all(rg.direct for rg in found):
        _relayed_schedule(ops, graph, found, coll, C, P)
        return ops.build()
    n = len(found[0].order)
    if kind is CollKind.ALLGATHER:
        _pass_block(ops, found, C, P, 0, COPY, 0, None)
    elif kind is CollKind.REDUCESCATTER:
        _pass_block(ops, found, C, P, 1, REDUCE, 0, None)
    else:
        rs = _pass_block(ops, found, C, P, 1, REDUCE, 0, None)
        _pass_block(ops, found, C, P, 0, COPY, n - 1, rs)
    return ops.build()
