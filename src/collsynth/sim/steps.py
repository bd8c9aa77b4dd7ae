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
# compile). Each hop's and each operation's fields are one record (a numpy structured array
# the loop reads whole): the fields of one hop lie on one cache line or two, not on ten.

#: a hop's fields (48 bytes): its link, operation, position in its link's planned order
#: (planned models) or its connection's (realized), its connection (-1 where none),
#: transmission time, alpha, alpha from it to the route's end, and when it was requested (its
#: start and end, the loop's outputs, are arrays of their own: nothing copies them out)
HOP = np.dtype([("link", np.int32), ("op", np.int32), ("pos", np.int32), ("cls", np.int32),
                ("tx", np.float64), ("alpha", np.float64), ("tail", np.float64),
                ("req", np.float64)], align=True)  # fmt: skip
#: an operation's fields (64 bytes, one cache line): its last and first hop (-1: a multicast
#: branch), the hops its arrival still waits for, its dependencies not yet done, its arrival
#: so far, the time added after it (reduction), its finish, when it is ready, its planned
#: priority, and padding. Hops and operations are numbered in four bytes: at most
#: :data:`MAX_HOPS` hops (the simulator refuses more)
MAX_HOPS = 2**31 - 1
OP = np.dtype([("last", np.int32), ("first", np.int32), ("left", np.int32),
               ("remaining", np.int32), ("acc", np.float64), ("extra", np.float64),
               ("finish", np.float64), ("ready", np.float64), ("prio", np.float64),
               ("spare", np.float64)], align=True)  # fmt: skip


def hop_records(hop_link, hop_op, hop_tx, hop_alpha, hop_alpha_tail, pos, cls):
    """The hops' records (requested at 0 until requested)."""
    out = np.zeros(hop_link.shape[0], dtype=HOP)
    fields = (("link", hop_link), ("op", hop_op), ("pos", pos), ("cls", cls), ("tx", hop_tx),
              ("alpha", hop_alpha), ("tail", hop_alpha_tail))  # fmt: skip
    for name, values in fields:
        out[name] = values
    return out


def op_records(op_first_hop, op_last_hop, op_hops, indeg, op_extra, op_release, op_prio):
    """The operations' records (finish NaN until done; ready at the release time until the
    dependencies finish)."""
    out = np.zeros(op_first_hop.shape[0], dtype=OP)
    for name, values in (("first", op_first_hop), ("last", op_last_hop), ("left", op_hops),
                         ("remaining", indeg), ("extra", op_extra), ("ready", op_release),
                         ("prio", op_prio)):  # fmt: skip
        out[name] = values
    out["finish"] = np.nan
    return out


def hop_times(n_hops):
    """Each hop's start and end of transmission (NaN until served)."""
    return np.full(n_hops, np.nan), np.full(n_hops, np.nan)


def link_state(n_links):
    """Per-link state: busy time, whether a link-free event is pending, when the link is free,
    and the position in its planned order of the next hop it may serve."""
    busy = np.zeros(n_links)
    free_pending = np.zeros(n_links, dtype=np.bool_)
    return busy, free_pending, np.zeros(n_links), np.zeros(n_links, dtype=np.int64)


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


#: a connection's fields (48 bytes): where its segment of the waiting hops starts and where
#: its slots end, the head and tail of its queue, its next position in its planned order,
#: and whether it carries a transfer
CONN = np.dtype([("ptr", np.int64), ("slots_end", np.int64), ("head", np.int64),
                 ("tail", np.int64), ("next", np.int64), ("busy", np.int64)])  # fmt: skip


def connection_state(hop_conn_pos, hop_class, class_ptr):
    """Per connection (class), its record (:data:`CONN`), and where its waiting transfers are
    kept: its segment ``class_ptr[c]:class_ptr[c + 1]`` of one array of hops (-1: empty),
    first one slot per position of its planned order (a transfer that came before its turn
    waits in its slot), then its unordered transfers in a queue by (request time, hop) from
    ``head`` to ``tail``, which starts at ``slots_end``. Returns (the records, the waiting
    hops)."""
    n_classes = class_ptr.shape[0] - 1
    conns = np.zeros(n_classes, dtype=CONN)
    conns["ptr"] = class_ptr[:n_classes]
    ordered = (hop_class >= 0) & (hop_conn_pos >= 0)
    ends = class_ptr[:n_classes] + np.bincount(hop_class[ordered], minlength=n_classes)[:n_classes]
    for name in ("slots_end", "head", "tail"):  # the queue starts after the slots
        conns[name] = ends
    return conns, np.full(int(class_ptr[n_classes]) + 1, -1, dtype=np.int64)


def initial_events(n_links, hops, ops, shared):
    """The global event heap, holding the first-hop requests of operations without
    dependencies: its key arrays and size (the requests sorted by their keys, which is a
    heap; their hops' request times set). Each hop is requested once, and with planned link
    orders once more when it is unparked; links' completions are events of their own there
    (``shared``: they are kept in an indexed heap instead, one entry per link)."""
    n_hops = hops.shape[0]
    cap = (1 if shared else 2) * n_hops + n_links + 1
    et = np.empty(cap)
    ep = np.empty(cap)
    eid = np.empty(cap, dtype=np.int64)
    ready = np.flatnonzero((ops["remaining"] == 0) & (ops["first"] >= 0))
    first = ops["first"][ready].astype(np.int64)
    times, prio = ops["ready"][ready], ops["prio"][ready]
    hops["req"][first] = times
    keys = np.lexsort((first, prio, times))
    k = len(ready)
    et[:k], ep[:k], eid[:k] = times[keys], prio[keys], first[keys]
    return et, ep, eid, k


# ---------------------------------------------------------------------- steps
def connection_wait(h, c, hops, conns, waiting):
    """Hop ``h`` must wait for connection ``c``: into its slot (ordered), or into the queue,
    kept sorted by (request time, hop) (requests come in time order, so this moves nothing
    except among requests of one instant)."""
    pos = hops[h]["pos"]
    r = conns[c]
    if pos >= 0:
        waiting[r["ptr"] + pos] = h
        return
    req = hops[h]["req"]
    i = r["tail"]
    while i > r["head"]:
        g = waiting[i - 1]
        rg = hops[g]["req"]
        if rg < req or (rg == req and g < h):
            break
        waiting[i] = g
        i -= 1
    waiting[i] = h
    r["tail"] = r["tail"] + 1


def connection_next(c, conns, waiting):
    """The transfer connection ``c`` carries next now that it is free: the first queued
    unordered one, else the one in the slot of its next planned position if it has come;
    -1 where none may go (the connection idles)."""
    r = conns[c]
    if r["head"] < r["tail"]:
        h = waiting[r["head"]]
        waiting[r["head"]] = -1
        r["head"] = r["head"] + 1
        return h
    slot = r["ptr"] + r["next"]
    if slot < r["slots_end"] and waiting[slot] >= 0:
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


def release_successors(op, finish, ops, succ, hops, heap, esize):
    """An operation finished: its successors' readiness; request the first hop of each
    successor whose dependencies are all done. ``succ``: (successor pointers, successor ids);
    ``heap``: the event heap's key arrays (time, priority, id). The new event-heap size."""
    succ_ptr, succ_ids = succ
    et, ep, eid = heap
    for k in range(succ_ptr[op], succ_ptr[op + 1]):
        r = ops[succ_ids[k]]
        if finish > r["ready"]:
            r["ready"] = finish
        r["remaining"] = r["remaining"] - 1
        if r["remaining"] == 0:
            h0 = np.int64(r["first"])
            if h0 >= 0:  # (-1: a multicast branch, requested where it parts instead)
                hops[h0]["req"] = r["ready"]
                esize = heap_push(et, ep, eid, ZERO, esize, r["ready"], r["prio"], h0)
    return esize


def connection_turn(h, c, hops, conns):
    """Whether connection ``c`` may carry hop ``h`` next: it is unordered, or the next in the
    connection's planned order."""
    pos = hops[h]["pos"]
    return pos < 0 or pos == conns[c]["next"]


def connection_started(h, c, hops, conns):
    """Hop ``h`` went onto connection ``c``: it is busy, and an ordered hop moves its turn
    on."""
    r = conns[c]
    r["busy"] = 1
    pos = hops[h]["pos"]
    if pos >= 0:
        r["next"] = pos + 1


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


def next_hop(h, t, hops, ops, groups, heap, esize):
    """Hop ``h`` started at ``t``: the head of the data reaches the route's next link
    ``alpha`` later (requested then). With in-network groups (``groups``: flags, hops each
    hop waits for, branch pointers and hops, users pointers, operations and tails), also the
    branches that part from ``h`` (multicast), and a hop where routes meet (in-switch
    reduction) is requested only when every hop into it has started, at the latest head.
    The new event-heap size."""
    r = hops[h]
    o = ops[r["op"]]
    nt = t + r["alpha"]
    et, ep, eid = heap
    flags, need, fork_ptr, fork_ids = groups[0], groups[1], groups[2], groups[3]
    if not flags[0]:
        if h < o["last"]:
            hops[h + 1]["req"] = nt
            esize = heap_push(et, ep, eid, ZERO, esize, nt, o["prio"], h + 1)
        return esize
    if h < o["last"]:
        esize = request_hop(h + 1, nt, hops, ops, need, heap, esize)
    for k in range(fork_ptr[h], fork_ptr[h + 1]):
        esize = request_hop(fork_ids[k], nt, hops, ops, need, heap, esize)
    return esize


def request_hop(s, nt, hops, ops, need, heap, esize):
    """One hop into ``s`` has its head at ``s`` at ``nt``; ``s`` is requested when the last
    one has (the new event-heap size)."""
    r = hops[s]
    if nt > r["req"]:
        r["req"] = nt
    need[s] -= 1
    if need[s] == 0:
        et, ep, eid = heap
        esize = heap_push(et, ep, eid, ZERO, esize, r["req"], ops[r["op"]]["prio"], s)
    return esize


def hop_done(h, end, hops, ops, succ, groups, heap, esize, done_ops):
    """Hop ``h``'s ``end`` is known: the arrival so far of each operation that waits for it (its
    own; with in-network groups, every one whose data it carries, with the alphas still ahead
    on that operation's path); an operation whose last such hop this was is done and its
    successors may go. The new event-heap size and count of operations done. (One function
    with the arrival inside: each compiled function costs numba a fixed share of the first
    compile.)"""
    grouped = groups[0][0]
    user_ptr, user_op, user_tail = groups[4], groups[5], groups[6]
    k0, k1 = (user_ptr[h], user_ptr[h + 1]) if grouped else (0, 1)
    for k in range(k0, k1):
        op = user_op[k] if grouped else np.int64(hops[h]["op"])
        tail = end + (user_tail[k] if grouped else hops[h]["tail"])
        r = ops[op]
        if tail > r["acc"]:
            r["acc"] = tail
        r["left"] = r["left"] - 1
        if r["left"] == 0:
            finish = r["acc"] + r["extra"]
            r["finish"] = finish
            done_ops += 1
            esize = release_successors(op, finish, ops, succ, hops, heap, esize)
    return esize, done_ops


__all__ = [
    "CONN",
    "HOP",
    "MAX_HOPS",
    "OP",
    "connection_next",
    "connection_started",
    "connection_state",
    "connection_turn",
    "connection_wait",
    "hop_done",
    "hop_records",
    "hop_times",
    "initial_events",
    "link_queues",
    "link_state",
    "next_hop",
    "next_in_order",
    "op_records",
    "release_successors",
    "request_hop",
    "share_advance",
    "share_schedule",
    "share_state",
    "unpark_next",
]
