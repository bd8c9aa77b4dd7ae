"""The simulator's event loop over flat arrays (compiled with numba when available).

One event per *hop* (an operation's use of one link). See ``docs/simulator.md`` for the model.
The loop is written once, as plain Python on numpy arrays, and compiled by numba; the same
function runs uncompiled (``compiled=False``) so tests can check both give identical results.

Event ``(t, prio, hop)``: the head of the operation's data reaches the link of ``hop`` at ``t``.

* If the link has a planned order and this hop is not next in it, the hop is parked until its
  predecessor in that order has been served.
* Otherwise transmission starts at ``max(t, free[link])`` and occupies the link for
  ``bytes / bw``; the next hop of the route is requested ``alpha`` after the start (cut-through
  at switches and routers: the head moves on after the propagation delay).
* After the last hop the operation is complete when every hop has finished transmitting and the
  data has propagated to the receiver: ``max_i(end_i + sum_{j>=i} alpha_j)`` (plus the optional
  reduction time). Operations that depend on it become ready then (store-and-forward at GPUs).
"""

from __future__ import annotations

import numpy as np


def _less(t_a, p_a, h_a, t_b, p_b, h_b):
    if t_a != t_b:
        return t_a < t_b
    if p_a != p_b:
        return p_a < p_b
    return h_a < h_b


def _push(ht, hp, hh, size, t, p, h):
    i = size
    ht[i] = t
    hp[i] = p
    hh[i] = h
    while i > 0:
        parent = (i - 1) // 2
        if _less(ht[i], hp[i], hh[i], ht[parent], hp[parent], hh[parent]):
            ht[i], ht[parent] = ht[parent], ht[i]
            hp[i], hp[parent] = hp[parent], hp[i]
            hh[i], hh[parent] = hh[parent], hh[i]
            i = parent
        else:
            break
    return size + 1


def _pop(ht, hp, hh, size):
    t = ht[0]
    p = hp[0]
    h = hh[0]
    size -= 1
    ht[0] = ht[size]
    hp[0] = hp[size]
    hh[0] = hh[size]
    i = 0
    while True:
        left = 2 * i + 1
        if left >= size:
            break
        small = left
        right = left + 1
        if right < size and _less(ht[right], hp[right], hh[right], ht[left], hp[left], hh[left]):
            small = right
        if _less(ht[small], hp[small], hh[small], ht[i], hp[i], hh[i]):
            ht[i], ht[small] = ht[small], ht[i]
            hp[i], hp[small] = hp[small], hp[i]
            hh[i], hh[small] = hh[small], hh[i]
            i = small
        else:
            break
    return t, p, h, size


def run_events(hop_link, hop_op, hop_tx, hop_alpha, hop_alpha_tail, op_first_hop, op_last_hop,
               op_prio, op_release, op_extra, succ_ptr, succ_ids, indeg, hop_order_pos,
               link_order_ptr, link_order_hops, n_links):
    """Run the event loop; returns per-hop start/end, per-op ready/finish, per-link busy time.

    ``op_extra`` is time added after arrival (reduction cost). ``op_release`` is the earliest
    start of each operation (0, or its planned start when releases are honoured).
    ``hop_order_pos[h]`` is the hop's position in its link's planned order, or -1.
    """
    n_ops = op_first_hop.shape[0]
    n_hops = hop_link.shape[0]
    free = np.zeros(n_links)
    busy = np.zeros(n_links)
    next_pos = np.zeros(n_links, dtype=np.int64)
    hop_start = np.full(n_hops, np.nan)
    hop_end = np.full(n_hops, np.nan)
    parked = np.zeros(n_hops, dtype=np.bool_)
    park_time = np.zeros(n_hops)
    op_ready = op_release.copy()
    op_finish = np.full(n_ops, np.nan)
    op_acc = np.zeros(n_ops)
    remaining = indeg.copy()
    cap = 2 * n_hops + 1
    ht = np.empty(cap)
    hp = np.empty(cap)
    hh = np.empty(cap, dtype=np.int64)
    size = 0
    for op in range(n_ops):
        if remaining[op] == 0:
            size = _push(ht, hp, hh, size, op_ready[op], op_prio[op], op_first_hop[op])
    done_ops = 0
    while size > 0:
        t, p, h, size = _pop(ht, hp, hh, size)
        link = hop_link[h]
        pos = hop_order_pos[h]
        if pos >= 0 and pos != next_pos[link]:
            parked[h] = True
            park_time[h] = t
            continue
        start = t
        if free[link] > start:
            start = free[link]
        end = start + hop_tx[h]
        free[link] = end
        busy[link] += hop_tx[h]
        hop_start[h] = start
        hop_end[h] = end
        op = hop_op[h]
        tail = end + hop_alpha_tail[h]
        if tail > op_acc[op]:
            op_acc[op] = tail
        if pos >= 0:
            next_pos[link] = pos + 1
            base = link_order_ptr[link]
            if base + pos + 1 < link_order_ptr[link + 1]:
                nh = link_order_hops[base + pos + 1]
                if parked[nh]:
                    parked[nh] = False
                    nt = park_time[nh]
                    if t > nt:
                        nt = t
                    size = _push(ht, hp, hh, size, nt, op_prio[hop_op[nh]], nh)
        if h < op_last_hop[op]:
            size = _push(ht, hp, hh, size, start + hop_alpha[h], p, h + 1)
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
                size = _push(ht, hp, hh, size, op_ready[s], op_prio[s], op_first_hop[s])
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
        _compiled = njit(cache=True)(_rebind(run_events, {"_push": push, "_pop": pop, "np": np}))
    return _compiled


def _rebind(func, extra_globals):
    """A copy of ``func`` whose globals resolve ``extra_globals`` first (for numba)."""
    import types

    g = dict(func.__globals__)
    g.update(extra_globals)
    return types.FunctionType(func.__code__, g, func.__name__, func.__defaults__,
                              func.__closure__)
