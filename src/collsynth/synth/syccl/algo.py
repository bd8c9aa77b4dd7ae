"""``syccl`` — SyCCL-style symmetric decomposition (Cao et al., "SyCCL: Exploiting Symmetry
for Efficient Collective Communication Scheduling", ACM SIGCOMM 2025): AllGather, ReduceScatter
(by reversal) and AllToAll on island x rail fabrics. See ``docs/syccl.md``.

Stage 1 (sketches): a sketch is an order of the dimensions, one stage per dimension.
:mod:`.sketch` enumerates the candidate sketches with the paper's pruning rules; for AllGather
the survivors are ``rail>island`` (first gather along the rail group, GPU j of every island,
then spread the S pieces each GPU holds over its island) and ``island>rail``. Per unit of a
rank's data a GPU receives

* ``rail>island``: network ``S-1`` pieces, island ``S(m-1)`` pieces;
* ``island>rail``: network ``m(S-1)`` pieces, island ``m-1`` pieces.

In general a stage on groups of size g, after earlier stages of sizes g_1..g_k, loads each GPU
with ``(g-1) * g_1 * ... * g_k`` pieces on its dimension. AllToAll sketches route each block
along one dimension per stage (the block moves to the group member whose coordinate on that
dimension is its destination's): ``rail>island`` is PXN (send over the rail to the destination
island's rail mate, which forwards inside its island), ``island>rail`` the reverse; both load a
GPU with ``m(S-1)`` network and ``S(m-1)`` island blocks.

**Chunk allocation.** Every rank's data is split into fractions t_k over the sketches (sum 1).
With per-GPU capacities c_d (island ingress bandwidth; network share) the time is
``T(t) = max_d sum_k t_k L_{k,d} / c_d``; we minimize T over the simplex exactly (rational
arithmetic). With two dimensions an optimum uses at most two sketches, so the candidates are the
single sketches and, for each pair (a, b), the fraction equalising both dimensions
(w_d = u_d: each dimension's workload proportional to its capacity):

    t_a = (L_b,1/c_1 - L_b,2/c_2) / ((L_b,1 - L_a,1)/c_1 + (L_a,2 - L_b,2)/c_2),  t_b = 1 - t_a

kept when 0 <= t_a <= 1. The fraction is then rounded to a multiple of 1/QUANT for the IR.

Stage 2 (per sub-demand): the all-gather inside one group of each dimension is synthesized once
as a template on group positions (``shift``: every member sends to every other member in one
hop, in pairwise-shift order, step ``(b - o) mod g - 1``, the order TE-CCL's MILP finds on these
groups; ``ring``: a ring on positions 0..g-1; ``milp``: TE-CCL's epoch MILP solution of the
sub-demand, :mod:`.stage2`, with ``stage2=milp``) and replicated over every isomorphic group by
mapping positions to ranks (group j of the rail dimension, island s of the island dimension).
The AllToAll sub-demand of a group is the one-hop exchange (pairwise-shift order).

Stage 3 (global selection): a candidate (allocation, rail template, pipeline depth P) is
stitched into one IR with numpy (``ScheduleBuilder.add_many`` with byte ranges): each sketch's
byte range [lo, hi) of every chunk is cut into P parts, a stage's operation depends on the
operation that delivered that part to the sender. Candidates are simulated at ``size``
(default 1 GB): every allocation x template at P = COARSE_P, then a P sweep for the best
COARSE_KEEP of them (stopping when deeper pipelining stops helping, or at the op budget);
the fastest is kept (ties: first candidate in a fixed order), so the result is deterministic.
ReduceScatter reverses the best AllGather candidate and orders the reduces by its simulated
timeline run backwards (:func:`reverse_to_reducescatter`). AllToAll also scores the one-stage
sketch (the ``direct`` baseline schedule).
"""

from __future__ import annotations

from fractions import Fraction
from math import lcm
from typing import Any

import numpy as np

from ...arrays import unique
from ...collective import Collective, CollKind
from ...errors import CollsynthError
from ...schedule.ir import OpKind, Schedule, ScheduleBuilder
from ...topology.model import Topology
from ...topology.paths import RouteTable
from .. import register
from ..options import Option, plan_size
from .sketch import enumerate_sketches
from .symmetry import Fabric, detect

QUANT = 64
PIPELINES = (1, 2, 4, 8, 16)
COARSE_P = 2
COARSE_KEEP = 1
#: most operations a candidate may have (bounds memory and simulation time at 512+ GPUs)
OP_BUDGET = 3_000_000
#: relative improvement a pipeline step must bring for the sweep to go on
MIN_GAIN = 0.01
SKETCHES = (("rail", "island"), ("island", "rail"))


def sketch_loads(
    sketch: tuple[str, ...], sizes: dict[str, int], kind: CollKind = CollKind.ALLGATHER
) -> dict[str, int]:
    """Pieces each GPU receives per dimension for one unit of every rank's data.

    AllGather: a stage on groups of size g after stages of sizes g_1..g_k: ``(g-1) g_1..g_k``.
    AllToAll (unit: one block per source-destination pair): a stage on groups of size g moves,
    to each GPU, ``(g-1)/g`` of the ``N`` blocks it will hold, N = number of ranks.
    """
    loads = {d: 0 for d in sizes}
    if kind is CollKind.ALLTOALL:
        n = 1
        for d in sizes:
            n *= sizes[d]
        for d in sketch:
            loads[d] += n * (sizes[d] - 1) // sizes[d]
        return loads
    held = 1
    for d in sketch:
        loads[d] += (sizes[d] - 1) * held
        held *= sizes[d]
    return loads


def allocate(
    loads: list[dict[str, int]], caps: dict[str, Fraction]
) -> tuple[list[Fraction], Fraction]:
    """Exact min-max chunk allocation over two dimensions: (fractions per sketch, time/unit)."""
    dims = sorted(caps)
    if len(dims) != 2:
        raise CollsynthError("syccl: chunk allocation needs exactly two dimensions")
    d1, d2 = dims
    K = len(loads)

    def cost(t: list[Fraction]) -> Fraction:
        return max(sum(t[k] * loads[k][d] for k in range(K)) / caps[d] for d in dims)

    cands: list[list[Fraction]] = []
    for a in range(K):
        cands.append([Fraction(int(k == a)) for k in range(K)])
    for a in range(K):
        for b in range(a + 1, K):
            la, lb = loads[a], loads[b]
            den = Fraction(lb[d1] - la[d1]) / caps[d1] + Fraction(la[d2] - lb[d2]) / caps[d2]
            if den == 0:
                continue
            ta = (Fraction(lb[d1]) / caps[d1] - Fraction(lb[d2]) / caps[d2]) / den
            if 0 <= ta <= 1:
                t = [Fraction(0)] * K
                t[a], t[b] = ta, 1 - ta
                cands.append(t)
    best = min(cands, key=cost)  # min keeps the first of equal costs
    return best, cost(best)


# ------------------------------------------------------------------------------ templates
class _Template:
    """All-gather on group positions 0..g-1 as arrays: transfer i moves origin ``o[i]``'s data
    from ``a[i]`` to ``b[i]`` after transfer ``prev[i]`` (-1: the origin's own data) at hop
    ``depth[i]``; ``last[o, b]`` is the transfer that delivers origin o to position b."""

    def __init__(self, kind: str, g: int, rows: list | None = None):
        if rows is not None:  # given (a stage-2 MILP solution)
            rows = [tuple(int(v) for v in r) for r in rows]
        else:
            rows = []
        if kind == "milp":
            pass
        elif kind in ("direct", "shift") or g <= 2:
            shift = kind == "shift"
            for o in range(g):
                for b in range(g):
                    if b != o:
                        rows.append((o, b, o, -1, (b - o) % g - 1 if shift else 0))
        elif kind == "ring":
            for o in range(g):
                prev = -1
                for h in range(g - 1):
                    rows.append(((o + h) % g, (o + h + 1) % g, o, prev, h))
                    prev = len(rows) - 1
        else:  # pragma: no cover - internal
            raise CollsynthError(f"syccl: unknown template {kind!r}")
        arr = np.array(rows, dtype=np.int64).reshape(-1, 5)
        self.kind, self.g = kind, g
        self.a, self.b, self.o, self.prev, self.depth = (arr[:, i].copy() for i in range(5))
        self.last = np.full((g, g), -1, dtype=np.int64)
        for i, (_, b, o, _, _) in enumerate(rows):
            self.last[o, b] = i  # later transfers overwrite: the final delivery
        off = ~np.eye(g, dtype=bool)
        if np.any(self.last[off] < 0) or np.any(self.prev >= np.arange(len(rows))):
            raise CollsynthError(
                f"syccl: the {kind} template does not complete the all-gather of {g} positions"
            )


def _ag_stage(
    held: np.ndarray, deliv: np.ndarray, G: np.ndarray, tp: _Template, base_id: int, base_step: int
) -> tuple[dict, np.ndarray, np.ndarray]:
    """One AllGather stage replicated over the groups ``G`` (shape [groups, g]).

    ``held[r]`` lists the chunks rank r holds (all ranks hold equally many) and ``deliv[r]``
    the local op id that delivered each (-1: held initially). Returns the ops (arrays in
    group, transfer, item order) and the new ``held``/``deliv``."""
    ng, g = G.shape
    n, H = held.shape
    T = len(tp.a)
    org = G[:, tp.o]  # [ng, T]
    ids = base_id + np.arange(ng * T * H, dtype=np.int64).reshape(ng, T, H)
    chunk = held[org]  # [ng, T, H]
    prev = np.maximum(tp.prev, 0)
    dep = np.where((tp.prev >= 0)[None, :, None], ids[:, prev, :], deliv[org])
    ops = {
        "src": np.broadcast_to(G[:, tp.a][:, :, None], (ng, T, H)).ravel(),
        "dst": np.broadcast_to(G[:, tp.b][:, :, None], (ng, T, H)).ravel(),
        "chunk": chunk.ravel(),
        "dep": dep.ravel(),
        "step": np.broadcast_to((base_step + tp.depth)[None, :, None], (ng, T, H)).ravel(),
    }
    # rank at position b of group gi now holds origin o's items for every o
    new_held = np.empty((n, g * H), dtype=np.int64)
    new_deliv = np.empty((n, g * H), dtype=np.int64)
    hb = held[G]  # [ng, g(o), H]
    last = np.maximum(tp.last, 0)  # [g(o), g(b)]
    got = ids[:, last, :]  # [ng, g(o), g(b), H]
    own = np.eye(g, dtype=bool)[None, :, :, None]
    dl = np.where(own, deliv[G][:, :, None, :], got)  # [ng, o, b, H]
    new_held[G.ravel()] = np.broadcast_to(hb[:, None, :, :], (ng, g, g, H)).reshape(ng * g, g * H)
    new_deliv[G.ravel()] = dl.transpose(0, 2, 1, 3).reshape(ng * g, g * H)
    return ops, new_held, new_deliv


def _a2a_stage(
    held: np.ndarray,
    deliv: np.ndarray,
    G: np.ndarray,
    key: np.ndarray,
    base_id: int,
    base_step: int,
) -> tuple[dict, np.ndarray, np.ndarray]:
    """One AllToAll stage over the groups ``G``: every block moves to the group member at
    position ``key[block]`` (its destination's coordinate on this dimension), one hop, sends in
    pairwise-shift order (step ``base_step + (b - a) mod g - 1``)."""
    ng, g = G.shape
    n, H = held.shape
    if H % g:
        raise CollsynthError("syccl: internal error: AllToAll blocks do not split evenly")
    Q = H // g
    k = key[held]
    order = np.argsort(k, axis=1, kind="stable")
    ks = np.take_along_axis(k, order, axis=1).reshape(n, g, Q)
    if not np.all(ks == np.arange(g)[None, :, None]):
        raise CollsynthError(
            "syccl: internal error: AllToAll blocks are not uniform over a group (P2 violated)"
        )
    hs = np.take_along_axis(held, order, axis=1).reshape(n, g, Q)
    ds = np.take_along_axis(deliv, order, axis=1).reshape(n, g, Q)
    A, B = np.meshgrid(np.arange(g), np.arange(g), indexing="ij")
    mask = A != B
    ai, bi = A[mask], B[mask]  # pairs (a, b), a != b, T = g(g-1)
    T = len(ai)
    pair = np.full((g, g), 0, dtype=np.int64)
    pair[ai, bi] = np.arange(T)
    snd = G[:, ai]  # [ng, T]
    ids = base_id + np.arange(ng * T * Q, dtype=np.int64).reshape(ng, T, Q)
    ops = {
        "src": np.broadcast_to(snd[:, :, None], (ng, T, Q)).ravel(),
        "dst": np.broadcast_to(G[:, bi][:, :, None], (ng, T, Q)).ravel(),
        "chunk": hs[snd, bi[None, :], :].ravel(),
        "dep": ds[snd, bi[None, :], :].ravel(),
        "step": np.broadcast_to((base_step + (bi - ai) % g - 1)[None, :, None], (ng, T, Q)).ravel(),
    }
    # rank at position b of group gi receives from every a the blocks keyed b
    bb = np.arange(g)
    nh = hs[G[:, None, :], bb[None, :, None], :]  # [ng, b, a, Q]
    own = np.eye(g, dtype=bool)[None, :, :, None]
    nd = np.where(
        own, ds[G[:, None, :], bb[None, :, None], :], ids[:, pair.T, :]
    )  # pair.T[b, a] = pair[a, b]
    new_held = np.empty_like(held)
    new_deliv = np.empty_like(deliv)
    new_held[G.ravel()] = nh.reshape(ng * g, H)
    new_deliv[G.ravel()] = nd.reshape(ng * g, H)
    return ops, new_held, new_deliv


class _RouteTable:
    """Routes of the island and rail pairs as a padded (pair -> links) table, for vectorised
    CSR building."""

    def __init__(self, n: int, *tables: dict):
        width = max(len(r) for tab in tables for r in tab.values())
        self.n = n
        self.pad = np.zeros((n * n, width), dtype=np.int64)
        self.lens = np.zeros(n * n, dtype=np.int64)
        for tab in tables:
            for (a, b), r in tab.items():
                self.pad[a * n + b, : len(r)] = r
                self.lens[a * n + b] = len(r)

    def csr(self, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        pairs = src * self.n + dst
        lens = self.lens[pairs]
        if np.any(lens == 0):  # pragma: no cover - internal
            raise CollsynthError("syccl: internal error: a stage pair has no route")
        ptr = np.zeros(len(pairs) + 1, dtype=np.int64)
        np.cumsum(lens, out=ptr[1:])
        mask = np.arange(self.pad.shape[1])[None, :] < lens[:, None]
        return ptr, self.pad[pairs][mask]


class _Plan:
    """Everything a candidate build needs that does not depend on the candidate."""

    def __init__(self, topology: Topology, collective: Collective, fab: Fabric):
        self.topology, self.collective, self.fab = topology, collective, fab
        n = topology.num_ranks
        S, m = fab.servers, fab.island_size
        self.groups = {
            "island": np.array(fab.islands, dtype=np.int64),
            "rail": np.array(fab.rails, dtype=np.int64),
        }
        pos = {"island": np.empty(n, dtype=np.int64), "rail": np.empty(n, dtype=np.int64)}
        for s, isl in enumerate(fab.islands):
            for j, r in enumerate(isl):
                pos["island"][r] = j
                pos["rail"][r] = s
        self.pos = pos
        self.routes = _RouteTable(n, fab.island_routes, fab.net_routes)
        self.stage_gap = max(S, m)
        self._blocks: dict = {}
        self.milp: dict[int, _Template] = {}  # stage-2 MILP templates by sub-demand id
        self._sub: dict = {}

    def sub_topology(self, dim: str) -> Topology:
        if dim not in self._sub:
            from .stage2 import sub_topology

            self._sub[dim] = sub_topology(self.topology, self.fab, dim)
        return self._sub[dim]

    @staticmethod
    def spec(sketch: tuple[str, ...], rk: Any, k: int) -> tuple:
        """Per-stage template ids of sketch ``k`` in candidate template ``rk``: a rail kind
        (``shift``/``ring``: island stages ``shift``) or a MILP candidate ``("milp", level,
        specs)`` whose ``specs[k]`` lists a sub-demand id (or ``shift``) per stage."""
        if isinstance(rk, str):
            return tuple(rk if d == "rail" else "shift" for d in sketch)
        return rk[2][k]

    def template(self, dim: str, tid: Any) -> _Template:
        g = self.groups[dim].shape[1]
        if isinstance(tid, int):
            return self.milp.get(tid) or _Template("shift", g)
        return _Template(tid if dim == "rail" else "shift", g)

    def block(self, sketch: tuple[str, ...], spec: tuple) -> dict:
        """Ops of one sketch for one byte range (local dep ids), cached; ``spec``: the
        template id of every stage."""
        key = (sketch, spec)
        if key in self._blocks:
            return self._blocks[key]
        c = self.collective
        n, C = c.num_ranks, c.chunks_per_rank
        a2a = c.kind is CollKind.ALLTOALL
        if a2a:
            held = np.arange(n * n * C, dtype=np.int64).reshape(n, n * C)
            dest = (np.arange(n * n * C, dtype=np.int64) // C) % n
        else:
            held = np.arange(n * C, dtype=np.int64).reshape(n, C)
        deliv = np.full(held.shape, -1, dtype=np.int64)
        parts = []
        cur = 0
        for si, dim in enumerate(sketch):
            G = self.groups[dim]
            base = si * self.stage_gap
            if a2a:
                ops, held, deliv = _a2a_stage(held, deliv, G, self.pos[dim][dest], cur, base)
            else:
                ops, held, deliv = _ag_stage(
                    held, deliv, G, self.template(dim, spec[si]), cur, base
                )
            parts.append(ops)
            cur += len(ops["src"])
        blk = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
        blk["route_ptr"], blk["route_links"] = self.routes.csr(blk["src"], blk["dst"])
        self._blocks[key] = blk
        return blk

    def ops_per_unit(self, sketches, fracs, rk: Any) -> int:
        return sum(
            len(self.block(sk, self.spec(sk, rk, k))["src"])
            for k, (sk, f) in enumerate(zip(sketches, fracs))
            if f != 0
        )


def quantize(fracs: list[Fraction]) -> list[Fraction]:
    q = [f.limit_denominator(QUANT) for f in fracs]
    q[-1] = 1 - sum(q[:-1], Fraction(0))
    return q


def build(
    plan: _Plan,
    sketches: list[tuple[str, ...]],
    fracs: list[Fraction],
    rail_kind: Any,
    pipeline: int,
    meta: dict,
) -> Schedule:
    """Stitch the candidate (sketch fractions, rail template, pipeline depth) into one IR."""
    q = quantize(fracs)
    den = lcm(*[x.denominator for x in q]) * pipeline
    b = ScheduleBuilder(plan.topology, plan.collective, meta)
    lo = Fraction(0)
    P = pipeline
    for k, sketch in enumerate(sketches):
        if q[k] == 0:
            continue
        hi = lo + q[k]
        plo, phi = int(lo * den), int(hi * den)
        width = (phi - plo) // P
        blk = plan.block(sketch, plan.spec(sketch, rail_kind, k))
        K = len(blk["src"])
        off = len(b)
        # P copies of the block, one per part (part-major order)
        pid = np.repeat(np.arange(P, dtype=np.int64), K)
        dep = np.tile(blk["dep"], P)
        has = dep >= 0
        dep = np.where(has, dep + off + pid * K, -1)
        dep_ptr = np.zeros(K * P + 1, dtype=np.int64)
        np.cumsum(has, out=dep_ptr[1:])
        rlen = np.diff(blk["route_ptr"])
        route_ptr = np.zeros(K * P + 1, dtype=np.int64)
        np.cumsum(np.tile(rlen, P), out=route_ptr[1:])
        plo_arr = plo + np.arange(P, dtype=np.int64) * width
        phi_arr = np.append(plo_arr[1:], phi)
        part = np.stack(
            [np.repeat(plo_arr, K), np.repeat(phi_arr, K), np.full(K * P, den, dtype=np.int64)],
            axis=1,
        )
        b.add_many(
            np.tile(blk["src"], P),
            np.tile(blk["dst"], P),
            np.tile(blk["chunk"], P),
            route_ptr=route_ptr,
            route_links=np.tile(blk["route_links"], P),
            dep_ptr=dep_ptr,
            dep_ids=dep[has],
            kind=OpKind.COPY,
            step=np.tile(blk["step"], P),
            part=part,
        )
        lo = hi
    return b.build()


def reverse_to_reducescatter(
    ag: Schedule, collective: Collective, finish: np.ndarray | None = None
) -> Schedule:
    """ReduceScatter as the reverse of an AllGather schedule.

    Each AllGather (chunk, part) forms a broadcast tree from the chunk's owner (every other rank
    receives it exactly once). Reversed, every edge becomes a ``reduce`` from the child to the
    parent that waits for the reversed edges of the child's own children, along the reversed
    route (each link replaced by the link between the same nodes in the other direction).
    Vectorised: reversing the op order and every route is reversing the flat link array.

    ``finish`` (the AllGather's simulated op finish times) plans the reversed timeline: a
    feasible AllGather timetable run backwards is a feasible ReduceScatter timetable, so each
    reduce gets as its step the rank of ``-finish`` (the op that finished last in the
    AllGather is served first). Without it the steps are the AllGather's, reversed.
    """
    t = ag.topology
    N = ag.num_ops
    nl = len(t.links)
    order = np.lexsort((np.arange(nl), -t.link_bw))
    pair_best: dict[tuple[int, int], int] = {}
    for lid in order.tolist():
        pair_best.setdefault((int(t.link_src[lid]), int(t.link_dst[lid])), lid)
    back = np.full(nl, -1, dtype=np.int64)
    for lid in range(nl):
        back[lid] = pair_best.get((int(t.link_dst[lid]), int(t.link_src[lid])), -1)
    links = ag.route_links[::-1]
    new_links = back[links]
    if np.any(new_links < 0):
        bad = int(links[np.flatnonzero(new_links < 0)[0]])
        raise CollsynthError(
            f"syccl: reduce-scatter needs link {t.link_label(bad)} in both directions"
        )
    total = int(ag.route_ptr[-1])
    route_ptr = total - ag.route_ptr[::-1]
    # op i depends on d  ->  reversed op N-1-d depends on N-1-i
    owner = np.repeat(np.arange(N, dtype=np.int64), np.diff(ag.dep_ptr))
    new_owner = N - 1 - ag.dep_ids
    new_ids = N - 1 - owner
    srt = np.lexsort((new_ids, new_owner))
    dep_ptr = np.zeros(N + 1, dtype=np.int64)
    np.cumsum(np.bincount(new_owner, minlength=N), out=dep_ptr[1:])
    if finish is not None:
        _, step = np.unique(-np.asarray(finish, dtype=np.float64)[::-1], return_inverse=True)
        step = step.astype(np.int64)
    else:
        assert ag.step is not None  # syccl's AllGather schedules always carry steps
        smax = int(ag.step.max()) if N else 0
        step = smax - ag.step[::-1]
    # ... and parts
    assert ag.part_lo is not None and ag.part_hi is not None and ag.part_den is not None
    part = np.stack([ag.part_lo[::-1], ag.part_hi[::-1], ag.part_den[::-1]], axis=1)
    b = ScheduleBuilder(t, collective, dict(ag.meta))
    b.add_many(
        ag.dst[::-1],
        ag.src[::-1],
        ag.chunk[::-1],
        route_ptr=route_ptr,
        route_links=new_links,
        dep_ptr=dep_ptr,
        dep_ids=new_ids[srt],
        kind=OpKind.REDUCE,
        step=step,
        part=part,
    )
    return b.build()


def direct_candidate(
    topology: Topology, collective: Collective, routes: RouteTable
) -> Schedule | None:
    """The one-stage AllToAll sketch, vectorised: every block straight from its source to its
    destination along the route table's direct route, in pairwise-exchange order (step
    ``(d - s) mod n - 1``, ops sorted by (step, source, destination, chunk)): the ``direct``
    baseline's schedule, op for op, built without its per-operation Python. None where some
    pair has no direct route (the baseline would relay through GPUs)."""
    n = collective.num_ranks
    post_r, post_c = collective.postcondition()
    src = collective.chunk_source[post_c]
    keep = src != post_r
    s, d, c = src[keep], post_r[keep], post_c[keep]
    shift = (d - s) % n - 1
    order = np.lexsort((c, d, s, shift))
    s, d, c, shift = s[order], d[order], c[order], shift[order]
    tab: dict[tuple[int, int], tuple[int, ...]] = {}
    for a in unique(s).tolist():
        row = routes.direct(a)
        for b in unique(d[s == a]).tolist():
            r = row.get(b)
            if r is None:
                return None
            tab[(a, b)] = r
    rt = _RouteTable(n, tab)
    route_ptr, route_links = rt.csr(s, d)
    b = ScheduleBuilder(topology, collective, {"algorithm": "direct"})
    b.add_many(s, d, c, route_ptr=route_ptr, route_links=route_links, kind=OpKind.COPY, step=shift)
    return b.build()


_POOL: dict = {}  # the forked scorers' view of the candidates (set before the pool forks)


def _pool_time(i: int) -> float:
    make, cands, size = _POOL["make"], _POOL["cands"], _POOL["size"]
    from ...sim import simulate

    return simulate(make(*cands[i]), size, order="plan").time_s


def _times_in_pool(make, cands: list[tuple], size: float, workers: int) -> list[float]:
    """Simulated times of ``cands`` (``make`` arguments) in a fork pool, in list order."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    _POOL.update(make=make, cands=cands, size=size)
    try:
        ctx = mp.get_context("fork")
        with ProcessPoolExecutor(max_workers=min(workers, len(cands)), mp_context=ctx) as pool:
            return list(pool.map(_pool_time, range(len(cands))))
    finally:
        _POOL.clear()


class _SubDemands:
    """Stage-2 MILP sub-demands of the candidates: one id per distinct MILP (dimension + epoch
    grid, :func:`.stage2.subdemand_key`), solved once in the process pool and shared by every
    candidate, stage and group that needs it."""

    def __init__(self, plan: _Plan, sketches: list[tuple[str, ...]], size: float, workers: int):
        self.plan, self.sketches, self.size, self.workers = plan, sketches, size, workers
        self.ids: dict[tuple, int] = {}
        self.info: list[dict] = []
        self.pending: list[tuple[int, tuple]] = []

    def specs(self, fr: list[Fraction], P: int, mult: float) -> tuple:
        """Per-sketch, per-stage template ids of the MILP candidate (fractions ``fr``, pipeline
        ``P``) at epoch ``mult`` x fast: the stage's sub-demand is the all-gather in one group
        of one item per member, an item being what a member holds entering the stage (its
        fraction of a rank's share, one pipeline part, times the group sizes of the earlier
        stages)."""
        from .stage2 import MILP_MAX_GROUP, subdemand_key

        plan = self.plan
        q = quantize(fr)
        share = self.size / plan.topology.num_ranks
        out: list[tuple[str | int, ...]] = []
        for k, sk in enumerate(self.sketches):
            if q[k] == 0:
                out.append(())
                continue
            held = 1
            stages: list[str | int] = []
            for d in sk:
                g = plan.groups[d].shape[1]
                if g > MILP_MAX_GROUP:
                    stages.append("shift")
                else:
                    cb = float(q[k]) * held * share / P
                    key = subdemand_key(plan.sub_topology(d), d, cb, mult)
                    if key not in self.ids:
                        self.ids[key] = len(self.info)
                        self.info.append({})
                        self.pending.append((self.ids[key], (d, plan.sub_topology(d), cb, mult)))
                    stages.append(self.ids[key])
                held *= g
            out.append(tuple(stages))
        return tuple(out)

    def solve(self) -> float:
        """Solve the pending sub-demands (pool order fixed); returns the wall time."""
        import time

        from .stage2 import solve_many

        t0 = time.perf_counter()
        jobs, self.pending = self.pending, []
        for (sid, job), (rows, info) in zip(jobs, solve_many([j for _, j in jobs], self.workers)):
            if rows is not None:
                try:
                    self.plan.milp[sid] = _Template("milp", self.plan.groups[job[0]].shape[1], rows)
                except CollsynthError as e:
                    info = {**info, "error": str(e)}
            self.info[sid] = {"id": sid, **info}
        return time.perf_counter() - t0


@register(
    "syccl",
    collectives={CollKind.ALLGATHER, CollKind.REDUCESCATTER, CollKind.ALLTOALL},
    summary="SyCCL-style symmetric decomposition: island/rail sketches, chunk allocation, "
    "replicated sub-schedules, simulator selection (AllGather, ReduceScatter by "
    "reversal, AllToAll with PXN-style two-stage sketches)",
    options=(
        Option(
            "workers",
            "int",
            1,
            minimum=1,
            shorthand=True,
            unit="processes",
            help="worker processes for the stage-2 sub-MILPs and candidate scoring",
        ),
        Option(
            "stage2",
            "choice",
            "template",
            choices=("template", "milp"),
            help="template (direct/ring sub-schedules) or milp (also TE-CCL's epoch "
            "MILP per distinct sub-demand, groups <= 16: coarse epoch to "
            "filter, fine epoch to select)",
        ),
        Option(
            "fine_keep",
            "int",
            1,
            minimum=1,
            words=("all",),
            help="stage2=milp: coarse-epoch candidates re-solved at the fine epoch "
            "(all: no filtering)",
        ),
    ),
    size_aware=True,
    reference="Cao et al., 'SyCCL: Exploiting Symmetry for Efficient Collective "
    "Communication Scheduling', ACM SIGCOMM 2025",
)
def syccl(
    topology: Topology,
    collective: Collective,
    size: float | None = None,
    workers: int = 1,
    stage2: str = "template",
    fine_keep: int | str = 1,
) -> Schedule:
    """SyCCL symmetric decomposition; options arrive typed (see the declaration above)."""
    w = int(workers)
    keep = None if fine_keep == "all" else int(fine_keep)
    routes = RouteTable(topology)  # shared by detection and the direct candidate
    fab = detect(topology, routes)
    search = _stage1(topology, collective, fab, size, w, stage2)
    a2a = collective.kind is CollKind.ALLTOALL
    rail_kinds = ["shift"] + (["ring"] if fab.servers > 2 and not a2a else [])
    # (AllToAll stages are one-hop pairwise-shift exchanges whatever the rail template)
    coarse = _score_coarse(search, rail_kinds)
    if stage2 == "milp" and not a2a:
        _score_milp(search, keep, coarse)
    _sweep_pipelines(search, coarse)
    return _record(_chosen(search, topology, collective, routes), search)


class _Search:
    """The candidates of stage 3: builds them, simulates them at ``size`` and keeps the first
    eligible one of least time (``kept``: its key, schedule and simulated op finish times)."""

    def __init__(
        self,
        plan: _Plan,
        sketches: list[tuple[str, ...]],
        allocs: list[tuple[str, list[Fraction]]],
        common: dict,
        size: float,
        workers: int,
    ):
        self.plan, self.sketches, self.allocs, self.common = plan, sketches, allocs, common
        self.size, self.workers = size, workers
        # (time, order, candidate, eligible): coarse-epoch MILP candidates only filter
        self.tried: list[tuple[float, int, Any, bool]] = []
        self.kept: dict = {}

    def make(self, name: str, fr: list[Fraction], rk: Any, P: int) -> Schedule:
        """The schedule of candidate (allocation ``name`` with fractions ``fr``, rail template
        ``rk``, pipeline depth ``P``)."""
        meta = {
            "syccl": {
                **self.common,
                "allocation": name,
                "fractions": [str(f) for f in fr],
                "rail_template": rk if isinstance(rk, str) else "milp",
                "pipeline": P,
            }
        }
        if not isinstance(rk, str):
            meta["syccl"]["milp_subdemands"] = [list(x) for x in rk[2]]
        return build(self.plan, self.sketches, fr, rk, P, meta)

    def score(self, name: str, fr: list[Fraction], rk: Any, P: int, eligible: bool = True) -> float:
        """Simulated time of one candidate; an eligible one faster than the kept is kept."""
        from ...sim import simulate

        s = self.make(name, fr, rk, P)
        res = simulate(s, self.size, order="plan")
        tm = res.time_s
        if eligible and (not self.kept or tm < self.kept["time"]):
            self.kept.update(key=(name, fr, rk, P), finish=res.op_finish_s, sched=s, time=tm)
        self.tried.append((tm, len(self.tried), (name, fr, rk, P), eligible))
        return tm

    def score_all(
        self, cands: list[tuple[str, list[Fraction], Any, int]], eligible: bool = True
    ) -> list[float]:
        """``score`` for each candidate (name, fr, rk, P), in order. With ``workers`` > 1 (and
        fork available) they are built and simulated in a process pool that returns only the
        times; the best of them is then rebuilt and re-simulated here if it beats the kept
        one (its schedule and op finish times are needed). Same times, same order, same
        choice as one by one."""
        import multiprocessing as mp

        from ...sim import simulate

        w = self.workers
        if w == 1 or len(cands) < 2 or "fork" not in mp.get_all_start_methods():
            return [self.score(*c, eligible=eligible) for c in cands]
        times = _times_in_pool(self.make, cands, self.size, w)
        j = min(range(len(cands)), key=lambda i: (times[i], i))  # first of least time
        if eligible and (not self.kept or times[j] < self.kept["time"]):
            s = self.make(*cands[j])
            res = simulate(s, self.size, order="plan")
            self.kept.update(key=cands[j], finish=res.op_finish_s, sched=s, time=times[j])
        for c, tm in zip(cands, times):
            self.tried.append((tm, len(self.tried), c, eligible))
        return times

    def fits(self, fr, rk, P) -> bool:
        """Whether the candidate stays within :data:`OP_BUDGET` operations."""
        return self.plan.ops_per_unit(self.sketches, fr, rk) * P <= OP_BUDGET

    def p0(self, fr, rk) -> int:
        """The first pipeline depth of a candidate: ``COARSE_P``, or 1 over the budget."""
        return COARSE_P if self.fits(fr, rk, COARSE_P) else 1


def _allocations(
    sketches: list[tuple[str, ...]],
    loads: list[dict[str, int]],
    caps: dict[str, Fraction],
    a2a: bool,
) -> list[tuple[str, list[Fraction]]]:
    """The chunk allocations to score: the balanced optimum, each sketch alone and, for
    AllToAll, an even split."""
    opt, _ = allocate(loads, caps)
    allocs = [("balanced", opt)]
    for k, sk in enumerate(sketches):
        single = [Fraction(int(i == k)) for i in range(len(sketches))]
        if single != opt:
            allocs.append((">".join(sk), single))
    if a2a:
        half = [Fraction(1, len(sketches))] * len(sketches)
        if all(half != fr for _, fr in allocs):
            allocs.append(("even", half))
    return allocs


def _stage1(
    topology: Topology,
    collective: Collective,
    fab: Fabric,
    size: float | None,
    workers: int,
    stage2: str,
) -> _Search:
    """Stage 1: the sketches, their per-dimension loads and the chunk allocations to score."""
    a2a = collective.kind is CollKind.ALLTOALL
    base = (
        collective
        if a2a
        else Collective(CollKind.ALLGATHER, collective.num_ranks, collective.chunks_per_rank)
    )
    sizes = {"island": fab.island_size, "rail": fab.servers}
    caps = {"island": Fraction(fab.island_bw), "rail": Fraction(fab.net_bw)}
    sk_info = enumerate_sketches(sizes, CollKind.ALLTOALL if a2a else CollKind.ALLGATHER, caps=caps)
    sketches = [s.dims for s in sk_info]
    loads = [sketch_loads(sk, sizes, base.kind) for sk in sketches]
    allocs = _allocations(sketches, loads, caps, a2a)
    score_size = plan_size(size, "syccl")
    plan = _Plan(topology, base, fab)
    common = {
        **fab.describe(),
        "sketches": [">".join(s) for s in sketches],
        "sketches_enumerated": [s.describe() for s in sk_info],
        "stage2": stage2,
    }
    return _Search(plan, sketches, allocs, common, score_size, workers)


def _score_coarse(search: _Search, rail_kinds: list[str]) -> list[tuple]:
    """Stage 3, first step: every allocation x rail template at pipeline ``COARSE_P``; returns
    ``(time, order, name, fractions, rail template, P)`` per candidate."""
    first = [(name, fr, rk, search.p0(fr, rk)) for name, fr in search.allocs for rk in rail_kinds]
    return [(tm, i, *c) for i, (c, tm) in enumerate(zip(first, search.score_all(first)))]


def _score_milp(search: _Search, keep: int | None, coarse: list[tuple]) -> None:
    """Stage 2 with ``stage2=milp``, two-step epoch duration: (a) every allocation's
    sub-demands at the coarse epoch, candidates scored (filter only); (b) the best ``keep``
    re-solved at the fine epoch and scored as real candidates (appended to ``coarse``)."""
    from .stage2 import COARSE_MULT, FINE_MULT

    subs = _SubDemands(search.plan, search.sketches, search.size, search.workers)
    mc = []
    for name, fr in search.allocs:
        P0 = search.p0(fr, "shift")
        mc.append((name, fr, ("milp", "coarse", subs.specs(fr, P0, COARSE_MULT)), P0))
    t_coarse = subs.solve()
    c_scores = [(tm, i) for i, tm in enumerate(search.score_all(mc, eligible=False))]
    survivors = sorted(c_scores)[:keep] if keep is not None else c_scores
    surv = sorted(i for _, i in survivors)  # fixed (allocation) order
    fc = []
    for i in surv:
        name, fr, _, P0 = mc[i]
        fc.append((name, fr, ("milp", "fine", subs.specs(fr, P0, FINE_MULT)), P0))
    t_fine = subs.solve()
    f_scores = search.score_all(fc)
    for (name, fr, rk, P0), tm in zip(fc, f_scores):
        coarse.append((tm, len(coarse), name, fr, rk, P0))
    search.common["milp"] = {
        "coarse_epoch_multiplier": COARSE_MULT,
        "fine_epoch_multiplier": FINE_MULT,
        "fine_keep": "all" if keep is None else keep,
        "subdemands": subs.info,
        "coarse": [{"allocation": mc[i][0], "time_s": tm} for tm, i in c_scores],
        "fine": [{"allocation": c[0], "time_s": tm} for c, tm in zip(fc, f_scores)],
        "solve_wall_s": {"coarse": t_coarse, "fine": t_fine},
    }


def _sweep_pipelines(search: _Search, coarse: list[tuple]) -> None:
    """Stage 3, second step: a pipeline sweep for the best ``COARSE_KEEP`` candidates."""
    for tm0, _, name, fr, rk, P0 in sorted(coarse, key=lambda x: (x[0], x[1]))[:COARSE_KEEP]:
        # deeper pipelines while they help by more than MIN_GAIN (and fit the op budget);
        # shallower ones only when the first deeper one did not help
        times = {P0: tm0}
        i0 = PIPELINES.index(P0)
        for P in PIPELINES[i0 + 1 :]:
            if not search.fits(fr, rk, P):
                break
            times[P] = search.score(name, fr, rk, P)
            if times[P] >= times[PIPELINES[PIPELINES.index(P) - 1]] * (1 - MIN_GAIN):
                break
        if len(times) <= 2 and min(times, key=lambda p: (times[p], p)) == P0:
            for P in PIPELINES[:i0][::-1]:
                times[P] = search.score(name, fr, rk, P)
                if times[P] >= times[PIPELINES[PIPELINES.index(P) + 1]] * (1 - MIN_GAIN):
                    break


def _chosen(
    search: _Search, topology: Topology, collective: Collective, routes: RouteTable
) -> Schedule:
    """The kept candidate (the first eligible one of least time) as the answer: ReduceScatter
    runs it backwards; AllToAll takes the one-stage sketch instead when that is faster."""
    from ...sim import simulate

    kept = search.kept
    best_t = kept["time"]
    if collective.kind is CollKind.REDUCESCATTER:
        # the best AllGather run backwards: its simulated timeline, reversed, plans the order
        return reverse_to_reducescatter(kept["sched"], collective, kept["finish"])
    sched = kept["sched"]
    if collective.kind is CollKind.ALLTOALL:
        # the one-stage sketch: every block straight to its destination (``direct``)
        from .. import synthesize

        d = direct_candidate(topology, collective, routes)
        if d is None:
            d = synthesize("direct", topology, collective, link_order=False)
        dt = simulate(d, search.size, order="plan").time_s
        search.tried.append((dt, len(search.tried), ("direct",), True))
        if dt < best_t:
            sched = d.with_meta(
                syccl={
                    **search.common,
                    "allocation": "direct",
                    "fractions": [],
                    "rail_template": None,
                    "pipeline": 1,
                }
            )
    return sched


def _record(sched: Schedule, search: _Search) -> Schedule:
    """Record the selection (MILP sub-demands, scoring size, candidates) in ``meta``."""
    if "milp" in search.common:
        sched.meta["syccl"]["milp"] = search.common["milp"]
    sched.meta["syccl"]["scored_size"] = search.size
    sched.meta["syccl"]["candidates"] = len(search.tried)
    sched.meta["syccl"]["workers"] = search.workers
    return sched
