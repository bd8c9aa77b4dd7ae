"""The SCALE-CCL loop's commit of a decision: start a stream, schedule its events, record it.

A stream is the route ``Scratch.chain[:length]`` from a GPU through switches/routers (or none)
to a GPU. Compiled with the rest of the loop (:mod:`.kernel`).
"""

from __future__ import annotations

import numpy as np

from .events import push_event, push_start
from .state import EVENTS, OPS_LEN, ROUTE_LEN, ROUTER_GEN, RX_END, RX_START, TX_END, TX_START
from .tables import WORD


def _reserve(params, links, events, counters, chain, length, t):
    """Reserve the stream's links from ``t`` and schedule its events: (start, arrival,
    duration).

    A link counts as free within ``eps`` of the round's time, so a hop may find its link
    still busy for up to ``eps``; the stream then starts that much later (all its hops
    shifted alike). Lateness below ``noise * t`` is float rounding of equal times."""
    free, alpha, bw = links.free, links.alpha, links.bw
    if length == 1:  # GPU -> GPU: one hop, starting now
        last = chain[0]
        if free[last] - t > params.noise * t:
            t = free[last]
        dur = params.sub_bytes / bw[last]
        free[last] = t + dur
        push_event(events, counters, t + dur, TX_END, last)
        s = t + alpha[last]
        push_start(events, counters, s)  # reception start
        counters[EVENTS + TX_START] += 1
        counters[EVENTS + RX_START] += 1
        return t, s, dur
    counters[ROUTER_GEN] += 1  # links out of switches/routers change: the reach memo is stale
    slowest = bw[chain[0]]
    for i in range(1, length):
        if bw[chain[i]] < slowest:
            slowest = bw[chain[i]]
    dur = params.sub_bytes / slowest
    s = t
    shift = 0.0
    for i in range(length):
        late = free[chain[i]] - s
        if late > shift and late > params.noise * s:
            shift = late
        s += alpha[chain[i]]
    if shift > 0.0:
        t = t + shift
    s = t
    for i in range(length):
        link = chain[i]
        free[link] = s + dur
        counters[EVENTS + TX_START] += 1
        if s != t:  # the first hop starts now, with this round's decisions
            push_start(events, counters, s)
        push_event(events, counters, s + dur, TX_END, link)
        s += alpha[link]
        push_start(events, counters, s)  # reception start
        counters[EVENTS + RX_START] += 1
    return t, s, dur


def _record(ops, counters, chain, length, u, v, b, t, fin, dep):
    """Append operation (GPU ``u`` -> ``v``, subchunk ``b``, route ``chain[:length]``)."""
    op = counters[OPS_LEN]
    route_ptr, route_links = ops.route_ptr, ops.route_links
    ops.src[op] = u
    ops.dst[op] = v
    ops.sub[op] = b
    ops.start[op] = t
    ops.finish[op] = fin
    ops.dep[op] = dep
    nr = counters[ROUTE_LEN]
    for i in range(length):
        route_links[nr + i] = chain[i]
    counters[ROUTE_LEN] = nr + length
    route_ptr[op + 1] = nr + length
    counters[OPS_LEN] = op + 1


def commit(state, length, u, b, t):
    """Start stream ``Scratch.chain[:length]`` (GPU ``u`` sends subchunk ``b`` at ``t``) and
    record it.

    Reserves its links, schedules its events and updates the neighbour memory table."""
    memory, counters = state.memory, state.counters
    covered, dom_covered, want = memory.covered, memory.dom_covered, memory.want
    dom_needed, dom_needed_bits = memory.dom_needed, memory.dom_needed_bits
    params, chain = state.params, state.scratch.chain
    S = params.n_subs
    v = state.graph.link_dst_rank[chain[length - 1]]
    t, s, dur = _reserve(params, state.links, state.events, counters, chain, length, t)
    fin = s + dur
    push_event(state.events, counters, fin, RX_END, counters[OPS_LEN])
    _record(state.ops, counters, chain, length, u, v, b, t, fin, memory.via[u * S + b])
    memory.inflight[v] += 1
    w = b // WORD
    bit = np.int64(1) << (b % WORD)
    if not covered[v, w] & bit:
        covered[v, w] |= bit
        kd = state.graph.rank_dom[v]
        dom_covered[kd, w] |= bit
        if want[v, w] & bit:
            i = kd * S + b
            dom_needed[i] -= 1
            if dom_needed[i] == 0:
                dom_needed_bits[kd, w] &= ~bit
