"""The collsynth simulator: alpha-beta, store-and-forward at GPUs, cut-through at switches and
routers, link contention. The model and its equations are in ``docs/simulator.md``.

``simulate(schedule, size)`` returns a :class:`SimResult`: completion time overall and per rank,
algbw and busbw (nccl-tests factors), per-link busy time and utilisation, and the timeline of
every hop.
"""

from __future__ import annotations

import time as _time

import numpy as np

from ..deadline import TimeLimitError
from ..errors import CollsynthError
from ..schedule.compact import CompactSchedule
from ..schedule.dag import owners, successors
from ..schedule.ir import OpKind, Schedule
from ..units import fmt_time
from .engine import (
    compiled_fair_loop,
    compiled_loaded,
    compiled_planned_loop,
    fair_loop,
    planned_loop,
    rank_times,
    run_events,
    run_events_fair,
)
from .groups import group_arrays, group_plan
from .hops import hop_arrays, hop_times_of, prepend_hops, virtual_hops
from .orders import connection_positions, connections, order_arrays, planned_priorities
from .plain import call_plain
from .quotient import Quotient, compact_quotient, find_quotient
from .result import SimResult
from .steps import MAX_HOPS, hop_records, op_records

ORDER_POLICIES = ("auto", "plan", "fcfs", "fair")
#: ``simulate(symmetric=ORBIT_TIES)``: quotient simulation with ties broken by orbit
ORBIT_TIES = "orbit-ties"
# The link model the executors realize and the emulated testbed validated (docs/testbed.md):
# links shared fairly by the connections (rank pairs) that use them, each connection carrying
# its messages in the order its sender posts them (the schedule's link orders where it has them,
# else first ready, first served). Every reported time defaults to it.
REALIZED = "fair"
# Below this many link hops ``simulate`` runs the plain Python loop unless the compiled one is
# already loaded in this process: loading it (numba and its cache, about 0.7 s) takes longer
# than the plain loop (about 10 k hops/s) on a small schedule.
COMPILE_FROM_HOPS = 1_000
# The same on the quotient of a symmetric schedule (sim/quotient.py), where the rest of the
# simulation takes a few tenths of a second: the plain loop's 5-15 k hops/s beat loading the
# compiled loop (about 0.9 s in a fresh process) up to about this many hops.
QUOTIENT_COMPILE_FROM_HOPS = 10_000
# What each model is called in outputs (``model`` fields and table headers).
MODEL_NAMES = {
    "fair": "realized (links shared by connections, each in its posting order)",
    "auto": "planned (the plan's priorities and link orders)",
    "plan": "planned (the plan's priorities and link orders)",
    "fcfs": "first served (one transfer at a time per link, first ready first served)",
}


def _check_args(size: float, order: str, reduce_bw: float | None, op_cost: float = 0.0) -> None:
    """Refuse an unknown order policy, a size that is not a positive number of bytes, a
    reduction bandwidth that is not positive and a per-operation cost that is negative (in that
    order)."""
    if order not in ORDER_POLICIES:
        raise CollsynthError(f"order policy {order!r} is not one of {', '.join(ORDER_POLICIES)}")
    if not (isinstance(size, (int, float)) and np.isfinite(size) and size > 0):
        raise CollsynthError(f"size {size!r} must be a positive number of bytes")
    if reduce_bw is not None and not (np.isfinite(reduce_bw) and reduce_bw > 0):
        raise CollsynthError(f"reduction bandwidth {reduce_bw!r} must be positive")
    if not (isinstance(op_cost, (int, float)) and np.isfinite(op_cost) and op_cost >= 0):
        raise CollsynthError(f"per-operation cost {op_cost!r} must be zero or more seconds")


def _op_delays(
    s: Schedule, nbytes: np.ndarray, reduce_bw: float | None, release: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Per operation: the reduction time added after arrival (``bytes / reduce_bw`` for reduce
    operations) and the earliest start (the planned start with ``release``, else 0)."""
    n_ops = s.num_ops
    extra = np.zeros(n_ops)
    if reduce_bw is not None:
        extra = np.where(s.kind == OpKind.REDUCE, nbytes / reduce_bw, 0.0)
    release_t = np.zeros(n_ops)
    if release and s.start is not None:
        release_t = np.where(np.isnan(s.start), 0.0, s.start)
    return extra, release_t


def _call_holding_signals(kernel, *args):
    """``kernel(*args)`` with a time limit's alarm held until it returns: a Python signal
    handler that raises while a compiled call is returning leaves the interpreter with an
    exception set inside the call (a ``SystemError``, and now and then a crash), so during the
    call the alarm only records that it rang; the limit's own handler then runs at once.
    The plain Python loop runs over lists (:func:`collsynth.sim.plain.call_plain`), where
    the alarm may interrupt it."""
    import signal
    import threading

    if not hasattr(kernel, "py_func"):
        return call_plain(kernel, *args)
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "SIGALRM"):
        return kernel(*args)
    from ..interrupt import deferred  # SIGINT, SIGTERM, SIGHUP: held the same way

    limit_handler = signal.getsignal(signal.SIGALRM)
    if not callable(limit_handler):
        with deferred():
            return kernel(*args)
    rang: list = []
    signal.signal(signal.SIGALRM, lambda signum, frame: rang.append((signum, frame)))
    try:
        with deferred():
            out = kernel(*args)
    except SystemError as e:  # an older handler installed inside the call raised anyway
        if isinstance(e.__cause__, TimeLimitError):
            raise e.__cause__ from None
        raise
    finally:
        signal.signal(signal.SIGALRM, limit_handler)
    if rang:
        limit_handler(*rang[0])
    return out


def _run_loop(order, hops, ops, succ, n_links, groups, compiled, shared, planned):
    """Run the loop of model ``order`` over the records ``hops`` and ``ops``: the realized one
    with ``shared`` = (connection pointers, which links are shared), else the planned one with
    ``planned`` = (link-order pointers and hops, priorities, whether to force link queues);
    compiled or not. What :func:`collsynth.sim.engine.run_events` returns."""
    if order == "fair":
        class_ptr, link_shared = shared
        loop = compiled_fair_loop() if compiled else fair_loop
        return run_events_fair(hops, ops, *succ, n_links, class_ptr, link_shared, groups, loop,
                               _call_holding_signals)  # fmt: skip
    optr, ohops, prio, force_queues = planned
    reserve = (bool(np.all(prio == prio[0])) if len(prio) else True) and not force_queues
    loop = compiled_planned_loop() if compiled else planned_loop
    return run_events(hops, ops, *succ, optr, ohops, n_links, reserve, groups, loop,
                      _call_holding_signals)  # fmt: skip


def simulate(
    schedule: Schedule | CompactSchedule,
    size: float,
    *,
    reduce_bw: float | None = None,
    order: str = REALIZED,
    release: bool = False,
    op_cost_s: float = 0.0,
    compiled: bool | None = None,
    symmetric: bool | str | Quotient = True,
    _force_queues: bool = False,
) -> SimResult:
    """Simulate ``schedule`` moving ``size`` bytes (nccl-tests convention).

    ``order``: ``fair`` (the default, :data:`REALIZED`: what the executors and exporters
    realize and the testbed measured) shares each link equally among the rank pairs with data
    on it, each pair's transfers going one at a time in the schedule's link order restricted to
    that pair (the order its sender posts them), or first ready first served where the link has
    no order (TCP connections or RDMA queue pairs; processor sharing, see
    ``docs/simulator.md``); planned priorities are ignored. ``auto`` (= ``plan``) follows the
    schedule's plan: explicit per-link orders are obeyed exactly across all pairs; otherwise a
    free link starts the waiting transfer with the earliest planned start time (or step), then
    the first ready. ``fcfs`` ignores every plan: first ready, first served.
    ``release`` holds each operation until its planned start.
    ``reduce_bw`` (bytes/s) adds ``bytes / reduce_bw`` to every reduce operation.
    ``op_cost_s`` (seconds) is what issuing one operation costs its sender: a rank issues its
    operations one at a time, each taking ``op_cost_s`` before its bytes start, while issued
    operations travel in parallel (an executor's or a NIC's per-message work; 0, the default, is
    the pure alpha-beta model). Modelled as one virtual link per rank in front of every route.
    ``compiled``: run the numba-compiled loop (True), the plain Python one (False), or
    (None, the default) the compiled one when it is already loaded or the schedule has
    :data:`COMPILE_FROM_HOPS` link hops or more: below that, loading the compiled code costs
    more than it saves. Both give the same results.
    ``symmetric``: simulate one operation per orbit when the schedule's symmetry is verified
    and makes that exact (:mod:`collsynth.sim.quotient`; models ``plan`` and ``fair``), with
    the same results as the explicit simulation; False simulates every operation;
    :data:`ORBIT_TIES` also simulates a symmetric schedule without link orders on its
    quotient, in any model, with ties between waiting transfers broken by orbit instead of by
    hop id (a symmetric execution; synthesis takes its link orders from it, see
    ``synth/order.py``). A :class:`~collsynth.sim.quotient.Quotient` that
    :func:`~collsynth.sim.quotient.find_quotient` returned for this schedule (in the planned
    or realized model, or with ``orbit_ties``) is used as it is, as with :data:`ORBIT_TIES`:
    a caller that simulates one schedule several times finds its symmetry once.
    A :class:`~collsynth.schedule.compact.CompactSchedule` is simulated on its quotient as
    it is (models ``plan`` and ``fair``; see :func:`_compact`).
    """
    _check_args(size, order, reduce_bw, op_cost_s)
    wall0 = _time.perf_counter()
    if isinstance(schedule, CompactSchedule):
        return _compact(schedule, size, order, reduce_bw, release, op_cost_s, compiled, wall0)
    s = schedule
    q = given = None
    if isinstance(symmetric, Quotient):
        given, symmetric = symmetric, ORBIT_TIES
    if symmetric and op_cost_s == 0 and not _force_queues:
        fits = given is not None and order != "fcfs" and given.fits(s)
        q = given if fits else find_quotient(s, order)
        if q is None and symmetric == ORBIT_TIES and not s.link_order:
            q = find_quotient(s, order, orbit_ties=True)
    if q is None:
        out = _explicit(s, size, order, reduce_bw, release, op_cost_s, compiled, _force_queues)
    else:
        out = _on_quotient(s, q, size, order, reduce_bw, release, compiled)
    op_start, op_finish, hop_link, hop_op, hop_start, hop_end, busy, used = out
    total = float(op_finish.max()) if s.num_ops else 0.0
    per_rank = rank_times(s.src, s.dst, op_finish, s.topology.num_ranks)
    return SimResult(
        s,
        float(size),
        total,
        per_rank,
        op_start,
        op_finish,
        hop_link,
        hop_op,
        hop_start,
        hop_end,
        busy,
        used,
        _time.perf_counter() - wall0,
        float(op_cost_s),
        q.order if q is not None else 1,
        q.op_orbit if q is not None else None,
    )


def _compact(c, size, order, reduce_bw, release, op_cost_s, compiled, wall0) -> SimResult:
    """A compact schedule simulated on its quotient, straight from its representatives
    (:func:`collsynth.sim.quotient.compact_quotient`): exact where its link orders place
    every hop (as for a symmetric explicit schedule); without link orders, ties are broken
    by orbit (a symmetric execution, said in the result's ``order_policy``). The result's
    per-operation and per-hop arrays are the representatives'; link busy times and
    per-rank times are every link's and rank's (those of its orbit's representative)."""
    if order == "fcfs":
        raise CollsynthError("the first-served model breaks ties by hop id: it simulates "
                             "the expanded schedule (CompactSchedule.expand())")  # fmt: skip
    if op_cost_s:
        raise CollsynthError("a per-operation cost is simulated on the expanded schedule "
                             "(CompactSchedule.expand())")  # fmt: skip
    q = compact_quotient(c)
    r = c.reps
    out = _on_quotient(r, q, size, order, reduce_bw, release, compiled, expand=False)
    op_start, op_finish, hop_link, hop_op, hop_start, hop_end, busy, used = out
    rank_rep = c.action.rank_frames[0]
    per_rep = rank_times(rank_rep[r.src], rank_rep[r.dst], op_finish, c.topology.num_ranks)
    return SimResult(
        c, float(size), float(op_finish.max()) if r.num_ops else 0.0, per_rep[rank_rep],
        op_start, op_finish, hop_link, hop_op, hop_start, hop_end, busy, used,
        _time.perf_counter() - wall0, 0.0, q.order, None,
    )  # fmt: skip


def _stalled(done: int, n_ops: int) -> None:
    if done != n_ops:
        raise CollsynthError(
            f"simulation stalled with {n_ops - done} of {n_ops} operations "
            f"never started (dependency cycle or planned link order that "
            f"deadlocks; verify the schedule)"
        )


def _explicit(s, size, order, reduce_bw, release, op_cost_s, compiled, force_queues):
    """The explicit simulation: every hop of every operation. (op start, op finish, hop
    link, hop operation, hop start, hop end, link busy time, the model in words)."""
    t = s.topology
    n_ops = s.num_ops
    n_links = len(t.links)
    plan = group_plan(s) if s.has_groups else None
    own_ptr, own_links = (plan.own_ptr, plan.own_links) if plan else (s.route_ptr, s.route_links)
    hop_link, hop_op, hop_tx, hop_alpha, hop_alpha_tail, nbytes = hop_arrays(
        s, size, own_ptr, own_links
    )
    (hop_link, hop_op, hop_tx, hop_alpha, hop_alpha_tail), route_ptr, n_all = virtual_hops(
        s, op_cost_s, (hop_link, hop_op, hop_tx, hop_alpha, hop_alpha_tail),
        own_ptr.astype(np.int64), n_links, plan.forked if plan else None,
    )  # fmt: skip
    groups, op_hops, op_first = group_arrays(plan, own_ptr, route_ptr)
    _check_hops(len(hop_link))
    if compiled is None:
        compiled = len(hop_link) >= COMPILE_FROM_HOPS or compiled_loaded(order == "fair")
    op_last = route_ptr[1:] - 1
    extra, release_t = _op_delays(s, nbytes, reduce_bw, release)
    succ_ptr, succ_ids = successors(n_ops, s.dep_ptr, s.dep_ids)
    indeg = np.diff(s.dep_ptr).astype(np.int64)
    pos, optr, ohops, prio, used = order_arrays(
        s, "fcfs" if order == "fcfs" else "plan", hop_link, route_ptr, n_all, compiled
    )
    if order == "fair":
        hop_class, class_ptr, shared = connections(
            s.src, s.dst, t.num_ranks, hop_link, hop_op, n_links, n_all, compiled
        )
        pos = connection_positions(hop_class, len(class_ptr) - 1, ohops, compiled)
        prio = np.zeros(n_ops)
        used = _fair_words(len(ohops) > 0)
    # the loop's records; the arrays they copy are let go before it runs
    hops = hop_records(hop_link, hop_op, hop_tx, hop_alpha, hop_alpha_tail, pos,
                       hop_class if order == "fair" else -1)  # fmt: skip
    ops = op_records(op_first, op_last, op_hops, indeg, extra, release_t, prio)
    del hop_link, hop_op, hop_tx, hop_alpha, hop_alpha_tail, pos, op_last, op_hops, indeg
    del extra, release_t
    if order == "fair":
        del hop_class
    hop_start, hop_end, op_ready, op_finish, busy, done = _run_loop(
        order, hops, ops, (succ_ptr, succ_ids), n_all, groups, compiled,
        (class_ptr, shared) if order == "fair" else None, (optr, ohops, prio, force_queues),
    )  # fmt: skip
    hop_link, hop_op = hops["link"].astype(np.int64), hops["op"].astype(np.int64)
    del hops, ops
    _stalled(done, n_ops)
    op_start = hop_start[route_ptr[:-1]] if n_ops else np.zeros(0)
    if n_all > n_links:  # drop the virtual hops: the outputs speak of real links only
        keep = hop_link < n_links
        hop_link, hop_op = hop_link[keep], hop_op[keep]
        hop_start, hop_end, busy = hop_start[keep], hop_end[keep], busy[:n_links]
        if op_cost_s > 0:
            used += f", {fmt_time(op_cost_s)} per operation at its sender"
            real_first = own_ptr[:-1][s.kind != OpKind.JOIN]
            op_start[s.kind != OpKind.JOIN] = hop_start[real_first]
    return op_start, op_finish, hop_link, hop_op, hop_start, hop_end, busy, used


def _fair_words(ordered: bool) -> str:
    if ordered:
        return "links shared fairly by rank pairs, each pair in its planned link order"
    return "links shared fairly by rank pairs, each pair first ready, first served"


def _check_hops(n_hops: int) -> None:
    if n_hops > MAX_HOPS:
        raise CollsynthError(
            f"schedule has {n_hops:,} link hops; the simulator numbers at most {MAX_HOPS:,}"
        )


def _on_quotient(s, q, size, order, reduce_bw, release, compiled, expand=True):
    """The simulation on the quotient ``q`` (:mod:`collsynth.sim.quotient`): the
    representatives' hops only, the results expanded to every operation, hop and link; the
    same outputs as :func:`_explicit`. ``expand=False`` (``s``: a compact schedule's
    representatives): the representatives' operations and hops, every link's busy time."""
    t = s.topology
    n_links = len(t.links)
    reps = q.reps
    n_reps = len(reps)
    nbytes = s.op_bytes(size)
    hop_link = q.hop_link
    hop_op = owners(q.route_ptr)
    hop_tx, hop_alpha, hop_tail = hop_times_of(t, nbytes[reps], q.route_ptr, hop_link)
    arrays = (hop_link, hop_op, hop_tx, hop_alpha, hop_tail, q.hop_pos, q.hop_src, q.hop_dst)
    arrays, route_ptr, n_all, moved = _join_hops(s.kind[reps] == OpKind.JOIN, q.route_ptr,
                                                 arrays, n_links)  # fmt: skip
    hop_link, hop_op, hop_tx, hop_alpha, hop_tail, pos, hop_src, hop_dst = arrays
    order_hops = moved[q.order_hops]
    order_ptr = np.append(q.order_ptr, np.full(n_all - n_links, q.order_ptr[-1]))
    if compiled is None:
        compiled = len(hop_link) >= QUOTIENT_COMPILE_FROM_HOPS or compiled_loaded(order == "fair")
    groups, op_hops, op_first = group_arrays(None, route_ptr, route_ptr)
    extra, release_t = _op_delays(s, nbytes, reduce_bw, release)
    succ = successors(n_reps, q.dep_ptr, q.dep_ids)
    ordered = len(q.order_hops) > 0
    prio, used = planned_priorities(s) if order != "fcfs" else (np.zeros(s.num_ops), "")
    prio = prio[reps]
    used = "first ready, first served" if order == "fcfs" else used
    used += " + planned link orders" if ordered else ""
    if order == "fair":
        hop_class, class_ptr, shared = connections(
            hop_src, hop_dst, t.num_ranks, hop_link, np.arange(len(hop_link)), n_links, n_all,
            compiled,
        )  # fmt: skip
        pos = connection_positions(hop_class, len(class_ptr) - 1, order_hops, compiled)
        prio = np.zeros(n_reps)
        used = _fair_words(ordered)
    hops = hop_records(hop_link, hop_op, hop_tx, hop_alpha, hop_tail, pos,
                       hop_class if order == "fair" else -1)  # fmt: skip
    ops = op_records(op_first, route_ptr[1:] - 1, op_hops, np.diff(q.dep_ptr), extra[reps],
                     release_t[reps], prio)  # fmt: skip
    q_start, q_end, _, q_finish, q_busy, done = _run_loop(
        order, hops, ops, succ, n_all, groups, compiled,
        (class_ptr, shared) if order == "fair" else None, (order_ptr, order_hops, prio, False),
    )  # fmt: skip
    _stalled(done, n_reps)
    # every hop's and operation's times are its representative's
    at = moved[q.route_ptr[q.op_orbit[q.all_hop_op]] + q.all_hop_k]
    every = len(at) * (1 if expand else q.order)
    used += (
        f"; simulated on the quotient by {q.order} automorphisms "
        f"({len(q.hops):,} of {every:,} hops"
        + (", exact: docs/simulator.md)" if ordered else ", ties broken by orbit)")
    )
    if not expand:
        busy = q_busy[:n_links][q.link_rep]
        return (q_start[route_ptr[:-1]], q_finish, s.route_links.astype(np.int64),
                q.all_hop_op, q_start[at], q_end[at], busy, used)  # fmt: skip
    return (
        q_start[route_ptr[:-1]][q.op_orbit],
        q_finish[q.op_orbit],
        s.route_links.astype(np.int64),
        q.all_hop_op,
        q_start[at],
        q_end[at],
        q_busy[:n_links][q.link_rep],
        used,
    )


def _join_hops(joins: np.ndarray, route_ptr: np.ndarray, arrays: tuple, n_links: int):
    """Each representative join (mask ``joins``) gets its zero-time hop on the join link,
    as in the explicit simulation (:func:`collsynth.sim.hops.virtual_hops`): the per-hop
    ``arrays`` (link, operation, transmission, alpha, alpha to the end, order position,
    sender, receiver) with those hops in front of the joins' empty routes, the new route
    pointers, the number of links with the join link, and where each former hop went."""
    n_hops = len(arrays[0])
    if not joins.any():
        return arrays, route_ptr, n_links, np.arange(n_hops, dtype=np.int64)
    n = len(joins)
    zero = np.zeros(n)
    none = np.full(n, -1, dtype=np.int64)
    virtual = (np.full(n, n_links, dtype=np.int64), np.arange(n, dtype=np.int64), zero, zero,
               zero, none, none, none)  # fmt: skip
    arrays, ptr = prepend_hops(route_ptr, joins, arrays, virtual)
    moved = np.arange(n_hops, dtype=np.int64) + np.repeat(np.cumsum(joins), np.diff(route_ptr))
    return arrays, ptr, n_links + 1, moved


__all__ = [
    "COMPILE_FROM_HOPS",
    "MODEL_NAMES",
    "ORBIT_TIES",
    "ORDER_POLICIES",
    "REALIZED",
    "simulate",
]
