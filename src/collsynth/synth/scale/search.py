"""The SCALE-CCL loop's router search: cut-through reach of a switch/router (a Dijkstra).

From a switch/router a stream's head arrives at, a Dijkstra over switch/router nodes finds,
per datacenter, the least cost of entering it (cost = waiting + transmission + propagation
along the chain of hops) and whether that entry needs no waiting (``Search.ok``). Entries are
ordered ``(cost, node, arrival, chain, free)`` lexicographically (chains compared link by
link); the last result is memoised until a stream through switches/routers is committed
(``counters[ROUTER_GEN]`` changes). Compiled with the rest of the loop (:mod:`.kernel`).
"""

from __future__ import annotations

import numpy as np

from .bits import round_limit
from .state import MEMO_GEN, MEMO_NODE, MEMO_STAMP, ROUTER_GEN
from .tables import WORD


def _entry_less(search, i, j):
    """Order of router-search entries: (cost, node, arrival, chain, free)."""
    cost, node, arrival, length = search.cost, search.node, search.arrival, search.length
    chain, free = search.chain, search.free
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


def _entry_pop(search, hn):
    """Remove the least entry of the search heap (``hn`` entries); returns it."""
    h = search.heap
    e = h[0]
    hn -= 1
    h[0] = h[hn]
    i = 0
    while True:
        c = 2 * i + 1
        if c >= hn:
            break
        if c + 1 < hn and _entry_less(search, h[c + 1], h[c]):
            c += 1
        if not _entry_less(search, h[c], h[i]):
            break
        h[i], h[c] = h[c], h[i]
        i = c
    return e


def _entry_push(search, hn, k):
    """Add entry ``k`` to the search heap holding ``hn`` entries."""
    h = search.heap
    i = hn
    h[i] = k
    while i > 0:
        parent = (i - 1) >> 1
        if not _entry_less(search, h[i], h[parent]):
            break
        h[i], h[parent] = h[parent], h[i]
        i = parent


def _relax_entries(graph, links, search, eps, e, y):
    """Datacenter entries out of node ``y`` reached by entry ``e``: least cost, and free."""
    entry_ptr, entry_link, link_dst_dom = graph.entry_ptr, graph.entry_link, graph.link_dst_dom
    free_at, delta, alpha = links.free, links.delta, links.alpha
    best_cost, best_free = search.best_cost, search.best_free
    cost, ty, fr = search.cost[e], search.arrival[e], search.free[e]
    lim = round_limit(ty, eps)
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


def _relax_hops(graph, links, search, eps, e, y, stamp, ne, hn):
    """Entries for the unlabelled switches/routers after ``y``; returns (entries, heap size)."""
    hop_ptr, hop_link, link_dst = graph.hop_ptr, graph.hop_link, graph.link_dst
    free_at, delta, alpha = links.free, links.delta, links.alpha
    label, costs, node, arrival = search.label, search.cost, search.node, search.arrival
    frees, lengths, chain = search.free, search.length, search.chain
    cost, ty, fr, length = costs[e], arrival[e], frees[e], lengths[e]
    lim = round_limit(ty, eps)
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
        _entry_push(search, hn, k)
        hn += 1
    return ne, hn


def reach(state, x, ta):
    """Cut-through reach of switch/router ``x`` for a head arriving at ``ta`` (memoised)."""
    graph, links, search, counters = state.graph, state.links, state.search, state.counters
    eps = state.params.eps
    memo, memo_arrival, ok = search.memo, search.memo_arrival, search.ok
    label, label_entry, node = search.label, search.label_entry, search.node
    best_cost, best_free = search.best_cost, search.best_free
    if memo[MEMO_NODE] == x and memo_arrival[0] == ta and memo[MEMO_GEN] == counters[ROUTER_GEN]:
        return
    stamp = memo[MEMO_STAMP] + 1
    for kd in range(graph.n_doms):
        best_cost[kd] = np.inf
        best_free[kd] = 0
    search.cost[0] = 0.0
    node[0] = x
    search.arrival[0] = ta
    search.free[0] = 1
    search.length[0] = 0
    search.heap[0] = 0
    ne, hn = 1, 1
    while hn > 0:
        e = _entry_pop(search, hn)
        hn -= 1
        y = node[e]
        if label[y] == stamp:
            continue
        label[y] = stamp
        label_entry[y] = e
        _relax_entries(graph, links, search, eps, e, y)
        ne, hn = _relax_hops(graph, links, search, eps, e, y, stamp, ne, hn)
    for w in range(graph.dom_words):
        ok[w] = 0
    for kd in range(graph.n_doms):
        if best_free[kd]:
            ok[kd // WORD] |= np.int64(1) << (kd % WORD)
    memo[MEMO_NODE] = x
    memo[MEMO_GEN] = counters[ROUTER_GEN]
    memo[MEMO_STAMP] = stamp
    memo_arrival[0] = ta
