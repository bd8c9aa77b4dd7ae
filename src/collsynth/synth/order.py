"""The order a schedule executes in, chosen and written down: per-link orders that the executors
and exporters realize.

An algorithm's timing is a *plan*: its steps or start times say which transfer a link should
serve first. Nothing on a real network enforces that plan. Links are shared by the connections
(sender-receiver rank pairs: TCP connections, RDMA queue pairs, MSCCL thread blocks) that use
them, and each connection carries its messages in the order its sender posts them. What a
runtime does control is that order: the executors post each pair's messages in the schedule's
link order, the MSCCL and MSCCL++ exporters write each thread block's steps in it (a thread
block runs its steps in a fixed order, so an exported schedule always has *some* order: better
that it is a chosen one).

:func:`with_link_orders` chooses, at the size the schedule is for, between two orders and writes
the better one as ``Schedule.link_order`` (for every link the schedule uses):

* **planned**: the operations sorted by the time their data starts moving in the planned model
  (``order="plan"``). Restricted to a pair, this is the plan's order; where one connection uses
  a link (direct GPU links) the realized time is then exactly the planned one (ForestColl's
  ReduceScatter on DGX-1 at 1 GB: 0.997 of the bound instead of 0.75 first ready, first served).
* **first ready**: the operations sorted by the time their data starts moving in the realized
  model without orders (each pair first ready, first served). Written down, the realized model
  serves every pair in exactly that order, so the realized time is the first-ready one; this
  wins where links are shared and the plan's order makes a pair wait for a transfer that comes
  later under sharing than the plan assumed (ForestColl's AllGather on two DGX-2: 1.001x the
  bound first ready against 1.125x in the planned order).

The choice is made in the realized model (``sim.REALIZED``), the one the testbed validated. One
sort key for every link keeps the orders consistent across the links of a route and with the
dependencies (an operation starts after its dependencies finish, so (start, finish, id) is a
linear extension of them): the orders can never deadlock (the verifier checks that anyway).
A schedule whose algorithm wrote link orders of its own (TE-CCL, MTEG: their plan) keeps them.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..schedule.ir import Schedule
from ..sim import REALIZED, simulate

#: ``meta["link_order"]["from"]`` of the two orders :func:`with_link_orders` may write
FROM_PLAN = "planned start times"
FROM_FIRST_READY = "first ready, first served"


def link_orders_by(schedule: Schedule, key: np.ndarray, tie: np.ndarray) -> dict[int, np.ndarray]:
    """Per link the schedule uses, the operations that carry data over it, sorted by ``key``
    (then ``tie``, then op id): one sort for all links."""
    s = schedule
    lengths = np.diff(s.route_ptr)
    owner = np.repeat(np.arange(s.num_ops, dtype=np.int64), lengths)
    carried = s.carried_hops()
    links = s.route_links[carried].astype(np.int64)
    ops = owner[carried]
    idx = np.lexsort((ops, tie[ops], key[ops], links))
    links, ops = links[idx], ops[idx]
    if not len(links):
        return {}
    cuts = np.flatnonzero(np.r_[True, links[1:] != links[:-1], True])
    return {int(links[a]): ops[a:b].copy() for a, b in zip(cuts[:-1], cuts[1:])}


def _one_pair_per_link(schedule: Schedule) -> bool:
    """Whether every route is one link and every link carries one sender-receiver pair: then
    each link is one connection, served one transfer at a time in both models, so the realized
    time in the plan's order is the planned time itself (``tests/test_order.py`` checks it)."""
    s = schedule
    if s.has_groups or np.any(np.diff(s.route_ptr) > 1):
        return False
    owner = np.repeat(np.arange(s.num_ops, dtype=np.int64), np.diff(s.route_ptr))
    n = np.int64(s.topology.num_ranks)
    pair = s.src[owner].astype(np.int64) * n + s.dst[owner].astype(np.int64)
    links = s.route_links.astype(np.int64)
    uniq = np.unique(np.stack([links, pair]), axis=1)
    return len(np.unique(uniq[0])) == uniq.shape[1]


def with_link_orders(schedule: Schedule, size: float) -> Schedule:
    """``schedule`` with the link orders (planned, or first ready) under which it is faster in
    the realized model at ``size`` bytes; ``meta["link_order"]`` says which, and both times.
    A schedule that has link orders already (chosen before, or an algorithm's own plan: TE-CCL,
    MTEG) is returned as it is."""
    if schedule.num_ops == 0 or schedule.link_order:  # chosen already, or the algorithm's own
        return schedule
    planned = simulate(schedule, size, order="plan")
    planned_orders = link_orders_by(schedule, planned.op_start_s, planned.op_finish_s)
    first_ready = simulate(schedule, size, order=REALIZED)
    t_first = first_ready.time_s
    if _one_pair_per_link(schedule):  # the realized model serves the plan's order exactly
        t_plan = planned.time_s
    else:
        ordered = replace(schedule, link_order=planned_orders)
        t_plan = simulate(ordered, size, order=REALIZED).time_s
    if t_plan <= t_first:
        orders, source = planned_orders, FROM_PLAN
    else:
        orders = link_orders_by(schedule, first_ready.op_start_s, first_ready.op_finish_s)
        source = FROM_FIRST_READY
    if not orders:
        return schedule
    meta = dict(schedule.meta)
    meta["link_order"] = {
        "from": source,
        "size_bytes": float(size),
        "realized_time_s": {"planned": t_plan, "first_ready": t_first},
    }
    return replace(schedule, link_order=orders, meta=meta)


def has_chosen_order(schedule: Schedule) -> bool:
    """Whether ``schedule``'s link orders were chosen by :func:`with_link_orders`."""
    info = schedule.meta.get("link_order")
    return bool(schedule.link_order) and isinstance(info, dict) and "from" in info


def without_chosen_order(schedule: Schedule) -> Schedule:
    """The algorithm's own plan: ``schedule`` without the link orders that
    :func:`with_link_orders` chose (an algorithm's own orders, TE-CCL's or MTEG's, are never
    replaced, so they stay)."""
    if not has_chosen_order(schedule):
        return schedule
    meta = {k: v for k, v in schedule.meta.items() if k != "link_order"}
    return replace(schedule, link_order=None, meta=meta)
