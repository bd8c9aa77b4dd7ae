"""The simulator's event loop over flat arrays (compiled with numba when available).

One *request* per hop (an operation's use of one link). See ``docs/simulator.md`` for the model.
The loop is written once, as plain Python on numpy arrays, and compiled by numba; the same
function runs uncompiled (``compiled=False``; over Python lists, :mod:`collsynth.sim.plain`)
so tests can check both give identical results.
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
from .heap import ZERO, heap_less, heap_pop, heap_push
from .steps import (
    connection_next,
    connection_started,
    connection_state,
    connection_turn,
    connection_wait,
    hop_done,
    hop_times,
    initial_events,
    link_queues,
    link_state,
    next_hop,
    release_successors,
    share_advance,
    share_schedule,
    share_state,
    unpark_next,
)


def planned_loop(hops, ops, times, links, reserve, heap, esize, succ, groups, parked):
    """The loop of :func:`run_events` over the state it made (the hops' and operations'
    records, tuples of arrays; ``times``: the hops' starts and ends): compiled without
    reference counting, as :func:`fair_loop` is. The number of operations done."""
    hop_start, hop_end = times
    busy, free_pending, link_free_at, next_pos, qbase, qsize, qp, qr, qh = links[:9]
    link_order_ptr, link_order_hops = links[9], links[10]
    et, ep, eid = heap
    n_hops = len(hops)
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
            link = np.int64(hops[h]["link"])
            pos = hops[h]["pos"]
            if pos >= 0 and pos != next_pos[link]:
                parked[h] = True
                continue
            if reserve:
                if link_free_at[link] > t:
                    t = link_free_at[link]
            elif link_free_at[link] > t or qsize[link] > 0:
                # busy, or others already wait for it: queue up and compete when it frees
                r = hops[h]
                qsize[link] = heap_push(
                    qp, qr, qh, qbase[link], qsize[link], ops[r["op"]]["prio"], r["req"], h
                )
                if not free_pending[link]:
                    free_pending[link] = True
                    esize = heap_push(
                        et, ep, eid, ZERO, esize, link_free_at[link], np.inf, n_hops + link
                    )
                continue
        # serve hop h on link at time t
        r = hops[h]
        end = t + r["tx"]
        link_free_at[link] = end
        busy[link] += r["tx"]
        hop_start[h] = t
        hop_end[h] = end
        if qsize[link] > 0 and not free_pending[link]:
            free_pending[link] = True
            esize = heap_push(et, ep, eid, ZERO, esize, end, np.inf, n_hops + link)
        op = np.int64(r["op"])
        pos = r["pos"]
        if pos >= 0:
            nh = unpark_next(link, pos, link_order_ptr, link_order_hops, next_pos, parked)
            if nh >= 0:
                esize = heap_push(et, ep, eid, ZERO, esize, t, ops[hops[nh]["op"]]["prio"], nh)
        if grouped:
            esize = next_hop(h, t, hops, ops, groups, heap, esize)
            esize, done_ops = hop_done(h, end, hops, ops, succ, groups, heap, esize, done_ops)
            continue
        o = ops[op]
        tail = end + r["tail"]
        if tail > o["acc"]:
            o["acc"] = tail
        if h < o["last"]:
            nt = t + r["alpha"]
            hops[h + 1]["req"] = nt
            esize = heap_push(et, ep, eid, ZERO, esize, nt, o["prio"], h + 1)
            continue
        finish = o["acc"] + o["extra"]
        o["finish"] = finish
        done_ops += 1
        esize = release_successors(op, finish, ops, succ, hops, heap, esize)
    return done_ops


def _outputs(times, ops, busy, done_ops):
    """What the loops return: per-hop start and end, per-operation ready and finish (plain
    arrays, out of the records), per-link busy time and the operations done."""
    return (times[0], times[1], np.ascontiguousarray(ops["ready"]),
            np.ascontiguousarray(ops["finish"]), busy, done_ops)  # fmt: skip


def run_events(hops, ops, succ_ptr, succ_ids, link_order_ptr, link_order_hops, n_links,
               reserve, groups, loop=planned_loop, call=None):  # fmt: skip
    """Run the event loop; returns per-hop start/end, per-op ready/finish, per-link busy time.

    ``hops``, ``ops``: the hops' and operations' records (:data:`~collsynth.sim.steps.HOP`,
    :data:`~collsynth.sim.steps.OP`; a hop's ``pos`` is its position in its link's explicit
    planned order, or -1; an operation's ``prio`` its planned priority, 0 everywhere for first
    ready first served, and ``extra`` the time added after its arrival, a reduction), filled
    in by the loop. ``reserve``: every priority is equal, so a request can book the link at
    once (``start = max(t, free)``): with equal priorities nobody who asks later may overtake
    it, which is exactly first-ready-first-served, without queues or link-free events. The
    event keys are in the module's docstring. ``groups``: multicasts and in-switch reductions
    (see :func:`next_hop`), ``groups[0][0]`` false where there are none. ``loop``:
    :func:`planned_loop`, compiled or not (the state is allocated here, with numpy);
    ``call(loop, *args)`` calls it (default: directly).
    """
    busy, free_pending, link_free_at, next_pos = link_state(n_links)
    times = hop_times(hops.shape[0])
    parked = np.zeros(hops.shape[0], dtype=np.bool_)
    qbase, qsize, qp, qr, qh = link_queues(hops["link"], n_links, reserve)
    et, ep, eid, esize = initial_events(n_links, hops, ops, False)
    links = (busy, free_pending, link_free_at, next_pos, qbase, qsize, qp, qr, qh,
             link_order_ptr, link_order_hops)  # fmt: skip
    args = (hops, ops, times, links, reserve, (et, ep, eid), esize, (succ_ptr, succ_ids), groups,
            parked)  # fmt: skip
    done_ops = call(loop, *args) if call is not None else loop(*args)
    return _outputs(times, ops, busy, done_ops)


def fair_loop(hops, ops, times, links, connections, heap, esize, succ, groups):
    """The loop of :func:`run_events_fair` over the state it made (records and tuples of
    arrays; it allocates nothing, so it is compiled without reference counting, which cost a
    third of its time when every step it calls was passed counted arrays). The number of
    operations done."""
    hop_start, hop_end = times
    link_shared, busy, link_free_at, vt, vlast, active = links[:6]
    qbase, qsize, qp, qr, qh, lorder, lpos = links[6:]
    conns, waiting = connections
    et, ep, eid = heap
    n_hops = len(hops)
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
            # the link stays at the top of its heap until share_schedule below moves it to
            # its next completion (one sift instead of a removal and an insertion: nothing
            # in between reads the other links' completions)
            vt[link] = qp[qbase[link]]
            vlast[link] = t
            while qsize[link] > 0 and qp[qbase[link]] <= vt[link]:
                _, _, h, qsize[link] = heap_pop(qp, qr, qh, qbase[link], qsize[link])
                active[link] -= 1
                hop_end[h] = t
                esize, done_ops = hop_done(h, t, hops, ops, succ, groups, heap, esize, done_ops)
                c = np.int64(hops[h]["cls"])
                h2 = connection_next(c, conns, waiting)
                if h2 >= 0:  # the connection's next transfer goes on
                    r = hops[h2]
                    qsize[link] = heap_push(
                        qp, qr, qh, qbase[link], qsize[link], vt[link] + r["tx"], 0.0, h2
                    )
                    active[link] += 1
                    busy[link] += r["tx"]
                    hop_start[h2] = t
                    connection_started(h2, c, hops, conns)
                    esize = next_hop(h2, t, hops, ops, groups, heap, esize)
                else:
                    conns[c]["busy"] = 0
            lsize = share_schedule(link, qbase, qsize, qp, vt, vlast, active, link_free_at,
                                    lheap, lsize)  # fmt: skip
            continue
        t, _, h, esize = heap_pop(et, ep, eid, ZERO, esize)
        r = hops[h]
        link = np.int64(r["link"])
        if link_shared[link]:
            c = np.int64(r["cls"])
            if conns[c]["busy"] or not connection_turn(h, c, hops, conns):
                # the connection carries an earlier transfer, or one before this in its
                # planned order has not come yet: wait in line (unordered transfers first,
                # by request time; an ordered one in its slot until its turn)
                connection_wait(h, c, hops, conns, waiting)
                continue
            connection_started(h, c, hops, conns)
            share_advance(link, t, vt, vlast, active)
            qsize[link] = heap_push(
                qp, qr, qh, qbase[link], qsize[link], vt[link] + r["tx"], 0.0, h
            )
            active[link] += 1
            busy[link] += r["tx"]
            hop_start[h] = t
            lsize = share_schedule(link, qbase, qsize, qp, vt, vlast, active, link_free_at,
                                    lheap, lsize)  # fmt: skip
            esize = next_hop(h, t, hops, ops, groups, heap, esize)
            continue
        # a first-served link (an issue slot): booked at once
        if link_free_at[link] > t:
            t = link_free_at[link]
        link_free_at[link] = t + r["tx"]
        busy[link] += r["tx"]
        hop_start[h] = t
        hop_end[h] = t + r["tx"]
        esize = next_hop(h, t, hops, ops, groups, heap, esize)
        esize, done_ops = hop_done(h, hop_end[h], hops, ops, succ, groups, heap, esize, done_ops)
    return done_ops


def run_events_fair(hops, ops, succ_ptr, succ_ids, n_links, class_ptr, link_shared, groups,
                    loop=fair_loop, call=None):  # fmt: skip
    """The event loop with shared links (``order="fair"``): ``link_shared[l]`` links are
    shared by their connections (a hop's ``cls`` in its record: its connection on such a
    link, whose waiting transfers queue in ``class_ptr[c]:class_ptr[c + 1]``); the others
    (issue slots) serve first ready, first served. A hop's ``pos``: its position in its
    connection's planned order (the schedule's link order restricted to one sender-receiver
    pair, which is the order an executor posts that pair's messages in), or -1: a connection
    carries its ordered transfers in that order, and its unordered ones first ready, first
    served. No planned priorities. Its loop is compiled apart from :func:`planned_loop`, and
    only when used. ``loop``, ``call``: as for :func:`run_events` (:func:`fair_loop`). Returns
    what :func:`run_events` returns."""
    busy, _, link_free_at, _ = link_state(n_links)
    link_free_at[link_shared] = np.inf  # no completion scheduled yet
    qbase, qsize, qp, qr, qh = link_queues(hops["link"], n_links, False)
    vt, vlast, active = share_state(n_links)
    conns = connection_state(hops["pos"], hops["cls"], class_ptr)
    et, ep, eid, esize = initial_events(n_links, hops, ops, True)
    times = hop_times(hops.shape[0])
    # the shared links' next completions: an indexed heap over links keyed by link_free_at
    lorder = np.zeros(n_links, dtype=np.int64)
    lpos = np.full(n_links, -1, dtype=np.int64)
    links = (link_shared, busy, link_free_at, vt, vlast, active, qbase, qsize, qp, qr, qh,
             lorder, lpos)  # fmt: skip
    args = (hops, ops, times, links, conns, (et, ep, eid), esize, (succ_ptr, succ_ids), groups)
    done_ops = call(loop, *args) if call is not None else loop(*args)
    return _outputs(times, ops, busy, done_ops)


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
