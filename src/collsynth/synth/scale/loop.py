"""SCALE-CCL's event loop, written once over numpy arrays; compiled with numba when importable.

:func:`run_loop` is plain Python on numpy arrays, split into short steps. The way
``collsynth.sim.engine`` does it, :func:`compiled_run_loop` compiles it and every step with
numba ``njit(cache=True)`` on first use (steps that allocate nothing without reference
counting, see :data:`_ALLOCATING`); without numba it returns :func:`run_loop` itself.
``engine="python"`` (:func:`.algo.plan`) runs the same function uncompiled, so tests check
that both give the same plan, bit for bit.

State is a handful of named tuples of arrays (numba passes named tuples of arrays as they
are): :class:`~.tables.Graph` (the topology's tables), :data:`Params` (scalars),
:data:`Links` (per-link timing), :data:`Memory` (the neighbour memory table), :data:`Events`
(the two event heaps), :data:`Ops` (the plan so far), :data:`Triggers` (links to reconsider
and links waiting), :data:`Scratch` (per-decision buffers) and :data:`Search` (the router
Dijkstra). Counters and sizes live in the int64 array ``cnt`` under the names below.

Representation:

* subchunk ``j`` of chunk ``ch`` has the id ``b = j * n_chunks + ch`` (pipeline order); sets
  of subchunks are bit sets of ``words`` int64 words of 63 bits (the sign bit stays clear, so
  ``x & -x`` and shifts behave as on non-negative integers): ``b`` is bit ``b % 63`` of word
  ``b // 63``, and the lowest set bit is the first in queue order. Sets of datacenters are
  bit sets of ``dom_words`` words the same way;
* completion events (transmission and reception completion) are a binary heap ordered by
  ``(time, type, seq)``; start events (transmission and reception start) change no state and
  are counted when scheduled, but they still make rounds, so their times are a second heap;
* a round takes every event within ``eps`` of the earliest pending one (1 fs, relative beyond
  1 s), applies the completions, then lets the GPU links they touched decide, in link order;
* the router Dijkstra orders its entries ``(cost, node, arrival, chain, free)``
  lexicographically (chains compared link by link) and memoises its last result until a
  stream through switches/routers is committed;
* the heaps and the operation columns grow (doubling) before a round's decisions whenever
  they might not hold what the round can add (each triggered link commits at most once).

Every floating-point expression is evaluated in one fixed order (no ``fastmath``), so the
compiled and uncompiled runs give identical plans.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from .tables import WORD

# event types, in processing order for co-timed completions
TX_END, RX_END, TX_START, RX_START = 0, 1, 2, 3

# fields of the counters array ``cnt`` (int64)
HEAP_LEN = 0  # completion events in the heap
STARTS_LEN = 1  # start-event times in the start heap
SEQ = 2  # sequence number of the last completion event pushed (heap tie-break)
OPS_LEN = 3  # operations recorded
ROUTE_LEN = 4  # route links recorded
TRIGGERED_LEN = 5  # links listed for this round's decisions
BLOCKED_LEN = 6  # GPU links into routers waiting for any router link to free
ROUTER_GEN = 7  # streams committed through switches/routers (validity of the reach memo)
STALLED = 8  # 1 when data is missing and nothing can move any more
EVENTS = 9  # EVENTS + event type: events scheduled (starts) or processed (completions)
SS_CALLS = 13  # Subchunk Scheduling (Algorithm 1) calls
LWNF = 14  # Load-Aware Neighbor Forwarding decisions
LWNF_REFUSED = 15  # ... of which refused (every way in would have to wait)
SS_DUPLICATES = 16  # Algorithm 1 calls that resolved duplicates across queues
ROUNDS = 17  # rounds of co-timed events
KICKS = 18  # restarts with nothing in flight and data missing
N_COUNTERS = 19

# fields of ``Search.memo`` (int64): the memoised router Dijkstra
MEMO_NODE = 0  # the switch/router searched from (-1: none yet)
MEMO_GEN = 1  # ``cnt[ROUTER_GEN]`` when it was searched
MEMO_STAMP = 2  # label stamp of that search (labels of other stamps are stale)

# what a GPU link into a router that sent nothing waits for
WAIT_RECEPTION = 0  # nothing it holds is wanted beyond: a reception may change that
WAIT_ANY = 1  # any router link freeing
WAIT_BUSY = 2  # one of the busy first hops listed in ``Scratch.busy``

#: LWNF weights: f = link term + W_QUEUE * buffer term + W_PROGRESS * progress term (seconds).
W_QUEUE = 1.0
W_PROGRESS = 1.0

Params = namedtuple(
    "Params",
    [
        "n_chunks",
        "subchunks",
        "n_subs",  # chunks, subchunks per chunk, subchunk ids
        "words",  # int64 words per subchunk set
        "sub_bytes",  # bytes per subchunk
        "eps",  # co-timing tolerance of a round (relative beyond 1 s)
        "noise",  # lateness below noise * t is float rounding, not a wait
    ],
)
Links = namedtuple(
    "Links",
    [
        "free",  # when each link has drained what it carries (updated)
        "bw",
        "alpha",  # bandwidth (bytes/s), propagation delay (s)
        "delta",  # transmission time of one subchunk
    ],
)
Memory = namedtuple(
    "Memory",
    [
        "has",  # [rank, word]: subchunks held
        "cov",  # [rank, word]: held or being received (neighbour memory table)
        "want",  # [rank, word]: wanted and not held at the start
        "dcov",
        "dwant",  # [datacenter, word]: union over its ranks
        "dneed",  # [datacenter * n_subs + b]: its ranks wanting b, not covered
        "dneed_bits",  # [datacenter, word]: the b with dneed > 0
        "via",  # [rank * n_subs + b]: operation that delivered b (-1: none)
        "inflight",  # [rank]: receptions in progress (LWNF's buffer term)
    ],
)
Events = namedtuple(
    "Events",
    [
        "time",
        "kind",
        "seq",
        "arg",  # completion heap (arg: link or operation)
        "starts",  # start-event times (a heap)
    ],
)
Ops = namedtuple("Ops", ["src", "dst", "sub", "start", "finish", "dep", "route_ptr", "route_links"])
Triggers = namedtuple(
    "Triggers",
    [
        "listed",  # [link]: listed in ``order`` for this round
        "reset",  # [link]: reconsider everything (else only ``bits``)
        "bits",  # [link, word]: subchunks that became sendable on it
        "order",  # links listed this round
        "watch",  # [router link, queue position]: GPU links waiting for it to free
        "blocked",  # [link]: waiting for any router link to free
        "blocked_list",  # those links
    ],
)
Scratch = namedtuple(
    "Scratch",
    [
        "useful",
        "row",
        "held",
        "excluded",
        "once",
        "twice",  # subchunk sets
        "rows",  # [queue, word]: Algorithm 1's queues J towards one node
        "backlog",
        "delta_q",  # per queue: T and delta
        "busy",  # busy first hops out of a router
        "chain",  # the route being built
        "needy",
        "first",
        "dmiss",  # datacenter sets
    ],
)
Search = namedtuple(
    "Search",
    [
        "label",
        "label_entry",  # [node]: stamp when labelled, its entry
        "cost",
        "node",
        "arrival",
        "free",
        "length",
        "chain",  # entries
        "heap",  # entry ids
        "best_cost",
        "best_free",  # [datacenter]: least entry cost, free at that cost
        "ok",  # datacenters whose best entry needs no waiting (bit set)
        "memo",
        "memo_arrival",  # what was searched last
    ],
)


# ---------------------------------------------------------------------------- bits
def _low_bit(x):
    """Index of the lowest set bit of a non-zero word."""
    p = x & -x
    i = 0
    if p >= (1 << 32):
        p >>= 32
        i += 32
    if p >= (1 << 16):
        p >>= 16
        i += 16
    if p >= (1 << 8):
        p >>= 8
        i += 8
    if p >= (1 << 4):
        p >>= 4
        i += 4
    if p >= (1 << 2):
        p >>= 2
        i += 2
    if p >= 2:
        i += 1
    return i


def _pop_count(x):
    """Number of set bits of a word."""
    c = 0
    while x:
        x &= x - 1
        c += 1
    return c


def _bit_at(sets, row, b):
    """Bit ``b`` of the bit set ``sets[row]``."""
    return (sets[row, b // WORD] >> (b % WORD)) & 1


def _bit_in(words, b):
    """Bit ``b`` of the one-row bit set ``words``."""
    return (words[b // WORD] >> (b % WORD)) & 1


def _row_meets(sets, row, words, n):
    """Whether ``sets[row]`` and ``words`` (``n`` words) share a bit."""
    for x in range(n):
        if sets[row, x] & words[x]:
            return True
    return False


def _words_meet(a, b, n):
    """Whether the bit sets ``a`` and ``b`` (``n`` words) share a bit."""
    for x in range(n):
        if a[x] & b[x]:
            return True
    return False


def _round_limit(t, eps):
    """Latest time co-timed with ``t``."""
    return t + (eps if t <= 1.0 else eps * t)


# ---------------------------------------------------------------------------- event heaps
def _event_less(time, kind, seq, i, j):
    """Heap order of completion events: (time, type, seq)."""
    if time[i] != time[j]:
        return time[i] < time[j]
    if kind[i] != kind[j]:
        return kind[i] < kind[j]
    return seq[i] < seq[j]


def _event_swap(time, kind, seq, arg, i, j):
    """Swap two completion-heap slots."""
    time[i], time[j] = time[j], time[i]
    kind[i], kind[j] = kind[j], kind[i]
    seq[i], seq[j] = seq[j], seq[i]
    arg[i], arg[j] = arg[j], arg[i]


def _push_event(ev, cnt, t, kind, arg):
    """Schedule a completion event."""
    times, kinds, seqs, args = ev.time, ev.kind, ev.seq, ev.arg
    cnt[SEQ] += 1
    i = cnt[HEAP_LEN]
    cnt[HEAP_LEN] = i + 1
    times[i] = t
    kinds[i] = kind
    seqs[i] = cnt[SEQ]
    args[i] = arg
    while i > 0:
        parent = (i - 1) >> 1
        if not _event_less(times, kinds, seqs, i, parent):
            break
        _event_swap(times, kinds, seqs, args, i, parent)
        i = parent


def _pop_event(ev, cnt):
    """Remove the earliest completion event; returns the slot it was moved to."""
    times, kinds, seqs, args = ev.time, ev.kind, ev.seq, ev.arg
    n = cnt[HEAP_LEN] - 1
    cnt[HEAP_LEN] = n
    _event_swap(times, kinds, seqs, args, 0, n)
    i = 0
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and _event_less(times, kinds, seqs, c + 1, c):
            c += 1
        if not _event_less(times, kinds, seqs, c, i):
            break
        _event_swap(times, kinds, seqs, args, i, c)
        i = c
    return n


def _push_start(ev, cnt, t):
    """Schedule a start event (only its time is kept)."""
    h = ev.starts
    i = cnt[STARTS_LEN]
    cnt[STARTS_LEN] = i + 1
    h[i] = t
    while i > 0:
        parent = (i - 1) >> 1
        if not h[i] < h[parent]:
            break
        h[i], h[parent] = h[parent], h[i]
        i = parent


def _pop_start(ev, cnt):
    """Remove the earliest start event."""
    h = ev.starts
    n = cnt[STARTS_LEN] - 1
    cnt[STARTS_LEN] = n
    h[0] = h[n]
    i = 0
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and h[c + 1] < h[c]:
            c += 1
        if not h[c] < h[i]:
            break
        h[i], h[c] = h[c], h[i]
        i = c


# ---------------------------------------------------------------------------- triggers
def _trigger(listed, order, reset, cnt, link, fully):
    """List ``link`` for this round's decisions, once; ``fully``: for everything it could send.

    Otherwise only the subchunks ``Triggers.bits`` says became sendable on it are considered."""
    if not listed[link]:
        listed[link] = 1
        order[cnt[TRIGGERED_LEN]] = link
        cnt[TRIGGERED_LEN] += 1
    if fully:
        reset[link] = 1


def _trigger_all(g, tr, cnt):
    """List every GPU out-link, fully (the planner's schedule-all)."""
    gpu_out_ptr, gpu_out = g.gpu_out_ptr, g.gpu_out
    listed, order, reset = tr.listed, tr.order, tr.reset
    for u in range(g.n_ranks):
        for q in range(gpu_out_ptr[u], gpu_out_ptr[u + 1]):
            _trigger(listed, order, reset, cnt, gpu_out[q], True)


def _clear_triggers(tr, cnt, words):
    """Forget this round's listed links."""
    listed, order, reset, bits = tr.listed, tr.order, tr.reset, tr.bits
    for i in range(cnt[TRIGGERED_LEN]):
        link = order[i]
        listed[link] = 0
        reset[link] = 0
        for w in range(words):
            bits[link, w] = 0
    cnt[TRIGGERED_LEN] = 0


def _sort_links(a, n, mark):
    """Sort the distinct links ``a[:n]`` (``mark[l]`` set for each) in place."""
    if n < 48:
        for i in range(1, n):
            x = a[i]
            j = i - 1
            while j >= 0 and a[j] > x:
                a[j + 1] = a[j]
                j -= 1
            a[j + 1] = x
    else:
        j = 0
        for link in range(len(mark)):
            if mark[link]:
                a[j] = link
                j += 1


# ---------------------------------------------------------------------------- set-up
def _memory(g, p, has, want):
    """The neighbour memory table at the start (``want`` loses what is held, in place)."""
    W, S = p.words, p.n_subs
    rank_dom = g.rank_dom
    nd = max(g.n_doms, 1)
    cov = has.copy()
    dcov = np.zeros((nd, W), dtype=np.int64)
    dwant = np.zeros((nd, W), dtype=np.int64)
    dneed = np.zeros(nd * S, dtype=np.int64)
    for r in range(g.n_ranks):
        kd = rank_dom[r]
        for w in range(W):
            want[r, w] &= ~has[r, w]
            dcov[kd, w] |= cov[r, w]
            dwant[kd, w] |= want[r, w]
            x = want[r, w]
            while x:
                low = x & -x
                dneed[kd * S + w * WORD + _low_bit(low)] += 1
                x ^= low
    return Memory(
        has,
        cov,
        want,
        dcov,
        dwant,
        dneed,
        dwant.copy(),
        np.full(g.n_ranks * S, -1, dtype=np.int64),
        np.zeros(g.n_ranks, dtype=np.int64),
    )


def _allocate(g, p, max_ops):
    """Empty events, operations, triggers, scratch buffers and router search."""
    m, W, DW, nd = g.n_links, p.words, g.dom_words, max(g.n_doms, 1)
    i64, f64 = np.int64, np.float64
    heap = m + 4 * max_ops + 1
    ev = Events(
        np.zeros(heap, f64),
        np.zeros(heap, i64),
        np.zeros(heap, i64),
        np.zeros(heap, i64),
        np.zeros(heap, f64),
    )
    ops = Ops(
        np.zeros(max_ops, i64),
        np.zeros(max_ops, i64),
        np.zeros(max_ops, i64),
        np.zeros(max_ops, f64),
        np.zeros(max_ops, f64),
        np.zeros(max_ops, i64),
        np.zeros(max_ops + 1, i64),
        np.zeros(2 * max_ops, i64),
    )
    tr = Triggers(
        np.zeros(m, np.uint8),
        np.zeros(m, np.uint8),
        np.zeros((m, W), i64),
        np.zeros(m, i64),
        np.zeros((m, g.max_queues), np.uint8),
        np.zeros(m, np.uint8),
        np.zeros(m, i64),
    )
    q = g.max_queues
    sc = Scratch(
        np.zeros(W, i64),
        np.zeros(W, i64),
        np.zeros(W, i64),
        np.zeros(W, i64),
        np.zeros(W, i64),
        np.zeros(W, i64),
        np.zeros((q, W), i64),
        np.zeros(q, f64),
        np.zeros(q, f64),
        np.zeros(m, i64),
        np.zeros(g.max_route, i64),
        np.zeros(DW, i64),
        np.zeros(DW, i64),
        np.zeros(DW, i64),
    )
    e = g.max_entries
    se = Search(
        np.zeros(g.n_nodes, i64),
        np.zeros(g.n_nodes, i64),
        np.zeros(e, f64),
        np.zeros(e, i64),
        np.zeros(e, f64),
        np.zeros(e, i64),
        np.zeros(e, i64),
        np.zeros((e, g.max_route), i64),
        np.zeros(e, i64),
        np.zeros(nd, f64),
        np.zeros(nd, i64),
        np.zeros(DW, i64),
        np.array([-1, 0, 0], dtype=i64),
        np.zeros(1, f64),
    )
    return ev, ops, tr, sc, se


def _grow(a, cap):
    """A copy of 1-d ``a`` with room for ``cap`` elements."""
    out = np.zeros(cap, dtype=a.dtype)
    out[: len(a)] = a
    return out


def _room_needed(ev, ops, cnt, max_route):
    """Whether this round's decisions might not fit the heaps or the operation columns.

    Each listed link commits at most one stream of at most ``max_route`` links."""
    tn = cnt[TRIGGERED_LEN]
    return (
        cnt[HEAP_LEN] + tn * (max_route + 1) + 1 > len(ev.time)
        or cnt[STARTS_LEN] + tn * 2 * max_route + 1 > len(ev.starts)
        or cnt[OPS_LEN] + tn + 1 > len(ops.src)
        or cnt[ROUTE_LEN] + tn * max_route > len(ops.route_links)
    )


def _make_room(ev, ops, cnt, max_route):
    """Grow (doubling) the heaps and operation columns for this round's decisions."""
    tn = cnt[TRIGGERED_LEN]
    need = cnt[HEAP_LEN] + tn * (max_route + 1) + 1
    if need > len(ev.time):
        cap = max(2 * len(ev.time), need)
        ev = Events(
            _grow(ev.time, cap),
            _grow(ev.kind, cap),
            _grow(ev.seq, cap),
            _grow(ev.arg, cap),
            ev.starts,
        )
    need = cnt[STARTS_LEN] + tn * 2 * max_route + 1
    if need > len(ev.starts):
        ev = Events(
            ev.time, ev.kind, ev.seq, ev.arg, _grow(ev.starts, max(2 * len(ev.starts), need))
        )
    need = cnt[OPS_LEN] + tn + 1
    if need > len(ops.src):
        cap = max(2 * len(ops.src), need)
        ops = Ops(
            _grow(ops.src, cap),
            _grow(ops.dst, cap),
            _grow(ops.sub, cap),
            _grow(ops.start, cap),
            _grow(ops.finish, cap),
            _grow(ops.dep, cap),
            _grow(ops.route_ptr, cap + 1),
            ops.route_links,
        )
    need = cnt[ROUTE_LEN] + tn * max_route
    if need > len(ops.route_links):
        ops = Ops(
            ops.src,
            ops.dst,
            ops.sub,
            ops.start,
            ops.finish,
            ops.dep,
            ops.route_ptr,
            _grow(ops.route_links, max(2 * len(ops.route_links), need)),
        )
    return ev, ops


# ---------------------------------------------------------------------------- router search
def _entry_less(se, i, j):
    """Order of router-search entries: (cost, node, arrival, chain, free)."""
    cost, node, arrival, length, chain = se.cost, se.node, se.arrival, se.length, se.chain
    free = se.free
    if cost[i] != cost[j]:
        return cost[i] < cost[j]
    if node[i] != node[j]:
        return node[i] < node[j]
    if arrival[i] != arrival[j]:
        return arrival[i] < arrival[j]
    li, lj = length[i], length[j]
    for q in range(min(li, lj)):
        if chain[i, q] != chain[j, q]:
            return chain[i, q] < chain[j, q]
    if li != lj:
        return li < lj
    return free[i] < free[j]


def _entry_pop(se, hn):
    """Remove the least entry of the search heap (``hn`` entries); returns it."""
    h = se.heap
    e = h[0]
    hn -= 1
    h[0] = h[hn]
    i = 0
    while True:
        c = 2 * i + 1
        if c >= hn:
            break
        if c + 1 < hn and _entry_less(se, h[c + 1], h[c]):
            c += 1
        if not _entry_less(se, h[c], h[i]):
            break
        h[i], h[c] = h[c], h[i]
        i = c
    return e


def _entry_push(se, hn, k):
    """Add entry ``k`` to the search heap holding ``hn`` entries."""
    h = se.heap
    i = hn
    h[i] = k
    while i > 0:
        parent = (i - 1) >> 1
        if not _entry_less(se, h[i], h[parent]):
            break
        h[i], h[parent] = h[parent], h[i]
        i = parent


def _relax_entries(g, links, se, eps, e, y):
    """Datacenter entries out of node ``y`` reached by entry ``e``: least cost, and free."""
    entry_ptr, entry_link, link_dst_dom = g.entry_ptr, g.entry_link, g.link_dst_dom
    free_at, delta, alpha = links.free, links.delta, links.alpha
    best_cost, best_free = se.best_cost, se.best_free
    cost, ty, fr = se.cost[e], se.arrival[e], se.free[e]
    lim = _round_limit(ty, eps)
    for q in range(entry_ptr[y], entry_ptr[y + 1]):
        l2 = entry_link[q]
        kd = link_dst_dom[l2]
        fa = free_at[l2]
        if fa > lim:  # must wait: never a free entry
            c2 = cost + (fa - ty) + delta[l2] + alpha[l2]
            if c2 < best_cost[kd]:
                best_cost[kd] = c2
                best_free[kd] = 0
        else:  # (cost + 0.0 == cost: same sum as waiting 0)
            c2 = cost + delta[l2] + alpha[l2]
            old = best_cost[kd]
            if c2 < old:
                best_cost[kd] = c2
                best_free[kd] = fr
            elif fr != 0 and c2 == old:
                best_free[kd] = 1


def _relax_hops(g, links, se, eps, e, y, stamp, ne, hn):
    """Entries for the unlabelled switches/routers after ``y``; returns (entries, heap size)."""
    hop_ptr, hop_link, link_dst = g.hop_ptr, g.hop_link, g.link_dst
    free_at, delta, alpha = links.free, links.delta, links.alpha
    label, costs, node, arrival = se.label, se.cost, se.node, se.arrival
    frees, lengths, chain = se.free, se.length, se.chain
    cost, ty, fr, length = costs[e], arrival[e], frees[e], lengths[e]
    lim = _round_limit(ty, eps)
    for q in range(hop_ptr[y], hop_ptr[y + 1]):
        l2 = hop_link[q]
        v = link_dst[l2]
        if label[v] == stamp:
            continue
        fa = free_at[l2]
        wait = fa - ty if fa > lim else 0.0
        k = ne
        ne += 1
        costs[k] = cost + wait + delta[l2] + alpha[l2]
        node[k] = v
        arrival[k] = ty + alpha[l2]
        frees[k] = 1 if (fr != 0 and wait == 0.0) else 0
        for i in range(length):
            chain[k, i] = chain[e, i]
        chain[k, length] = l2
        lengths[k] = length + 1
        _entry_push(se, hn, k)
        hn += 1
    return ne, hn


def _reach(g, p, links, se, cnt, x, ta):
    """Cut-through reach of switch/router ``x`` for a head arriving at ``ta`` (memoised)."""
    memo, memo_arrival, ok = se.memo, se.memo_arrival, se.ok
    label, label_entry, node = se.label, se.label_entry, se.node
    best_cost, best_free = se.best_cost, se.best_free
    if memo[MEMO_NODE] == x and memo_arrival[0] == ta and memo[MEMO_GEN] == cnt[ROUTER_GEN]:
        return
    stamp = memo[MEMO_STAMP] + 1
    for kd in range(g.n_doms):
        best_cost[kd] = np.inf
        best_free[kd] = 0
    se.cost[0] = 0.0
    node[0] = x
    se.arrival[0] = ta
    se.free[0] = 1
    se.length[0] = 0
    se.heap[0] = 0
    ne, hn = 1, 1
    while hn > 0:
        e = _entry_pop(se, hn)
        hn -= 1
        y = node[e]
        if label[y] == stamp:
            continue
        label[y] = stamp
        label_entry[y] = e
        _relax_entries(g, links, se, p.eps, e, y)
        ne, hn = _relax_hops(g, links, se, p.eps, e, y, stamp, ne, hn)
    for w in range(g.dom_words):
        ok[w] = 0
    for kd in range(g.n_doms):
        if best_free[kd]:
            ok[kd // WORD] |= np.int64(1) << (kd % WORD)
    memo[MEMO_NODE] = x
    memo[MEMO_GEN] = cnt[ROUTER_GEN]
    memo[MEMO_STAMP] = stamp
    memo_arrival[0] = ta


# ---------------------------------------------------------------------------- decisions
def _pick(g, links, sc, cnt, words, lid, nq, mine, t):
    """Algorithm 1 over the queues ``sc.rows`` towards one node: what queue ``mine`` sends.

    Queue ``mine`` is link ``lid``'s, holding ``sc.row``. It sends the first subchunk only it
    holds, else: duplicates go, one by one in queue order, to the queue with the lowest
    ``T + delta`` (T = the link's backlog plus the unique subchunks queued before), and the
    first that goes to this queue is sent; -1 when none does."""
    rows, row, once, twice = sc.rows, sc.row, sc.once, sc.twice
    backlog, delta_q = sc.backlog, sc.delta_q
    queue_link, free, delta = g.queue_link, links.free, links.delta
    for w in range(words):
        o = 0
        tw = 0
        for i in range(nq):
            r = rows[i, w]
            tw |= o & r
            o |= r
        once[w] = o
        twice[w] = tw
    for w in range(words):
        uq = row[w] & ~twice[w]
        if uq:
            return w * WORD + _low_bit(uq)
    cnt[SS_DUPLICATES] += 1
    base = g.queue_ptr[g.link_dst[lid]]
    for i in range(nq):
        q = queue_link[base + i]
        delta_q[i] = delta[q]
        fq = free[q] - t
        c = 0
        for w in range(words):
            c += _pop_count(rows[i, w] & (once[w] & ~twice[w]))
        backlog[i] = (0.0 if 0.0 > fq else fq) + delta_q[i] * c
    for w in range(words):
        x = twice[w]
        while x:
            low = x & -x
            x ^= low
            best_i = -1
            best_c = np.inf
            for i in range(nq):
                if rows[i, w] & low:
                    c = backlog[i] + delta_q[i]
                    if c < best_c:
                        best_i = i
                        best_c = c
            backlog[best_i] += delta_q[best_i]
            if best_i == mine:
                return w * WORD + _low_bit(low)
    return -1


def _queues(g, mem, sc, words, d, nq):
    """Algorithm 1's queues towards node ``d`` (what each predecessor holds of ``sc.useful``)."""
    queue_rank, has, useful, rows = g.queue_rank, mem.has, sc.useful, sc.rows
    base = g.queue_ptr[d]
    for i in range(nq):
        r = queue_rank[base + i]
        for w in range(words):
            rows[i, w] = has[r, w] & useful[w]


def _schedule_to_gpu(g, p, links, mem, tr, sc, cnt, lid, u, t):
    """Subchunk Scheduling for GPU ``u``'s idle link ``lid`` into a GPU: the subchunk, or -1."""
    W = p.words
    has, cov, want, dneed_bits = mem.has, mem.cov, mem.want, mem.dneed_bits
    useful, row, bits = sc.useful, sc.row, tr.bits
    queue_rank = g.queue_rank
    v = g.link_dst_rank[lid]
    kd = g.rank_dom[v]
    reset = tr.reset[lid]
    found = False
    for w in range(W):
        # neighbour memory table of v: what it (or, for multicast relays, someone in its
        # datacenter) wants, minus what it holds or is receiving
        uw = (want[v, w] | dneed_bits[kd, w]) & ~cov[v, w]
        useful[w] = uw
        rw = has[u, w] & uw
        row[w] = rw
        if rw & (-1 if reset else bits[lid, w]):
            found = True
    if not found:
        return -1
    cnt[SS_CALLS] += 1
    d = g.link_dst[lid]
    base = g.queue_ptr[d]
    nq = g.queue_ptr[d + 1] - base
    for w in range(W):  # the common case: a subchunk no other queue holds
        once = 0
        twice = 0
        for i in range(nq):
            j = has[queue_rank[base + i], w] & useful[w]
            twice |= once & j
            once |= j
        uq = row[w] & ~twice
        if uq:
            return w * WORD + _low_bit(uq)
    _queues(g, mem, sc, W, d, nq)
    return _pick(g, links, sc, cnt, W, lid, nq, g.queue_pos[lid], t)


def _worth_router(g, p, mem, tr, lid, u):
    """Whether GPU ``u`` holds something a datacenter beyond the router at ``lid``'s head lacks.

    Only what was triggered on ``lid`` counts, unless it is listed fully."""
    has, dwant, dcov, bits, node_doms = mem.has, mem.dwant, mem.dcov, tr.bits, g.node_doms
    d = g.link_dst[lid]
    reset = tr.reset[lid]
    for w in range(p.words):
        hw = has[u, w] if reset else bits[lid, w] & has[u, w]
        if not hw:
            continue
        lack = 0
        for kd in range(g.n_doms):
            if _bit_at(node_doms, d, kd):
                lack |= dwant[kd, w] & ~dcov[kd, w]
        if hw & lack:
            return True
    return False


def _useful_net(g, p, links, mem, sc, se, cnt, d, ta):
    """What is worth entering switch/router ``d`` for a head arriving at ``ta``.

    Into ``sc.useful``: the subchunks some datacenter lacks that can be entered now along its
    best path; into ``sc.row``: those of them in ``sc.held``. Returns (what to wait for if
    nothing is sent, busy first hops listed in ``sc.busy``, whether ``sc.row`` is non-empty)."""
    W, DW = p.words, g.dom_words
    node_doms, link_doms, out_ptr, out_link = g.node_doms, g.link_doms, g.out_ptr, g.out_link
    dwant, dcov, free = mem.dwant, mem.dcov, links.free
    held, useful, row = sc.held, sc.useful, sc.row
    needy, first, busy = sc.needy, sc.first, sc.busy
    any_needy = False
    for x in range(DW):
        needy[x] = 0
    for kd in range(g.n_doms):
        if _bit_at(node_doms, d, kd):
            for w in range(W):
                if dwant[kd, w] & ~dcov[kd, w] & held[w]:
                    needy[kd // WORD] |= np.int64(1) << (kd % WORD)
                    any_needy = True
                    break
    if not any_needy:
        return WAIT_RECEPTION, 0, False
    lim = _round_limit(ta, p.eps)
    for x in range(DW):
        first[x] = 0
    n_busy = 0
    for q in range(out_ptr[d], out_ptr[d + 1]):
        l2 = out_link[q]
        if free[l2] <= lim:
            for x in range(DW):
                first[x] |= link_doms[l2, x]
        elif _row_meets(link_doms, l2, needy, DW):
            busy[n_busy] = l2
            n_busy += 1
    if not _words_meet(first, needy, DW):
        return WAIT_BUSY, n_busy, False
    _reach(g, p, links, se, cnt, d, ta)
    ok = se.ok
    found = False
    for w in range(W):
        out = 0
        for kd in range(g.n_doms):
            if _bit_in(ok, kd):
                out |= dwant[kd, w] & ~dcov[kd, w]
        useful[w] = out
        rw = held[w] & out
        row[w] = rw
        if rw:
            found = True
    return WAIT_ANY, n_busy, found


def _best_entry(g, p, links, mem, sc, se, b):
    """LWNF's last hop for subchunk ``b``: (link, its node) of least f, or -1.

    Candidates: free entries into a GPU of a datacenter in ``sc.dmiss`` that does not cover
    ``b``, after a free path from the router searched."""
    entry_ptr, entry_link = g.entry_ptr, g.entry_link
    link_dst_rank, link_dst_dom = g.link_dst_rank, g.link_dst_dom
    free_at, delta, alpha = links.free, links.delta, links.alpha
    cov, inflight, dmiss = mem.cov, mem.inflight, sc.dmiss
    label, label_entry, costs, arrival, frees = (
        se.label,
        se.label_entry,
        se.cost,
        se.arrival,
        se.free,
    )
    ch = b % p.n_chunks
    w = b // WORD
    bit = np.int64(1) << (b % WORD)
    stamp = se.memo[MEMO_STAMP]
    best, best_f, best_y = -1, np.inf, -1
    for y in g.net_nodes:
        if label[y] != stamp:
            continue
        e = label_entry[y]
        if not frees[e]:
            continue
        cost, ty = costs[e], arrival[e]
        lim = _round_limit(ty, p.eps)
        for q in range(entry_ptr[y], entry_ptr[y + 1]):
            l2 = entry_link[q]
            if free_at[l2] > lim:
                continue
            r = link_dst_rank[l2]
            if not _bit_in(dmiss, link_dst_dom[l2]) or cov[r, w] & bit:
                continue
            buffered = inflight[r] * delta[l2]
            held = 0
            for j in range(p.subchunks):
                held += _bit_at(cov, r, j * p.n_chunks + ch)
            progress = held / p.subchunks * delta[l2]
            f = cost + delta[l2] + alpha[l2] + W_QUEUE * buffered + W_PROGRESS * progress
            if f < best_f:
                best, best_f, best_y = l2, f, y
    return best, best_y


def _forward(g, p, links, mem, sc, se, cnt, lid, ta, b):
    """Load-Aware Neighbor Forwarding of subchunk ``b`` into the router at ``lid``'s head.

    Returns the route's length, the route in ``sc.chain``, or -1 when the best way into every
    datacenter lacking ``b`` would have to wait (a bufferless router refuses)."""
    dwant, dcov, dmiss, ok, chain = mem.dwant, mem.dcov, sc.dmiss, se.ok, sc.chain
    _reach(g, p, links, se, cnt, g.link_dst[lid], ta)
    cnt[LWNF] += 1
    w = b // WORD
    bit = np.int64(1) << (b % WORD)
    any_miss = False
    for x in range(g.dom_words):
        dmiss[x] = 0
    for kd in range(g.n_doms):
        if _bit_in(ok, kd) and dwant[kd, w] & ~dcov[kd, w] & bit:
            dmiss[kd // WORD] |= np.int64(1) << (kd % WORD)
            any_miss = True
    best = -1
    best_y = -1
    if any_miss:
        best, best_y = _best_entry(g, p, links, mem, sc, se, b)
    if best < 0:
        cnt[LWNF_REFUSED] += 1
        return -1
    e = se.label_entry[best_y]
    length = se.length[e]
    route = se.chain
    chain[0] = lid
    for i in range(length):
        chain[1 + i] = route[e, i]
    chain[1 + length] = best
    return length + 2


def _wait(g, tr, sc, cnt, lid, why, n_busy):
    """Register what GPU link ``lid`` into a router, which sent nothing, waits for.

    The busy first hops it needs, any router link, or (``WAIT_RECEPTION``) a reception."""
    blocked, blocked_list, watch, busy = tr.blocked, tr.blocked_list, tr.watch, sc.busy
    if why == WAIT_ANY:
        if not blocked[lid]:
            blocked[lid] = 1
            blocked_list[cnt[BLOCKED_LEN]] = lid
            cnt[BLOCKED_LEN] += 1
    elif why == WAIT_BUSY:
        pos = g.queue_pos[lid]
        for i in range(n_busy):
            watch[busy[i], pos] = 1


def _schedule_to_router(g, p, links, mem, tr, sc, se, cnt, lid, u, t):
    """Subchunk Scheduling for GPU ``u``'s idle link ``lid`` into a switch/router.

    LWNF chooses the next hops. Returns (route length, subchunk), the route in ``sc.chain``;
    length -1 when it sends nothing (it then waits). A subchunk LWNF cannot place is excluded
    and the next one tried (at most 4 attempts)."""
    W = p.words
    has, excluded, held, rows, row = mem.has, sc.excluded, sc.held, sc.rows, sc.row
    d = g.link_dst[lid]
    ta = t + links.alpha[lid]
    nq = g.queue_ptr[d + 1] - g.queue_ptr[d]
    mine = g.queue_pos[lid]
    for w in range(W):
        excluded[w] = 0
    why = WAIT_ANY
    n_busy = 0
    b = -1
    for _attempt in range(4):
        cnt[SS_CALLS] += 1
        for w in range(W):
            held[w] = has[u, w] & ~excluded[w]
        # P = GPUs with a queue towards d; D = the datacenters d can enter now lacking it
        why, n_busy, found = _useful_net(g, p, links, mem, sc, se, cnt, d, ta)
        if not found:
            break
        _queues(g, mem, sc, W, d, nq)
        for w in range(W):
            rows[mine, w] = row[w]
        b = _pick(g, links, sc, cnt, W, lid, nq, mine, t)
        if b < 0:
            break
        length = _forward(g, p, links, mem, sc, se, cnt, lid, ta, b)
        if length > 0:
            return length, b
        excluded[b // WORD] |= np.int64(1) << (b % WORD)
        why = WAIT_ANY
    _wait(g, tr, sc, cnt, lid, why, n_busy)
    return -1, b


# ---------------------------------------------------------------------------- commit
def _reserve(p, links, ev, cnt, chain, length, t):
    """Reserve a stream's links from ``t`` and schedule its events: (start, arrival, duration).

    A link counts as free within ``eps`` of the round's time, so a hop may find its link
    still busy for up to ``eps``; the stream then starts that much later (all its hops
    shifted alike). Lateness below ``noise * t`` is float rounding of equal times."""
    free, alpha, bw = links.free, links.alpha, links.bw
    if length == 1:  # GPU -> GPU: one hop, starting now
        last = chain[0]
        if free[last] - t > p.noise * t:
            t = free[last]
        dur = p.sub_bytes / bw[last]
        free[last] = t + dur
        _push_event(ev, cnt, t + dur, TX_END, last)
        s = t + alpha[last]
        _push_start(ev, cnt, s)  # reception start
        cnt[EVENTS + TX_START] += 1
        cnt[EVENTS + RX_START] += 1
        return t, s, dur
    cnt[ROUTER_GEN] += 1  # links out of switches/routers change: the reach memo is stale
    slowest = bw[chain[0]]
    for i in range(1, length):
        if bw[chain[i]] < slowest:
            slowest = bw[chain[i]]
    dur = p.sub_bytes / slowest
    s = t
    shift = 0.0
    for i in range(length):
        late = free[chain[i]] - s
        if late > shift and late > p.noise * s:
            shift = late
        s += alpha[chain[i]]
    if shift > 0.0:
        t = t + shift
    s = t
    for i in range(length):
        link = chain[i]
        free[link] = s + dur
        cnt[EVENTS + TX_START] += 1
        if s != t:  # the first hop starts now, with this round's decisions
            _push_start(ev, cnt, s)
        _push_event(ev, cnt, s + dur, TX_END, link)
        s += alpha[link]
        _push_start(ev, cnt, s)  # reception start
        cnt[EVENTS + RX_START] += 1
    return t, s, dur


def _record(ops, cnt, chain, length, u, v, b, t, fin, dep):
    """Append operation (GPU ``u`` -> ``v``, subchunk ``b``, route ``chain[:length]``)."""
    op = cnt[OPS_LEN]
    route_ptr, route_links = ops.route_ptr, ops.route_links
    ops.src[op] = u
    ops.dst[op] = v
    ops.sub[op] = b
    ops.start[op] = t
    ops.finish[op] = fin
    ops.dep[op] = dep
    nr = cnt[ROUTE_LEN]
    for i in range(length):
        route_links[nr + i] = chain[i]
    cnt[ROUTE_LEN] = nr + length
    route_ptr[op + 1] = nr + length
    cnt[OPS_LEN] = op + 1


def _commit(g, p, links, mem, ev, ops, cnt, chain, length, u, b, t):
    """Start stream ``chain[:length]`` (GPU ``u`` sends subchunk ``b`` at ``t``) and record it.

    Reserves its links, schedules its events and updates the neighbour memory table."""
    cov, dcov, want, dneed, dneed_bits = mem.cov, mem.dcov, mem.want, mem.dneed, mem.dneed_bits
    S = p.n_subs
    v = g.link_dst_rank[chain[length - 1]]
    t, s, dur = _reserve(p, links, ev, cnt, chain, length, t)
    fin = s + dur
    _push_event(ev, cnt, fin, RX_END, cnt[OPS_LEN])
    _record(ops, cnt, chain, length, u, v, b, t, fin, mem.via[u * S + b])
    mem.inflight[v] += 1
    w = b // WORD
    bit = np.int64(1) << (b % WORD)
    if not cov[v, w] & bit:
        cov[v, w] |= bit
        kd = g.rank_dom[v]
        dcov[kd, w] |= bit
        if want[v, w] & bit:
            i = kd * S + b
            dneed[i] -= 1
            if dneed[i] == 0:
                dneed_bits[kd, w] &= ~bit


def _decide(g, p, links, mem, ev, ops, tr, sc, se, cnt, t):
    """Decisions after a round at ``t``: each idle listed GPU link, in link order, sends."""
    order, free, chain = tr.order, links.free, sc.chain
    link_src_rank, link_dst_gpu = g.link_src_rank, g.link_dst_gpu
    n = cnt[TRIGGERED_LEN]
    _sort_links(order, n, tr.listed)
    lim = _round_limit(t, p.eps)
    for i in range(n):
        lid = order[i]
        if free[lid] > lim:
            continue
        u = link_src_rank[lid]
        if link_dst_gpu[lid]:
            b = _schedule_to_gpu(g, p, links, mem, tr, sc, cnt, lid, u, t)
            if b >= 0:
                chain[0] = lid
                _commit(g, p, links, mem, ev, ops, cnt, chain, 1, u, b, t)
        elif _worth_router(g, p, mem, tr, lid, u):
            length, b = _schedule_to_router(g, p, links, mem, tr, sc, se, cnt, lid, u, t)
            if length > 0:
                _commit(g, p, links, mem, ev, ops, cnt, chain, length, u, b, t)
    _clear_triggers(tr, cnt, p.words)


# ---------------------------------------------------------------------------- rounds
def _link_freed(g, tr, cnt, a):
    """Transmission completion on link ``a``: list the GPU links it may unblock."""
    listed, order, reset = tr.listed, tr.order, tr.reset
    watch, blocked, blocked_list = tr.watch, tr.blocked, tr.blocked_list
    queue_ptr, queue_link = g.queue_ptr, g.queue_link
    if g.link_src_gpu[a]:
        _trigger(listed, order, reset, cnt, a, True)
        return
    x = g.link_src[a]
    base = queue_ptr[x]
    for i in range(queue_ptr[x + 1] - base):
        if watch[a, i]:
            watch[a, i] = 0
            _trigger(listed, order, reset, cnt, queue_link[base + i], True)
    for i in range(cnt[BLOCKED_LEN]):
        link = blocked_list[i]
        blocked[link] = 0
        _trigger(listed, order, reset, cnt, link, True)
    cnt[BLOCKED_LEN] = 0


def _received(g, p, mem, ops, tr, cnt, op):
    """Reception completion of operation ``op``: the receiver holds and may forward it.

    Its out-links are listed for just that subchunk."""
    listed, order, reset, bits = tr.listed, tr.order, tr.reset, tr.bits
    gpu_out_ptr, gpu_out = g.gpu_out_ptr, g.gpu_out
    v = ops.dst[op]
    b = ops.sub[op]
    w = b // WORD
    bit = np.int64(1) << (b % WORD)
    mem.has[v, w] |= bit
    mem.via[v * p.n_subs + b] = op
    mem.inflight[v] -= 1
    for q in range(gpu_out_ptr[v], gpu_out_ptr[v + 1]):
        link = gpu_out[q]
        _trigger(listed, order, reset, cnt, link, False)
        if not reset[link]:
            bits[link, w] |= bit


def _round(g, p, mem, ev, ops, tr, cnt):
    """Apply every event within ``eps`` of the earliest pending one; returns the round's time."""
    times, kinds, args, starts = ev.time, ev.kind, ev.arg, ev.starts
    now = times[0] if cnt[HEAP_LEN] > 0 else np.inf
    if cnt[STARTS_LEN] > 0 and starts[0] < now:
        now = starts[0]
    lim = _round_limit(now, p.eps)
    while cnt[STARTS_LEN] > 0 and starts[0] <= lim:
        _pop_start(ev, cnt)
    while cnt[HEAP_LEN] > 0 and times[0] <= lim:
        i = _pop_event(ev, cnt)
        kind = kinds[i]
        cnt[EVENTS + kind] += 1  # a completion (starts are counted when scheduled)
        if kind == TX_END:
            _link_freed(g, tr, cnt, args[i])
        else:
            _received(g, p, mem, ops, tr, cnt, args[i])
    cnt[ROUNDS] += 1
    return now


def _missing(mem, words):
    """Whether some rank still lacks (and is not receiving) something it wants."""
    want, cov = mem.want, mem.cov
    for r in range(want.shape[0]):
        for w in range(words):
            if want[r, w] & ~cov[r, w]:
                return True
    return False


def _next_free(free, now):
    """The earliest time after ``now`` a link frees (inf: none)."""
    later = np.inf
    for link in range(len(free)):
        if free[link] > now and free[link] < later:
            later = free[link]
    return later


def _rounds(g, p, links, mem, ev, ops, tr, sc, se, cnt, now):
    """Decide and run rounds from ``now``: (time, whether the arrays need more room).

    Runs until the plan is complete or stalled, or until a round's decisions might need more
    room than the arrays have."""
    while True:
        if cnt[TRIGGERED_LEN] > 0:
            if _room_needed(ev, ops, cnt, g.max_route):
                return now, True
            _decide(g, p, links, mem, ev, ops, tr, sc, se, cnt, now)
        if cnt[HEAP_LEN] > 0 or cnt[STARTS_LEN] > 0:
            now = _round(g, p, mem, ev, ops, tr, cnt)
            continue
        if not _missing(mem, p.words):
            return now, False
        # nothing in flight yet something is missing: retry from the next link freeing
        cnt[KICKS] += 1
        later = _next_free(links.free, now)
        if cnt[KICKS] > 2 and later == np.inf:
            cnt[STALLED] = 1
            return now, False
        if later != np.inf:
            now = later
        _trigger_all(g, tr, cnt)


def run_loop(g, p, links, has, want, max_ops):
    """The SCALE-CCL event loop: (counters, operations).

    ``links.free``, ``has`` and ``want`` are updated in place; ``max_ops`` is the room for
    operations to start with."""
    cnt = np.zeros(N_COUNTERS, dtype=np.int64)
    mem = _memory(g, p, has, want)
    ev, ops, tr, sc, se = _allocate(g, p, max_ops)
    # queued traffic (re-planning input) completes its transmission when the queue drains
    for link in range(g.n_links):
        if links.free[link] > 0:
            _push_event(ev, cnt, links.free[link], TX_END, link)
    _trigger_all(g, tr, cnt)
    now, grow = _rounds(g, p, links, mem, ev, ops, tr, sc, se, cnt, 0.0)
    while grow:
        ev, ops = _make_room(ev, ops, cnt, g.max_route)
        now, grow = _rounds(g, p, links, mem, ev, ops, tr, sc, se, cnt, now)
    n, nr = cnt[OPS_LEN], cnt[ROUTE_LEN]
    return cnt, Ops(
        ops.src[:n].copy(),
        ops.dst[:n].copy(),
        ops.sub[:n].copy(),
        ops.start[:n].copy(),
        ops.finish[:n].copy(),
        ops.dep[:n].copy(),
        ops.route_ptr[: n + 1].copy(),
        ops.route_links[:nr].copy(),
    )


# ---------------------------------------------------------------------------- compilation
#: The functions that allocate arrays; every other one is compiled without numba's reference
#: counting (numba's ``_nrt=False`` option): they only read and write arrays their callers own,
#: and with it each call would update the count of every array in the named tuples it is
#: passed (a hundred atomic updates per call, several times the loop's own work).
_ALLOCATING = ("run_loop", "_memory", "_allocate", "_grow", "_make_room")

_COMPILED: list = []


def numba_available() -> bool:
    """Whether numba can be imported."""
    try:
        import numba  # noqa: F401
    except ImportError:
        return False
    return True


def compiled_run_loop():
    """:func:`run_loop` compiled with numba, or :func:`run_loop` itself without numba.

    ``cache=True``: compiled once per machine, then loaded from numba's on-disk cache."""
    if not _COMPILED:
        try:
            from numba import njit
        except ImportError:
            _COMPILED.append(run_loop)
            return run_loop
        import types

        from numba.core.cpu import CPUTargetOptions

        uncounted = {"_nrt": False} if hasattr(CPUTargetOptions, "_nrt") else {}
        space = dict(globals())  # the compiled helpers resolve each other here
        for name, f in globals().items():
            if (
                not isinstance(f, types.FunctionType)
                or f.__module__ != __name__
                or name in ("numba_available", "compiled_run_loop")
            ):
                continue
            options = {} if name in _ALLOCATING else uncounted
            # nogil: a time limit's watchdog thread can still run during a long plan
            space[name] = njit(cache=True, nogil=True, **options)(
                types.FunctionType(f.__code__, space, f.__name__, f.__defaults__, f.__closure__)
            )
        _COMPILED.append(space["run_loop"])
    return _COMPILED[0]
