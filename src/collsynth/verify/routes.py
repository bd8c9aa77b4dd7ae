"""The ``route`` rule: every route is a real path of links from the sender's node to the
receiver's node whose intermediate nodes are switches or routers, visiting no node twice (a
join has no route)."""

from __future__ import annotations

import numpy as np

from ..arrays import unique
from ..schedule.ir import OpKind
from .context import Context, fail

#: routes are checked this many operations at a time (the per-hop arrays of one block)
ROUTE_BLOCK_OPS = 1 << 22


def check_routes(ctx: Context) -> None:
    s, t, n = ctx.schedule, ctx.topology, ctx.num_ops
    lengths = np.diff(s.route_ptr)
    join = s.kind == OpKind.JOIN
    empty = np.flatnonzero((lengths == 0) & ~join)
    if len(empty):
        op = int(empty[0])
        fail("route", f"{s.describe_op(op)} has an empty route", op)
    routed = np.flatnonzero((lengths > 0) & join)
    if len(routed):
        op = int(routed[0])
        fail("route", f"{s.describe_op(op)} has a route (a join moves no data)", op)
    links = s.route_links
    bad = np.flatnonzero((links < 0) | (links >= len(t.links)))
    if len(bad):
        op = _hop_owner(ctx, int(bad[0]))
        fail("route", f"{s.describe_op(op)}: link {int(links[bad[0]])} does not exist", op)
    # the per-hop arrays a block of operations at a time (bounded memory at scale)
    block = ROUTE_BLOCK_OPS
    for a in range(0, n, block):
        _check_route_block(ctx, a, min(n, a + block), lengths, join)
    ctx.checks.append("route")


def _hop_owner(ctx: Context, hop: int) -> int:
    """The operation whose route holds entry ``hop`` of ``route_links``."""
    return int(np.searchsorted(ctx.schedule.route_ptr, hop, side="right") - 1)


def _check_route_block(ctx: Context, a: int, b: int, lengths: np.ndarray, join: np.ndarray) -> None:
    """Operations ``a <= op < b``: routes leave the sender, reach the receiver, chain
    through switches and routers only, and visit no node twice."""
    s, t = ctx.schedule, ctx.topology
    h0 = int(s.route_ptr[a])
    links = s.route_links[h0 : int(s.route_ptr[b])]
    lsrc = t.link_src[links]
    ldst = t.link_dst[links]
    moving = a + np.flatnonzero(~join[a:b])  # operations with a route
    first = s.route_ptr[moving] - h0
    last = s.route_ptr[moving + 1] - 1 - h0
    bad = np.flatnonzero(lsrc[first] != t.compute_nodes[s.src[moving]])
    if len(bad):
        op = int(moving[bad[0]])
        fail(
            "route",
            f"{s.describe_op(op)}: route starts with "
            f"{t.link_label(int(links[first[bad[0]]]))}, not at the sender",
            op,
        )
    bad = np.flatnonzero(ldst[last] != t.compute_nodes[s.dst[moving]])
    if len(bad):
        op = int(moving[bad[0]])
        fail(
            "route",
            f"{s.describe_op(op)}: route ends with "
            f"{t.link_label(int(links[last[bad[0]]]))}, not at the receiver",
            op,
        )
    if len(links) == len(moving):
        return  # every route one link long
    # consecutive links inside one route must chain, through non-compute nodes
    inner = np.ones(len(links), dtype=bool)
    inner[last] = False  # positions followed by another link of the same route
    pos = np.flatnonzero(inner)
    broken = pos[ldst[pos] != lsrc[pos + 1]]
    if len(broken):
        op = _hop_owner(ctx, h0 + int(broken[0]))
        fail(
            "route",
            f"{s.describe_op(op)}: {t.link_label(int(links[broken[0]]))} "
            f"is not followed by a link leaving its end node "
            f"({t.link_label(int(links[broken[0] + 1]))})",
            op,
        )
    through = pos[t.kind_codes[ldst[pos]] == 0]
    if len(through):
        op = _hop_owner(ctx, h0 + int(through[0]))
        node = t.nodes[int(ldst[through[0]])].name
        fail(
            "route",
            f"{s.describe_op(op)}: route passes through compute node "
            f"{node!r} (relays through a GPU must be separate operations)",
            op,
        )
    # no node twice: the intermediate nodes of each route, routes of one length together
    blk = lengths[a:b]
    twice: list[int] = []
    for length in unique(blk[blk >= 3]).tolist():
        ops = a + np.flatnonzero(blk == length)
        hops = (s.route_ptr[ops] - h0)[:, None] + np.arange(length - 1)
        mids = np.sort(ldst[hops], axis=1)
        again = np.flatnonzero((mids[:, 1:] == mids[:, :-1]).any(axis=1))
        if len(again):
            twice.append(int(ops[again[0]]))
    if twice:
        op = min(twice)
        fail("route", f"{s.describe_op(op)}: route visits a node twice", op)
