"""Lowering a :class:`~collsynth.schedule.trees.TreeForm` to chunk operations (:func:`lower`).

Every root's data is cut into ``k * pipeline`` chunks (``k``: the total multiplicity of the
root's trees); tree ``i`` carries ``mult_i * pipeline`` of them; each chunk travels every edge
of its tree with a dependency on the operation that brought it to the edge's tail (out-trees)
or on the operations that brought the children's partial sums (in-trees). AllReduce is
ReduceScatter over the in-trees followed by AllGather over the out-trees; a chunk's broadcasts
from its root wait for its reductions into the root through one join where that makes fewer
dependencies. With ``shares="mult"`` (AllReduce) a root's share of the buffer is its trees'
multiplicity over all the trees' instead of ``1/N``. Operations are emitted round-robin over the
trees. Each tree's edge order and dependencies come from :mod:`collsynth.schedule.tree_tasks`.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

import numpy as np

from ..collective import Collective, CollKind
from ..errors import CollsynthError
from ..files import dependency_limit
from ..topology.model import Topology
from .dag import ragged_arange
from .ir import OpKind, Schedule, ScheduleBuilder
from .tree_tasks import TreeTask, check_edges, tasks_at_once

if TYPE_CHECKING:
    from .trees import TreeForm


def _roots(form: TreeForm, direction: str) -> dict[int, list[int]]:
    """Per root, the indices of its ``direction`` trees, in order."""
    c = form.columns
    want = 1 if direction == "in" else 0
    out: dict[int, list[int]] = defaultdict(list)
    for i, (r, d) in enumerate(zip(c["tree_root"].tolist(), c["tree_in"].tolist())):
        if d == want:
            out[r].append(i)
    return dict(out)


def _chunk_plan(roots: dict[int, list[int]], mult: list[int], pipeline: int) -> tuple[int, dict]:
    """Chunks per rank and, per tree index, the local chunk indices it carries."""
    import math

    ks = {r: sum(mult[i] for i in ts) for r, ts in roots.items()}
    k_all = 1
    for k in ks.values():
        k_all = math.lcm(k_all, k)
    cpr = k_all * pipeline
    plan = {}
    for r, ts in roots.items():
        scale = k_all // ks[r]
        off = 0
        for i in ts:
            cnt = mult[i] * scale * pipeline
            plan[i] = range(off, off + cnt)
            off += cnt
    return cpr, plan


def _mult_plan(
    in_roots: dict[int, list[int]],
    out_roots: dict[int, list[int]],
    mult: list[int],
    pipeline: int,
    n: int,
) -> tuple[int, dict, dict]:
    """``shares="mult"``: chunks per rank and, per tree index, the buffer's chunk indices it
    carries; root ``r`` owns ``k_r * pipeline`` consecutive chunks, roots in rank order."""
    ks = {r: sum(mult[i] for i in ts) for r, ts in sorted(in_roots.items())}
    if ks != {r: sum(mult[i] for i in ts) for r, ts in sorted(out_roots.items())}:
        raise CollsynthError("shares='mult': every root's in-trees and out-trees must agree")
    total = sum(ks.values()) * pipeline
    if total % n:
        raise CollsynthError(
            f"shares='mult': {sum(ks.values())} trees times pipeline {pipeline} do not "
            f"split into {n} ranks' chunks"
        )
    plans: list[dict] = []
    for roots in (in_roots, out_roots):
        plan, off = {}, 0
        for _, ts in sorted(roots.items()):
            for i in ts:
                cnt = mult[i] * pipeline
                plan[i] = range(off, off + cnt)
                off += cnt
        plans.append(plan)
    return total // n, plans[0], plans[1]


def lower(
    topology: Topology,
    collective: Collective,
    form: TreeForm,
    pipeline: int = 1,
    meta: dict | None = None,
    shares: str = "rank",
    only_roots: set[int] | None = None,
) -> Schedule:
    """Lower trees to a chunk schedule for ``collective`` (its chunk count is set here).

    ``shares="rank"`` (default): every root's data is cut into ``k * pipeline`` chunks, each
    root the same amount. ``shares="mult"`` (AllReduce only): a root's share of the buffer is
    its trees' total multiplicity over all roots' (its in-trees and out-trees must agree), so
    roots may reduce and broadcast different amounts; the buffer is cut into
    ``K * pipeline`` chunks for ``K`` trees in all (a multiple of the ranks), root after root.

    ``only_roots``: lower the trees of these roots only: the representatives of a compact
    schedule, whose other operations are their images (:mod:`collsynth.schedule.compact`).
    The form then needs trees for these roots only (it may hold the others' too), and the
    chunking is theirs (every root's alike, as in a symmetric form). Every dependency of a
    tree's operations is on operations of trees with the same root, so the part is closed
    under dependencies.
    """
    if pipeline < 1:
        raise CollsynthError(f"pipeline depth must be at least 1, got {pipeline}")
    if shares not in ("rank", "mult"):
        raise CollsynthError(f"shares must be 'rank' or 'mult', got {shares!r}")
    if shares == "mult" and collective.kind is not CollKind.ALLREDUCE:
        raise CollsynthError("shares='mult' lowers AllReduce trees only")
    n = topology.num_ranks
    kind = collective.kind
    out_roots = _roots(form, "out")
    in_roots = _roots(form, "in")
    everyone = set(range(n))
    # Collective requires a root for the rooted kinds (broadcast, reduce)
    root_set: set[int] = {collective.root} if collective.root is not None else set()
    if kind in (CollKind.ALLGATHER, CollKind.BROADCAST):
        need_out = everyone if kind is CollKind.ALLGATHER else root_set
        need_in: set[int] = set()
    elif kind in (CollKind.REDUCESCATTER, CollKind.REDUCE):
        need_out = set()
        need_in = everyone if kind is CollKind.REDUCESCATTER else root_set
    elif kind is CollKind.ALLREDUCE:
        need_out = need_in = everyone
    else:
        raise CollsynthError(f"trees cannot express {kind.value}")
    if shares == "mult":  # a root may hold no share, but it then has neither kind of tree
        need_out = need_in = set(out_roots) | set(in_roots)
    if only_roots is not None:  # the representatives' trees stand for every root's
        need_out, need_in = need_out & only_roots, need_in & only_roots
        in_roots = {r: ts for r, ts in in_roots.items() if r in only_roots}
        out_roots = {r: ts for r, ts in out_roots.items() if r in only_roots}
    for name, roots, need in (("out", out_roots, need_out), ("in", in_roots, need_in)):
        if set(roots) != need:
            miss = sorted(need - set(roots)) or sorted(set(roots) - need)
            raise CollsynthError(
                f"{kind.value} needs {name}-trees rooted at exactly ranks "
                f"{sorted(need)[:8]}...; rank {miss[0]} differs"
            )
    cols = form.columns
    mult = cols["tree_mult"].tolist()
    cpr: int | None
    if shares == "mult":
        cpr, plan_in, plan_out = _mult_plan(in_roots, out_roots, mult, pipeline, n)
    else:
        cpr_out, plan_out = _chunk_plan(out_roots, mult, pipeline) if out_roots else (None, {})
        cpr_in, plan_in = _chunk_plan(in_roots, mult, pipeline) if in_roots else (None, {})
        if cpr_out and cpr_in and cpr_out != cpr_in:
            raise CollsynthError("in-trees and out-trees must split each rank's data alike")
        cpr = cpr_out or cpr_in
    assert cpr is not None  # some trees are needed, so one of the plans exists
    coll = collective.with_chunks(cpr)
    owner = None  # AllReduce: the root that reduces each chunk
    if kind is CollKind.ALLREDUCE and shares == "mult":
        owner = np.zeros(coll.num_chunks, dtype=np.int64)
        for r, ts in in_roots.items():
            for t in ts:
                owner[plan_in[t].start : plan_in[t].stop] = r
    elif kind is CollKind.ALLREDUCE:  # chunk r * per rank + i belongs to r
        owner = np.arange(coll.num_chunks, dtype=np.int64) // coll.chunks_per_rank
    b = ScheduleBuilder(topology, coll, meta=meta)
    if only_roots is None:
        b.trees = form
    ptr = cols["tree_ptr"].tolist()
    # Emit round-robin over trees (chunk 0 of every tree, then chunk 1, ...) and give each
    # operation the step "round * width + depth" (width > every depth): steps are the planned
    # priority on shared links, so older pipeline rounds go first and every tree advances
    # together. AllReduce: every reduction is emitted (and stepped) before the broadcasts that
    # depend on it.
    # shares="mult": reductions and broadcasts are meant to share the links at once (the LP
    # plans both on every link), so steps go by pipeline round across both directions: round
    # q's broadcasts come before round q + 1's reductions in every link's planned order
    layout = _Layout(form, n, coll.num_chunks) if shares == "mult" else None
    reduced = _Reduced(coll.num_chunks)  # chunk -> ops that completed its reduction at the root
    step0, base = 0, 0
    for direction, roots, plan in (("in", in_roots, plan_in), ("out", out_roots, plan_out)):
        ids = [t for _, ts in sorted(roots.items()) for t in ts]
        chunks = [
            np.array([_chunk_id(coll, r, loc, shares) for loc in plan[t]], np.int64)
            for r, ts in sorted(roots.items())
            for t in ts
        ]
        tasks = tasks_at_once(cols, np.array(ids, dtype=np.int64), direction, n, chunks)
        if tasks is None:  # default routes, or a tree to refuse: one tree at a time
            tasks = []
            for r, ts in sorted(roots.items()):
                for i, t in enumerate(ts):
                    lo, hi = ptr[t], ptr[t + 1]
                    src = cols["edge_from"][lo:hi].tolist()
                    dst = cols["edge_to"][lo:hi].tolist()
                    what = f"{direction}-tree {i} of rank {r}"
                    children = check_edges(r, src, dst, direction, n, what)
                    ch = chunks[len(tasks)]
                    tasks.append(TreeTask.make(b, r, direction, src, dst, cols, lo, children, ch))
        if direction == "out" and tasks and reduced.ptr is not None:
            assert owner is not None  # out-trees after in-trees: AllReduce
            join_step = layout.join_steps() if layout is not None else step0
            joins = _joins(tasks, reduced, coll, owner, join_step, base)
            if joins is not None:
                b.add_many(**joins)
                base += len(joins["src"])
                step0 += 1
        if tasks:
            block, step0 = _emit(tasks, direction, reduced, step0, base, layout)
            del tasks  # one direction's tasks at a time
            b.add_many(**block)
            base += len(block["src"])
            del block
    return b.build()


class _Reduced:
    """Per chunk, the operations that complete its reduction at its root (CSR over chunks)."""

    def __init__(self, num_chunks: int):
        self.num_chunks = num_chunks
        self.len = np.zeros(num_chunks, dtype=np.int64)
        self.parts: list[tuple[np.ndarray, np.ndarray]] = []  # (chunks, ops per chunk row)
        self.ptr: np.ndarray | None = None
        self.ids = np.zeros(0, dtype=np.int64)

    def add(self, chunks: np.ndarray, ops: np.ndarray) -> None:
        self.len[chunks] = ops.shape[1]
        self.parts.append((chunks, ops))

    def freeze(self) -> None:
        self.ptr = np.zeros(self.num_chunks + 1, dtype=np.int64)
        np.cumsum(self.len, out=self.ptr[1:])
        self.ids = np.zeros(int(self.ptr[-1]), dtype=np.int64)
        for chunks, ops in self.parts:
            self.ids[self.ptr[chunks][:, None] + np.arange(ops.shape[1])] = ops
        self.parts = []

    def replace(self, chunks: np.ndarray, ops: np.ndarray) -> None:
        """The reduction of each of ``chunks`` is now complete at the one operation ``ops[i]``
        (a join), instead of its list."""
        assert self.ptr is not None
        lens = self.len.copy()
        lens[chunks] = 1
        ptr = np.zeros(self.num_chunks + 1, dtype=np.int64)
        np.cumsum(lens, out=ptr[1:])
        keep = np.ones(self.num_chunks, dtype=bool)
        keep[chunks] = False
        kept = np.flatnonzero(keep)
        ids = np.empty(int(ptr[-1]), dtype=np.int64)
        ids[ragged_arange(lens[kept], ptr[kept])] = self.ids[
            ragged_arange(self.len[kept], self.ptr[kept])
        ]
        ids[ptr[chunks]] = ops
        self.len, self.ptr, self.ids = lens, ptr, ids


def _joins(
    tasks: list[TreeTask],
    reduced: _Reduced,
    coll: Collective,
    owner: np.ndarray,
    step: int | np.ndarray,
    base: int,
) -> dict | None:
    """AllReduce: a join at the root of every chunk whose broadcasts would otherwise each
    wait for every reduction into the root, where that saves dependencies (fan-in times
    fan-out above fan-in plus fan-out), as :meth:`ScheduleBuilder.add_many` columns (op ids
    from ``base``, all at ``step``, or at ``step[chunk]``); ``reduced`` then names the join for
    those chunks. None where no chunk gains."""
    fan_out = np.zeros(coll.num_chunks, dtype=np.int64)
    for t in tasks:
        fan_out[t.chunks] = len(t.from_root)
    fan_in = reduced.len
    chunks = np.flatnonzero(fan_in * fan_out > fan_in + fan_out)
    if not len(chunks):
        return None
    assert reduced.ptr is not None  # frozen after the in-trees
    lens = fan_in[chunks]
    dep_ptr = np.zeros(len(chunks) + 1, dtype=np.int64)
    np.cumsum(lens, out=dep_ptr[1:])
    dep_ids = reduced.ids[ragged_arange(lens, reduced.ptr[chunks])]
    root = owner[chunks]
    reduced.replace(chunks, base + np.arange(len(chunks), dtype=np.int64))
    return {
        "src": root,
        "dst": root,
        "chunk": chunks,
        "route_ptr": np.zeros(len(chunks) + 1, dtype=np.int64),
        "route_links": np.zeros(0, dtype=np.int64),
        "dep_ptr": dep_ptr,
        "dep_ids": dep_ids,
        "kind": int(OpKind.JOIN),
        "step": step[chunks] if isinstance(step, np.ndarray) else np.full(len(chunks), step),
    }


class _Layout:
    """Steps by pipeline round across both directions (``shares="mult"``): round ``q`` of a
    chunk holds steps ``q * width`` on; its reductions at ``+ level``, its join at ``+ h_in +
    1``, its broadcasts at ``+ h_in + 2 + depth`` (``h_in``, ``h_out``: the tallest in-tree and
    out-tree), so every dependency goes to a later step."""

    def __init__(self, form: TreeForm, n: int, num_chunks: int):
        heights = form.heights(n)
        into = form.columns["tree_in"] == 1
        self.h_in = int(heights[into].max()) if into.any() else 0
        h_out = int(heights[~into].max()) if (~into).any() else 0
        self.width = self.h_in + h_out + 3
        self.offset = {"in": 0, "out": self.h_in + 2}
        self.round_of = np.zeros(num_chunks, dtype=np.int64)  # set by the in-trees

    def join_steps(self) -> np.ndarray:
        """Per chunk, the step of its join."""
        return self.round_of * self.width + self.h_in + 1


def _emit(
    tasks: list[TreeTask],
    direction: str,
    reduced: _Reduced,
    step0: int,
    base: int,
    layout: _Layout | None = None,
) -> tuple[dict, int]:
    """The operations of one direction's trees as :meth:`ScheduleBuilder.add_many` columns
    (op ids from ``base``), and the first step after them. Operations are ordered by pipeline
    round, then tree, then edge; their steps go by round within the direction, or across both
    directions with a ``layout``."""
    rounds = np.array([len(t.chunks) for t in tasks], dtype=np.int64)
    sizes = np.array([len(t.src) for t in tasks], dtype=np.int64)
    q_max = int(rounds.max())
    per = np.where(np.arange(q_max)[:, None] < rounds[None, :], sizes[None, :], 0)
    starts = (np.cumsum(per.ravel()) - per.ravel()).reshape(per.shape) + base
    total = int(per.sum())
    width = 1 + max((int(t.depth.max()) for t in tasks if len(t.depth)), default=0)
    src = np.empty(total, dtype=np.int64)
    dst = np.empty(total, dtype=np.int64)
    chunk = np.empty(total, dtype=np.int64)
    step = np.empty(total, dtype=np.int64)
    rlen = np.empty(total, dtype=np.int64)
    dlen = np.empty(total, dtype=np.int64)
    last = step0
    ids_of: list[np.ndarray] = []
    for j, t in enumerate(tasks):
        q = np.arange(rounds[j], dtype=np.int64)
        first = starts[: rounds[j], j]  # op id of each round's first edge
        ids = (first - base)[:, None] + np.arange(sizes[j], dtype=np.int64)[None, :]
        ids_of.append(ids)
        src[ids] = t.src
        dst[ids] = t.dst
        chunk[ids] = t.chunks[:, None]
        if layout is None:
            step[ids] = step0 + q[:, None] * width + t.depth[None, :]
        else:
            if direction == "in":
                layout.round_of[t.chunks] = q
            rq = layout.round_of[t.chunks]
            step[ids] = rq[:, None] * layout.width + layout.offset[direction] + t.depth[None, :]
            last = max(last, int(step[ids].max()) + 1)
        rlen[ids] = t.route_len
        dlen[ids] = t.dep_len
        if direction == "out" and len(t.from_root):
            dlen[ids[:, t.from_root]] = reduced.len[t.chunks][:, None]
        depth = int(t.depth.max()) if len(t.depth) else 0
        if layout is None:
            last = max(last, step0 + (int(rounds[j]) - 1) * width + depth + 1)
        if direction == "in":
            reduced.add(t.chunks, first[:, None] + t.from_root[None, :])
    route_ptr = np.zeros(total + 1, dtype=np.int64)
    np.cumsum(rlen, out=route_ptr[1:])
    dep_ptr = np.zeros(total + 1, dtype=np.int64)
    np.cumsum(dlen, out=dep_ptr[1:])
    limit = dependency_limit()
    if int(dep_ptr[-1]) + base > limit:  # (base: at most one per earlier op, in-trees)
        fan = int(dlen.max()) if total else 0
        raise CollsynthError(
            f"these trees need {int(dep_ptr[-1]):,} dependencies in their {direction}-tree "
            f"operations (up to {fan} per operation), more than the limit of {limit:,} "
            f"(COLLSYNTH_MAX_DEPS raises it; each takes 8 bytes and more to verify)"
        )
    route_links = np.empty(int(route_ptr[-1]), dtype=np.int64)
    dep_ids = np.empty(int(dep_ptr[-1]), dtype=np.int64)
    if direction == "in":
        reduced.freeze()
    for j, t in enumerate(tasks):
        ids = ids_of[j]
        first = ids[:, :1]
        if len(t.route_flat):
            owner = np.repeat(np.arange(len(t.src), dtype=np.int64), t.route_len)
            within = ragged_arange(t.route_len)
            route_links[route_ptr[first + owner[None, :]] + within[None, :]] = t.route_flat
        if len(t.dep_edge):
            dep_ids[dep_ptr[first + t.dep_owner[None, :]] + t.dep_within[None, :]] = (
                first + base + t.dep_edge[None, :]
            )
        if direction == "out" and len(t.from_root) and reduced.ptr is not None:
            ops = ids[:, t.from_root].ravel()
            chunks = np.repeat(t.chunks, len(t.from_root))
            lens = reduced.len[chunks]
            into = ragged_arange(lens, dep_ptr[ops])
            dep_ids[into] = reduced.ids[ragged_arange(lens, reduced.ptr[chunks])]
    kind = OpKind.REDUCE if direction == "in" else OpKind.COPY
    block = {
        "src": src,
        "dst": dst,
        "chunk": chunk,
        "route_ptr": route_ptr,
        "route_links": route_links,
        "dep_ptr": dep_ptr,
        "dep_ids": dep_ids,
        "kind": int(kind),
        "step": step,
    }
    return block, last


def _chunk_id(coll: Collective, root: int, local: int, shares: str = "rank") -> int:
    if shares == "mult" or coll.kind in (CollKind.BROADCAST, CollKind.REDUCE):
        return local  # (shares="mult": the plan numbers the buffer's chunks directly)
    return root * coll.chunks_per_rank + local


__all__ = ["lower"]
