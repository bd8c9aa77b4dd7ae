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

*Shared* links (``order="fair"``) instead divide their bandwidth equally among the connections
(sender-receiver rank pairs) with data on them, each connection carrying its own transfers one
at a time (TCP, or an RDMA queue pair): in its planned order where the schedule's link orders
give one (the order its sender posts them; a transfer waits for its turn), else first ready,
first served. A shared link's ``FREE``
event is its next completion; the link keeps a virtual time ``V`` that advances at ``1 / n``
per second with ``n`` connections active, and a transfer admitted at ``V0`` ends when ``V``
reaches ``V0 + bytes / bw`` (processor sharing, exact between events).

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
            if h0 >= 0:  # (-1: a multicast branch, requested where it parts instead)
                hop_req[h0] = op_ready[s]
                esize = _push(et, ep, eid, 0, esize, op_ready[s], op_prio[s], h0)
    return esize


def _initial_events(n_hops, n_links, remaining, op_first_hop, op_ready, op_prio, hop_req, shared):
    """The global event heap, holding the first-hop requests of operations without
    dependencies: its key arrays and size. With shared links every admission and completion
    may schedule one more (possibly superseded) completion event."""
    cap = (4 if shared else 2) * n_hops + n_links + 1
    et = np.empty(cap)
    ep = np.empty(cap)
    eid = np.empty(cap, dtype=np.int64)
    esize = 0
    for op in range(op_first_hop.shape[0]):
        if remaining[op] == 0 and op_first_hop[op] >= 0:
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


def _share_state(n_links, class_ptr):
    """Per shared link: virtual time, when it was last advanced and active connections; per
    connection (class): whether it has a transfer on its link, its waiting transfers' queue
    sizes and key arrays (planned position or -1, request time, hop), in heap segments
    starting at ``class_ptr``."""
    n_classes = class_ptr.shape[0] - 1
    cap = class_ptr[n_classes] + 1
    return (
        np.zeros(n_links),
        np.zeros(n_links),
        np.zeros(n_links, dtype=np.int64),
        np.zeros(n_classes, dtype=np.bool_),
        np.zeros(n_classes, dtype=np.int64),
        np.zeros(cap),
        np.zeros(cap),
        np.zeros(cap, dtype=np.int64),
    )


def _conn_turn(h, c, hop_conn_pos, conn_next):
    """Whether connection ``c`` may carry hop ``h`` next: it is unordered, or the next in the
    connection's planned order."""
    return hop_conn_pos[h] < 0 or hop_conn_pos[h] == conn_next[c]


def _conn_started(h, c, hop_conn_pos, conn_next):
    """Hop ``h`` went onto connection ``c``: an ordered hop moves the connection's turn on."""
    if hop_conn_pos[h] >= 0:
        conn_next[c] = hop_conn_pos[h] + 1


def _share_advance(link, t, vt, vlast, active):
    """Bring a shared link's virtual time up to real time ``t``."""
    if active[link] > 0:
        vt[link] += (t - vlast[link]) / active[link]
    vlast[link] = t


def _share_schedule(link, qbase, qsize, qp, vt, vlast, active, link_free_at, heap, esize, ev_id):
    """(Re)schedule the shared link's next completion from its smallest virtual finish; a
    superseded event stays in the heap and is ignored when popped (its time is no longer
    ``link_free_at``). The new event-heap size."""
    et, ep, eid = heap
    if qsize[link] == 0:
        link_free_at[link] = np.inf
        return esize
    tn = vlast[link] + (qp[qbase[link]] - vt[link]) * active[link]
    if tn < vlast[link]:
        tn = vlast[link]  # rounding: never schedule into the past
    if tn != link_free_at[link]:
        link_free_at[link] = tn
        esize = _push(et, ep, eid, 0, esize, tn, np.inf, ev_id)
    return esize


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
    op_hops,
    groups,
):
    """Run the event loop; returns per-hop start/end, per-op ready/finish, per-link busy time.

    ``op_prio``: planned priority of each operation (0 everywhere for first-ready-first-served).
    ``op_extra``: time added after arrival (reduction cost). ``op_release``: earliest start of
    each operation. ``hop_order_pos[h]``: the hop's position in its link's explicit planned
    order, or -1. ``reserve``: every priority is equal, so a request can book the link at once
    (``start = max(t, free)``): with equal priorities nobody who asks later may overtake it,
    which is exactly first-ready-first-served, without queues or link-free events. The event
    keys are in the module's docstring. ``op_hops``: the hops whose end an operation's
    arrival waits for; ``groups``: multicasts and in-switch reductions (see :func:`_next_hop`),
    ``groups[0][0]`` false where there are none.
    """
    n_hops = hop_link.shape[0]
    busy, free_pending, link_free_at, next_pos = _link_state(n_links)
    hop_start, hop_end, hop_req, parked = _hop_state(n_hops)
    op_ready, op_finish, op_acc, remaining = _op_state(op_release, indeg)
    qbase, qsize, qp, qr, qh = _link_queues(hop_link, n_links, reserve)
    et, ep, eid, esize = _initial_events(
        n_hops, n_links, remaining, op_first_hop, op_ready, op_prio, hop_req, False
    )
    heap = (et, ep, eid)
    succ = (succ_ptr, succ_ids)
    grouped = groups[0][0]
    opst = (op_acc, op_hops.copy(), op_extra, op_finish, op_ready, remaining, op_first_hop, op_prio)
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
        pos = hop_order_pos[h]
        if pos >= 0:
            nh = _unpark_next(link, pos, link_order_ptr, link_order_hops, next_pos, parked)
            if nh >= 0:
                esize = _push(et, ep, eid, 0, esize, t, op_prio[hop_op[nh]], nh)
        if grouped:
            esize = _next_hop(h, t, hop_op, hop_alpha, hop_req, op_last_hop, op_prio, groups,
                              heap, esize)  # fmt: skip
            esize, done_ops = _hop_done(h, hop_op, hop_end, hop_alpha_tail, opst, succ, groups,
                                        hop_req, heap, esize, done_ops)  # fmt: skip
            continue
        tail = end + hop_alpha_tail[h]
        if tail > op_acc[op]:
            op_acc[op] = tail
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
):
    """The event loop with shared links (``order="fair"``): ``link_shared[l]`` links are
    shared by their connections (``hop_class[h]``: the connection of a hop on one, whose
    waiting transfers queue in ``class_ptr[c]:class_ptr[c + 1]``); the others (issue slots)
    serve first ready, first served. ``hop_conn_pos[h]``: the hop's position in its
    connection's planned order (the schedule's link order restricted to one sender-receiver
    pair, which is the order an executor posts that pair's messages in), or -1: a connection
    carries its ordered transfers in that order, and its unordered ones first ready, first
    served. No planned priorities. Compiled separately from :func:`run_events`, and only when
    used. Returns what :func:`run_events` returns."""
    n_hops = hop_link.shape[0]
    busy, _, link_free_at, _ = _link_state(n_links)
    for l in range(n_links):
        if link_shared[l]:
            link_free_at[l] = np.inf  # no completion scheduled yet
    hop_start, hop_end, hop_req, _ = _hop_state(n_hops)
    op_prio = np.zeros(op_first_hop.shape[0])
    op_ready, op_finish, op_acc, remaining = _op_state(op_release, indeg)
    hops_left = op_hops.copy()
    qbase, qsize, qp, qr, qh = _link_queues(hop_link, n_links, False)
    vt, vlast, active, cbusy, csize, cq_t, cq_z, cq_h = _share_state(n_links, class_ptr)
    conn_next = np.zeros(class_ptr.shape[0] - 1, dtype=np.int64)
    et, ep, eid, esize = _initial_events(
        n_hops, n_links, remaining, op_first_hop, op_ready, op_prio, hop_req, True
    )
    heap = (et, ep, eid)
    succ = (succ_ptr, succ_ids)
    opst = (op_acc, hops_left, op_extra, op_finish, op_ready, remaining, op_first_hop, op_prio)
    done_ops = 0
    while esize > 0:
        t, _, x, esize = _pop(et, ep, eid, 0, esize)
        if x >= n_hops:  # a shared link's completion (ignored when superseded)
            link = x - n_hops
            if t != link_free_at[link] or qsize[link] == 0:
                continue
            link_free_at[link] = np.inf  # consumed; the next is scheduled below
            vt[link] = qp[qbase[link]]
            vlast[link] = t
            while qsize[link] > 0 and qp[qbase[link]] <= vt[link]:
                _, _, h, qsize[link] = _pop(qp, qr, qh, qbase[link], qsize[link])
                active[link] -= 1
                hop_end[h] = t
                esize, done_ops = _hop_done(h, hop_op, hop_end, hop_alpha_tail, opst, succ,
                                            groups, hop_req, heap, esize, done_ops)  # fmt: skip
                c = hop_class[h]
                if csize[c] > 0 and _conn_turn(cq_h[class_ptr[c]], c, hop_conn_pos, conn_next):
                    # the connection's next transfer goes on
                    _, _, h2, csize[c] = _pop(cq_t, cq_z, cq_h, class_ptr[c], csize[c])
                    qsize[link] = _push(
                        qp, qr, qh, qbase[link], qsize[link], vt[link] + hop_tx[h2], 0.0, h2
                    )
                    active[link] += 1
                    busy[link] += hop_tx[h2]
                    hop_start[h2] = t
                    _conn_started(h2, c, hop_conn_pos, conn_next)
                    esize = _next_hop(
                        h2, t, hop_op, hop_alpha, hop_req, op_last_hop, op_prio, groups, heap, esize
                    )
                else:
                    cbusy[c] = False
            esize = _share_schedule(link, qbase, qsize, qp, vt, vlast, active, link_free_at,
                                    heap, esize, x)  # fmt: skip
            continue
        h = x
        link = hop_link[h]
        if link_shared[link]:
            c = hop_class[h]
            if cbusy[c] or not _conn_turn(h, c, hop_conn_pos, conn_next):
                # the connection carries an earlier transfer, or one before this in its
                # planned order has not come yet: wait in line (ordered by planned position,
                # unordered transfers first, then by request time)
                key = hop_conn_pos[h] if hop_conn_pos[h] >= 0 else -1
                csize[c] = _push(cq_t, cq_z, cq_h, class_ptr[c], csize[c], key, t, h)
                continue
            cbusy[c] = True
            _conn_started(h, c, hop_conn_pos, conn_next)
            _share_advance(link, t, vt, vlast, active)
            qsize[link] = _push(qp, qr, qh, qbase[link], qsize[link], vt[link] + hop_tx[h], 0.0, h)
            active[link] += 1
            busy[link] += hop_tx[h]
            hop_start[h] = t
            esize = _share_schedule(link, qbase, qsize, qp, vt, vlast, active, link_free_at,
                                    heap, esize, n_hops + link)  # fmt: skip
            esize = _next_hop(h, t, hop_op, hop_alpha, hop_req, op_last_hop, op_prio, groups,
                              heap, esize)  # fmt: skip
            continue
        # a first-served link (an issue slot): booked at once
        if link_free_at[link] > t:
            t = link_free_at[link]
        link_free_at[link] = t + hop_tx[h]
        busy[link] += hop_tx[h]
        hop_start[h] = t
        hop_end[h] = t + hop_tx[h]
        esize = _next_hop(h, t, hop_op, hop_alpha, hop_req, op_last_hop, op_prio, groups,
                          heap, esize)  # fmt: skip
        esize, done_ops = _hop_done(h, hop_op, hop_end, hop_alpha_tail, opst, succ, groups,
                                    hop_req, heap, esize, done_ops)  # fmt: skip
    return hop_start, hop_end, op_ready, op_finish, busy, done_ops


def _next_hop(h, t, hop_op, hop_alpha, hop_req, op_last_hop, op_prio, groups, heap, esize):
    """Hop ``h`` started at ``t``: the head of the data reaches the route's next link
    ``alpha`` later (requested then). With in-network groups (``groups``: flags, hops each
    hop waits for, branch pointers and hops, users pointers, operations and tails), also the
    branches that part from ``h`` (multicast), and a hop where routes meet (in-switch
    reduction) is requested only when every hop into it has started, at the latest head.
    The new event-heap size."""
    op = hop_op[h]
    nt = t + hop_alpha[h]
    et, ep, eid = heap
    flags, need, fork_ptr, fork_ids = groups[0], groups[1], groups[2], groups[3]
    if not flags[0]:
        if h < op_last_hop[op]:
            hop_req[h + 1] = nt
            esize = _push(et, ep, eid, 0, esize, nt, op_prio[op], h + 1)
        return esize
    if h < op_last_hop[op]:
        esize = _request(h + 1, nt, hop_op, hop_req, need, op_prio, heap, esize)
    for k in range(fork_ptr[h], fork_ptr[h + 1]):
        esize = _request(fork_ids[k], nt, hop_op, hop_req, need, op_prio, heap, esize)
    return esize


def _request(s, nt, hop_op, hop_req, need, op_prio, heap, esize):
    """One hop into ``s`` has its head at ``s`` at ``nt``; ``s`` is requested when the last
    one has (the new event-heap size)."""
    if nt > hop_req[s]:
        hop_req[s] = nt
    need[s] -= 1
    if need[s] == 0:
        et, ep, eid = heap
        esize = _push(et, ep, eid, 0, esize, hop_req[s], op_prio[hop_op[s]], s)
    return esize


def _hop_done(h, hop_op, hop_end, hop_alpha_tail, opst, succ, groups, hop_req, heap, esize,
              done_ops):  # fmt: skip
    """Hop ``h``'s end is known: the arrival so far of each operation that waits for it (its
    own; with in-network groups, every one whose data it carries, with the alphas still ahead
    on that operation's path); an operation whose last such hop this was is done and its
    successors may go. The new event-heap size and count of operations done."""
    op_acc, hops_left, op_extra, op_finish, op_ready, remaining, op_first_hop, op_prio = opst
    if groups[0][0]:
        user_ptr, user_op, user_tail = groups[4], groups[5], groups[6]
        for k in range(user_ptr[h], user_ptr[h + 1]):
            esize, done_ops = _arrive(user_op[k], hop_end[h] + user_tail[k], opst, succ,
                                      hop_req, heap, esize, done_ops)  # fmt: skip
        return esize, done_ops
    return _arrive(hop_op[h], hop_end[h] + hop_alpha_tail[h], opst, succ, hop_req, heap, esize,
                   done_ops)  # fmt: skip


def _arrive(op, tail, opst, succ, hop_req, heap, esize, done_ops):
    """One of ``op``'s hops ended, its data at the receiver by ``tail``."""
    op_acc, hops_left, op_extra, op_finish, op_ready, remaining, op_first_hop, op_prio = opst
    if tail > op_acc[op]:
        op_acc[op] = tail
    hops_left[op] -= 1
    if hops_left[op] == 0:
        finish = op_acc[op] + op_extra[op]
        op_finish[op] = finish
        done_ops += 1
        esize = _release(
            op, finish, succ, op_ready, remaining, op_first_hop, hop_req, op_prio, heap, esize
        )
    return esize, done_ops


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


_compiled_fair = None
_steps: dict | None = None


def _compiled_steps() -> dict | None:
    """The compiled helpers both loops share (None without numba); each is compiled when a
    loop that calls it is."""
    global _steps
    if _steps is None:
        try:
            from numba import njit
        except ImportError:  # pragma: no cover - numba is a dependency
            return None
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
        steps["_share_state"] = njit(cache=True)(_rebind(_share_state, steps))
        steps["_share_advance"] = njit(cache=True, inline="always")(_share_advance)
        steps["_conn_turn"] = njit(cache=True, inline="always")(_conn_turn)
        steps["_conn_started"] = njit(cache=True, inline="always")(_conn_started)
        steps["_share_schedule"] = njit(cache=True)(_rebind(_share_schedule, steps))
        steps["_request"] = njit(cache=True)(_rebind(_request, steps))
        steps["_next_hop"] = njit(cache=True)(_rebind(_next_hop, steps))
        steps["_arrive"] = njit(cache=True)(_rebind(_arrive, steps))
        steps["_hop_done"] = njit(cache=True)(_rebind(_hop_done, steps))
        _steps = steps
    return _steps


def _compile(loop):
    """``loop`` compiled with the shared helpers (itself without numba)."""
    steps = _compiled_steps()
    if steps is None:  # pragma: no cover - numba is a dependency
        return loop
    from numba import njit

    # nogil: a time limit's watchdog thread can still run during a long simulation
    return njit(cache=True, nogil=True)(_rebind(loop, steps))


def compiled_loaded(fair: bool) -> bool:
    """Whether the compiled loop for the fair model (``fair``) or the others is loaded."""
    return (_compiled_fair if fair else _compiled) is not None


def compiled_run_events():
    """The numba-compiled event loop (compiled once per process, cached on disk)."""
    global _compiled
    if _compiled is None:
        _compiled = _compile(run_events)
    return _compiled


def compiled_run_events_fair():
    """The numba-compiled loop with shared links (compiled only when first used)."""
    global _compiled_fair
    if _compiled_fair is None:
        _compiled_fair = _compile(run_events_fair)
    return _compiled_fair


def _rebind(func, extra_globals):
    """A copy of ``func`` whose globals resolve ``extra_globals`` first (for numba)."""
    import types

    g = dict(func.__globals__)
    g.update(extra_globals)
    return types.FunctionType(func.__code__, g, func.__name__, func.__defaults__, func.__closure__)
