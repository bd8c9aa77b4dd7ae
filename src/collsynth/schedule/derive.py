"""What :class:`~collsynth.schedule.ir.Schedule` derives from its columns: the schedule without
joins (:func:`expand_joins`), the link orders once every group member carries its own data
(:func:`expanded_link_order`), the link orders as each connection sees them
(:func:`pair_order_edges`) and which route entries carry data (:func:`carried_hops`).

The :class:`Schedule` methods of the same names call these.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..arrays import unique
from .dag import owners, ragged_arange
from .ir import OpKind, Schedule


def expand_joins(s: Schedule) -> Schedule:
    """The same schedule without join operations: every dependency on a join is replaced
    by the join's own (transitively), duplicates dropped; the other operations keep their
    order and are renumbered. ``s`` when there is no join. The dependency lists grow to
    fan-in times fan-out entries, so this is for small schedules (exporters, executors)."""
    is_join = s.kind == OpKind.JOIN
    if not is_join.any():
        return s
    n = s.num_ops
    # each operation's stand-ins: itself, or for a join the non-join operations it awaits
    resolved: dict[int, list[int]] = {}

    def resolve(j: int) -> list[int]:
        if j not in resolved:
            out: dict[int, None] = {}
            stack = [j]
            seen = {j}
            while stack:
                for d in s.deps(stack.pop()).tolist():
                    if not is_join[d]:
                        out[d] = None
                    elif d in resolved:
                        out.update(dict.fromkeys(resolved[d]))
                    elif d not in seen:
                        seen.add(d)
                        stack.append(d)
            resolved[j] = sorted(out)
        return resolved[j]

    lens = np.ones(n, dtype=np.int64)
    joins = np.flatnonzero(is_join).tolist()
    lists = [resolve(j) for j in joins]
    lens[joins] = [len(x) for x in lists]
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lens, out=ptr[1:])
    ids = owners(ptr)
    for j, x in zip(joins, lists):
        ids[ptr[j] : ptr[j + 1]] = x
    owner = owners(s.dep_ptr)
    sel = ~is_join[owner]
    owner, dep = owner[sel], s.dep_ids[sel]
    new_owner = np.repeat(owner, lens[dep])
    new_dep = ids[ragged_arange(lens[dep], ptr[dep])]
    key = unique(new_owner * n + new_dep)  # sorted per owner, duplicates dropped
    keep = ~is_join
    renum = np.cumsum(keep) - 1
    m = int(keep.sum())
    dep_ids = renum[key % n]
    dep_ptr = np.zeros(m + 1, dtype=np.int64)
    np.cumsum(np.bincount(renum[key // n], minlength=m), out=dep_ptr[1:])
    rlen = np.diff(s.route_ptr)[keep]
    route_ptr = np.zeros(m + 1, dtype=np.int64)
    np.cumsum(rlen, out=route_ptr[1:])

    def cut(col: np.ndarray | None) -> np.ndarray | None:
        return None if col is None else col[keep]

    return replace(
        s,
        src=s.src[keep],
        dst=s.dst[keep],
        chunk=s.chunk[keep],
        kind=s.kind[keep],
        route_ptr=route_ptr,
        route_links=s.route_links,  # joins have no links
        dep_ptr=dep_ptr,
        dep_ids=dep_ids,
        start=cut(s.start),
        duration=cut(s.duration),
        step=cut(s.step),
        part_lo=cut(s.part_lo),
        part_hi=cut(s.part_hi),
        part_den=cut(s.part_den),
        group=cut(s.group),
        link_order=({k: renum[v] for k, v in s.link_order.items()} if s.link_order else None),
    )


def expanded_link_order(s: Schedule) -> dict[int, np.ndarray] | None:
    """The link orders once every group member carries its own data: each member that
    shared a link with its group's carrier goes right after the carrier there."""
    if not s.link_order or s.group is None:
        return s.link_order
    carried = carried_hops(s)
    owner = owners(s.route_ptr)
    riders: dict[tuple[int, int], list[int]] = {}  # (link, group) -> members not carrying
    for h in np.flatnonzero(~carried).tolist():
        o = int(owner[h])
        riders.setdefault((int(s.route_links[h]), int(s.group[o])), []).append(o)
    out: dict[int, np.ndarray] = {}
    for link, seq in s.link_order.items():
        ops: list[int] = []
        for o in np.asarray(seq).tolist():
            ops.append(o)
            g = int(s.group[o])
            if g >= 0:
                ops.extend(riders.get((int(link), g), ()))
        out[link] = np.array(ops, dtype=np.int64)
    return out


def pair_order_edges(s: Schedule) -> tuple[np.ndarray, np.ndarray]:
    """The link orders as each connection sees them: arrays ``(a, b)`` of operations with
    the same sender and receiver where ``b`` comes right after ``a`` among that pair's
    operations in some link's planned order (each edge once, sorted). This is the order
    the executors post a pair's messages in and the exporters give a thread block's steps;
    it is all of a link order that a runtime can enforce, since different pairs share a
    link however their messages are posted."""
    empty = np.zeros(0, dtype=np.int64)
    if not s.link_order:
        return empty, empty
    n = np.int64(s.topology.num_ranks)
    a_parts, b_parts = [], []
    for _, seq in sorted(s.link_order.items()):
        seq = np.asarray(seq, dtype=np.int64)
        if len(seq) < 2:
            continue
        key = s.src[seq].astype(np.int64) * n + s.dst[seq].astype(np.int64)
        by = np.argsort(key, kind="stable")  # per pair, in the link's order
        same = key[by][1:] == key[by][:-1]
        a_parts.append(seq[by][:-1][same])
        b_parts.append(seq[by][1:][same])
    if not a_parts:
        return empty, empty
    m = np.int64(max(s.num_ops, 1))
    key = unique(np.concatenate(a_parts) * m + np.concatenate(b_parts))
    return key // m, key % m


def carried_hops(s: Schedule) -> np.ndarray:
    """Per entry of ``route_links``: False where an earlier member of the operation's
    in-network group already carries the data over that link (a multicast's shared
    prefix, an in-switch reduction's shared suffix: the same path from the common sender
    or to the common receiver), True elsewhere. The link's planned order and its capacity
    name the carrying member only."""
    out = np.ones(len(s.route_links), dtype=bool)
    if not s.has_groups:
        return out
    g = s.group
    assert g is not None
    seen: set[tuple] = set()
    for o in np.flatnonzero(g >= 0).tolist():
        lo, hi = int(s.route_ptr[o]), int(s.route_ptr[o + 1])
        route = s.route_links[lo:hi].tolist()
        copy = s.kind[o] == OpKind.COPY
        for i in range(len(route)):
            path = tuple(route[: i + 1]) if copy else tuple(route[i:])
            key = (int(g[o]), path)
            if key in seen:
                out[lo + i] = False
            else:
                seen.add(key)
    return out


__all__ = ["carried_hops", "expand_joins", "expanded_link_order", "pair_order_edges"]
