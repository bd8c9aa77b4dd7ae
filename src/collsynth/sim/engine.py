"""The simulator's event loop over flat arrays (compiled with numba when available).

One *request* per hop (an operation's use of one link). See ``docs/simulator.md`` for the model.
The loop is written once, as plain Python on numpy arrays, and compiled by numba; the same
function runs uncompiled (``compiled=False``) so tests can check both give identical results.

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

A hop transmits for ``bytes / bw``; the route's next hop is requested ``alpha`` after the start
(cut-through at switches and routers). After its last hop an operation is complete when every
hop has finished transmitting and the data has propagated: ``max_i(end_i + sum_{j>=i}
alpha_j)`` (plus the optional reduction time); dependent operations become ready then.
"""

from __future__ import annotations

import numpy as np


def _less(a0, a1, a2, b0, b1, b2):
    if a0 != b0:
        return a0 < b0
    if a1 != b1:
        return a1 < b1
    return a2 < b2


def _push(k0, k1, k2, base, size, v0, v1, v2):
    """Push (v0, v1, v2) onto the binary heap stored in ``k*[base:base+size]``; new size."""
    i = size
    while i > 0:
        parent = (i - 1) // 2
        b = base + parent
        if _less(v0, v1, v2, k0[b], k1[b], k2[b]):
            a = base + i
            k0[a] = k0[b]
            k1[a] = k1[b]
            k2[a] = k2[b]
            i = parent
        else:
            break
    a = base + i
    k0[a] = v0
    k1[a] = v1
    k2[a] = v2
    return size + 1


def _pop(k0, k1, k2, base, size):
    """Remove the smallest entry of the heap in ``k*[base:base+size]``; (v0, v1, v2, size)."""
    r0 = k0[base]
    r1 = k1[base]
    r2 = k2[base]
    size -= 1
    last = base + size
    v0 = k0[last]
    v1 = k1[last]
    v2 = k2[last]
    i = 0
    while True:
        left = 2 * i + 1
        if left >= size:
            break
        small = left
        right = left + 1
        if right < size:
            a = base + right
            b = base + left
            if _less(k0[a], k1[a], k2[a], k0[b], k1[b], k2[b]):
                small = right
        c = base + small
        if _less(k0[c], k1[c], k2[c], v0, v1, v2):
            a = base + i
            k0[a] = k0[c]
            k1[a] = k1[c]
            k2[a] = k2[c]
            i = small
        else:
            break
    a = base + i
    k0[a] = v0
    k1[a] = v1
    k2[a] = v2
    return r0, r1, r2, size


def _queue_bases(hop_link, n_links, reserve):
    """Start of each link's waiting-queue segment (prefix sums of hops per link)."""
    qbase = np.zeros(n_links + 1, dtype=np.int64)
    if not reserve:
        for h in range(hop_link.shape[0]):
            qbase[hop_link[h] + 1] += 1
        for l in range(n_links):
            qbase[l + 1] += qbase[l]
    return qbase


def _next_in_order(link, pos, link_order_ptr, link_order_hops):
    """The hop after position ``pos`` in the link's planned order, or -1."""
    b0 = link_order_ptr[link]
    if b0 + pos + 1 < link_order_ptr[link + 1]:
        return link_order_hops[b0 + pos + 1]
    return -1


def _release(op, finish, succ, op_ready, remaining, op_first_hop, hop_req, op_prio, heap, esize):
    """An operation finished: its successors' readiness; request the first hop of each
    successor whose dependencies are all done. ``succ``: (successor pointers, successor ids);
    ``heap``: the event heap's key arrays (time, priority, id). The new event-heap size."""
    succ_ptr, succ_ids = succ
    et, ep, eid = heap
    for k in range(succ_ptr[op], succ_ptr[op + 1]):
        s = succ_ids[k]
        if finish > op_ready[s]:
            op_ready[s] = finish
        remaining[s] -= 1
        if remaining[s] == 0:
            h0 = op_first_hop[s]
            hop_req[h0] = op_ready[s]
            esize = _push(et, ep, eid, 0, esize, op_ready[s], op_prio[s], h0)
    return esize


def _initial_events(n_hops, n_links, remaining, op_first_hop, op_ready, op_prio, hop_req):
    """The global event heap, holding the first-hop requests of operations without
    dependencies: its key arrays and size."""
    cap = 2 * n_hops + n_links + 1
    et = np.empty(cap)
    ep = np.empty(cap)
    eid = np.empty(cap, dtype=np.int64)
    esize = 0
    for op in range(op_first_hop.shape[0]):
        if remaining[op] == 0:
            h0 = op_first_hop[op]
            hop_req[h0] = op_ready[op]
            esize = _push(et, ep, eid, 0, esize, op_ready[op], op_prio[op], h0)
    return et, ep, eid, esize


def _link_state(n_links):
    """Per-link state: busy time, whether a link-free event is pending, when the link is free,
    and the position in its planned order of the next hop it may serve."""
    busy = np.zeros(n_links)
    free_pending = np.zeros(n_links, dtype=np.bool_)
    return busy, free_pending, np.zeros(n_links), np.zeros(n_links, dtype=np.int64)


def _hop_state(n_hops):
    """Per-hop state: start and end of its transmission (NaN until served), the time it is
    requested, and whether it is parked until its turn in its link's planned order."""
    start = np.full(n_hops, np.nan)
    end = np.full(n_hops, np.nan)
    return start, end, np.zeros(n_hops), np.zeros(n_hops, dtype=np.bool_)


def _op_state(op_release, indeg):
    """Per-operation state: when it is ready (its release time until its dependencies finish),
    its finish (NaN until done), its arrival so far, and its dependencies not yet done."""
    n_ops = op_release.shape[0]
    return op_release.copy(), np.full(n_ops, np.nan), np.zeros(n_ops), indeg.copy()


def _unpark_next(link, pos, link_order_ptr, link_order_hops, next_pos, parked):
    """The hop at ``pos`` of the link's planned order was served: the next position may be
    served now; the hop there if it was parked waiting for its turn (no longer parked), or -1."""
    next_pos[link] = pos + 1
    nh = _next_in_order(link, pos, link_order_ptr, link_order_hops)
    if nh >= 0 and parked[nh]:
        parked[nh] = False
        return nh
    return -1


def _link_queues(hop_link, n_links, reserve):
    """Per-link waiting queues: heap segments sized by the number of hops on each link (none
    with ``reserve``). Returns (segment starts, sizes, and the priority, request-time and hop
    key arrays)."""
    qbase = _queue_bases(hop_link, n_links, reserve)
    qcap = hop_link.shape[0] + 1 if not reserve else 1
    qsize = np.zeros(n_links, dtype=np.int64)
    return qbase, qsize, np.zeros(qcap), np.zeros(qcap), np.zeros(qcap, dtype=np.int64)


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
):
    """Run the event loop; returns per-hop start/end, per-op ready/finish, per-link busy time.

    ``op_prio``: planned priority of each operation (0 everywhere for first-ready-first-served).
    ``op_extra``: time added after arrival (reduction cost). ``op_release``: earliest start of
    each operation. ``hop_order_pos[h]``: the hop's position in its link's explicit planned
    order, or -1. ``reserve``: every priority is equal, so a request can book the link at once
    (``start = max(t, free)``): with equal priorities nobody who asks later may overtake it,
    which is exactly first-ready-first-served, without queues or link-free events. The event
    keys are in the module's docstring.
    """
    n_hops = hop_link.shape[0]
    busy, free_pending, link_free_at, next_pos = _link_state(n_links)
    hop_start, hop_end, hop_req, parked = _hop_state(n_hops)
    op_ready, op_finish, op_acc, remaining = _op_state(op_release, indeg)
    qbase, qsize, qp, qr, qh = _link_queues(hop_link, n_links, reserve)
    et, ep, eid, esize = _initial_events(
        n_hops, n_links, remaining, op_first_hop, op_ready, op_prio, hop_req
    )
    heap = (et, ep, eid)
    succ = (succ_ptr, succ_ids)
    done_ops = 0
    while esize > 0:
        t, p, x, esize = _pop(et, ep, eid, 0, esize)
        if x >= n_hops:
            link = x - n_hops
            free_pending[link] = False
            if qsize[link] == 0:
                continue
            _, _, h, qsize[link] = _pop(qp, qr, qh, qbase[link], qsize[link])
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
                qsize[link] = _push(
                    qp, qr, qh, qbase[link], qsize[link], op_prio[hop_op[h]], hop_req[h], h
                )
                if not free_pending[link]:
                    free_pending[link] = True
                    esize = _push(et, ep, eid, 0, esize, link_free_at[link], np.inf, n_hops + link)
                continue
        # serve hop h on link at time t
        end = t + hop_tx[h]
        link_free_at[link] = end
        busy[link] += hop_tx[h]
        hop_start[h] = t
        hop_end[h] = end
        if qsize[link] > 0 and not free_pending[link]:
            free_pending[link] = True
            esize = _push(et, ep, eid, 0, esize, end, np.inf, n_hops + link)
        op = hop_op[h]
        tail = end + hop_alpha_tail[h]
        if tail > op_acc[op]:
            op_acc[op] = tail
        pos = hop_order_pos[h]
        if pos >= 0:
            nh = _unpark_next(link, pos, link_order_ptr, link_order_hops, next_pos, parked)
            if nh >= 0:
                esize = _push(et, ep, eid, 0, esize, t, op_prio[hop_op[nh]], nh)
        if h < op_last_hop[op]:
            nt = t + hop_alpha[h]
            hop_req[h + 1] = nt
            esize = _push(et, ep, eid, 0, esize, nt, op_prio[op], h + 1)
            continue
        finish = op_acc[op] + op_extra[op]
        op_finish[op] = finish
        done_ops += 1
        esize = _release(
            op, finish, succ, op_ready, remaining, op_first_hop, hop_req, op_prio, heap, esize
        )
    return hop_start, hop_end, op_ready, op_finish, busy, done_ops


def rank_times(src, dst, finish, n_ranks):
    """Latest completion of an operation each rank sends or receives."""
    out = np.zeros(n_ranks)
    for i in range(src.shape[0]):
        f = finish[i]
        if f > out[src[i]]:
            out[src[i]] = f
        if f > out[dst[i]]:
            out[dst[i]] = f
    return out


_compiled = None
_compiled_rank_times = None


def compiled_rank_times():
    global _compiled_rank_times
    if _compiled_rank_times is None:
        try:
            from numba import njit
        except ImportError:  # pragma: no cover
            _compiled_rank_times = rank_times
            return _compiled_rank_times
        _compiled_rank_times = njit(cache=True, nogil=True)(rank_times)
    return _compiled_rank_times


def compiled_run_events():
    """The numba-compiled event loop (compiled once per process, cached on disk)."""
    global _compiled
    if _compiled is None:
        try:
            from numba import njit
        except ImportError:  # pragma: no cover - numba is a dependency
            _compiled = run_events
            return _compiled
        less = njit(cache=True, inline="always")(_less)
        globals_ = {"_less": less}
        push = njit(cache=True)(_rebind(_push, globals_))
        pop = njit(cache=True)(_rebind(_pop, globals_))
        steps = {"_push": push, "_pop": pop, "np": np}
        steps["_queue_bases"] = njit(cache=True)(_rebind(_queue_bases, steps))
        steps["_next_in_order"] = njit(cache=True, inline="always")(_next_in_order)
        steps["_release"] = njit(cache=True)(_rebind(_release, steps))
        steps["_unpark_next"] = njit(cache=True, inline="always")(_rebind(_unpark_next, steps))
        steps["_op_state"] = njit(cache=True)(_rebind(_op_state, steps))
        steps["_link_state"] = njit(cache=True)(_rebind(_link_state, steps))
        steps["_hop_state"] = njit(cache=True)(_rebind(_hop_state, steps))
        steps["_link_queues"] = njit(cache=True)(_rebind(_link_queues, steps))
        steps["_initial_events"] = njit(cache=True)(_rebind(_initial_events, steps))
        # nogil: a time limit's watchdog thread can still run during a long simulation
        _compiled = njit(cache=True, nogil=True)(_rebind(run_events, steps))
    return _compiled


def _rebind(func, extra_globals):
    """A copy of ``func`` whose globals resolve ``extra_globals`` first (for numba)."""
    import types

    g = dict(func.__globals__)
    g.update(extra_globals)
    return types.FunctionType(func.__code__, g, func.__name__, func.__defaults__, func.__closure__)
