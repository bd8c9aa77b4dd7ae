"""The SCALE-CCL loop's decisions: Subchunk Scheduling (Algorithm 1) and Load-Aware Neighbor
Forwarding (LWNF) for one idle GPU link.

* into a GPU (:func:`schedule_to_gpu`): the neighbour memory table says what the receiver (or,
  for multicast relays, its datacenter) lacks; a subchunk only this queue holds goes first,
  duplicates across the queues towards the receiver go to the queue of least ``T + delta``
  (:func:`_pick`);
* into a switch/router (:func:`schedule_to_router`): the same over what datacenters beyond it
  lack and can be entered now, then LWNF (:func:`_forward`) chooses the hops to the GPU of
  least ``f = transmission + propagation + remaining delay + buffer occupancy + delivery
  progress``; a link that sends nothing registers what it waits for (:func:`_wait`).

Every step takes the loop's :data:`~.state.State`. Compiled with the rest of the loop
(:mod:`.kernel`).
"""

from __future__ import annotations

import numpy as np

from .bits import bit_at, bit_in, low_bit, pop_count, round_limit, row_meets, words_meet
from .search import reach
from .state import BLOCKED_LEN, LWNF, LWNF_REFUSED, MEMO_STAMP, SS_CALLS, SS_DUPLICATES
from .tables import WORD

# what a GPU link into a router that sent nothing waits for
WAIT_RECEPTION = 0  # nothing it holds is wanted beyond: a reception may change that
WAIT_ANY = 1  # any router link freeing
WAIT_BUSY = 2  # one of the busy first hops listed in ``Scratch.busy``

#: LWNF weights: f = link term + W_QUEUE * buffer term + W_PROGRESS * progress term (seconds).
W_QUEUE = 1.0
W_PROGRESS = 1.0


# ---------------------------------------------------------------------------- Algorithm 1
def _pick(graph, links, scratch, counters, words, lid, nq, mine, t):
    """Algorithm 1 over the queues ``Scratch.rows`` towards one node: what queue ``mine`` sends.

    Queue ``mine`` is link ``lid``'s, holding ``Scratch.row``. It sends the first subchunk
    only it holds, else: duplicates go, one by one in queue order, to the queue with the lowest
    ``T + delta`` (T = the link's backlog plus the unique subchunks queued before), and the
    first that goes to this queue is sent; -1 when none does."""
    rows, row, once, twice = scratch.rows, scratch.row, scratch.once, scratch.twice
    backlog, queue_delta = scratch.backlog, scratch.queue_delta
    queue_link, free, delta = graph.queue_link, links.free, links.delta
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
            return w * WORD + low_bit(uq)
    counters[SS_DUPLICATES] += 1
    base = graph.queue_ptr[graph.link_dst[lid]]
    for i in range(nq):
        q = queue_link[base + i]
        queue_delta[i] = delta[q]
        fq = free[q] - t
        c = 0
        for w in range(words):
            c += pop_count(rows[i, w] & (once[w] & ~twice[w]))
        backlog[i] = (0.0 if 0.0 > fq else fq) + queue_delta[i] * c
    for w in range(words):
        x = twice[w]
        while x:
            low = x & -x
            x ^= low
            best_i = -1
            best_c = np.inf
            for i in range(nq):
                if rows[i, w] & low:
                    c = backlog[i] + queue_delta[i]
                    if c < best_c:
                        best_i = i
                        best_c = c
            backlog[best_i] += queue_delta[best_i]
            if best_i == mine:
                return w * WORD + low_bit(low)
    return -1


def _queues(graph, has, scratch, words, d, nq):
    """Algorithm 1's queues towards node ``d`` (what each predecessor of ``has`` holds of
    ``Scratch.useful``)."""
    queue_rank, useful, rows = graph.queue_rank, scratch.useful, scratch.rows
    base = graph.queue_ptr[d]
    for i in range(nq):
        r = queue_rank[base + i]
        for w in range(words):
            rows[i, w] = has[r, w] & useful[w]


def schedule_to_gpu(state, lid, u, t):
    """Subchunk Scheduling for GPU ``u``'s idle link ``lid`` into a GPU: the subchunk, or -1."""
    graph, memory, scratch, triggers = state.graph, state.memory, state.scratch, state.triggers
    W = state.params.words
    has, covered, want = memory.has, memory.covered, memory.want
    dom_needed_bits = memory.dom_needed_bits
    useful, row, bits = scratch.useful, scratch.row, triggers.bits
    queue_rank = graph.queue_rank
    v = graph.link_dst_rank[lid]
    kd = graph.rank_dom[v]
    reset = triggers.reset[lid]
    found = False
    for w in range(W):
        # neighbour memory table of v: what it (or, for multicast relays, someone in its
        # datacenter) wants, minus what it holds or is receiving
        uw = (want[v, w] | dom_needed_bits[kd, w]) & ~covered[v, w]
        useful[w] = uw
        rw = has[u, w] & uw
        row[w] = rw
        if rw & (-1 if reset else bits[lid, w]):
            found = True
    if not found:
        return -1
    state.counters[SS_CALLS] += 1
    d = graph.link_dst[lid]
    base = graph.queue_ptr[d]
    nq = graph.queue_ptr[d + 1] - base
    for w in range(W):  # the common case: a subchunk no other queue holds
        once = 0
        twice = 0
        for i in range(nq):
            j = has[queue_rank[base + i], w] & useful[w]
            twice |= once & j
            once |= j
        uq = row[w] & ~twice
        if uq:
            return w * WORD + low_bit(uq)
    _queues(graph, has, scratch, W, d, nq)
    return _pick(graph, state.links, scratch, state.counters, W, lid, nq, graph.queue_pos[lid], t)


# ---------------------------------------------------------------------------- into routers
def worth_router(graph, memory, triggers, words, lid, u):
    """Whether GPU ``u`` holds something a datacenter beyond the router at ``lid``'s head lacks.

    Only what was triggered on ``lid`` counts, unless it is listed fully."""
    has, dom_wanted, dom_covered = memory.has, memory.dom_wanted, memory.dom_covered
    bits, node_doms = triggers.bits, graph.node_doms
    d = graph.link_dst[lid]
    reset = triggers.reset[lid]
    for w in range(words):
        hw = has[u, w] if reset else bits[lid, w] & has[u, w]
        if not hw:
            continue
        lack = 0
        for kd in range(graph.n_doms):
            if bit_at(node_doms, d, kd):
                lack |= dom_wanted[kd, w] & ~dom_covered[kd, w]
        if hw & lack:
            return True
    return False


def _useful_net(state, d, ta):
    """What is worth entering switch/router ``d`` for a head arriving at ``ta``.

    Into ``Scratch.useful``: the subchunks some datacenter lacks that can be entered now along
    its best path; into ``Scratch.row``: those of them in ``Scratch.held``. Returns (what to
    wait for if nothing is sent, busy first hops listed in ``Scratch.busy``, whether
    ``Scratch.row`` is non-empty)."""
    graph, memory, scratch = state.graph, state.memory, state.scratch
    W, DW = state.params.words, graph.dom_words
    node_doms, link_doms = graph.node_doms, graph.link_doms
    out_ptr, out_link = graph.out_ptr, graph.out_link
    dom_wanted, dom_covered, free = memory.dom_wanted, memory.dom_covered, state.links.free
    held, useful, row = scratch.held, scratch.useful, scratch.row
    needy, first, busy = scratch.needy, scratch.first, scratch.busy
    any_needy = False
    for x in range(DW):
        needy[x] = 0
    for kd in range(graph.n_doms):
        if bit_at(node_doms, d, kd):
            for w in range(W):
                if dom_wanted[kd, w] & ~dom_covered[kd, w] & held[w]:
                    needy[kd // WORD] |= np.int64(1) << (kd % WORD)
                    any_needy = True
                    break
    if not any_needy:
        return WAIT_RECEPTION, 0, False
    lim = round_limit(ta, state.params.eps)
    for x in range(DW):
        first[x] = 0
    n_busy = 0
    for q in range(out_ptr[d], out_ptr[d + 1]):
        l2 = out_link[q]
        if free[l2] <= lim:
            for x in range(DW):
                first[x] |= link_doms[l2, x]
        elif row_meets(link_doms, l2, needy, DW):
            busy[n_busy] = l2
            n_busy += 1
    if not words_meet(first, needy, DW):
        return WAIT_BUSY, n_busy, False
    reach(state, d, ta)
    ok = state.search.ok
    found = False
    for w in range(W):
        out = 0
        for kd in range(graph.n_doms):
            if bit_in(ok, kd):
                out |= dom_wanted[kd, w] & ~dom_covered[kd, w]
        useful[w] = out
        rw = held[w] & out
        row[w] = rw
        if rw:
            found = True
    return WAIT_ANY, n_busy, found


def _best_entry(state, b):
    """LWNF's last hop for subchunk ``b``: (link, its node) of least f, or -1.

    Candidates: free entries into a GPU of a datacenter in ``Scratch.dom_missing`` that does
    not cover ``b``, after a free path from the router searched."""
    graph, params, links, search = state.graph, state.params, state.links, state.search
    entry_ptr, entry_link = graph.entry_ptr, graph.entry_link
    link_dst_rank, link_dst_dom = graph.link_dst_rank, graph.link_dst_dom
    free_at, delta, alpha = links.free, links.delta, links.alpha
    covered, inflight = state.memory.covered, state.memory.inflight
    dom_missing = state.scratch.dom_missing
    label, label_entry, costs, arrival, frees = (
        search.label,
        search.label_entry,
        search.cost,
        search.arrival,
        search.free,
    )
    ch = b % params.n_chunks
    w = b // WORD
    bit = np.int64(1) << (b % WORD)
    stamp = search.memo[MEMO_STAMP]
    best, best_f, best_y = -1, np.inf, -1
    for y in graph.net_nodes:
        if label[y] != stamp:
            continue
        e = label_entry[y]
        if not frees[e]:
            continue
        cost, ty = costs[e], arrival[e]
        lim = round_limit(ty, params.eps)
        for q in range(entry_ptr[y], entry_ptr[y + 1]):
            l2 = entry_link[q]
            if free_at[l2] > lim:
                continue
            r = link_dst_rank[l2]
            if not bit_in(dom_missing, link_dst_dom[l2]) or covered[r, w] & bit:
                continue
            buffered = inflight[r] * delta[l2]
            held = 0
            for j in range(params.subchunks):
                held += bit_at(covered, r, j * params.n_chunks + ch)
            progress = held / params.subchunks * delta[l2]
            f = cost + delta[l2] + alpha[l2] + W_QUEUE * buffered + W_PROGRESS * progress
            if f < best_f:
                best, best_f, best_y = l2, f, y
    return best, best_y


def _forward(state, lid, ta, b):
    """Load-Aware Neighbor Forwarding of subchunk ``b`` into the router at ``lid``'s head.

    Returns the route's length, the route in ``Scratch.chain``, or -1 when the best way into
    every datacenter lacking ``b`` would have to wait (a bufferless router refuses)."""
    graph, memory, scratch, search = state.graph, state.memory, state.scratch, state.search
    counters = state.counters
    dom_wanted, dom_covered = memory.dom_wanted, memory.dom_covered
    dom_missing, ok, chain = scratch.dom_missing, search.ok, scratch.chain
    reach(state, graph.link_dst[lid], ta)
    counters[LWNF] += 1
    w = b // WORD
    bit = np.int64(1) << (b % WORD)
    any_miss = False
    for x in range(graph.dom_words):
        dom_missing[x] = 0
    for kd in range(graph.n_doms):
        if bit_in(ok, kd) and dom_wanted[kd, w] & ~dom_covered[kd, w] & bit:
            dom_missing[kd // WORD] |= np.int64(1) << (kd % WORD)
            any_miss = True
    best = -1
    best_y = -1
    if any_miss:
        best, best_y = _best_entry(state, b)
    if best < 0:
        counters[LWNF_REFUSED] += 1
        return -1
    e = search.label_entry[best_y]
    length = search.length[e]
    route = search.chain
    chain[0] = lid
    for i in range(length):
        chain[1 + i] = route[e, i]
    chain[1 + length] = best
    return length + 2


def _wait(graph, triggers, scratch, counters, lid, why, n_busy):
    """Register what GPU link ``lid`` into a router, which sent nothing, waits for.

    The busy first hops it needs, any router link, or (``WAIT_RECEPTION``) a reception."""
    blocked, blocked_list, watch = triggers.blocked, triggers.blocked_list, triggers.watch
    busy = scratch.busy
    if why == WAIT_ANY:
        if not blocked[lid]:
            blocked[lid] = 1
            blocked_list[counters[BLOCKED_LEN]] = lid
            counters[BLOCKED_LEN] += 1
    elif why == WAIT_BUSY:
        pos = graph.queue_pos[lid]
        for i in range(n_busy):
            watch[busy[i], pos] = 1


def schedule_to_router(state, lid, u, t):
    """Subchunk Scheduling for GPU ``u``'s idle link ``lid`` into a switch/router.

    LWNF chooses the next hops. Returns (route length, subchunk), the route in
    ``Scratch.chain``; length -1 when it sends nothing (it then waits). A subchunk LWNF cannot
    place is excluded and the next one tried (at most 4 attempts)."""
    graph, scratch, counters = state.graph, state.scratch, state.counters
    W = state.params.words
    has, excluded, held, rows, row = (
        state.memory.has,
        scratch.excluded,
        scratch.held,
        scratch.rows,
        scratch.row,
    )
    d = graph.link_dst[lid]
    ta = t + state.links.alpha[lid]
    nq = graph.queue_ptr[d + 1] - graph.queue_ptr[d]
    mine = graph.queue_pos[lid]
    for w in range(W):
        excluded[w] = 0
    why = WAIT_ANY
    n_busy = 0
    b = -1
    for _attempt in range(4):
        counters[SS_CALLS] += 1
        for w in range(W):
            held[w] = has[u, w] & ~excluded[w]
        # P = GPUs with a queue towards d; D = the datacenters d can enter now lacking it
        why, n_busy, found = _useful_net(state, d, ta)
        if not found:
            break
        _queues(graph, has, scratch, W, d, nq)
        for w in range(W):
            rows[mine, w] = row[w]
        b = _pick(graph, state.links, scratch, counters, W, lid, nq, mine, t)
        if b < 0:
            break
        length = _forward(state, lid, ta, b)
        if length > 0:
            return length, b
        excluded[b // WORD] |= np.int64(1) << (b % WORD)
        why = WAIT_ANY
    _wait(graph, state.triggers, scratch, counters, lid, why, n_busy)
    return -1, b
