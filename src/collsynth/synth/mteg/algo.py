"""MTEGCCA driver: decomposition into multicast tasks, ordering, planning and the timed IR."""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ... import deadline
from ...collective import Collective, CollKind
from ...errors import CollsynthError
from ...schedule.ir import Schedule, ScheduleBuilder
from ...topology.model import Topology
from ...units import parse_time
from .. import register
from ..options import Option, int_option, size_option
from .model import SlotGraph
from .steiner import Planner

#: Data size planned for when none is given (the schedule's timing is for this size).
DEFAULT_SIZE = float(1 << 20)

#: Collectives MTEGCCA handles: every one whose chunks travel from one source to destinations.
SUPPORTED = {
    CollKind.ALLGATHER,
    CollKind.BROADCAST,
    CollKind.CUSTOM,
    CollKind.GATHER,
    CollKind.SCATTER,
    CollKind.ALLTOALL,
}


@dataclass(frozen=True)
class Task:
    """One multicast: chunk ``chunk`` from rank ``source`` to ``dests`` (the paper's step 1)."""

    chunk: int
    source: int
    dests: tuple[int, ...]
    volume: float  # bytes delivered: chunk bytes x destinations
    round: int  # position of the chunk among its source's chunks
    spread: int  # the source's position in the farthest-first order of ranks

    @property
    def key(self) -> tuple:
        """The paper's step 2: largest data first; ties by round, farthest-first source, chunk
        id."""
        return (-self.volume, self.round, self.spread, self.chunk)


def spread_order(topology: Topology) -> list[int]:
    """Ranks in farthest-first order: rank 0, then repeatedly the rank whose hop distance to
    the ranks already listed is largest (ties: lowest rank).

    Used to break ties between equally large broadcasts so that consecutive trees start in
    different parts of the topology (e.g. alternate chassis) instead of one region claiming
    every link near it first.
    """
    n = topology.num_ranks
    dist = topology.hop_distances()[:, topology.compute_nodes].astype(np.float64)
    dist = np.where(dist < 0, np.inf, dist)
    sym = np.minimum(dist, dist.T)
    order = [0]
    near = sym[0].copy()
    chosen = np.zeros(n, dtype=bool)
    chosen[0] = True
    for _ in range(n - 1):
        cand = np.where(chosen, -1.0, near)
        r = int(np.argmax(cand))  # first maximum: lowest rank among ties
        order.append(r)
        chosen[r] = True
        near = np.minimum(near, sym[r])
    return order


def decompose(
    collective: Collective, chunk_bytes: float, spread: list[int] | None = None
) -> list[Task]:
    """Multicast tasks of a non-reducing collective, in planning order (the paper's steps 1–2).

    Broadcast: one task per chunk. AllGather: one broadcast per (source, chunk), ``C`` chunks
    per rank. Multicast (custom collectives), Gather, Scatter, AllToAll: one task per chunk to
    its destination set. Ties in size are broken by the chunk's round at its source (its
    position among the source's chunks; for AllToAll its destination's offset from the source),
    then by the source's position in ``spread``, then by chunk id.
    """
    if collective.kind not in SUPPORTED:
        raise CollsynthError(
            f"mteg does not support {collective.kind.value} (it plans copies only, no reductions)"
        )
    src = collective.chunk_source
    pos = list(range(collective.num_ranks))
    if spread is not None:
        for i, r in enumerate(spread):
            pos[r] = i
    seen: dict[int, int] = {}
    tasks = []
    n, cpr = collective.num_ranks, collective.chunks_per_rank
    shift = collective.kind is CollKind.ALLTOALL
    for c in range(collective.num_chunks):
        s = int(src[c])
        dests = tuple(d for d in collective.destinations(c) if d != s)
        r = seen.get(s, 0)
        seen[s] = r + 1
        if shift:
            # AllToAll: rank s's chunks to s+1, s+2, ... first (a shift pattern), so that equal
            # rounds do not all aim at the same destination
            d = (c // cpr) % n
            r = ((d - s) % n) * cpr + c % cpr
        if dests:
            tasks.append(Task(c, s, dests, chunk_bytes * len(dests), r, pos[s]))
    tasks.sort(key=lambda t: t.key)
    return tasks


def _parse_slot(value: Any) -> float | None:
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "auto")):
        return None
    tau = parse_time(value, "mteg option slot")
    if tau <= 0:
        raise CollsynthError(f"mteg option slot={value!r} must be a positive time")
    return tau


def asap_seconds(graph: SlotGraph, planner: Planner) -> float:
    """Completion of a plan executed as soon as possible (an estimate, in seconds).

    The plan's transfers in planned order (departure slot, then plan order; a parent always
    departs earlier), each hop starting as soon as its chunk is there and its link has finished
    the transfer before it: the model of ``docs/simulator.md`` (a hop transmits for
    ``chunk / its bw``, the next hop is requested ``alpha`` later, a transfer is complete
    when its last byte has propagated). Whole slots round every transfer up, so at coarse
    slots a plan can run much earlier than its slots say; :func:`best_plan` and the
    negotiation compare plans by this time.
    """
    hops = graph.e_hops
    free = [0.0] * len(graph.topology.links)
    op_edge, op_parent = planner.op_edge, planner.op_parent
    lead, shared = planner.op_lead, planner.op_shared
    done = [0.0] * len(op_edge)
    # per transfer, when each hop is requested (a multicast branch goes on from its lead's
    # request of the first hop it does not share: the switch forwards the lead's stream)
    reqs: list[list[float]] = [[] for _ in op_edge]
    finish = 0.0
    for i in sorted(range(len(op_edge)), key=planner.op_slot.__getitem__):
        par = op_parent[i]
        req = done[par] if par >= 0 else 0.0
        comp = 0.0
        k0 = shared[i]
        mine: list[float] = []
        if k0:
            req = reqs[lead[i]][k0]
            mine = reqs[lead[i]][:k0]
        for l, a, tx, tail in hops[op_edge[i]][k0:]:
            mine.append(req)
            f = free[l]
            st = req if req > f else f
            end = st + tx
            free[l] = end
            if end + tail > comp:
                comp = end + tail
            req = st + a
        mine.append(req)
        reqs[i] = mine
        done[i] = comp
        if comp > finish:
            finish = comp
    return finish


@dataclass
class Plan:
    """A finished slot plan (before lowering to the IR)."""

    graph: SlotGraph
    planner: Planner
    tasks: list[Task]
    size: float
    collective: Collective
    trees: str = "sequential"
    nearest: str = "arrival"
    price: float = 0.0
    negotiation: dict | None = None
    _asap: tuple | None = None

    @property
    def tau(self) -> float:
        return self.graph.tau

    @property
    def slots(self) -> int:
        return self.planner.finish

    @property
    def seconds(self) -> float:
        return self.planner.finish * self.graph.tau

    @property
    def asap(self) -> float:
        """:func:`asap_seconds` of the plan (cached)."""
        if self._asap is None or self._asap[0] is not self.planner:
            self._asap = (self.planner, asap_seconds(self.graph, self.planner))
        return self._asap[1]

    def better_than(self, other: Plan) -> bool:
        """Strictly earlier as soon as possible (relative 1e-12), then in the slot plan."""
        a, b = self.asap, other.asap
        if abs(a - b) > 1e-12 * max(a, b):
            return a < b
        return self.seconds < other.seconds * (1 - 1e-12)


def plan(
    topology: Topology,
    collective: Collective,
    size: float | None = None,
    slot: Any = None,
    horizon: Any = None,
    occupancy: Any = None,
    trees: Any = None,
    nearest: Any = None,
    negotiate: Any = None,
    price: Any = None,
    switch_copy: bool = False,
) -> Plan:
    """Run MTEGCCA's planning (no IR): the slot plan for ``size`` bytes (``switch_copy``:
    switches with the ``multicast`` capability may copy a stream to several out-links)."""
    if collective.num_ranks != topology.num_ranks:
        raise CollsynthError(
            f"collective has {collective.num_ranks} ranks but topology "
            f"{topology.name!r} has {topology.num_ranks} compute nodes"
        )
    nbytes = size_option(size, "mteg", DEFAULT_SIZE)
    tau = _parse_slot(slot)
    h0 = int_option(horizon, "horizon", "mteg", minimum=1)
    mode = "exact" if occupancy is None else str(occupancy).strip().lower()
    if mode not in ("exact", "slot"):
        raise CollsynthError(f"mteg option occupancy={occupancy!r} is not exact or slot")
    grow = "sequential" if trees is None else str(trees).strip().lower()
    if grow not in ("sequential", "concurrent"):
        raise CollsynthError(f"mteg option trees={trees!r} is not sequential or concurrent")
    near = "arrival" if nearest is None else str(nearest).strip().lower()
    if near not in ("arrival", "cost"):
        raise CollsynthError(f"mteg option nearest={nearest!r} is not arrival or cost")
    rounds = _parse_negotiate(negotiate)
    lam = _parse_price(price)
    if lam is None:
        lam = 0.0
    cb = collective.chunk_bytes(nbytes)
    graph = SlotGraph(topology, cb, tau, exact=mode == "exact", multicast=bool(switch_copy))
    tasks = decompose(collective, cb, spread_order(topology))
    planner = _route_all(graph, tasks, h0, near, grow, None, lam)
    p = Plan(graph, planner, tasks, nbytes, collective, grow, near, lam)
    if rounds is None:
        rounds = negotiation_rounds(graph, tasks)
    if rounds > 0:
        _negotiate(p, h0, rounds)
    return p


def _route_all(
    graph: SlotGraph,
    tasks: list[Task],
    h0: int | None,
    near: str,
    grow: str,
    penalty: dict[int, dict[int, float]] | None,
    price: float = 0.0,
) -> Planner:
    """One pass of the paper's steps 3–5: every task's tree, in planning order."""
    planner = Planner(graph, h0, near, penalty, price)
    rest = tasks
    if grow == "concurrent":
        full = [t for t in tasks if len(t.dests) == graph.n - 1]
        rest = [t for t in tasks if len(t.dests) != graph.n - 1]
        planner.route_concurrent([(t.chunk, t.source) for t in full])
    for task in rest:
        planner.route(task.chunk, task.source, task.dests)
    return planner


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


def _parse_negotiate(value: Any) -> int | None:
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "auto")):
        return None
    if isinstance(value, str) and value.strip().lower() in ("off", "no", "none"):
        return 0
    return int_option(value, "negotiate", "mteg", minimum=0)


def _parse_price(value: Any) -> float | None:
    """``price``: a non-negative number, or None for ``auto``."""
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "auto")):
        return None
    if isinstance(value, str) and value.strip().lower() in ("off", "no", "none"):
        return 0.0
    try:
        lam = float(value)
    except (TypeError, ValueError):
        raise CollsynthError(f"mteg option price={value!r} is not a number, off or auto") from None
    if not (math.isfinite(lam) and lam >= 0):
        raise CollsynthError(f"mteg option price={value!r} must be a non-negative number")
    return lam


def _negotiate(p: Plan, h0: int | None, rounds: int) -> None:
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
            cur = _route_all(g, p.tasks, h0, p.nearest, p.trees, penalty, p.price)
            n += 1
            used += 1
            cand = Plan(g, cur, p.tasks, p.size, p.collective, p.trees, p.nearest, p.price)
            if cand.better_than(best_p):
                best_p, best, best_round, last_gain = cand, cur, used, n
    p.planner = best
    p._asap = best_p._asap
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
    """One negotiation round's penalties (see :func:`_negotiate`); False if none was added."""
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


def lower(p: Plan) -> Schedule:
    """The timed IR of a plan: one operation per transmission edge of every tree."""
    g, pl = p.graph, p.planner
    t = g.topology
    coll_tasks = p.tasks
    b = ScheduleBuilder(t, p.collective)
    tau = g.tau
    on_link: dict[int, list[tuple[float, int]]] = {}
    edges = g.edges
    for op, (chunk, e, slot, parent) in enumerate(
        zip(pl.op_chunk, pl.op_edge, pl.op_slot, pl.op_parent)
    ):
        edge = edges[e]
        b.add(
            edge.src,
            edge.dst,
            chunk,
            route=edge.route,
            deps=(parent,) if parent >= 0 else (),
            start=slot * tau,
            step=slot,
            group=pl.op_group[op] if pl.op_group[op] >= 0 else None,
        )
        for l, a, _w in pl.op_occ[op]:  # a multicast's shared hops: its carrier's order only
            on_link.setdefault(l, []).append((slot + a, op))
    # A planned order per link: the order of its busy windows. The verifier (and the simulator)
    # need the orders of all links to fit one global order of operations; with routes through
    # switches whose hops start at different alpha offsets, a link's window order can disagree
    # with the departure order. Such a link gets no explicit order (the simulator then serves it
    # by planned start time; held to the planned starts it still meets no contention).
    unordered = 0
    slots = pl.op_slot
    for l in sorted(on_link):
        seq = [op for _s, op in sorted(on_link[l])]
        keys = [(slots[op], op) for op in seq]
        if all(x < y for x, y in zip(keys, keys[1:])):
            b.set_link_order(l, seq)
        else:
            unordered += 1
    b.size = p.size
    rounding = [edges[e].length * tau - edges[e].exact_s for e in pl.op_edge]
    b.meta.update(
        {
            "mteg": {
                "slot_s": tau,
                "occupancy": "exact" if g.exact else "slot",
                "trees": p.trees,
                "nearest": p.nearest,
                "price": p.price,
                "chunk_bytes": g.chunk_bytes,
                "plan_slots": pl.finish,
                "plan_time_s": pl.finish * tau,
                "horizon_slots": pl.horizon,
                "initial_horizon_slots": pl.initial_horizon,
                "horizon_growths": pl.growths,
                "switch_copy": g.multicast,
                "multicast_groups": pl.groups,
                "tasks": len(coll_tasks),
                "transmission_edges": len(edges),
                "max_rounding_s": float(max(rounding)) if rounding else 0.0,
                "links_without_order": unordered,
                "asap_s": p.asap,
                "negotiation": p.negotiation
                or {
                    "rounds": 0,
                    "best_round": 0,
                    "first_slots": pl.finish,
                    "best_slots": pl.finish,
                    "first_asap_s": p.asap,
                    "best_asap_s": p.asap,
                },
            }
        }
    )
    return b.build()


@register(
    "mteg",
    collectives=SUPPORTED,
    summary="MTEGCCA: Takahashi–Matsuyama Steiner trees per broadcast on an implicit "
    "multicast time-expanded graph; timed, conflict-free slots",
    options=(
        Option(
            "slot",
            "time",
            "auto",
            words=("auto",),
            minimum=0.0,
            exclusive_minimum=True,
            shorthand=True,
            help="slot length tau (e.g. 0.5us); auto: one chunk on the fastest link "
            "(the paper's), and on small problems where whole slots round "
            "transfers up a lot also a 4x finer slot; the plan that finishes "
            "first",
        ),
        Option(
            "horizon",
            "int",
            "auto",
            words=("auto",),
            minimum=1,
            unit="slots",
            help="initial horizon H; doubled automatically while a broadcast cannot be routed",
        ),
        Option(
            "occupancy",
            "choice",
            "exact",
            choices=("exact", "slot"),
            help="exact (a link is busy exactly while it transmits) or slot (whole "
            "slots: the paper's one transfer per (link, slot))",
        ),
        Option(
            "trees",
            "choice",
            "auto",
            choices=("sequential", "concurrent", "auto"),
            help="sequential (the paper: one broadcast tree after another), "
            "concurrent (all grown together, nearest first) or auto (both, the "
            "plan that finishes first)",
        ),
        Option(
            "nearest",
            "choice",
            "auto",
            choices=("arrival", "cost", "auto"),
            help="arrival (TM attaches the earliest-arriving terminal), cost (the "
            "paper's edge cost: transmission plus storage slots added to the "
            "tree) or auto (both, the plan that finishes first)",
        ),
        Option(
            "negotiate",
            "int",
            "auto",
            words=("off", "auto"),
            minimum=0,
            unit="rounds",
            help="re-planning rounds with penalties on contended edges (not in the "
            "paper): an integer, 0/off, or auto (up to 16, fewer on large "
            "problems); the earliest plan is kept",
        ),
        Option(
            "price",
            "float",
            "auto",
            words=("off", "auto"),
            minimum=0.0,
            help="link-time price of broadcast tree edges (not in the paper): slots "
            "of key per slot of link time a transfer holds, off, or auto (0, and "
            "on small problems also 1, 2 and 4 with nearest=arrival; the plan "
            "that finishes first)",
        ),
        Option(
            "switch_copy",
            "bool",
            False,
            help="switches with the multicast capability copy a stream to several "
            "out-links (a multicast group in the IR: one stream up to where the routes part); "
            "full broadcasts only",
        ),
    ),
    size_aware=True,
    reference="Liu Fei, Wang Peng, Ma Han, Li Ye, Li Hongyan, 'Collective communication "
    "scheduling algorithm based on multicast time-expanded graph' (MTEGCCA), "
    "Journal on Communications, 2026, doi:10.11959/j.issn.1000-436x.2026062",
)
def synthesize(
    topology: Topology,
    collective: Collective,
    *,
    size: float | None = None,
    slot: Any = None,
    horizon: Any = None,
    occupancy: Any = None,
    trees: Any = None,
    nearest: Any = None,
    negotiate: Any = None,
    price: Any = None,
    switch_copy: bool = False,
) -> Schedule:
    """MTEGCCA: Steiner trees on a multicast time-expanded graph (Liu Fei et al., Journal on
    Communications 2026).

    With ``trees``/``nearest`` left to ``auto`` every combination is planned and the plan with
    the earliest completion (in slots; ties keep the paper's own variant, sequential + arrival)
    is lowered: a departure from the paper, which has one variant; planning is cheap next to
    lowering and verification, and no variant wins everywhere (concurrent trees on NDv2,
    cost-based attachment on DGX-2 and MI250 at large sizes, the paper's elsewhere).
    Each variant is improved by negotiated re-planning (``negotiate``, default ``auto``);
    on small problems link-time priced variants join (``price``, default ``auto``).
    """
    return lower(
        best_plan(
            topology,
            collective,
            size,
            slot,
            horizon,
            occupancy,
            trees,
            nearest,
            negotiate,
            price,
            bool(switch_copy),
        )
    )


def best_plan(
    topology: Topology,
    collective: Collective,
    size: float | None = None,
    slot: Any = None,
    horizon: Any = None,
    occupancy: Any = None,
    trees: Any = None,
    nearest: Any = None,
    negotiate: Any = None,
    price: Any = None,
    switch_copy: bool = False,
) -> Plan:
    """:func:`plan` for every variant ``auto`` stands for; the earliest-finishing plan.

    With ``slot`` left to ``auto`` the variants are planned with the paper's slot (one chunk on
    the fastest link) and, when that slot rounds the transfers up a lot (:func:`slot_waste` above
    ``REFINE_WASTE``) and the problem is small (``REFINE_WORK``), again with slots
    ``REFINE`` times shorter. Plans are compared by their as-soon-as-possible completion
    (:func:`asap_seconds`; whole slots round every transfer up, so the slot plan is a poor
    judge between slot lengths), then by the slot plan's. Ties keep the earlier candidate:
    paper's slot, sequential, arrival. With ``price`` left to ``auto`` and a small problem
    (``PRICE_WORK``) the candidates per slot also include the arrival variants of
    ``PRICE_TREES`` at every link-time price of ``PRICES``. With ``negotiate`` left to
    ``auto`` every candidate gets the same number of rounds, :func:`negotiation_rounds` of
    the candidate count (one budget, ``SEARCH_WORK``, for the whole search).
    """
    lam = _parse_price(price)
    tau0 = _parse_slot(slot)
    nbytes = size_option(size, "mteg", DEFAULT_SIZE)
    # the paper's graph: problem size (work) and whether the slot wastes much (refinement)
    g0 = SlotGraph(
        topology,
        collective.chunk_bytes(nbytes),
        tau0,
        exact=occupancy is None or str(occupancy).strip().lower() != "slot",
    )
    n_tasks = len(decompose(collective, g0.chunk_bytes))
    work = max(1, n_tasks * len(g0.edges))
    taus: list[Any] = [slot]
    if tau0 is None and slot_waste(g0) > REFINE_WASTE and work <= REFINE_WORK:
        taus.append(g0.tau / REFINE)
    # candidates per slot: every (trees, nearest) variant at price ``lam`` (0 with auto), then
    # with price=auto on small problems the priced arrival variants
    cands = [
        (g, n, lam or 0.0)
        for g in _variants(trees, ("sequential", "concurrent"))
        for n in _variants(nearest, ("arrival", "cost"))
    ]
    if lam is None and work <= PRICE_WORK:
        cands += [
            (g, "arrival", x)
            for g in _variants(trees, PRICE_TREES)
            if g in PRICE_TREES
            for x in PRICES
            if "arrival" in _variants(nearest, ("arrival", "cost"))
        ]
    rounds = _parse_negotiate(negotiate)
    if rounds is None:  # auto: the search budget shared by every candidate
        rounds = negotiation_rounds(g0, n_tasks, len(cands) * len(taus))
    best: Plan | None = None
    for tau in taus:
        for g, n, x in cands:
            p = plan(
                topology, collective, size, tau, horizon, occupancy, g, n, rounds, x, switch_copy
            )
            if best is None or p.better_than(best):
                best = p
    assert best is not None  # at least one slot length and one candidate
    return best


#: ``price=auto``: the link-time prices tried besides 0 (slots of key per slot of link time),
#: with ``nearest=arrival`` and concurrent trees (where they helped: MI250, DGX-2, NDv2) ...
PRICES = (1.0, 2.0, 4.0)
PRICE_TREES = ("concurrent",)
#: ... on problems up to this size (tasks x transmission edges; 10-chassis NDv2 is beyond)
PRICE_WORK = 20_000


#: ``slot=auto`` also plans with slots this many times shorter than the paper's ...
REFINE = 4
#: ... when the paper's slot inflates the transfers by more than this fraction in all ...
REFINE_WASTE = 0.1
#: ... and the problem is small (tasks x transmission edges at most this).
REFINE_WORK = 20_000


def slot_waste(graph: SlotGraph) -> float:
    """How much whole slots inflate the transfers: ``sum(L tau - exact) / sum(exact)`` over
    the transmission edges (``exact`` = alpha + chunk / bottleneck bandwidth)."""
    exact = sum(e.exact_s for e in graph.edges)
    if exact <= 0:
        return 0.0
    return sum(e.length * graph.tau - e.exact_s for e in graph.edges) / exact


def _variants(value: Any, choices: tuple[str, ...]) -> tuple[str, ...]:
    if value is None or str(value).strip().lower() == "auto":
        return choices
    return (str(value),)


def mteg_horizon(
    topology: Topology,
    collective: Collective,
    size: float | None = None,
    tau: Any = None,
    occupancy: str = "slot",
) -> tuple[int, float]:
    """Completion of MTEGCCA's plan as ``(slots, seconds)`` with slots of length ``tau``.

    The paper's §3.2: a feasible MTEGCCA plan bounds the number of epochs an exact time-expanded
    solver (TE-CCL) needs from above: with epochs of length ``tau`` (default: one chunk on the
    fastest link), ``slots`` epochs suffice. ``tau`` is a time in seconds or a string
    (``"0.5us"``); ``size`` defaults to 1 MiB. The default ``occupancy="slot"`` plans with the
    paper's whole-slot resources (a link carries one transfer per slot, a transfer arrives
    ``ceil(alpha/tau) + ceil(chunk/(bw tau))`` slots after it leaves), which an epoch-based
    solver can reproduce epoch by epoch; ``"exact"`` gives the (tighter) plan ``synth`` uses.
    """
    p = best_plan(topology, collective, size, tau, occupancy=occupancy)
    return int(p.slots), float(p.seconds)
