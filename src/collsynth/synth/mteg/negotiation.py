"""Negotiated re-planning (option ``negotiate``; not in the paper): penalties on the
transfers that stood in the way of the last arrivals, every tree planned again, the earliest
plan kept (:func:`negotiate_plan`), within the work budget of :func:`negotiation_rounds`."""

from __future__ import annotations

import heapq
import math

from ... import deadline
from .model import SlotGraph
from .plans import Plan, route_all
from .steiner import Planner
from .tasks import Task

#: ``negotiate=auto``: at most this many re-planning rounds ...
NEGOTIATE_MAX_ROUNDS = 32
#: ... and at most this much work in all (rounds x tasks x transmission edges; one unit is
#: a few microseconds of planning): DGX-1 and MI250 get every round, NDv2 x2 28, NDv2 x4
#: six, DGX-2 x2 one, 10-chassis NDv2 (80 tasks x 410 edges) none (``SEARCH_WORK`` may
#: allow fewer). Small problems get many rounds: MI250 at 1 MB with ``trees=concurrent``
#: (10 candidates, 26 rounds each) reaches the TE-CCL MILP's optimum.
NEGOTIATE_WORK = 30_000
#: ``negotiate``: stop after this many rounds without a better plan.
NEGOTIATE_PATIENCE = 12
#: ``negotiate``: the penalty rules, one phase each, each from the first plan (the first
#: phase at most half the rounds, the second the rest): False = contention at the last
#: arrivals' last hop (the first rule), True = on the whole path to them (their chunk's
#: transfers from its source).
NEGOTIATE_PHASES = (False, True)
#: ``negotiate=auto`` in :func:`best_plan`: all candidates' planning passes together
#: (candidates x (1 + rounds) x tasks x transmission edges) stay within this: MI250 (14
#: candidates of 16 tasks x 56 edges) gets 18 rounds each, DGX-1 32, NDv2 x2 15, NDv2 x4
#: two, DGX-2 x2 one at 1 MB (7 candidates: no finer slot) and none at 1 GB (14).
SEARCH_WORK = 250_000


def negotiation_rounds(graph: SlotGraph, tasks: list[Task] | int, candidates: int = 1) -> int:
    """Rounds ``negotiate=auto`` stands for: a work budget, so synthesis stays fast.

    At most ``NEGOTIATE_MAX_ROUNDS``, ``NEGOTIATE_WORK`` per plan, and, when
    :func:`best_plan` plans ``candidates`` plans (variants x prices x slots), their passes
    (1 + rounds each) together within ``SEARCH_WORK`` (units: tasks x transmission edges).
    """
    n_tasks = tasks if isinstance(tasks, int) else len(tasks)
    work = max(1, n_tasks * len(graph.edges))
    shared = SEARCH_WORK // (max(1, candidates) * work) - 1
    return max(0, min(NEGOTIATE_MAX_ROUNDS, NEGOTIATE_WORK // work, shared))


def negotiate_plan(p: Plan, h0: int | None, rounds: int) -> None:
    """Negotiated re-planning (option ``negotiate``; not in the paper).

    Greedy trees take the earliest-arriving edges for themselves: on DGX-1 every broadcast
    sends its chunk over all four of its source's links at slot 0, the two slow NVLinks
    included, and the slow links are then busy when the last chunks need them (4 chunk times
    where the TE-CCL MILP needs 3). Each round looks at the transfers that arrive last; for
    each, at every in-edge of its receiver that could have delivered the chunk earlier (its
    sender held the chunk early enough), the transfers of *other* trees whose windows stood in
    the way get a penalty of one chunk time (on the fastest link) added to their edge's key
    in their own tree, and every tree is planned again on an empty residual graph. Penalties
    accumulate (the history of "negotiated congestion" routers); a tree then prefers another
    edge when its penalised one is contended, as long as the alternative is not later by more
    than the penalty. The plan that completes first as soon as possible is kept
    (:meth:`Plan.better_than`; ties: the earliest round, so the paper's plan when nothing
    improves). Two phases (``NEGOTIATE_PHASES``), each from the first plan without
    penalties: the penalised transfers are those in the way of the last arrivals' last hop,
    then of any transfer on their chunk's path from its source (a wait two hops before the
    last receiver delays it as much). A phase stops after ``NEGOTIATE_PATIENCE`` rounds
    without a better plan, when a round adds no penalty, when the plan reaches the
    empty-network latency bound, or at its share of the rounds. Penalties
    act on full broadcasts only (the Prim-like paths and ``trees=concurrent``); multicasts to
    subsets are re-planned unchanged, and a collective without full broadcasts is not
    re-planned at all.
    Deterministic: penalties are a function of the previous plan alone.
    """
    g = p.graph
    if not any(len(t.dests) == g.n - 1 for t in p.tasks):
        return  # penalties steer full broadcasts only: nothing would change
    source = {t.chunk: t.source for t in p.tasks}
    floor = _latency_floor(g, p.tasks)
    step = max(g.chunk_bytes / float(g.topology.link_bw.max()) / g.tau, 1.0)
    into: list[list[int]] = [[] for _ in range(g.n)]
    e_src = [e.src for e in g.edges]
    for e in g.edges:
        into[e.dst].append(e.id)
    best = p.planner
    first = best.finish
    used = best_round = 0
    first_s = p.asap
    best_p = p
    stopped = False
    for k, chain in enumerate(NEGOTIATE_PHASES):
        # each phase starts again from the first plan, with no penalties; all phases together
        # run at most ``rounds`` rounds, all but the last at most their share
        left = len(NEGOTIATE_PHASES) - k
        limit = rounds - used if left == 1 else -(-(rounds - used) // left)
        penalty: dict[int, dict[int, float]] = {}
        cur = p.planner
        n = last_gain = 0
        while n < limit and cur.finish > floor and n - last_gain < NEGOTIATE_PATIENCE:
            if deadline.nearly_out():  # keep the best plan so far; the rest is lowering
                stopped = True
                break
            if not _add_penalties(cur, g, source, into, e_src, penalty, step, chain):
                break
            cur = route_all(g, p.tasks, h0, p.nearest, p.trees, penalty, p.price)
            n += 1
            used += 1
            cand = Plan(g, cur, p.tasks, p.size, p.collective, p.trees, p.nearest, p.price)
            if cand.better_than(best_p):
                best_p, best, best_round, last_gain = cand, cur, used, n
    p.adopt(best_p)  # best_p.planner is best
    p.negotiation = {
        "rounds": used,
        "best_round": best_round,
        "first_slots": first,
        "best_slots": best.finish,
        "first_asap_s": first_s,
        "best_asap_s": p.asap,
        "stopped_by_time_limit": stopped,
    }


def _latency_floor(g: SlotGraph, tasks: list[Task]) -> int:
    """Fewest slots any plan needs: the farthest destination of a task on the empty network
    (a small Dijkstra per source; the problems negotiation runs on are small)."""
    dist_of: dict[int, list[float]] = {}
    floor = 0
    for t in tasks:
        dist = dist_of.get(t.source)
        if dist is None:
            dist = [math.inf] * g.n
            dist[t.source] = 0
            heap = [(0, t.source)]
            while heap:
                d, u = heapq.heappop(heap)
                if d > dist[u]:
                    continue
                for e in g.out[u]:
                    v, nd = g.e_dst[e], d + g.e_len[e]
                    if nd < dist[v]:
                        dist[v] = nd
                        heapq.heappush(heap, (nd, v))
            dist_of[t.source] = dist
        far = max(dist[d] for d in t.dests)
        if math.isfinite(far):
            floor = max(floor, int(far))
    return floor


def _add_penalties(
    pl: Planner,
    g: SlotGraph,
    source: dict[int, int],
    into: list[list[int]],
    e_src: list[int],
    penalty: dict[int, dict[int, float]],
    step: float,
    chain: bool = False,
) -> bool:
    """One negotiation round's penalties (see :func:`negotiate_plan`); False if none was added."""
    e_len, e_occ = g.e_len, g.e_occ
    n_ops = len(pl.op_edge)
    arrival = [pl.op_slot[i] + e_len[pl.op_edge[i]] for i in range(n_ops)]
    hold: dict[tuple[int, int], int] = {}
    windows: dict[int, list[tuple[float, float, int]]] = {}
    for i in range(n_ops):
        e, t = pl.op_edge[i], pl.op_slot[i]
        hold[(pl.op_chunk[i], g.e_dst[e])] = arrival[i]
        for l, a, w in pl.op_occ[i]:  # (a multicast branch: the hops it books)
            windows.setdefault(l, []).append((t + a, t + a + w, i))
    added = False
    # the last arrivals and, with ``chain``, every transfer on the way to them (their chunk's
    # path from its source: a wait or a detour anywhere on it delays the last arrival)
    crit: list[int] = []
    seen: set[int] = set()
    for i in range(n_ops):
        if arrival[i] < pl.finish:
            continue
        j = i
        while j >= 0 and j not in seen:
            seen.add(j)
            crit.append(j)
            j = pl.op_parent[j] if chain else -1
    for i in crit:
        chunk = pl.op_chunk[i]
        v = g.e_dst[pl.op_edge[i]]
        for e in into[v]:
            u = e_src[e]
            h = 0 if u == source.get(chunk) else hold.get((chunk, u))
            if h is None or h + e_len[e] >= arrival[i]:
                continue  # this edge could not have delivered it earlier
            last = arrival[i] - e_len[e]  # departures in [h, last) would have been earlier
            for l, a, w in e_occ[e]:
                lo, hi = h + a, last + a + w
                for s0, s1, j in windows.get(l, ()):
                    if s1 > lo and s0 < hi and pl.op_chunk[j] != chunk:
                        d = penalty.setdefault(pl.op_chunk[j], {})
                        ej = pl.op_edge[j]
                        d[ej] = d.get(ej, 0.0) + step
                        added = True
    return added
