"""Building SyCCL candidates: stage-2 templates on group positions, their replication over every
isomorphic group (AllGather and AllToAll stages), the per-candidate plan, the ReduceScatter by
reversal, and the one-stage ``direct`` AllToAll candidate. See :mod:`.algo` for the method.
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
from .allocation import quantize
from .symmetry import Fabric


# ------------------------------------------------------------------------------ templates
class Template:
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


def allgather_stage(
    held: np.ndarray, deliv: np.ndarray, G: np.ndarray, tp: Template, base_id: int, base_step: int
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


def alltoall_stage(
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


class PairRoutes:
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


class Plan:
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
        self.routes = PairRoutes(n, fab.island_routes, fab.net_routes)
        self.stage_gap = max(S, m)
        self._blocks: dict = {}
        self.milp: dict[int, Template] = {}  # stage-2 MILP templates by sub-demand id
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

    def template(self, dim: str, tid: Any) -> Template:
        g = self.groups[dim].shape[1]
        if isinstance(tid, int):
            return self.milp.get(tid) or Template("shift", g)
        return Template(tid if dim == "rail" else "shift", g)

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
                ops, held, deliv = alltoall_stage(held, deliv, G, self.pos[dim][dest], cur, base)
            else:
                ops, held, deliv = allgather_stage(
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


def build(
    plan: Plan,
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
    rt = PairRoutes(n, tab)
    route_ptr, route_links = rt.csr(s, d)
    b = ScheduleBuilder(topology, collective, {"algorithm": "direct"})
    b.add_many(s, d, c, route_ptr=route_ptr, route_links=route_links, kind=OpKind.COPY, step=shift)
    return b.build()
