"""The ``group`` rule: in-network groups (``Schedule.group``), multicasts and in-switch
reductions, are well formed. Their meaning is that of the same operations one by one, which
the other rules check."""

from __future__ import annotations

import numpy as np

from ..schedule.ir import OpKind, Schedule
from ..topology.model import Topology
from .context import Context, fail


def check_groups(ctx: Context) -> None:
    """Multicasts and in-switch reductions (``Schedule.group``): a group's members are all
    copies from one sender, of one chunk and byte range, after the same dependencies, to
    distinct receivers, whose routes part only at switches that can multicast; or all reduces
    of one chunk and byte range from distinct senders to one receiver, whose routes meet only
    at switches that can reduce (a route that leaves another and comes back to it, a tree that
    is not one, is refused)."""
    s, t = ctx.schedule, ctx.topology
    g = s.group
    assert g is not None
    if len(g) != s.num_ops:
        fail("structure", f"operation column 'group' has {len(g)} entries for {s.num_ops}")
    bad = np.flatnonzero(g < -1)
    if len(bad):
        op = int(bad[0])
        fail("group", f"{s.describe_op(op)}: group {int(g[op])} is not a group id or -1", op)
    members = np.flatnonzero(g >= 0)
    if len(members):
        order = members[np.argsort(g[members], kind="stable")]
        cuts = np.flatnonzero(np.diff(g[order])) + 1
        for ops in np.split(order, cuts):
            _check_group(s, t, [int(o) for o in ops])
    ctx.checks.append("group")


def _check_group(s: Schedule, t: Topology, ops: list[int]) -> None:
    first = ops[0]
    gid = int(s.group[first])  # type: ignore[index]
    kind = int(s.kind[first])
    what = "multicast" if kind == OpKind.COPY else "in-switch reduction"
    if kind == OpKind.JOIN:
        fail("group", f"{s.describe_op(first)}: a join cannot be in group {gid}", first)

    def same(col: np.ndarray | None, label: str) -> None:
        if col is None:
            return
        for o in ops[1:]:
            if col[o] != col[first]:
                fail(
                    "group",
                    f"{s.describe_op(o)} and op {first} of {what} group {gid} differ in {label}",
                    o,
                )

    same(s.kind, "kind")
    same(s.chunk, "chunk")
    for col in (s.part_lo, s.part_hi, s.part_den):
        same(col, "byte range")
    ends = s.src if kind == OpKind.COPY else s.dst
    same(ends, "sender" if kind == OpKind.COPY else "receiver")
    others = (s.dst if kind == OpKind.COPY else s.src)[ops].tolist()
    if len(set(others)) != len(others):
        dup = next(o for o, r in zip(ops, others) if others.count(r) > 1)
        side = "receiver" if kind == OpKind.COPY else "sender"
        fail(
            "group", f"{s.describe_op(dup)}: two members of {what} group {gid} share a {side}", dup
        )
    if kind == OpKind.COPY:
        deps0 = sorted(set(s.deps(first).tolist()))
        for o in ops[1:]:
            if sorted(set(s.deps(o).tolist())) != deps0:
                fail(
                    "group",
                    f"{s.describe_op(o)} and op {first} of multicast group {gid} wait for "
                    f"different operations (one stream leaves the sender)",
                    o,
                )
    _check_tree(s, t, ops, gid, kind, what)


def _check_tree(s: Schedule, t: Topology, ops: list[int], gid: int, kind: int, what: str) -> None:
    """The routes as a tree: where two part (multicast) or meet (reduction), a capable
    switch, and no link on two branches."""
    routes = {o: s.route(o).tolist() for o in ops}
    if kind != OpKind.COPY:
        routes = {o: r[::-1] for o, r in routes.items()}
    able = t.multicast_nodes if kind == OpKind.COPY else t.reduce_nodes
    verb = "multicast" if kind == OpKind.COPY else "reduce"
    children: dict[tuple, set[int]] = {}
    owner: dict[tuple, int] = {}
    for o in ops:
        prefix: tuple = ()
        for link in routes[o]:
            children.setdefault(prefix, set()).add(link)
            prefix = prefix + (link,)
            owner.setdefault(prefix, o)
    used: dict[int, tuple] = {}
    for prefix, links in children.items():
        for link in links:
            path = prefix + (link,)
            if used.setdefault(link, path) != path:
                o = owner[path]
                fail(
                    "group",
                    f"{s.describe_op(o)}: the routes of {what} group {gid} cross "
                    f"{t.link_label(link)} on two branches (not a tree)",
                    o,
                )
        if len(links) < 2 or not prefix:
            continue  # one branch, or the branches start at the rank itself
        node = int(t.link_dst[prefix[-1]] if kind == OpKind.COPY else t.link_src[prefix[-1]])
        if not able[node]:
            o = owner[prefix + (sorted(links)[1],)]
            fail(
                "group",
                f"{s.describe_op(o)}: the routes of {what} group {gid} "
                f"{'part' if kind == OpKind.COPY else 'meet'} at {t.nodes[node].name}, "
                f"which cannot {verb}",
                o,
            )
