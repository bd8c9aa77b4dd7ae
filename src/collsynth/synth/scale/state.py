"""The SCALE-CCL loop's state: named tuples of arrays, their allocation and their growth.

numba passes named tuples of arrays (and named tuples of them) as they are, so the loop's state
is a handful of them, and :data:`State` holds them all. The steps that touch many parts (the
rounds, the decisions, the commit, the router search) take the one ``state`` argument; the
leaf steps take just the two or three tuples they work on. That split is deliberate: numba
compiles each function (and its calls) for the whole of every argument, so a ``state``
argument on every leaf as well about doubled the loop's one-off compile time, for no change in
its speed; as split, compiling takes about a fifth longer than with the former hand-threaded
argument lists (about 72 s of CPU against 59 s), and plans run as fast.

* :class:`~.tables.Graph` — the topology's tables (read only);
* :data:`Params` — scalars of the instance;
* :data:`Links` — per-link timing (``free`` is updated);
* :data:`Memory` — the neighbour memory table;
* :data:`Events` — the two event heaps;
* :data:`Ops` — the plan so far;
* :data:`Triggers` — links to reconsider this round and links waiting;
* :data:`Scratch` — per-decision buffers;
* :data:`Search` — the router Dijkstra;
* ``counters`` — an int64 array of counters and sizes, under the field names below.

Representation:

* subchunk ``j`` of chunk ``ch`` has the id ``b = j * n_chunks + ch`` (pipeline order); sets
  of subchunks are bit sets of ``words`` int64 words of 63 bits (the sign bit stays clear, so
  ``x & -x`` and shifts behave as on non-negative integers): ``b`` is bit ``b % 63`` of word
  ``b // 63``, and the lowest set bit is the first in queue order. Sets of datacenters are
  bit sets of ``dom_words`` words the same way;
* the heaps and the operation columns grow (doubling) before a round's decisions whenever
  they might not hold what the round can add (each triggered link commits at most once):
  :func:`room_needed`, :func:`make_room`.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from .bits import low_bit
from .tables import WORD

# event types, in processing order for co-timed completions
TX_END, RX_END, TX_START, RX_START = 0, 1, 2, 3

# fields of the counters array (int64)
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
MEMO_GEN = 1  # ``counters[ROUTER_GEN]`` when it was searched
MEMO_STAMP = 2  # label stamp of that search (labels of other stamps are stale)

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
        "covered",  # [rank, word]: held or being received (neighbour memory table)
        "want",  # [rank, word]: wanted and not held at the start
        "dom_covered",
        "dom_wanted",  # [datacenter, word]: union over its ranks
        "dom_needed",  # [datacenter * n_subs + b]: its ranks wanting b, not covered
        "dom_needed_bits",  # [datacenter, word]: the b with dom_needed > 0
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
        "queue_delta",  # per queue: T and delta
        "busy",  # busy first hops out of a router
        "chain",  # the route being built
        "needy",
        "first",
        "dom_missing",  # datacenter sets
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
State = namedtuple(
    "State",
    [
        "graph",  # Graph
        "params",  # Params
        "links",  # Links
        "memory",  # Memory
        "events",  # Events
        "ops",  # Ops
        "triggers",  # Triggers
        "scratch",  # Scratch
        "search",  # Search
        "counters",  # int64 array, fields above
    ],
)


def initial_memory(graph, params, has, want):
    """The neighbour memory table at the start (``want`` loses what is held, in place)."""
    W, S = params.words, params.n_subs
    rank_dom = graph.rank_dom
    nd = max(graph.n_doms, 1)
    covered = has.copy()
    dom_covered = np.zeros((nd, W), dtype=np.int64)
    dom_wanted = np.zeros((nd, W), dtype=np.int64)
    dom_needed = np.zeros(nd * S, dtype=np.int64)
    for r in range(graph.n_ranks):
        kd = rank_dom[r]
        for w in range(W):
            want[r, w] &= ~has[r, w]
            dom_covered[kd, w] |= covered[r, w]
            dom_wanted[kd, w] |= want[r, w]
            x = want[r, w]
            while x:
                low = x & -x
                dom_needed[kd * S + w * WORD + low_bit(low)] += 1
                x ^= low
    return Memory(
        has,
        covered,
        want,
        dom_covered,
        dom_wanted,
        dom_needed,
        dom_wanted.copy(),
        np.full(graph.n_ranks * S, -1, dtype=np.int64),
        np.zeros(graph.n_ranks, dtype=np.int64),
    )


def initial_state(graph, params, links, memory, max_ops):
    """The state at the start: empty events, operations, triggers, scratch buffers and router
    search (room for ``max_ops`` operations), zero counters."""
    m, W, DW, nd = graph.n_links, params.words, graph.dom_words, max(graph.n_doms, 1)
    i64, f64 = np.int64, np.float64
    heap = m + 4 * max_ops + 1
    events = Events(
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
    triggers = Triggers(
        np.zeros(m, np.uint8),
        np.zeros(m, np.uint8),
        np.zeros((m, W), i64),
        np.zeros(m, i64),
        np.zeros((m, graph.max_queues), np.uint8),
        np.zeros(m, np.uint8),
        np.zeros(m, i64),
    )
    q = graph.max_queues
    scratch = Scratch(
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
        np.zeros(graph.max_route, i64),
        np.zeros(DW, i64),
        np.zeros(DW, i64),
        np.zeros(DW, i64),
    )
    e = graph.max_entries
    search = Search(
        np.zeros(graph.n_nodes, i64),
        np.zeros(graph.n_nodes, i64),
        np.zeros(e, f64),
        np.zeros(e, i64),
        np.zeros(e, f64),
        np.zeros(e, i64),
        np.zeros(e, i64),
        np.zeros((e, graph.max_route), i64),
        np.zeros(e, i64),
        np.zeros(nd, f64),
        np.zeros(nd, i64),
        np.zeros(DW, i64),
        np.array([-1, 0, 0], dtype=i64),
        np.zeros(1, f64),
    )
    counters = np.zeros(N_COUNTERS, dtype=np.int64)
    return State(graph, params, links, memory, events, ops, triggers, scratch, search, counters)


def _grow(a, cap):
    """A copy of 1-d ``a`` with room for ``cap`` elements."""
    out = np.zeros(cap, dtype=a.dtype)
    out[: len(a)] = a
    return out


def room_needed(events, ops, counters, max_route):
    """Whether this round's decisions might not fit the heaps or the operation columns.

    Each listed link commits at most one stream of at most ``max_route`` links."""
    tn = counters[TRIGGERED_LEN]
    return (
        counters[HEAP_LEN] + tn * (max_route + 1) + 1 > len(events.time)
        or counters[STARTS_LEN] + tn * 2 * max_route + 1 > len(events.starts)
        or counters[OPS_LEN] + tn + 1 > len(ops.src)
        or counters[ROUTE_LEN] + tn * max_route > len(ops.route_links)
    )


def make_room(events, ops, counters, max_route):
    """The heaps and operation columns grown (doubling) for this round's decisions: (events,
    ops)."""
    tn = counters[TRIGGERED_LEN]
    need = counters[HEAP_LEN] + tn * (max_route + 1) + 1
    if need > len(events.time):
        cap = max(2 * len(events.time), need)
        events = Events(
            _grow(events.time, cap),
            _grow(events.kind, cap),
            _grow(events.seq, cap),
            _grow(events.arg, cap),
            events.starts,
        )
    need = counters[STARTS_LEN] + tn * 2 * max_route + 1
    if need > len(events.starts):
        events = Events(
            events.time,
            events.kind,
            events.seq,
            events.arg,
            _grow(events.starts, max(2 * len(events.starts), need)),
        )
    need = counters[OPS_LEN] + tn + 1
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
    need = counters[ROUTE_LEN] + tn * max_route
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
    return events, ops


def final_ops(ops, counters):
    """Copies of the operations recorded (the loop's output)."""
    n, nr = counters[OPS_LEN], counters[ROUTE_LEN]
    return Ops(
        ops.src[:n].copy(),
        ops.dst[:n].copy(),
        ops.sub[:n].copy(),
        ops.start[:n].copy(),
        ops.finish[:n].copy(),
        ops.dep[:n].copy(),
        ops.route_ptr[: n + 1].copy(),
        ops.route_links[:nr].copy(),
    )
