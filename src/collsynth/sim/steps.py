"""The steps of the simulator's event loop (:mod:`collsynth.sim.engine`): its state arrays and
what happens when a hop is requested, starts, ends, or an operation completes.

Plain Python on numpy arrays; :func:`collsynth.sim.engine.compiled_steps` compiles each with
the helpers it calls (the small ones inlined into their callers).
"""

from __future__ import annotations

import numpy as np

from .heap import ZERO, heap_push, index_set


# ---------------------------------------------------------------------- state
# The loops' state is allocated with numpy before the compiled loop runs (only the loops and
# the steps they call are compiled: compiling the allocations as well cost a third of the first
# compile).
def link_state(n_links):
    """Per-link state: busy time, whether a link-free event is pending, when the link is free,
    and the position in its planned order of the next hop it may serve."""
    busy = np.zeros(n_links)
    free_pending = np.zeros(n_links, dtype=np.bool_)
    return busy, free_pending, np.zeros(n_links), np.zeros(n_links, dtype=np.int64)


def hop_state(n_hops):
    """Per-hop state: start and end of its transmission (NaN until served), the time it is
    requested, and whether it is parked until its turn in its link's planned order."""
    start = np.full(n_hops, np.nan)
    end = np.full(n_hops, np.nan)
    return start, end, np.zeros(n_hops), np.zeros(n_hops, dtype=np.bool_)


def op_state(op_release, indeg):
    """Per-operation state: when it is ready (its release time until its dependencies finish),
    its finish (NaN until done), its arrival so far, and its dependencies not yet done."""
    n_ops = op_release.shape[0]
    return (op_release.astype(np.float64), np.full(n_ops, np.nan), np.zeros(n_ops),
            indeg.astype(np.int64))  # fmt: skip


def link_queues(hop_link, n_links, reserve):
    """Per-link waiting queues: heap segments sized by the number of hops on each link (none
    with ``reserve``). Returns (segment starts, sizes, and the priority, request-time and hop
    key arrays)."""
    qbase = np.zeros(n_links + 1, dtype=np.int64)
    if not reserve:
        np.cumsum(np.bincount(hop_link, minlength=n_links)[:n_links], out=qbase[1:])
    qcap = hop_link.shape[0] + 1 if not reserve else 1
    qsize = np.zeros(n_links, dtype=np.int64)
    return qbase, qsize, np.zeros(qcap), np.zeros(qcap), np.zeros(qcap, dtype=np.int64)


def share_state(n_links):
    """Per shared link: virtual time, when it was last advanced and active connections."""
    return np.zeros(n_links), np.zeros(n_links), np.zeros(n_links, dtype=np.int64)


def connection_state(hop_conn_pos, hop_class, class_ptr):
    """Per connection (class): whether it carries a transfer, and where its waiting transfers
    are kept, in its segment ``class_ptr[c]:class_ptr[c + 1]`` of one array of hops (-1:
    empty): first one slot per position of its planned order (a transfer that came before
    its turn waits in its slot), then its unordered transfers in a queue by (request time,
    hop) from ``head[c]`` to ``tail[c]``, which starts at ``slots_end[c]``. Returns (busy,
    waiting hops, slots_end, head, tail)."""
    n_classes = class_ptr.shape[0] - 1
    head = class_ptr[:n_classes].astype(np.int64)
    ordered = (hop_class >= 0) & (hop_conn_pos >= 0)
    head += np.bincount(hop_class[ordered], minlength=n_classes)[:n_classes]  # slots first
    waiting = np.full(int(class_ptr[n_classes]) + 1, -1, dtype=np.int64)
    return np.zeros(n_classes, dtype=np.bool_), waiting, head, head.copy(), head.copy()


def initial_events(n_hops, n_links, remaining, op_first_hop, op_ready, op_prio, hop_req, shared):
    """The global event heap, holding the first-hop requests of operations without
    dependencies: its key arrays and size (the requests sorted by their keys, which is a
    heap). Each hop is requested once, and with planned link orders once more when it is
    unparked; links' completions are events of their own there (``shared``: they are kept in
    an indexed heap instead, one entry per link)."""
    cap = (1 if shared else 2) * n_hops + n_links + 1
    et = np.empty(cap)
    ep = np.empty(cap)
    eid = np.empty(cap, dtype=np.int64)
    ops = np.flatnonzero((remaining == 0) & (op_first_hop >= 0))
    first = op_first_hop[ops].astype(np.int64)
    hop_req[first] = op_ready[ops]
    keys = np.lexsort((first, op_prio[ops], op_ready[ops]))
    k = len(ops)
    et[:k] = op_ready[ops][keys]
    ep[:k] = op_prio[ops][keys]
    eid[:k] = first[keys]
    return et, ep, eid, k


# ---------------------------------------------------------------------- steps
def connection_wait(h, c, hop_conn_pos, hop_req, class_ptr, waiting, head, tail):
    """Hop ``h`` must wait for connection ``c``: into its slot (ordered), or into the queue,
    kept sorted by (request time, hop) (requests come in time order, so this moves nothing
    except among requests of one instant)."""
    pos = hop_conn_pos[h]
    if pos >= 0:
        waiting[class_ptr[c] + pos] = h
        return
    i = tail[c]
    while i > head[c]:
        g = waiting[i - 1]
        if hop_req[g] < hop_req[h] or (hop_req[g] == hop_req[h] and g < h):
            break
        waiting[i] = g
        i -= 1
    waiting[i] = h
    tail[c] += 1


def connection_next(c, conn_next, class_ptr, waiting, slots_end, head, tail):
    """The transfer connection ``c`` carries next now that it is free: the first queued
    unordered one, else the one in the slot of its next planned position if it has come;
    -1 where none may go (the connection idles)."""
    if head[c] < tail[c]:
        h = waiting[head[c]]
        waiting[head[c]] = -1
        head[c] += 1
        return h
    slot = class_ptr[c] + conn_next[c]
    if slot < slots_end[c] and waiting[slot] >= 0:
        h = waiting[slot]
        waiting[slot] = -1
        return h
    return -1


def next_in_order(link, pos, link_order_ptr, link_order_hops):
    """The hop after position ``pos`` in the link's planned order, or -1."""
    b0 = link_order_ptr[link]
    if b0 + pos + 1 < link_order_ptr[link + 1]:
        return link_order_hops[b0 + pos + 1]
    return -1


def unpark_next(link, pos, link_order_ptr, link_order_hops, next_pos, parked):
    """The hop at ``pos`` of the link's planned order was served: the next position may be
    served now; the hop there if it was parked waiting for its turn (no longer parked), or -1."""
    next_pos[link] = pos + 1
    nh = next_in_order(link, pos, link_order_ptr, link_order_hops)
    if nh >= 0 and parked[nh]:
        parked[nh] = False
        return nh
    return -1


def release_successors(
    op, finish, succ, op_ready, remaining, op_first_hop, hop_req, op_prio, heap, esize
):
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
                esize = heap_push(et, ep, eid, ZERO, esize, op_ready[s], op_prio[s], h0)
    return esize


def connection_turn(h, c, hop_conn_pos, conn_next):
    """Whether connection ``c`` may carry hop ``h`` next: it is unordered, or the next in the
    connection's planned order."""
    return hop_conn_pos[h] < 0 or hop_conn_pos[h] == conn_next[c]


def connection_started(h, c, hop_conn_pos, conn_next):
    """Hop ``h`` went onto connection ``c``: an ordered hop moves the connection's turn on."""
    if hop_conn_pos[h] >= 0:
        conn_next[c] = hop_conn_pos[h] + 1


def share_advance(link, t, vt, vlast, active):
    """Bring a shared link's virtual time up to real time ``t``."""
    if active[link] > 0:
        vt[link] += (t - vlast[link]) / active[link]
    vlast[link] = t


def share_schedule(link, qbase, qsize, qp, vt, vlast, active, link_free_at, lheap, lsize):
    """(Re)schedule the shared link's next completion from its smallest virtual finish, in
    the indexed heap of links' completions (``lheap``: its order and position arrays, keyed
    by ``link_free_at``; none while the link carries nothing). The new size of that heap."""
    tn = np.inf
    if qsize[link] > 0:
        tn = vlast[link] + (qp[qbase[link]] - vt[link]) * active[link]
        if tn < vlast[link]:
            tn = vlast[link]  # rounding: never schedule into the past
    if tn != link_free_at[link]:
        lsize = index_set(link_free_at, lheap[0], lheap[1], lsize, link, tn)
    return lsize


def next_hop(h, t, hop_op, hop_alpha, hop_req, op_last_hop, op_prio, groups, heap, esize):
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
            esize = heap_push(et, ep, eid, ZERO, esize, nt, op_prio[op], h + 1)
        return esize
    if h < op_last_hop[op]:
        esize = request_hop(h + 1, nt, hop_op, hop_req, need, op_prio, heap, esize)
    for k in range(fork_ptr[h], fork_ptr[h + 1]):
        esize = request_hop(fork_ids[k], nt, hop_op, hop_req, need, op_prio, heap, esize)
    return esize


def request_hop(s, nt, hop_op, hop_req, need, op_prio, heap, esize):
    """One hop into ``s`` has its head at ``s`` at ``nt``; ``s`` is requested when the last
    one has (the new event-heap size)."""
    if nt > hop_req[s]:
        hop_req[s] = nt
    need[s] -= 1
    if need[s] == 0:
        et, ep, eid = heap
        esize = heap_push(et, ep, eid, ZERO, esize, hop_req[s], op_prio[hop_op[s]], s)
    return esize


def hop_done(h, hop_op, hop_end, hop_alpha_tail, opst, succ, groups, hop_req, heap, esize,
              done_ops):  # fmt: skip
    """Hop ``h``'s end is known: the arrival so far of each operation that waits for it (its
    own; with in-network groups, every one whose data it carries, with the alphas still ahead
    on that operation's path); an operation whose last such hop this was is done and its
    successors may go. The new event-heap size and count of operations done. (One function
    with the arrival inside: each compiled function costs numba a fixed share of the first
    compile.)"""
    op_acc, hops_left, op_extra, op_finish, op_ready, remaining, op_first_hop, op_prio = opst
    grouped = groups[0][0]
    user_ptr, user_op, user_tail = groups[4], groups[5], groups[6]
    k0, k1 = (user_ptr[h], user_ptr[h + 1]) if grouped else (0, 1)
    for k in range(k0, k1):
        op = user_op[k] if grouped else hop_op[h]
        tail = hop_end[h] + (user_tail[k] if grouped else hop_alpha_tail[h])
        if tail > op_acc[op]:
            op_acc[op] = tail
        hops_left[op] -= 1
        if hops_left[op] == 0:
            finish = op_acc[op] + op_extra[op]
            op_finish[op] = finish
            done_ops += 1
            esize = release_successors(
                op, finish, succ, op_ready, remaining, op_first_hop, hop_req, op_prio, heap, esize
            )
    return esize, done_ops


__all__ = [
    "connection_next",
    "connection_started",
    "connection_state",
    "connection_turn",
    "connection_wait",
    "hop_done",
    "hop_state",
    "initial_events",
    "link_queues",
    "link_state",
    "next_hop",
    "next_in_order",
    "op_state",
    "release_successors",
    "request_hop",
    "share_advance",
    "share_schedule",
    "share_state",
    "unpark_next",
]
