"""The order rules: ``dependency-cycle`` (the dependencies form no cycle), ``link-order`` (a
planned per-link order lists exactly the operations that use the link and, with the
dependencies, cannot deadlock) and ``step-order`` (an operation's step is later than the steps
of the operations it depends on).

The dependency graph is walked with the shared helpers of :mod:`collsynth.schedule.dag`; only
the naming of an operation on a cycle is the verifier's own (:func:`cycle_member`).
"""

from __future__ import annotations

import numpy as np

from ..arrays import unique
from ..schedule.dag import is_acyclic, owners, topological_order
from .context import Context, fail


def dependency_order(ctx: Context) -> tuple[np.ndarray, np.ndarray]:
    """The operations in dependency order (ties by operation id) and each operation's place
    in it; fails ``dependency-cycle`` when there is none."""
    s, n = ctx.schedule, ctx.num_ops
    owner = owners(s.dep_ptr)
    if np.all(s.dep_ids < owner):
        order = np.arange(n)
    else:
        found = topological_order(n, s.dep_ptr, s.dep_ids)
        if found is None:
            op = cycle_member(n, s.dep_ids, owner)
            fail("dependency-cycle", f"dependency cycle through {s.describe_op(op)}", op)
        order = found
    ctx.checks.append("dependency-cycle")
    position = np.empty(n, dtype=np.int64)
    position[order] = np.arange(n)
    return order, position


def cycle_member(n: int, a: np.ndarray, b: np.ndarray) -> int:
    """A node on a cycle of the graph with edges ``a[i] -> b[i]`` (one must exist): from the
    smallest node that no topological order reaches (one on a cycle or after one, so one of
    its predecessors is such a node too), follow the smallest such predecessor until a node
    comes again."""
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    stuck = _unordered(n, a, b)
    by = np.argsort(b, kind="stable")
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(b, minlength=n), out=ptr[1:])
    preds = a[by]
    u = int(np.flatnonzero(stuck)[0])
    seen: set[int] = set()
    while u not in seen:
        seen.add(u)
        mine = preds[ptr[u] : ptr[u + 1]]
        u = int(mine[stuck[mine]].min())
    return u


def _unordered(n: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Which nodes no topological order reaches: those on a cycle (a strongly connected
    component of more than one node, or a self-loop) and those after one (reached from it
    along the edges)."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import breadth_first_order, connected_components

    graph = csr_matrix((np.ones(len(a), dtype=np.int8), (a, b)), shape=(n, n))
    _, label = connected_components(graph, directed=True, connection="strong")
    cyclic = np.bincount(label)[label] > 1
    cyclic[a[a == b]] = True
    # everything reachable from a cyclic node: a search from one more node linked to them all
    roots = np.flatnonzero(cyclic)
    start = np.full(len(roots), n, dtype=np.int64)
    wider = csr_matrix(
        (np.ones(len(a) + len(roots), dtype=np.int8), (np.r_[a, start], np.r_[b, roots])),
        shape=(n + 1, n + 1),
    )
    reached = breadth_first_order(wider, n, directed=True, return_predecessors=False)
    stuck = np.zeros(n + 1, dtype=bool)
    stuck[reached] = True
    return stuck[:n]


def check_link_order(ctx: Context) -> None:
    """Every planned link order lists exactly the operations that carry data over its
    link, each once, and the orders with the dependencies stay acyclic (no deadlock).
    Vectorized over all links; the first faulty link is then named link by link."""
    s, n = ctx.schedule, ctx.num_ops
    assert s.link_order is not None  # verify() checks a link order only when there is one
    lids, lengths, o_ops = s.link_order_entries()
    o_link = np.repeat(lids, lengths)
    owner = owners(s.route_ptr)
    carried = s.carried_hops()
    sel = np.isin(s.route_links, lids) & carried
    nl = np.int64(max(len(ctx.topology.links), 1))
    used = unique(owner[sel] * nl + s.route_links[sel].astype(np.int64))
    ok = bool((lids >= 0).all() and (lids < len(ctx.topology.links)).all())
    ok = ok and bool(((o_ops >= 0) & (o_ops < n)).all())
    if ok:
        keys = o_ops * nl + o_link
        uk = unique(keys)
        ok = len(uk) == len(keys) and len(uk) == len(used) and bool(np.array_equal(uk, used))
    if not ok:
        _name_link_order_fault(ctx, owner, carried)
    # deadlock: dependencies plus "served after" edges must stay acyclic
    ends = np.cumsum(lengths)
    nxt = np.ones(len(o_ops), dtype=bool)
    nxt[ends[lengths > 0] - 1] = False  # the last of each link has no successor there
    a = np.concatenate([s.dep_ids.astype(np.int64), o_ops[:-1][nxt[:-1]]])
    b = np.concatenate([owners(s.dep_ptr), o_ops[1:][nxt[:-1]]])
    if not is_acyclic(n, a, b):
        op = cycle_member(n, a, b)
        fail(
            "link-order",
            f"planned link order conflicts with the dependencies (deadlock) at {s.describe_op(op)}",
            op,
        )
    ctx.checks.append("link-order")


def _name_link_order_fault(ctx: Context, owner: np.ndarray, carried: np.ndarray) -> None:
    """The first link order (in the schedule's order) that is not exactly its link's
    users, named in words."""
    s, t, n = ctx.schedule, ctx.topology, ctx.num_ops
    assert s.link_order is not None
    for lid, planned in s.link_order.items():
        lid = int(lid)
        if not 0 <= lid < len(t.links):
            fail("link-order", f"planned order for link {lid}, which does not exist")
        users = set(owner[(s.route_links == lid) & carried].tolist())
        seq = [int(o) for o in planned]
        for o in seq:
            if not 0 <= o < n:
                fail(
                    "link-order",
                    f"planned order of {t.link_label(lid)} names op {o}, which does not exist",
                )
            if o not in users:
                fail(
                    "link-order",
                    f"planned order of {t.link_label(lid)} lists "
                    f"{s.describe_op(o)}, which does not use that link",
                    o,
                )
        if len(set(seq)) != len(seq):
            dup = next(o for k, o in enumerate(seq) if o in seq[:k])
            fail(
                "link-order",
                f"planned order of {t.link_label(lid)} lists {s.describe_op(dup)} twice",
                dup,
            )
        missing = users - set(seq)
        if missing:
            o = min(missing)
            fail(
                "link-order",
                f"planned order of {t.link_label(lid)} omits "
                f"{s.describe_op(o)}, which uses that link",
                o,
            )


def check_steps(ctx: Context) -> None:
    s = ctx.schedule
    step = s.step
    assert step is not None  # verify() checks steps only when there are some
    owner = owners(s.dep_ptr)
    if len(s.dep_ids):
        a = step[s.dep_ids]
        b = step[owner]
        bad = np.flatnonzero((a >= 0) & (b >= 0) & (a >= b))
        if len(bad) and _paced(s):
            bad = bad[~_pacing_shaped(s, s.dep_ids[bad], owner[bad])]
        if len(bad):
            op = int(owner[bad[0]])
            dep = int(s.dep_ids[bad[0]])
            fail(
                "step-order",
                f"{s.describe_op(op)} at step {int(step[op])} depends on "
                f"op {dep} at step {int(step[dep])}",
                op,
            )
    ctx.checks.append("step-order")


def _paced(s) -> bool:
    """Whether the schedule says its senders are paced (``meta["link_order"]["pacing"]``)."""
    info = s.meta.get("link_order")
    return isinstance(info, dict) and bool(info.get("pacing")) and bool(s.link_order)


def _pacing_shaped(s, before: np.ndarray, after: np.ndarray) -> np.ndarray:
    """Per dependency ``after`` -> ``before``: whether it has a pacing dependency's shape, two
    transfers of one sender with ``before`` earlier than ``after`` in the order of a link both
    use. A paced schedule's plan keeps its steps; its senders' pacing is an order between their
    own transfers along a link's order (which the ``link-order`` rule already ties to the
    dependencies), not a step of the plan."""
    out = np.zeros(len(before), dtype=bool)
    pairs = np.flatnonzero(s.src[before] == s.src[after])
    if not len(pairs):
        return out
    n = s.num_ops
    links, lengths, e_op = s.link_order_entries()
    e_link = np.repeat(links, lengths)
    e_pos = np.arange(len(e_op), dtype=np.int64) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    wanted = np.zeros(n, dtype=bool)
    wanted[before[pairs]] = True
    wanted[after[pairs]] = True
    keep = (e_op >= 0) & (e_op < n)
    keep[keep] = wanted[e_op[keep]]
    # each (link, op) of a wanted op at its place in the link's order (the last, if listed twice)
    key = e_link[keep] * n + e_op[keep]
    by = np.argsort(key, kind="stable")
    key, place = key[by], e_pos[keep][by]
    last = np.ones(len(key), dtype=bool)
    last[:-1] = key[1:] != key[:-1]
    key, place = key[last], place[last]
    # per pair, every link of ``before``'s: is ``after`` later in that link's order?
    op_of, link_of = key % n, key // n
    grouped = np.argsort(op_of, kind="stable")  # the entries op by op
    op_sorted = op_of[grouped]
    first = np.searchsorted(op_sorted, before[pairs])
    count = np.searchsorted(op_sorted, before[pairs], side="right") - first
    pair_of = np.repeat(np.arange(len(pairs)), count)
    entry = grouped[np.repeat(first - np.cumsum(count) + count, count) + np.arange(count.sum())]
    query = link_of[entry] * n + after[pairs][pair_of]
    at = np.minimum(np.searchsorted(key, query), max(len(key) - 1, 0))
    hit = (key[at] == query) & (place[entry] < place[at]) if len(key) else np.zeros(0, bool)
    out[pairs[np.unique(pair_of[hit])]] = True
    return out
