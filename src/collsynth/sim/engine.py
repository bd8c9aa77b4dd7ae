"""The simulator's event loop over flat arrays (compiled with numba when available).

One *request* per hop (an operation's use of one link). See ``docs/simulator.md`` for the model.
The loop is written once, as plain Python on numpy arrays, and compiled by numba; the same
function runs uncompiled (``compiled=False``) so tests can check both give identical results.
Its heaps are in :mod:`collsynth.sim.heap`, its state and steps in :mod:`collsynth.sim.steps`;
:func:`compiled_steps` compiles those with :func:`collsynth.jit.compiled`, each bound to the
compiled helpers it calls.

Events, in a global heap ordered by (time, priority, id):

* ``REQUEST`` of hop ``h`` at ``t``: the head of the operation's data reaches the link. If the
  link is idle the hop starts now; otherwise it waits in the link's own queue. A hop that is not
  next in its link's explicit planned order is parked until its predecessor has been served.
* ``FREE`` of link ``l`` at ``t``: the link finished a transmission; it starts the best waiting
  hop: smallest planned priority (step or start time, where the schedule gives one), then
  earliest request (first ready, first served), then lowest hop id. Links never idle while a
  servable hop waits (work-conserving).

A request has id = hop and its operation's priority; a link-free event has id = n_hops + link
and priority +inf, so at equal times every request is queued before the link picks the next hop.

*Shared* links (``order="fair"``) instead divide their bandwidth equally among the connections
(sender-receiver rank pairs) with data on them, each connection carrying its own transfers one
at a time (TCP, or an RDMA queue pair): in its planned order where the schedule's link orders
give one (the order its sender posts them; a transfer waits for its turn), else first ready,
first served. A shared link's ``FREE`` event is its next completion, kept apart from the global
heap in an indexed heap over links (one entry per link, moved in place; at equal times the
requests go first, as above); the link keeps a virtual time ``V`` that advances at ``1 / n``
per second with ``n`` connections active, and a transfer admitted at ``V0`` ends when ``V``
reaches ``V0 + bytes / bw`` (processor sharing, exact between events).

A hop transmits for ``bytes / bw``; the route's next hop is requested ``alpha`` after the start
(cut-through at switches and routers). After its last hop an operation is complete when every
hop has finished transmitting and the data has propagated: ``max_i(end_i + sum_{j>=i}
alpha_j)`` (plus the optional reduction time); dependent operations become ready then.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..jit import compiled
from . import heap, steps
from .heap import ZERO, heap_less, heap_pop, heap_push, index_set
from .steps import (
    connection_next,
    connection_started,
    connection_state,
    connection_turn,
    connection_wait,
    hop_done,
    hop_state,
    initial_events,
    link_queues,
    link_state,
    next_hop,
    op_state,
    release_successors,
    share_advance,
    share_schedule,
    share_state,
    unpark_next,
)


def planned_loop(hops, op_last_hop, opst, links, reserve, heap, esize, succ, groups):
    """The loop of :func:`run_events` over the state it made (tuples of arrays): compiled
    without reference counting, as :func:`fair_loop` is. The number of operations done."""
    hop_link, hop_op, hop_tx, hop_alpha, hop_alpha_tail, hop_order_pos = hops[:6]
    hop_start, hop_end, hop_req, parked = hops[6:]
    busy, free_pending, link_free_at, next_pos, qbase, qsize, qp, qr, qh = links[:9]
    link_order_ptr, link_order_hops = links[9], links[10]
    op_acc, _, op_extra, op_finish, op_ready, remaining, op_first_hop, op_prio = opst
    et, ep, eid = heap
    n_hops = hop_link.shape[0]
    grouped = groups[0][0]
    done_ops = np.int64(0)
    while esize > 0:
        t, p, x, esize = heap_pop(et, ep, eid, ZERO, esize)
        if x >= n_hops:
            link = x - n_hops
            free_pending[link] = False
            if qsize[link] == 0:
                continue
            _, _, h, qsize[link] = heap_pop(qp, qr, qh, qbase[link], qsize[link])
        else:
            h = x
            link = hop_link[h]
            pos = hop_order_pos[h]
            if pos >= 0 and pos != next_pos[link]:
                parked[h] = True
                continue
            if reserve:
                if link_free_at[link] > t:
                    t = link_free_at[link]
            elif link_free_at[link] > t or qsize[link] > 0:
                # busy, or others already wait for it: queue up and compete when it frees
                qsize[link] = heap_push(
                    qp, qr, qh, qbase[link], qsize[link], op_prio[hop_op[h]], hop_req[h], h
                )
                if not free_pending[link]:
                    free_pending[link] = True
                    esize = heap_push(
                        et, ep, eid, ZERO, esize, link_free_at[link], np.inf, n_hops + link
                    )
                continue
        # serve hop h on link at time t
        end = t + hop_tx[h]
        link_free_at[link] = end
        busy[link] += hop_tx[h]
        hop_start[h] = t
        hop_end[h] = end
        if qsize[link] > 0 and not free_pending[link]:
            free_pending[link] = True
            esize = heap_push(et, ep, eid, ZERO, esize, end, np.inf, n_hops + link)
        op = hop_op[h]
        pos = hop_order_pos[h]
        if pos >= 0:
            nh = unpark_next(link, pos, link_order_ptr, link_order_hops, next_pos, parked)
            if nh >= 0:
                esize = heap_push(et, ep, eid, ZERO, esize, t, op_prio[hop_op[nh]], nh)
        if grouped:
            esize = next_hop(h, t, hop_op, hop_alpha, hop_req, op_last_hop, op_prio, groups,
                              heap, esize)  # fmt: skip
            esize, done_ops = hop_done(h, hop_op, hop_end, hop_alpha_tail, opst, succ, groups,
                                        hop_req, heap, esize, done_ops)  # fmt: skip
            continue
        tail = end + hop_alpha_tail[h]
        if tail > op_acc[op]:
            op_acc[op] = tail
        if h < op_last_hop[op]:
            nt = t + hop_alpha[h]
            hop_req[h + 1] = nt
            esize = heap_push(et, ep, eid, ZERO, esize, nt, op_prio[op], h + 1)
            continue
        finish = op_acc[op] + op_extra[op]
        op_finish[op] = finish
        done_ops += 1
        esize = release_successors(
            op, finish, succ, op_ready, remaining, op_first_hop, hop_req, op_prio, heap, esize
        )
    return done_ops


def run_events(
    hop_link,
    hop_op,
    hop_tx,
    hop_alpha,
    hop_alpha_tail,
    op_first_hop,
    op_last_hop,
    op_prio,
    op_release,
    op_extra,
    succ_ptr,
    succ_ids,
    indeg,
    hop_order_pos,
    link_order_ptr,
    link_order_hops,
    n_links,
    reserve,
    op_hops,
    groups,
    loop=planned_loop,
    call=None,
):
    """Run the event loop; returns per-hop start/end, per-op ready/finish, per-link busy time.

    ``op_prio``: planned priority of each operation (0 everywhere for first-ready-first-served).
    ``op_extra``: time added after arrival (reduction cost). ``op_release``: earliest start of
    each operation. ``hop_order_pos[h]``: the hop's position in its link's explicit planned
    order, or -1. ``reserve``: every priority is equal, so a request can book the link at once
    (``start = max(t, free)``): with equal priorities nobody who asks later may overtake it,
    which is exactly first-ready-first-served, without queues or link-free events. The event
    keys are in the module's docstring. ``op_hops``: the hops whose end an operation's
    arrival waits for; ``groups``: multicasts and in-switch reductions (see :func:`next_hop`),
    ``groups[0][0]`` false where there are none. ``loop``: :func:`planned_loop`, compiled or
    not (the state is allocated here, with numpy); ``call(loop, *args)`` calls it (default:
    directly).
    """
    n_hops = hop_link.shape[0]
    busy, free_pending, link_free_at, next_pos = link_state(n_links)
    hop_start, hop_end, hop_req, parked = hop_state(n_hops)
    op_ready, op_finish, op_acc, remaining = op_state(op_release, indeg)
    qbase, qsize, qp, qr, qh = link_queues(hop_link, n_links, reserve)
    et, ep, eid, esize = initial_events(
        n_hops, n_links, remaining, op_first_hop, op_ready, op_prio, hop_req, False
    )
    heap = (et, ep, eid)
    succ = (succ_ptr, succ_ids)
    opst = (op_acc, op_hops.copy(), op_extra, op_finish, op_ready, remaining, op_first_hop, op_prio)
    hops = (hop_link, hop_op, hop_tx, hop_alpha, hop_alpha_tail, hop_order_pos, hop_start,
            hop_end, hop_req, parked)  # fmt: skip
    links = (busy, free_pending, link_free_at, next_pos, qbase, qsize, qp, qr, qh,
             link_order_ptr, link_order_hops)  # fmt: skip
    args = (hops, op_last_hop, opst, links, reserve, heap, esize, succ, groups)
    done_ops = call(loop, *args) if call is not None else loop(*args)
    return hop_start, hop_end, op_ready, op_finish, busy, done_ops


def fair_loop(hops, op_last_hop, opst, links, conns, heap, esize, succ, groups):
    """The loop of :func:`run_events_fair` over the state it made (tuples of arrays; it
    allocates nothing, so it is compiled without reference counting, which cost a third of
    its time when every step it calls was passed counted arrays). The number of operations
    done."""
    hop_link, hop_op, hop_tx, hop_alpha, hop_alpha_tail, hop_class, hop_conn_pos = hops[:7]
    hop_start, hop_end, hop_req = hops[7], hops[8], hops[9]
    link_shared, busy, link_free_at, vt, vlast, active = links[:6]
    qbase, qsize, qp, qr, qh, lorder, lpos = links[6:]
    class_ptr, cbusy, waiting, slots_end, chead, ctail, conn_next = conns
    op_prio = opst[7]
    et, ep, eid = heap
    n_hops = hop_link.shape[0]
    lheap = (lorder, lpos)
    lsize = np.int64(0)
    done_ops = np.int64(0)
    while esize > 0 or lsize > 0:
        if lsize > 0 and (
            esize == 0
            or heap_less(link_free_at[lorder[0]], np.inf, n_hops + lorder[0], et[0], ep[0], eid[0])
        ):  # a shared link's next completion comes first (after requests at the same time)
            link = lorder[0]
            t = link_free_at[link]
            lsize = index_set(link_free_at, lorder, lpos, lsize, link, np.inf)
            vt[link] = qp[qbase[link]]
            vlast[link] = t
            while qsize[link] > 0 and qp[qbase[link]] <= vt[link]:
                _, _, h, qsize[link] = heap_pop(qp, qr, qh, qbase[link], qsize[link])
                active[link] -= 1
                hop_end[h] = t
                esize, done_ops = hop_done(h, hop_op, hop_end, hop_alpha_tail, opst, succ,
                                            groups, hop_req, heap, esize, done_ops)  # fmt: skip
                c = hop_class[h]
                h2 = connection_next(c, conn_next, class_ptr, waiting, slots_end, chead, ctail)
                if h2 >= 0:  # the connection's next transfer goes on
                    qsize[link] = heap_push(
                        qp, qr, qh, qbase[link], qsize[link], vt[link] + hop_tx[h2], 0.0, h2
                    )
                    active[link] += 1
                    busy[link] += hop_tx[h2]
                    hop_start[h2] = t
                    connection_started(h2, c, hop_conn_pos, conn_next)
                    esize = next_hop(
                        h2, t, hop_op, hop_alpha, hop_req, op_last_hop, op_prio, groups, heap, esize
                    )
                else:
                    cbusy[c] = False
            lsize = share_schedule(link, qbase, qsize, qp, vt, vlast, active, link_free_at,
                                    lheap, lsize)  # fmt: skip
            continue
        t, _, h, esize = heap_pop(et, ep, eid, ZERO, esize)
        link = hop_link[h]
        if link_shared[link]:
            c = hop_class[h]
            if cbusy[c] or not connection_turn(h, c, hop_conn_pos, conn_next):
                # the connection carries an earlier transfer, or one before this in its
                # planned order has not come yet: wait in line (unordered transfers first,
                # by request time; an ordered one in its slot until its turn)
                connection_wait(h, c, hop_conn_pos, hop_req, class_ptr, waiting, chead, ctail)
                continue
            cbusy[c] = True
            connection_started(h, c, hop_conn_pos, conn_next)
            share_advance(link, t, vt, vlast, active)
            qsize[link] = heap_push(
                qp, qr, qh, qbase[link], qsize[link], vt[link] + hop_tx[h], 0.0, h
            )
            active[link] += 1
            busy[link] += hop_tx[h]
            hop_start[h] = t
            lsize = share_schedule(link, qbase, qsize, qp, vt, vlast, active, link_free_at,
                                    lheap, lsize)  # fmt: skip
            esize = next_hop(h, t, hop_op, hop_alpha, hop_req, op_last_hop, op_prio, groups,
                              heap, esize)  # fmt: skip
            continue
        # a first-served link (an issue slot): booked at once
        if link_free_at[link] > t:
            t = link_free_at[link]
        link_free_at[link] = t + hop_tx[h]
        busy[link] += hop_tx[h]
        hop_start[h] = t
        hop_end[h] = t + hop_tx[h]
        esize = next_hop(h, t, hop_op, hop_alpha, hop_req, op_last_hop, op_prio, groups,
                          heap, esize)  # fmt: skip
        esize, done_ops = hop_done(h, hop_op, hop_end, hop_alpha_tail, opst, succ, groups,
                                    hop_req, heap, esize, done_ops)  # fmt: skip
    return done_ops


def run_events_fair(
    hop_link,
    hop_op,
    hop_tx,
    hop_alpha,
    hop_alpha_tail,
    op_first_hop,
    op_last_hop,
    op_release,
    op_extra,
    succ_ptr,
    succ_ids,
    indeg,
    n_links,
    hop_class,
    class_ptr,
    link_shared,
    hop_conn_pos,
    op_hops,
    groups,
    loop=fair_loop,
    call=None,
):
    """The event loop with shared links (``order="fair"``): ``link_shared[l]`` links are
    shared by their connections (``hop_class[h]``: the connection of a hop on one, whose
    waiting transfers queue in ``class_ptr[c]:class_ptr[c + 1]``); the others (issue slots)
    serve first ready, first served. ``hop_conn_pos[h]``: the hop's position in its
    connection's planned order (the schedule's link order restricted to one sender-receiver
    pair, which is the order an executor posts that pair's messages in), or -1: a connection
    carries its ordered transfers in that order, and its unordered ones first ready, first
    served. No planned priorities. Its loop is compiled apart from :func:`planned_loop`, and
    only when used. ``loop``, ``call``: as for :func:`run_events` (:func:`fair_loop`). Returns what
    :func:`run_events` returns."""
    n_hops = hop_link.shape[0]
    busy, _, link_free_at, _ = link_state(n_links)
    link_free_at[link_shared] = np.inf  # no completion scheduled yet
    hop_start, hop_end, hop_req, _ = hop_state(n_hops)
    op_prio = np.zeros(op_first_hop.shape[0])
    op_ready, op_finish, op_acc, remaining = op_state(op_release, indeg)
    hops_left = op_hops.copy()
    qbase, qsize, qp, qr, qh = link_queues(hop_link, n_links, False)
    vt, vlast, active = share_state(n_links)
    cbusy, waiting, slots_end, chead, ctail = connection_state(hop_conn_pos, hop_class, class_ptr)
    conn_next = np.zeros(class_ptr.shape[0] - 1, dtype=np.int64)
    et, ep, eid, esize = initial_events(
        n_hops, n_links, remaining, op_first_hop, op_ready, op_prio, hop_req, True
    )
    heap = (et, ep, eid)
    succ = (succ_ptr, succ_ids)
    opst = (op_acc, hops_left, op_extra, op_finish, op_ready, remaining, op_first_hop, op_prio)
    # the shared links' next completions: an indexed heap over links keyed by link_free_at
    lorder = np.zeros(n_links, dtype=np.int64)
    lpos = np.full(n_links, -1, dtype=np.int64)
    hops = (hop_link, hop_op, hop_tx, hop_alpha, hop_alpha_tail, hop_class, hop_conn_pos,
            hop_start, hop_end, hop_req)  # fmt: skip
    links = (link_shared, busy, link_free_at, vt, vlast, active, qbase, qsize, qp, qr, qh,
             lorder, lpos)  # fmt: skip
    conns = (class_ptr, cbusy, waiting, slots_end, chead, ctail, conn_next)
    args = (hops, op_last_hop, opst, links, conns, heap, esize, succ, groups)
    done_ops = call(loop, *args) if call is not None else loop(*args)
    return hop_start, hop_end, op_ready, op_finish, busy, done_ops


def rank_times(src, dst, finish, n_ranks):
    """Latest completion of an operation each rank sends or receives (0 where none)."""
    out = np.zeros(n_ranks)
    np.fmax.at(out, src, finish)
    np.fmax.at(out, dst, finish)
    return out


#: the steps compiled with :func:`collsynth.jit.compiled`, in an order where every helper a
#: step calls comes before it: (module, name, inlined into its callers)
_STEPS = (
    (heap, "heap_less", True),
    (heap, "heap_push", False),
    (heap, "heap_pop", False),
    (heap, "index_less", True),
    (heap, "index_up", True),
    (heap, "index_down", True),
    (heap, "index_set", False),
    (steps, "next_in_order", True),
    (steps, "release_successors", True),
    (steps, "unpark_next", True),
    (steps, "share_advance", True),
    (steps, "connection_turn", True),
    (steps, "connection_started", True),
    (steps, "connection_wait", False),
    (steps, "connection_next", False),
    (steps, "share_schedule", False),
    (steps, "request_hop", True),
    (steps, "next_hop", False),
    (steps, "hop_done", False),
)
_loaded: dict[str, Callable] = {}  # the compiled loops this process has asked for


def compiled_steps() -> dict[str, Callable]:
    """The steps both loops share, compiled, by name: each bound to the compiled helpers
    before it in :data:`_STEPS` (numba compiles a call to a compiled global); memoized by
    :func:`collsynth.jit.compiled`, each compiled when a loop that calls it is."""
    out: dict[str, Callable] = {}
    for module, name, inline in _STEPS:
        out[name] = compiled(getattr(module, name), helpers=dict(out), inline=inline,
                             refcount=False)  # fmt: skip
    return out


def compiled_loaded(fair: bool) -> bool:
    """Whether the compiled loop for the fair model (``fair``) or the others is loaded."""
    return ("fair" if fair else "planned") in _loaded


def compiled_planned_loop() -> Callable:
    """:func:`planned_loop` compiled with numba (once per process, cached on disk): the
    ``loop`` of :func:`run_events`."""
    if "planned" not in _loaded:
        _loaded["planned"] = compiled(planned_loop, helpers=compiled_steps(), refcount=False)
    return _loaded["planned"]


def compiled_fair_loop() -> Callable:
    """:func:`fair_loop` compiled (only when first used): the ``loop`` of
    :func:`run_events_fair`."""
    if "fair" not in _loaded:
        _loaded["fair"] = compiled(fair_loop, helpers=compiled_steps(), refcount=False)
    return _loaded["fair"]


__all__ = [
    "compiled_loaded",
    "fair_loop",
    "planned_loop",
    "compiled_fair_loop",
    "compiled_planned_loop",
    "compiled_steps",
    "rank_times",
    "run_events",
    "run_events_fair",
]
