"""One rank's plan straight from a compact schedule, without expanding the other ranks' part.

:func:`compact_rank_plan` gives the :class:`~.plan.RankPlan` that :func:`~.plan.build_rank_plan`
gives for ``c.expand()``: the same operations (numbered as
:meth:`~collsynth.schedule.compact.CompactSchedule.expand` numbers them: representative ``A``'s
image under element ``e`` is ``A * |G| + e``), in the same execution order, with the same
frontiers, tags and link-order waits. It touches only

* the rank's own operations: for each representative, the image that sends from the rank and
  the one that sends to it (the group acts freely on the ranks, so there is at most one of
  each, and none where the rank is in another orbit than the representative's end);
* the representatives' levels in the quotient graph (dependencies and link orders between
  orbits): the execution order sorts by level, which every image of an operation shares (a
  chain into an image maps onto a chain of orbits, and back), then by id;
* for each of its operations, the ancestors reached through other ranks' operations (its
  local frontier, :mod:`.plan`), walked on demand from the representatives' dependencies;
* every operation between the rank and one peer is the rank's own, so each ordered pair's
  sequence numbers (the tags) are counted among them; a send's position in its link's order
  is its representative entry's position in the order of the link's orbit.

So the memory is that of one rank's part and its ancestors, not of the schedule (``run`` on a
compact file, issue 36). ``tests/test_compact_run.py`` checks the plans equal the expanded
schedule's on symmetric schedules of several fabrics and algorithms.
"""

from __future__ import annotations

import numpy as np

from ..errors import CollsynthError
from ..schedule.compact import CompactSchedule
from ..schedule.dag import levels, owners, ragged_arange
from ..schedule.ir import OpKind, Schedule
from .plan import RankPlan, input_chunks, output_chunks, tags_in_order


class RankOps:
    """The operations of one rank's plan by their global ids, for the executor's messages:
    ``src[op]``, ``dst[op]`` and :meth:`describe_op` (a :class:`Schedule`'s subset that the
    executor reads)."""

    def __init__(self, local: Schedule, ids: list[int]):
        self.local = local
        self.index = {op: j for j, op in enumerate(ids)}
        self.src = dict(zip(ids, local.src.tolist()))
        self.dst = dict(zip(ids, local.dst.tolist()))

    def describe_op(self, op: int) -> str:
        j = self.index[op]
        text = self.local.describe_op(j)
        return f"op {op}" + text[len(f"op {j}") :]


def quotient_levels(c: CompactSchedule) -> np.ndarray:
    """Every representative's level in the graph of orbits that the dependencies and the link
    orders make, joins bypassed (a dependency on a join stands for the join's own, as in
    :meth:`Schedule.expand_joins`, which the executors run): the level every image of it has
    in the explicit schedule without joins."""
    n = c.num_reps
    src = [c.dep_orbit.astype(np.int64)]
    dst = [owners(c.dep_ptr)]
    if c.order_links is not None:
        assert c.order_ptr is not None and c.order_orbit is not None
        ptr = np.asarray(c.order_ptr, dtype=np.int64)
        orb = c.order_orbit.astype(np.int64)
        same = owners(ptr)[1:] == owners(ptr)[:-1]  # consecutive entries of one order
        src.append(orb[:-1][same])
        dst.append(orb[1:][same])
    a, b = np.concatenate(src), np.concatenate(dst)
    join = c.reps.kind == OpKind.JOIN
    for _ in range(n + 1):  # an edge out of a join: from each of the join's own instead
        through = join[a]
        if not through.any():
            break
        into = np.flatnonzero(~through)
        outs = np.flatnonzero(through)
        by = np.argsort(b, kind="stable")
        start = np.searchsorted(b[by], a[outs], side="left")
        stop = np.searchsorted(b[by], a[outs], side="right")
        count = stop - start
        pick = by[ragged_arange(count, start)]
        pairs = np.unique(np.stack([np.concatenate([a[into], a[pick]]),
                                    np.concatenate([b[into], np.repeat(b[outs], count)])]),
                          axis=1)  # fmt: skip
        a, b = pairs[0], pairs[1]
    keep = ~join[b]
    a, b = a[keep], b[keep]
    by_dst = np.argsort(b, kind="stable")
    pred_ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(b, minlength=n), out=pred_ptr[1:])
    level = levels(n, pred_ptr, a[by_dst])
    if level is None:
        raise CollsynthError("the schedule's dependencies and link orders form a cycle")
    return level


def compact_rank_plan(
    c: CompactSchedule, rank: int, chunk_bytes: int, elem: int, tag_limit: int
) -> tuple[RankPlan, RankOps]:
    """Rank ``rank``'s plan of ``c`` (see the module doc) and its operations for messages."""
    coll = c.collective
    if not 0 <= rank < coll.num_ranks:
        raise CollsynthError(f"rank {rank} is not a rank of the schedule (0..{coll.num_ranks - 1})")
    if tag_limit < 1:
        raise CollsynthError(f"tag limit must be at least 1, got {tag_limit}")
    a, r = c.action, c.reps
    if r.has_groups:
        raise CollsynthError("a compact schedule with multicasts or in-switch reductions is "
                             "run expanded (CompactSchedule.expand())")  # fmt: skip
    G = a.order
    here = np.full(r.num_ops, rank, dtype=np.int64)
    moves = r.kind != OpKind.JOIN  # (joins are walked through, as expand_joins drops them)
    e_src = a.element_sending(r.src, here)  # the image sending from the rank (-1: none)
    e_dst = a.element_sending(r.dst, here)
    sends, recvs = np.flatnonzero((e_src >= 0) & moves), np.flatnonzero((e_dst >= 0) & moves)
    rep = np.concatenate([sends, recvs])
    el = np.concatenate([e_src[sends], e_dst[recvs]])
    ids = rep * G + el
    by = np.lexsort((ids, quotient_levels(c)[rep]))
    rep, el, ids = rep[by], el[by], ids[by]
    # the ids without joins (expand_joins keeps the others' order): what the plan reports
    before = np.concatenate([[0], np.cumsum(moves)]).astype(np.int64)
    shown = before[rep] * G + el
    local_ops = ids.tolist()
    index = {op: j for j, op in enumerate(local_ops)}
    src = a.rank_perms[el, r.src[rep]].astype(np.int64)
    dst = a.rank_perms[el, r.dst[rep]].astype(np.int64)
    chunk = a.chunk_image(el, r.chunk[rep]) if len(rep) else np.zeros(0, dtype=np.int64)
    is_send = src == rank
    ins, outs = input_chunks(coll, rank), output_chunks(coll, rank)
    slots = {ch: i for i, ch in enumerate(sorted(set(ins) | set(outs) | set(chunk.tolist())))}
    lo = np.zeros(len(rep), dtype=np.int64)
    hi = np.full(len(rep), chunk_bytes, dtype=np.int64)
    if r.part_den is not None:
        assert r.part_lo is not None and r.part_hi is not None
        den = r.part_den[rep].astype(np.int64)
        lo = chunk_bytes * r.part_lo[rep].astype(np.int64) // den
        hi = chunk_bytes * r.part_hi[rep].astype(np.int64) // den
    offset = np.array([slots[x] for x in chunk.tolist()], dtype=np.int64) * chunk_bytes + lo
    tag, recv_pre, post_pre = tags_in_order(src, dst, is_send, coll.num_ranks, tag_limit)
    _link_order_waits(c, rep, el, is_send, dst, post_pre)
    done_pre = [sorted(index[p] for p in pre) for pre in _frontiers(c, local_ops, index)]
    plan = RankPlan(
        rank=rank,
        num_ranks=coll.num_ranks,
        chunk_bytes=int(chunk_bytes),
        elem=int(elem),
        ops=shown,
        is_send=is_send.astype(bool),
        peer=np.where(is_send, dst, src),
        offset=offset,
        nbytes=hi - lo,
        reduce=(r.kind[rep] == OpKind.REDUCE).astype(bool),
        tag=tag,
        done_pre=done_pre,
        post_pre=post_pre,
        recv_pre=recv_pre,
        slots=slots,
        input_chunks=ins,
        output_chunks=outs,
    )
    local = Schedule(
        r.topology, coll, src, dst, chunk, r.kind[rep], np.arange(len(rep) + 1),
        np.zeros(len(rep), dtype=np.int64), np.zeros(len(rep) + 1, dtype=np.int64),
        np.zeros(0, dtype=np.int64), part_lo=None if r.part_lo is None else r.part_lo[rep],
        part_hi=None if r.part_hi is None else r.part_hi[rep],
        part_den=None if r.part_den is None else r.part_den[rep],
    )  # fmt: skip
    return plan, RankOps(local, shown.tolist())


def _deps(c: CompactSchedule, op: int) -> list[int]:
    """Operation ``op``'s dependencies (global ids)."""
    G = c.action.order
    rep, e = divmod(op, G)
    lo, hi = int(c.dep_ptr[rep]), int(c.dep_ptr[rep + 1])
    return (c.dep_orbit[lo:hi] * G + c.action.mul[e, c.dep_elem[lo:hi]]).tolist()


def _frontiers(c: CompactSchedule, local_ops: list[int], index: dict[int, int]) -> list[set]:
    """Each local operation's local frontier: its dependencies that are the rank's own, and
    for each other one, what it reaches the same way (memoized; walked without recursion)."""
    reach: dict[int, frozenset[int]] = {}  # an operation of other ranks: the local ones it reaches

    def walk(start: int) -> None:
        stack = [start]
        while stack:
            y = stack[-1]
            if y in reach:
                stack.pop()
                continue
            deps = _deps(c, y)
            todo = [d for d in deps if d not in index and d not in reach]
            if todo:
                stack.extend(todo)
                continue
            acc: set[int] = set()
            for d in deps:
                acc |= {d} if d in index else reach[d]
            reach[y] = frozenset(acc)
            stack.pop()

    out = []
    for x in local_ops:
        acc: set[int] = set()
        for d in _deps(c, x):
            if d in index:
                acc.add(d)
            else:
                walk(d)
                acc |= reach[d]
        out.append(acc)
    return out


def _link_order_waits(c: CompactSchedule, rep, el, is_send, dst, post_pre: list[list[int]]) -> None:
    """:func:`~.plan._link_order_pre` for the rank's sends: on every link (by id), the sends
    to one peer in the link's order, each posted after the one before it. A send's position
    in the order of its link ``g(l)`` (``l`` the smallest link of its orbit) is that of the
    entry ``(A, g^-1 e)`` in the order of ``l``, the images of the orders being the orders."""
    if c.order_links is None:
        return
    assert c.order_ptr is not None and c.order_orbit is not None and c.order_elem is not None
    a, r = c.action, c.reps
    G, n = a.order, r.num_ops
    link_rep, link_elem = a.link_frames
    ptr = np.asarray(c.order_ptr, dtype=np.int64)
    lid = c.order_links.astype(np.int64)[owners(ptr)]
    # each entry as seen on its orbit's smallest link (the element carrying that link onto
    # the ordered one taken off)
    norm = a.mul[a.inv[link_elem[lid]], c.order_elem.astype(np.int64)]
    keys = (link_rep[lid] * n + c.order_orbit.astype(np.int64)) * G + norm
    pos = np.arange(len(keys), dtype=np.int64) - ptr[owners(ptr)]
    by_key = np.argsort(keys, kind="stable")
    keys, pos = keys[by_key], pos[by_key]
    j = np.flatnonzero(is_send)
    lengths = np.diff(r.route_ptr)[rep[j]]
    hop_j = np.repeat(j, lengths)
    k = ragged_arange(lengths)  # each hop's place in its route
    rep_link = r.route_links[r.route_ptr[rep[hop_j]] + k].astype(np.int64)
    link = a.link_perms[el[hop_j], rep_link].astype(np.int64)
    want = (link_rep[link] * n + rep[hop_j]) * G + a.mul[a.inv[link_elem[link]], el[hop_j]]
    at = np.minimum(np.searchsorted(keys, want), max(len(keys) - 1, 0))
    found = (keys[at] == want) if len(keys) else np.zeros(len(want), dtype=bool)
    order = np.lexsort((pos[at][found], link[found]))
    last: dict[int, int] = {}
    prev_link = -1
    for lk, b in zip(link[found][order].tolist(), hop_j[found][order].tolist()):
        if lk != prev_link:
            last, prev_link = {}, lk
        peer = int(dst[b])
        before = last.get(peer)
        if before is not None and before not in post_pre[b]:
            post_pre[b].append(before)
        last[peer] = b


__all__ = ["RankOps", "compact_rank_plan", "quotient_levels"]
