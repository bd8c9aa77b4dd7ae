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

**Sender pacing** (:func:`paced`). A link order binds one connection; links that carry many
connections share their bandwidth among them, whatever each one's order. Where one rank sends
everything a link carries, to several receivers, and each receiver gets only a few transfers
(at most ``PACING_MAX_PER_PAIR`` at the median: trees without pipelining, as ForestColl's at
1,024 GPUs), sharing spreads the rank's sends
over the whole phase: every one of them ends late, and the forwarding behind each waits. The
sender itself can keep that from happening: each of its transfers on such a link waits until
the one ``W`` places earlier in the link's planned order has completed (a dependency between
two of its own sends, which every executor realizes locally: a send request completed, an
earlier step of the same GPU). Then at most ``W`` of its transfers share the link, in the
planned order. Where the schedule qualifies, windows 4, 2 and 8 are tried on the slower such
links (slower than the fastest link class the schedule's senders use that way), then one window
at a time up or down from the best while that helps, within a budget of simulated link hops
(``PACING_HOPS_BUDGET``: the whole search at 1,024 GPUs, the first window alone at 4,096), and
the best is kept if it beats the orders alone (``meta["link_order"]["pacing"]``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TypeVar

import numpy as np

from .. import deadline
from ..arrays import unique
from ..collective import CollKind
from ..schedule.compact import CompactSchedule
from ..schedule.dag import is_acyclic, levels, owners
from ..schedule.ir import OpKind, Schedule
from ..sim import REALIZED, simulate
from ..sim.quotient import Quotient, find_quotient
from ..topology.symmetry import link_frames, topology_group

#: an explicit or a compact schedule (what the ordering functions take and give back)
S = TypeVar("S", Schedule, CompactSchedule)

#: ``meta["link_order"]["from"]`` of the two orders :func:`with_link_orders` may write
FROM_PLAN = "planned start times"
FROM_FIRST_READY = "first ready, first served"
#: ``meta["phases"]["form"]`` of an AllReduce: as the algorithm made it, or
#: :func:`reduce_then_broadcast`'s
INTERLEAVED = "as planned"
PHASED = "reduce, then broadcast, per rank"
#: ``meta`` key by which an algorithm says its AllReduce's reductions and broadcasts were
#: planned to share the links at once (ForestColl's shared phases), ``{"rounds": P}`` with
#: chunk ``c`` in pipeline round ``c mod P``: :func:`with_link_orders` then also tries them
#: pipelined by groups of whole rounds (:func:`reduce_then_broadcast`, chained)
OVERLAP_PHASES = "overlap_phases"
#: the numbers of chunk groups tried for such a schedule
OVERLAP_GROUPS = (2, 4, 8)


def link_orders_by(
    schedule: Schedule, key: np.ndarray, tie: np.ndarray, orbit: np.ndarray | None = None
) -> dict[int, np.ndarray]:
    """Per link the schedule uses, the operations that carry data over it, sorted by ``key``
    (then ``tie``, then op id): one sort for all links. Where the fabric has symmetries
    (``orbit``: each operation's orbit, from a simulation on the quotient) the sort is made
    symmetric instead: see :func:`_symmetric_orders`."""
    s = schedule
    lengths = np.diff(s.route_ptr)
    owner = np.repeat(np.arange(s.num_ops, dtype=np.int64), lengths)
    carried = s.carried_hops()
    links = s.route_links[carried].astype(np.int64)
    ops = owner[carried]
    idx = None
    if orbit is not None:
        idx = _symmetric_orders(s, links, ops, key, tie, orbit)
    if idx is None:  # (``ops`` come in increasing order and the sort is stable)
        idx = np.lexsort((tie[ops], key[ops], links))
    links, ops = links[idx], ops[idx]
    if not len(links):
        return {}
    cuts = np.flatnonzero(np.r_[True, links[1:] != links[:-1], True])
    return {int(links[a]): ops[a:b].copy() for a, b in zip(cuts[:-1], cuts[1:])}


def _symmetric_orders(s: Schedule, links, ops, key, tie, orbit) -> np.ndarray | None:
    """The sort of :func:`link_orders_by` for a symmetric schedule, or None where it would
    not do. ``key`` and ``tie`` are times from a symmetric simulation, which gives the images
    of an operation under an automorphism of the fabric the same times up to rounding; they
    are compared at :data:`TIME_GRAIN` of the largest, so that rounding does not decide an
    order; then by dependency level (which grows along every dependency, so an operation
    never comes before one it waits for), then by orbit: so far one key for every link, like
    time and id, which keeps the orders consistent with each other and with the
    dependencies. Operations of one orbit that meet on a link then go by sender and receiver
    as seen from the link's orbit (:func:`collsynth.topology.symmetry.link_frames`: the same
    for every image of a link). A symmetric schedule then gets symmetric link orders, which
    is what lets the simulator run it on its quotient (:mod:`collsynth.sim.quotient`). That
    last key differs from link to link, so the orders are checked against deadlock (None if
    they could: the caller sorts by time and id instead)."""
    group = topology_group(s.topology) if len(links) else None
    level = levels(s.num_ops, s.dep_ptr, s.dep_ids)
    if group is None or level is None:
        return None
    ranks = group.rank_perms(s.topology)
    element = link_frames(s.topology, group)[1][links]
    src = ranks[element, s.src[ops].astype(np.int64)]
    dst = ranks[element, s.dst[ops].astype(np.int64)]
    idx = np.lexsort(_packed((links, _grains(key)[ops]), (_grains(tie)[ops], level[ops]),
                             (orbit[ops], src * s.topology.num_ranks + dst))[::-1])  # fmt: skip
    ordered_links, ordered_ops = links[idx], ops[idx]
    same = ordered_links[1:] == ordered_links[:-1]
    a = np.concatenate((s.dep_ids.astype(np.int64), ordered_ops[:-1][same]))
    b = np.concatenate((owners(s.dep_ptr), ordered_ops[1:][same]))
    return idx if is_acyclic(s.num_ops, a, b) else None


def _packed(*pairs: tuple[np.ndarray, np.ndarray]) -> list[np.ndarray]:
    """Sort keys, most significant first, with each pair of non-negative keys packed into
    one where both fit in 31 bits (a sort by fewer keys is faster; ``ops`` are not among
    them: they come in increasing order and ``np.lexsort`` is stable)."""
    out = []
    for hi, lo in pairs:
        if len(hi) and min(hi.min(), lo.min()) >= 0 and max(hi.max(), lo.max()) < 2**31:
            out.append((hi.astype(np.int64) << 31) | lo.astype(np.int64))
        else:
            out.extend((hi, lo))
    return out


#: times closer than this fraction of the largest are equal when link orders are sorted
TIME_GRAIN = 1e-9


def _grains(times: np.ndarray) -> np.ndarray:
    """``times`` in whole grains of :data:`TIME_GRAIN` of the largest magnitude."""
    top = float(np.max(np.abs(times))) if len(times) else 0.0
    if not np.isfinite(top) or top <= 0:
        return np.zeros(len(times), dtype=np.int64)
    return np.round(np.asarray(times, dtype=np.float64) / (top * TIME_GRAIN)).astype(np.int64)


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
    return len(unique(uniq[0])) == uniq.shape[1]


def fastest(schedules: Sequence[S], size: float) -> S:
    """Of an algorithm's alternatives (:class:`~collsynth.synth.registry.Alternatives`: the
    schedules its own estimate could not tell apart, its first choice first), the one that is
    fastest in the realized model at ``size`` bytes once :func:`with_link_orders` has ordered
    it (ties: the earlier). A single schedule is just ordered. ``meta["alternatives"]`` gives
    every alternative's realized time and which was kept. Alternatives after the first are
    skipped when less than half of a time limit is left (:func:`collsynth.deadline.nearly_out`).
    """
    first = with_link_orders(schedules[0], size)
    if len(schedules) == 1:
        return first
    kept, times = first, [realized_time(first, size)]
    for alt in schedules[1:]:
        if deadline.nearly_out():
            break
        cand = with_link_orders(alt, size)
        times.append(realized_time(cand, size))
        if times[-1] < min(times[:-1]):
            kept = cand
    meta = dict(kept.meta)
    meta["alternatives"] = {
        "size_bytes": float(size),
        "realized_time_s": times,
        "kept": times.index(min(times)),
        "given": len(schedules),
    }
    return replace(kept, meta=meta)


def realized_time(schedule: Schedule | CompactSchedule, size: float) -> float:
    """``schedule``'s time in the realized model at ``size`` bytes: the one
    :func:`with_link_orders` found for it at that size, else simulated."""
    info = schedule.meta.get("link_order") or {}
    if has_chosen_order(schedule) and float(info.get("size_bytes", -1)) == float(size):
        return float(info["time_s"])
    return simulate(schedule, size, order=REALIZED).time_s


def with_link_orders(schedule: S, size: float) -> S:
    """``schedule`` with the link orders (planned, or first ready) under which it is faster in
    the realized model at ``size`` bytes; ``meta["link_order"]`` says which, and both times.
    An AllReduce is also tried with each rank's broadcasts held until its reductions are done
    (:func:`reduce_then_broadcast`), and that form is kept where it is faster in the realized
    model (``meta["phases"]`` says so, with every form's time); one whose algorithm planned its
    phases to overlap (``meta[OVERLAP_PHASES]``) is also tried pipelined by ``OVERLAP_GROUPS``
    groups of chunks (:func:`reduce_then_broadcast` chained). A schedule that has link orders
    already (chosen before, or an algorithm's own plan: TE-CCL, MTEG) is returned as it is.
    A compact schedule gets the better of the two orders alone (:func:`_ordered_compact`)."""
    if isinstance(schedule, CompactSchedule):
        if schedule.num_ops == 0 or schedule.order_links is not None:
            return schedule
        return _ordered_compact(schedule, size)
    if schedule.num_ops == 0 or schedule.link_order:  # chosen already, or the algorithm's own
        return schedule
    best = _ordered(schedule, size)
    forms = {PHASED: reduce_then_broadcast(schedule)}
    if schedule.meta.get(OVERLAP_PHASES) and forms[PHASED] is not None:
        for g in OVERLAP_GROUPS:
            groups = _chunk_groups(schedule, g)
            if groups is not None:
                forms[_pipelined(g)] = reduce_then_broadcast(schedule, groups, chain=True)
    times = {INTERLEAVED: best.meta["link_order"]["time_s"]}
    kept = INTERLEAVED
    for name, form in forms.items():
        if form is None or (name != PHASED and deadline.nearly_out()):
            continue
        alt = _ordered(form, size)
        times[name] = alt.meta["link_order"]["time_s"]
        if times[name] < times[kept]:
            best, kept = alt, name
    if len(times) > 1:
        meta = dict(best.meta)
        meta["phases"] = {"form": kept, "realized_time_s": times}
        best = replace(best, meta=meta)
    return best


def _pipelined(groups: int) -> str:
    """``meta["phases"]["form"]`` of the phases pipelined by ``groups`` groups of chunks."""
    return f"reduce, then broadcast, per rank and group of chunks ({groups} groups)"


def _chunk_groups(schedule: Schedule, groups: int) -> np.ndarray | None:
    """Each chunk's group (``0 .. groups-1``) of ``groups`` groups of whole pipeline rounds,
    where ``meta[OVERLAP_PHASES]["rounds"]`` gives the rounds (chunk ``c`` is in round
    ``c mod rounds``); ``None`` where ``groups`` does not divide the rounds: a group that cut a
    round would hold some ranks' reductions of that round back and not others'."""
    info = schedule.meta.get(OVERLAP_PHASES)
    rounds = int(info.get("rounds", 0)) if isinstance(info, dict) else 0
    if groups < 2 or rounds % groups:
        return None
    chunk = np.arange(schedule.collective.num_chunks, dtype=np.int64)
    return ((chunk % rounds) * groups) // rounds


#: the windows sender pacing tries first (transfers of one sender in flight on a paced link)
PACING_WINDOWS = (4, 2, 8)
#: link hops the pacing search may simulate in all (each window tried simulates the schedule
#: once); the first window is always tried. At 1,024 GPUs (2.4 M hops per simulation) the
#: whole search fits; at 4,096 (38 M) only the first window does
PACING_HOPS_BUDGET = 25_000_000
#: pacing is tried where paced links carry at most this many transfers per receiver (median)
PACING_MAX_PER_PAIR = 8
#: most windows tried in all: PACING_WINDOWS, then one at a time from the best
PACING_MAX_TRIES = 7


def pacing_links(schedule: Schedule, orders: dict[int, np.ndarray]) -> list[int]:
    """The links :func:`paced` would pace: those whose every transfer one rank sends, to two or
    more receivers, with at most :data:`PACING_MAX_PER_PAIR` transfers per receiver at the
    median over them; of those, the ones slower than the fastest (all of them where they are
    equally fast). Empty where none qualifies, and for schedules with in-network groups (a
    multicast's members must wait for the same operations) or planned start times (pacing
    would move them)."""
    s = schedule
    if s.has_groups or (s.start is not None and not np.all(np.isnan(s.start))):
        return []
    cand: list[int] = []
    per_pair: list[float] = []
    for link, ops in orders.items():
        if len(ops) < 2 or not np.all(s.src[ops] == s.src[ops[0]]):
            continue
        receivers = np.unique(s.dst[ops])
        if len(receivers) < 2:
            continue
        cand.append(link)
        per_pair.append(len(ops) / len(receivers))
    if not cand or float(np.median(per_pair)) > PACING_MAX_PER_PAIR:
        return []
    bw = np.array([s.topology.links[link].bw for link in cand])
    slower = [link for link, b in zip(cand, bw) if b < bw.max()]
    return sorted(slower or cand)


def _pacing_pairs(
    orders: dict[int, np.ndarray], links: list[int], window: int
) -> tuple[np.ndarray, np.ndarray]:
    """(earlier, later) operation pairs of pacing ``links`` with ``window``: on each link, the
    transfer at place ``k`` waits for the one at ``k - window`` in the link's order."""
    before = [orders[link][:-window] for link in links if len(orders[link]) > window]
    after = [orders[link][window:] for link in links if len(orders[link]) > window]
    if not before:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    return np.concatenate(before).astype(np.int64), np.concatenate(after).astype(np.int64)


def paced(schedule: Schedule, links: list[int], window: int) -> Schedule | None:
    """``schedule`` (with link orders) with its senders paced on ``links``: each transfer waits
    for the one ``window`` places before it in the link's order (see the module). The added
    dependencies come last in each operation's list. None where the schedule has no link
    orders, nothing to pace, or a pacing pair is a dependency already (then the pacing could
    not be told apart from the algorithm's own dependencies and taken off again)."""
    s = schedule
    if not s.link_order or window < 1:
        return None
    before, after = _pacing_pairs(s.link_order, links, window)
    if not len(after):
        return None
    n = s.num_ops
    old_to = np.repeat(np.arange(n, dtype=np.int64), np.diff(s.dep_ptr))
    have = old_to * np.int64(n) + s.dep_ids.astype(np.int64)
    if np.isin(after * np.int64(n) + before, have).any():
        return None
    to = np.concatenate([old_to, after])
    frm = np.concatenate([s.dep_ids.astype(np.int64), before])
    idx = np.argsort(to, kind="stable")  # the algorithm's own dependencies first, in order
    meta = dict(s.meta)
    meta["link_order"] = dict(meta.get("link_order") or {})
    meta["link_order"]["pacing"] = {"window": int(window), "links": [int(x) for x in links]}
    return _with_deps(s, to[idx], frm[idx], meta)


def _with_deps(s: Schedule, to: np.ndarray, frm: np.ndarray, meta: dict) -> Schedule:
    """``s`` with the dependencies ``to[i]`` waits for ``frm[i]`` (``to`` sorted) and ``meta``."""
    dep_ptr = np.zeros(s.num_ops + 1, dtype=np.int64)
    np.cumsum(np.bincount(to, minlength=s.num_ops), out=dep_ptr[1:])
    return replace(s, dep_ptr=dep_ptr, dep_ids=frm.astype(s.dep_ids.dtype), meta=meta)


def unpaced(schedule: Schedule) -> Schedule:
    """``schedule`` without the dependencies :func:`paced` added (as it was before)."""
    info = (schedule.meta.get("link_order") or {}).get("pacing")
    orders = schedule.link_order
    if not info or not orders:
        return schedule
    s = schedule
    before, after = _pacing_pairs(orders, list(info["links"]), int(info["window"]))
    n = s.num_ops
    old_to = np.repeat(np.arange(n, dtype=np.int64), np.diff(s.dep_ptr))
    drop = np.isin(old_to * np.int64(n) + s.dep_ids, after * np.int64(n) + before)
    meta = dict(s.meta)
    meta["link_order"] = {k: v for k, v in meta["link_order"].items() if k != "pacing"}
    return _with_deps(s, old_to[~drop], s.dep_ids[~drop], meta)


def _with_pacing(schedule: Schedule, links: list[int], size: float, time_s: float) -> Schedule:
    """``schedule`` (ordered by planned start times) paced on ``links`` with the window of
    :data:`PACING_WINDOWS` that realizes fastest, where that beats ``time_s`` (the best the
    orders alone realize); otherwise ``schedule`` itself. ``meta["link_order"]["pacing"]``
    says which window and the time of every one tried."""
    best, best_t = schedule, time_s
    tried: dict[str, float] = {}

    hops = len(schedule.route_links)
    budget = max(1, PACING_HOPS_BUDGET // max(1, hops))

    def attempt(window: int) -> bool:
        """Try ``window`` (within the budget); whether it is the best so far."""
        nonlocal best, best_t
        if len(tried) >= min(budget, PACING_MAX_TRIES):
            return False
        cand = paced(schedule, links, window)
        if cand is None:
            return False
        t = simulate(cand, size, order=REALIZED).time_s
        tried[str(window)] = t
        if t < best_t:
            best, best_t = cand, t
            return True
        return False

    for window in PACING_WINDOWS:
        attempt(window)
    if best is schedule:
        return schedule
    w = best.meta["link_order"]["pacing"]["window"]
    for step in (-1, 1):  # then one window at a time from the best, while it gets better
        k = w + step
        while k >= 1 and str(k) not in tried and attempt(k):
            k += step
    meta = dict(best.meta)
    info = dict(meta["link_order"])
    info["pacing"] = dict(info["pacing"], realized_time_s=tried)
    info["time_s"] = best_t
    meta["link_order"] = info
    return replace(best, meta=meta)


def compact_link_orders(c: CompactSchedule, key: np.ndarray, tie: np.ndarray) -> dict | None:
    """A compact schedule's link orders sorted by ``key`` and ``tie`` (per representative:
    times from a simulation on its quotient, the same for every member of an orbit), as
    :func:`_symmetric_orders` sorts a symmetric explicit schedule's: by time at
    :data:`TIME_GRAIN`, dependency level, orbit, then sender and receiver as seen from the
    link's orbit; the ``order_*`` fields of :class:`CompactSchedule`, one order per link
    orbit. None where those orders could deadlock with the dependencies (decided on the
    quotient: see :mod:`collsynth.verify.compact`)."""
    a, r = c.action, c.reps
    n = r.num_ops
    level = levels(n, c.dep_ptr, c.dep_orbit)
    if level is None or not len(r.route_links):
        return None
    hop_op = owners(r.route_ptr)
    hl = r.route_links.astype(np.int64)
    link_rep, link_elem = a.link_frames
    rep = link_rep[hl]
    back = a.inv[link_elem[hl]]  # the member of each hop's orbit that crosses the rep link
    n_ranks = np.int64(c.topology.num_ranks)
    seen = a.rank_perms[back, r.src[hop_op]] * n_ranks + a.rank_perms[back, r.dst[hop_op]]
    idx = np.lexsort(_packed((rep, _grains(key)[hop_op]), (_grains(tie)[hop_op], level[hop_op]),
                             (hop_op, seen))[::-1])  # fmt: skip
    links, ops, elems = rep[idx], hop_op[idx], back[idx]
    same = links[1:] == links[:-1]
    src = np.concatenate((c.dep_orbit.astype(np.int64), ops[:-1][same]))
    dst = np.concatenate((owners(c.dep_ptr), ops[1:][same]))
    if not is_acyclic(n, src, dst):
        return None
    cuts = np.flatnonzero(np.r_[True, ~same])
    ptr = np.append(cuts, len(links)).astype(np.int64)
    return {"order_links": links[cuts], "order_ptr": ptr, "order_orbit": ops,
            "order_elem": elems}  # fmt: skip


def _ordered_compact(c: CompactSchedule, size: float) -> CompactSchedule:
    """:func:`_ordered` for a compact schedule: simulated on its quotient (ties broken by
    orbit) in the planned and the realized model, each giving symmetric link orders
    (:func:`compact_link_orders`); the one faster in the realized model is kept. The AllReduce
    phase forms and sender pacing are not tried on the compact form."""
    planned = simulate(c, size, order="plan")
    first_ready = simulate(c, size, order=REALIZED)
    t_first = first_ready.time_s
    plan_orders = compact_link_orders(c, planned.op_start_s, planned.op_finish_s)
    t_plan = np.inf
    if plan_orders is not None:
        t_plan = simulate(replace(c, **plan_orders), size, order=REALIZED).time_s
    orders, source = plan_orders, FROM_PLAN
    if t_first < t_plan or plan_orders is None:
        orders = compact_link_orders(c, first_ready.op_start_s, first_ready.op_finish_s)
        source = FROM_FIRST_READY
    if orders is None:
        return c  # (the simulations then break ties by orbit, and say so)
    meta = dict(c.meta)
    meta["link_order"] = {
        "from": source,
        "size_bytes": float(size),
        "time_s": min(t_plan, t_first),
        "realized_time_s": {"planned": float(t_plan), "first_ready": t_first},
    }
    return replace(c, meta=meta, **orders)


def _ordered(schedule: Schedule, size: float) -> Schedule:
    """``schedule`` with the better of its two candidate link orders in the realized model."""
    # a symmetric schedule is simulated with ties broken by orbit, so that its link orders
    # come out symmetric too (and the simulator can then run it on its quotient)
    # (found once for both simulations; none found: both explicit)
    ties: bool | Quotient = True
    if not schedule.link_order:
        q = find_quotient(schedule, "plan", orbit_ties=True)
        ties = q if q is not None else False
    planned = simulate(schedule, size, order="plan", symmetric=ties)
    planned_orders = link_orders_by(schedule, planned.op_start_s, planned.op_finish_s,
                                    planned.op_orbit)  # fmt: skip
    first_ready = simulate(schedule, size, order=REALIZED, symmetric=ties)
    t_first = first_ready.time_s
    if _one_pair_per_link(schedule):  # the realized model serves the plan's order exactly
        t_plan = planned.time_s
    else:
        ordered = replace(schedule, link_order=planned_orders)
        t_plan = simulate(ordered, size, order=REALIZED).time_s
    if t_plan <= t_first:
        orders, source = planned_orders, FROM_PLAN
    else:
        orders = link_orders_by(schedule, first_ready.op_start_s, first_ready.op_finish_s,
                                first_ready.op_orbit)  # fmt: skip
        source = FROM_FIRST_READY
    meta = dict(schedule.meta)
    meta["link_order"] = {
        "from": source,
        "size_bytes": float(size),
        "time_s": min(t_plan, t_first),
        "realized_time_s": {"planned": t_plan, "first_ready": t_first},
    }
    out = replace(schedule, link_order=orders or None, meta=meta)
    links = pacing_links(schedule, planned_orders)
    if not links:
        return out
    info = dict(meta["link_order"], **{"from": FROM_PLAN})
    planned_out = replace(schedule, link_order=planned_orders, meta=dict(meta, link_order=info))
    paced_out = _with_pacing(planned_out, links, size, info["time_s"])
    return out if paced_out is planned_out else paced_out


def reduce_then_broadcast(
    schedule: Schedule, groups: np.ndarray | None = None, chain: bool = False
) -> Schedule | None:
    """An AllReduce whose every rank starts sending broadcast data (copies) only once all the
    reductions it sends or receives are done: one join per rank that waits for those
    reductions, and a dependency on it for every copy the rank sends. The two phases then
    never share a rank's links, which the realized model rewards where the plan interleaved
    them (ForestColl's AllReduce on ``mi250:chassis=2`` at 1 GB: 1.10x the bound instead of
    1.26x). Dependencies are only added, so the result is as correct as ``schedule``.

    ``groups`` (each chunk's group, ``0 .. G-1``) cuts the data into ``G`` groups with one join
    per rank and group: a rank's copies of group ``g`` wait for its reductions of group ``g``
    alone, so the broadcast of one group overlaps the reductions of the next; with ``chain``
    a rank's reductions of group ``g + 1`` also wait for its join of group ``g`` (a software
    pipeline: the groups go through the reductions one after the other).

    None where it does not apply: not an AllReduce, no reductions or no copies, planned start
    times (the barrier would move them), in-network groups, steps that interleave the phases,
    or a copy that a reduction waits for (the barrier would deadlock)."""
    s = schedule
    if s.collective.kind is not CollKind.ALLREDUCE or s.has_groups:
        return None
    if s.start is not None and not np.all(np.isnan(s.start)):
        return None
    red = np.flatnonzero(s.kind == OpKind.REDUCE)
    copies = np.flatnonzero(s.kind == OpKind.COPY)
    if not len(red) or not len(copies):
        return None
    n_groups = 1 if groups is None else int(groups.max()) + 1
    step = s.step
    if n_groups > 1:
        step = None  # a rank's later reductions may wait for its join: no single step order
    elif step is not None and np.all(step >= 0):
        first_copy = int(step[copies].min())
        if int(step[red].max()) >= first_copy:
            return None
        step = np.where(step >= first_copy, step + 1, step)  # the joins take first_copy
    else:
        step = None
    n, r = s.num_ops, s.topology.num_ranks
    group = np.zeros(n, np.int64) if groups is None else groups[s.chunk].astype(np.int64)
    # each rank's join of a group waits for the reductions of that group it sends or receives
    slot = np.concatenate([s.src[red], s.dst[red]]).astype(np.int64) * n_groups + np.tile(
        group[red], 2
    )
    touch = unique(slot * np.int64(n) + np.tile(red, 2))
    join_slot, join_dep = touch // n, touch % n
    slots = unique(join_slot)
    join_of = np.full(r * n_groups, -1, dtype=np.int64)
    join_of[slots] = n + np.arange(len(slots), dtype=np.int64)
    # every copy a rank with a join sends waits for that join; chained, every reduction of a
    # later group waits for the rank's join of the group before
    waits_on = np.full(n, -1, dtype=np.int64)
    waits_on[copies] = join_of[s.src[copies].astype(np.int64) * n_groups + group[copies]]
    if chain and n_groups > 1:
        later = red[group[red] > 0]
        waits_on[later] = join_of[s.src[later].astype(np.int64) * n_groups + group[later] - 1]
    waits = np.flatnonzero(waits_on >= 0)
    extra = np.zeros(n, dtype=np.int64)
    extra[waits] = 1
    old_len = np.diff(s.dep_ptr)
    lengths = np.concatenate(
        [old_len + extra, np.bincount(join_slot, minlength=r * n_groups)[slots]]
    )
    dep_ptr = np.zeros(n + len(slots) + 1, dtype=np.int64)
    np.cumsum(lengths, out=dep_ptr[1:])
    dep_ids = np.empty(int(dep_ptr[-1]), dtype=np.int64)
    owner = np.repeat(np.arange(n, dtype=np.int64), old_len)
    # the join comes first in each list: a depth-first walk back from a copy (the verifier's
    # ancestor queries) then meets the copy's own chain before the join's wide fan-in
    dep_ids[dep_ptr[owner] + extra[owner] + (np.arange(len(owner)) - s.dep_ptr[owner])] = s.dep_ids
    dep_ids[dep_ptr[waits]] = waits_on[waits]
    dep_ids[dep_ptr[n] :] = join_dep  # sorted by rank and group, as the joins are
    edges_to = np.repeat(np.arange(n + len(slots), dtype=np.int64), lengths)
    if not is_acyclic(n + len(slots), dep_ids, edges_to):
        return None
    ranks = slots // n_groups
    k = len(ranks)

    def more(a: np.ndarray, fill: float | int) -> np.ndarray:
        return np.concatenate([a, np.full(k, fill, dtype=a.dtype)])

    def grow(a: np.ndarray | None, fill: float | int) -> np.ndarray | None:
        return None if a is None else more(a, fill)

    return replace(
        s,
        src=np.concatenate([s.src, ranks.astype(s.src.dtype)]),
        dst=np.concatenate([s.dst, ranks.astype(s.dst.dtype)]),
        chunk=more(s.chunk, 0),
        kind=more(s.kind, int(OpKind.JOIN)),
        route_ptr=more(s.route_ptr, int(s.route_ptr[-1])),
        dep_ptr=dep_ptr,
        dep_ids=dep_ids,
        start=grow(s.start, np.nan),
        duration=grow(s.duration, np.nan),
        step=None if step is None else grow(step, first_copy),
        part_lo=grow(s.part_lo, 0),
        part_hi=grow(s.part_hi, 1),
        part_den=grow(s.part_den, 1),
        group=grow(s.group, -1),
    )


def has_chosen_order(schedule: Schedule | CompactSchedule) -> bool:
    """Whether ``schedule``'s link orders were chosen by :func:`with_link_orders`."""
    info = schedule.meta.get("link_order")
    if isinstance(schedule, CompactSchedule):
        ordered = schedule.order_links is not None
    else:
        ordered = bool(schedule.link_order)
    return ordered and isinstance(info, dict) and "from" in info


def without_chosen_order(schedule: Schedule) -> Schedule:
    """The algorithm's own plan: ``schedule`` without the link orders that
    :func:`with_link_orders` chose (an algorithm's own orders, TE-CCL's or MTEG's, are never
    replaced, so they stay)."""
    if not has_chosen_order(schedule):
        return schedule
    schedule = unpaced(schedule)
    meta = {k: v for k, v in schedule.meta.items() if k != "link_order"}
    return replace(schedule, link_order=None, meta=meta)
