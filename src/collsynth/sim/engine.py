"""The simulator's event loop over flat arrays (compiled with numba when available).

One *request* per hop (an operation's use of one link). See ``docs/simulator.md`` for the model.
The loop is written once, as plain Python on numpy arrays, and compiled by numba; the same
function runs uncompiled (``compiled=False``) so tests can check both give identical results.

Events, in a global heap ordered by (time, kind, priority, request time, id):

* ``REQUEST`` of hop ``h`` at ``t``: the head of the operation's data reaches the link. If the
  link is idle the hop starts now; otherwise it waits in the link's own queue. A hop that is not
  next in its link's explicit planned order is parked until its predecessor has been served.
* ``FREE`` of link ``l`` at ``t``: the link finished a transmission; it starts the best waiting
  hop: smallest planned priority (step or start time, where the schedule gives one), then
  earliest request (first ready, first served), then lowest hop id. Links never idle while a
  servable hop waits (work-conserving).

A hop transmits for ``bytes / bw``; the route's next hop is requested ``alpha`` after the start
(cut-through at switches and routers). After its last hop an operation is complete when every
hop has finished transmitting and the data has propagated: ``max_i(end_i + sum_{j>=i}
alpha_j)`` (plus the optional reduction time); dependent operations become ready then.
"""

from __future__ import annotations

import numpy as np

REQUEST = 0
FREE = 1


def _less(t_a, k_a, p_a, r_a, h_a, t_b, k_b, p_b, r_b, h_b):
    if t_a != t_b:
        return t_a < t_b
    if k_a != k_b:
        return k_a < k_b
    if p_a != p_b:
        return p_a < p_b
    if r_a != r_b:
        return r_a < r_b
    return h_a < h_b


def _push(ht, hk, hp, hr, hh, base, size, t, k, p, r, h):
    """Push onto the binary heap stored in ``h*[base:base+size]``; returns the new size."""
    i = size
    ht[base + i] = t
    hk[base + i] = k
    hp[base + i] = p
    hr[base + i] = r
    hh[base + i] = h
    while i > 0:
        parent = (i - 1) // 2
        a = base + i
        b = base + parent
        if _less(ht[a], hk[a], hp[a], hr[a], hh[a], ht[b], hk[b], hp[b], hr[b], hh[b]):
            ht[a], ht[b] = ht[b], ht[a]
            hk[a], hk[b] = hk[b], hk[a]
            hp[a], hp[b] = hp[b], hp[a]
            hr[a], hr[b] = hr[b], hr[a]
            hh[a], hh[b] = hh[b], hh[a]
            i = parent
        else:
            break
    return size + 1


def _pop(ht, hk, hp, hr, hh, base, size):
    """Remove the top of the heap in ``h*[base:base+size]``; returns (t, k, p, r, h, size)."""
    t = ht[base]
    k = hk[base]
    p = hp[base]
    r = hr[base]
    h = hh[base]
    size -= 1
    last = base + size
    ht[base] = ht[last]
    hk[base] = hk[last]
    hp[base] = hp[last]
    hr[base] = hr[last]
    hh[base] = hh[last]
    i = 0
    while True:
        left = 2 * i + 1
        if left >= size:
            break
        small = left
        right = left + 1
        a = base + right
        b = base + left
        if right < size and _less(ht[a], hk[a], hp[a], hr[a], hh[a],
                                  ht[b], hk[b], hp[b], hr[b], hh[b]):
            small = right
        a = base + small
        b = base + i
        if _less(ht[a], hk[a], hp[a], hr[a], hh[a], ht[b], hk[b], hp[b], hr[b], hh[b]):
            ht[a], ht[b] = ht[b], ht[a]
            hk[a], hk[b] = hk[b], hk[a]
            hp[a], hp[b] = hp[b], hp[a]
            hr[a], hr[b] = hr[b], hr[a]
            hh[a], hh[b] = hh[b], hh[a]
            i = small
        else:
            break
    return t, k, p, r, h, size


def run_events(hop_link, hop_op, hop_tx, hop_alpha, hop_alpha_tail, op_first_hop, op_last_hop,
               op_prio, op_release, op_extra, succ_ptr, succ_ids, indeg, hop_order_pos,
               link_order_ptr, link_order_hops, n_links, reserve):
    """Run the event loop; returns per-hop start/end, per-op ready/finish, per-link busy time.

    ``op_prio``: planned priority of each operation (0 everywhere for first-ready-first-served).
    ``op_extra``: time added after arrival (reduction cost). ``op_release``: earliest start of
    each operation. ``hop_order_pos[h]``: the hop's position in its link's explicit planned
    order, or -1. ``reserve``: every priority is equal, so a request can book the link at once
    (``start = max(t, free)``): with equal priorities nobody who asks later may overtake it,
    which is exactly first-ready-first-served, without queues or link-free events.
    """
    n_ops = op_first_hop.shape[0]
    n_hops = hop_link.shape[0]
    busy = np.zeros(n_links)
    free_pending = np.zeros(n_links, dtype=np.bool_)
    link_free_at = np.zeros(n_links)
    next_pos = np.zeros(n_links, dtype=np.int64)
    hop_start = np.full(n_hops, np.nan)
    hop_end = np.full(n_hops, np.nan)
    hop_req = np.zeros(n_hops)
    parked = np.zeros(n_hops, dtype=np.bool_)
    op_ready = op_release.copy()
    op_finish = np.full(n_ops, np.nan)
    op_acc = np.zeros(n_ops)
    remaining = indeg.copy()
    # per-link waiting queues: heap segments sized by the number of hops on each link
    qbase = np.zeros(n_links + 1, dtype=np.int64)
    for h in range(n_hops):
        qbase[hop_link[h] + 1] += 1
    for l in range(n_links):
        qbase[l + 1] += qbase[l]
    qsize = np.zeros(n_links, dtype=np.int64)
    qt = np.zeros(n_hops + 1)
    qk = np.zeros(n_hops + 1, dtype=np.int64)
    qp = np.zeros(n_hops + 1)
    qr = np.zeros(n_hops + 1)
    qh = np.zeros(n_hops + 1, dtype=np.int64)
    # global event heap
    cap = 2 * n_hops + n_links + 1
    et = np.empty(cap)
    ek = np.empty(cap, dtype=np.int64)
    ep = np.empty(cap)
    er = np.empty(cap)
    eh = np.empty(cap, dtype=np.int64)
    esize = 0
    for op in range(n_ops):
        if remaining[op] == 0:
            h0 = op_first_hop[op]
            hop_req[h0] = op_ready[op]
            esize = _push(et, ek, ep, er, eh, 0, esize, op_ready[op], REQUEST, op_prio[op],
                          op_ready[op], h0)
    done_ops = 0
    while esize > 0:
        t, kind, p, r, x, esize = _pop(et, ek, ep, er, eh, 0, esize)
        if kind == FREE:
            link = x
            free_pending[link] = False
            if qsize[link] == 0:
                continue
            _, _, _, _, h, qsize[link] = _pop(qt, qk, qp, qr, qh, qbase[link], qsize[link])
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
                qsize[link] = _push(qt, qk, qp, qr, qh, qbase[link], qsize[link], 0.0, 0,
                                    op_prio[hop_op[h]], hop_req[h], h)
                if not free_pending[link]:
                    free_pending[link] = True
                    esize = _push(et, ek, ep, er, eh, 0, esize, link_free_at[link], FREE, 0.0,
                                  0.0, link)
                continue
        # serve hop h on link at time t
        start = t
        end = start + hop_tx[h]
        link_free_at[link] = end
        busy[link] += hop_tx[h]
        hop_start[h] = start
        hop_end[h] = end
        if qsize[link] > 0 and not free_pending[link]:
            free_pending[link] = True
            esize = _push(et, ek, ep, er, eh, 0, esize, end, FREE, 0.0, 0.0, link)
        op = hop_op[h]
        tail = end + hop_alpha_tail[h]
        if tail > op_acc[op]:
            op_acc[op] = tail
        pos = hop_order_pos[h]
        if pos >= 0:
            next_pos[link] = pos + 1
            b0 = link_order_ptr[link]
            if b0 + pos + 1 < link_order_ptr[link + 1]:
                nh = link_order_hops[b0 + pos + 1]
                if parked[nh]:
                    parked[nh] = False
                    esize = _push(et, ek, ep, er, eh, 0, esize, t, REQUEST,
                                  op_prio[hop_op[nh]], hop_req[nh], nh)
        if h < op_last_hop[op]:
            nt = start + hop_alpha[h]
            hop_req[h + 1] = nt
            esize = _push(et, ek, ep, er, eh, 0, esize, nt, REQUEST, op_prio[op], nt, h + 1)
            continue
        finish = op_acc[op] + op_extra[op]
        op_finish[op] = finish
        done_ops += 1
        for k in range(succ_ptr[op], succ_ptr[op + 1]):
            s = succ_ids[k]
            if finish > op_ready[s]:
                op_ready[s] = finish
            remaining[s] -= 1
            if remaining[s] == 0:
                h0 = op_first_hop[s]
                hop_req[h0] = op_ready[s]
                esize = _push(et, ek, ep, er, eh, 0, esize, op_ready[s], REQUEST, op_prio[s],
                              op_ready[s], h0)
    return hop_start, hop_end, op_ready, op_finish, busy, done_ops


_compiled = None


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
        _compiled = njit(cache=True)(_rebind(run_events, {"_push": push, "_pop": pop, "np": np,
                                                          "REQUEST": REQUEST, "FREE": FREE}))
    return _compiled


def _rebind(func, extra_globals):
    """A copy of ``func`` whose globals resolve ``extra_globals`` first (for numba)."""
    import types

    g = dict(func.__globals__)
    g.update(extra_globals)
    return types.FunctionType(func.__code__, g, func.__name__, func.__defaults__,
                              func.__closure__)
