"""SCALE-CCL's event loop, written once over numpy arrays; compiled with numba when importable.

:func:`run_loop` is plain Python on numpy arrays, split into short steps over several modules:

* :mod:`.state` — the state (named tuples of arrays, one :data:`~.state.State` holding them),
  its allocation and growth, the counter fields;
* :mod:`.bits` — bit sets and co-timing;
* :mod:`.events` — the event heaps and the links listed for a round's decisions;
* :mod:`.search` — the router Dijkstra (cut-through reach);
* :mod:`.decisions` — Subchunk Scheduling (Algorithm 1) and Load-Aware Neighbor Forwarding;
* :mod:`.commit` — starting a decided stream;
* this module — rounds, the decisions after each, and the driver :func:`run_loop`.

:func:`.kernel.compiled_run_loop` compiles them all as one group with numba (``engine="numba"``
of :func:`.algo.plan`); ``engine="python"`` runs the same functions uncompiled, so tests check
that both give the same plan, bit for bit.

A round takes every event within ``eps`` of the earliest pending one (1 fs, relative beyond
1 s), applies the completions, then lets the GPU links they touched decide, in link order.
Every floating-point expression is evaluated in one fixed order (no ``fastmath``), so the
compiled and uncompiled runs give identical plans.
"""

from __future__ import annotations

import numpy as np

from .bits import round_limit
from .commit import commit
from .decisions import schedule_to_gpu, schedule_to_router, worth_router
from .events import (
    clear_triggers,
    pop_event,
    pop_start,
    push_event,
    sort_links,
    trigger,
    trigger_all,
)
from .state import (
    BLOCKED_LEN,
    EVENTS,
    HEAP_LEN,
    KICKS,
    ROUNDS,
    STALLED,
    STARTS_LEN,
    TRIGGERED_LEN,
    TX_END,
    State,
    final_ops,
    initial_memory,
    initial_state,
    make_room,
    room_needed,
)
from .tables import WORD


def _decide(state, t):
    """Decisions after a round at ``t``: each idle listed GPU link, in link order, sends."""
    graph, triggers, counters = state.graph, state.triggers, state.counters
    order, free, chain = triggers.order, state.links.free, state.scratch.chain
    link_src_rank, link_dst_gpu = graph.link_src_rank, graph.link_dst_gpu
    n = counters[TRIGGERED_LEN]
    sort_links(order, n, triggers.listed)
    lim = round_limit(t, state.params.eps)
    for i in range(n):
        lid = order[i]
        if free[lid] > lim:
            continue
        u = link_src_rank[lid]
        if link_dst_gpu[lid]:
            b = schedule_to_gpu(state, lid, u, t)
            if b >= 0:
                chain[0] = lid
                commit(state, 1, u, b, t)
        elif worth_router(graph, state.memory, triggers, state.params.words, lid, u):
            length, b = schedule_to_router(state, lid, u, t)
            if length > 0:
                commit(state, length, u, b, t)
    clear_triggers(triggers, counters, state.params.words)


def _link_freed(graph, triggers, counters, a):
    """Transmission completion on link ``a``: list the GPU links it may unblock."""
    listed, order, reset = triggers.listed, triggers.order, triggers.reset
    watch, blocked, blocked_list = triggers.watch, triggers.blocked, triggers.blocked_list
    queue_ptr, queue_link = graph.queue_ptr, graph.queue_link
    if graph.link_src_gpu[a]:
        trigger(listed, order, reset, counters, a, True)
        return
    x = graph.link_src[a]
    base = queue_ptr[x]
    for i in range(queue_ptr[x + 1] - base):
        if watch[a, i]:
            watch[a, i] = 0
            trigger(listed, order, reset, counters, queue_link[base + i], True)
    for i in range(counters[BLOCKED_LEN]):
        link = blocked_list[i]
        blocked[link] = 0
        trigger(listed, order, reset, counters, link, True)
    counters[BLOCKED_LEN] = 0


def _received(state, op):
    """Reception completion of operation ``op``: the receiver holds and may forward it.

    Its out-links are listed for just that subchunk."""
    graph, memory, triggers, counters = state.graph, state.memory, state.triggers, state.counters
    listed, order, reset, bits = triggers.listed, triggers.order, triggers.reset, triggers.bits
    gpu_out_ptr, gpu_out = graph.gpu_out_ptr, graph.gpu_out
    v = state.ops.dst[op]
    b = state.ops.sub[op]
    w = b // WORD
    bit = np.int64(1) << (b % WORD)
    memory.has[v, w] |= bit
    memory.via[v * state.params.n_subs + b] = op
    memory.inflight[v] -= 1
    for q in range(gpu_out_ptr[v], gpu_out_ptr[v + 1]):
        link = gpu_out[q]
        trigger(listed, order, reset, counters, link, False)
        if not reset[link]:
            bits[link, w] |= bit


def _round(state):
    """Apply every event within ``eps`` of the earliest pending one; returns the round's time."""
    events, counters = state.events, state.counters
    times, kinds, args, starts = events.time, events.kind, events.arg, events.starts
    now = times[0] if counters[HEAP_LEN] > 0 else np.inf
    if counters[STARTS_LEN] > 0 and starts[0] < now:
        now = starts[0]
    lim = round_limit(now, state.params.eps)
    while counters[STARTS_LEN] > 0 and starts[0] <= lim:
        pop_start(events, counters)
    while counters[HEAP_LEN] > 0 and times[0] <= lim:
        i = pop_event(events, counters)
        kind = kinds[i]
        counters[EVENTS + kind] += 1  # a completion (starts are counted when scheduled)
        if kind == TX_END:
            _link_freed(state.graph, state.triggers, counters, args[i])
        else:
            _received(state, args[i])
    counters[ROUNDS] += 1
    return now


def _missing(memory, words):
    """Whether some rank still lacks (and is not receiving) something it wants."""
    want, covered = memory.want, memory.covered
    for r in range(want.shape[0]):
        for w in range(words):
            if want[r, w] & ~covered[r, w]:
                return True
    return False


def _next_free(free, now):
    """The earliest time after ``now`` a link frees (inf: none)."""
    later = np.inf
    for link in range(len(free)):
        if free[link] > now and free[link] < later:
            later = free[link]
    return later


def _rounds(state, now):
    """Decide and run rounds from ``now``: (time, whether the arrays need more room).

    Runs until the plan is complete or stalled, or until a round's decisions might need more
    room than the arrays have."""
    counters = state.counters
    while True:
        if counters[TRIGGERED_LEN] > 0:
            if room_needed(state.events, state.ops, counters, state.graph.max_route):
                return now, True
            _decide(state, now)
        if counters[HEAP_LEN] > 0 or counters[STARTS_LEN] > 0:
            now = _round(state)
            continue
        if not _missing(state.memory, state.params.words):
            return now, False
        # nothing in flight yet something is missing: retry from the next link freeing
        counters[KICKS] += 1
        later = _next_free(state.links.free, now)
        if counters[KICKS] > 2 and later == np.inf:
            counters[STALLED] = 1
            return now, False
        if later != np.inf:
            now = later
        trigger_all(state.graph, state.triggers, counters)


def run_loop(graph, params, links, has, want, max_ops):
    """The SCALE-CCL event loop: (counters, operations).

    ``links.free``, ``has`` and ``want`` are updated in place; ``max_ops`` is the room for
    operations to start with."""
    memory = initial_memory(graph, params, has, want)
    state = initial_state(graph, params, links, memory, max_ops)
    # queued traffic (re-planning input) completes its transmission when the queue drains
    for link in range(graph.n_links):
        if links.free[link] > 0:
            push_event(state.events, state.counters, links.free[link], TX_END, link)
    counters = state.counters
    trigger_all(graph, state.triggers, counters)
    now, grow = _rounds(state, 0.0)
    while grow:
        events, ops = make_room(state.events, state.ops, counters, graph.max_route)
        state = State(
            graph,
            params,
            links,
            memory,
            events,
            ops,
            state.triggers,
            state.scratch,
            state.search,
            counters,
        )
        now, grow = _rounds(state, now)
    return counters, final_ops(state.ops, counters)
