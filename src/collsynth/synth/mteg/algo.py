"""MTEGCCA driver: decomposition into multicast tasks, ordering, planning and the timed IR."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ...collective import CollKind, Collective
from ...errors import CollsynthError
from ...schedule.ir import Schedule, ScheduleBuilder
from ...topology.model import Topology
from ...units import parse_time
from .. import register
from ..options import int_option, size_option
from .model import SlotGraph
from .steiner import Planner

#: Data size planned for when none is given (the schedule's timing is for this size).
DEFAULT_SIZE = float(1 << 20)

#: Collectives MTEGCCA handles: every one whose chunks travel from one source to destinations.
SUPPORTED = {CollKind.ALLGATHER, CollKind.BROADCAST, CollKind.CUSTOM, CollKind.GATHER,
             CollKind.SCATTER, CollKind.ALLTOALL}


@dataclass(frozen=True)
class Task:
    """One multicast: chunk ``chunk`` from rank ``source`` to ``dests`` (seed step 1)."""

    chunk: int
    source: int
    dests: tuple[int, ...]
    volume: float          # bytes delivered: chunk bytes x destinations
    round: int             # position of the chunk among its source's chunks
    spread: int            # the source's position in the farthest-first order of ranks

    @property
    def key(self) -> tuple:
        """Seed step 2: largest data first; ties by round, farthest-first source, chunk id."""
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
        r = int(np.argmax(cand))          # first maximum: lowest rank among ties
        order.append(r)
        chosen[r] = True
        near = np.minimum(near, sym[r])
    return order


def decompose(collective: Collective, chunk_bytes: float,
              spread: list[int] | None = None) -> list[Task]:
    """Multicast tasks of a non-reducing collective, in planning order (seed steps 1–2).

    Broadcast: one task per chunk. AllGather: one broadcast per (source, chunk), ``C`` chunks
    per rank. Multicast (custom collectives), Gather, Scatter, AllToAll: one task per chunk to
    its destination set. Ties in size are broken by the chunk's round at its source (its
    position among the source's chunks; for AllToAll its destination's offset from the source),
    then by the source's position in ``spread``, then by chunk id.
    """
    if collective.kind not in SUPPORTED:
        raise CollsynthError(f"mteg does not support {collective.kind.value} "
                             f"(it plans copies only, no reductions)")
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

    @property
    def tau(self) -> float:
        return self.graph.tau

    @property
    def slots(self) -> int:
        return self.planner.finish

    @property
    def seconds(self) -> float:
        return self.planner.finish * self.graph.tau


def plan(topology: Topology, collective: Collective, size: float | None = None,
         slot: Any = None, horizon: Any = None, occupancy: Any = None,
         trees: Any = None, nearest: Any = None) -> Plan:
    """Run MTEGCCA's planning (no IR): the slot plan for ``size`` bytes."""
    if collective.num_ranks != topology.num_ranks:
        raise CollsynthError(f"collective has {collective.num_ranks} ranks but topology "
                             f"{topology.name!r} has {topology.num_ranks} compute nodes")
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
    cb = collective.chunk_bytes(nbytes)
    graph = SlotGraph(topology, cb, tau, exact=mode == "exact")
    tasks = decompose(collective, cb, spread_order(topology))
    planner = Planner(graph, h0, near)
    rest = tasks
    if grow == "concurrent":
        full = [t for t in tasks if len(t.dests) == graph.n - 1]
        rest = [t for t in tasks if len(t.dests) != graph.n - 1]
        planner.route_concurrent([(t.chunk, t.source) for t in full])
    for task in rest:
        planner.route(task.chunk, task.source, task.dests)
    return Plan(graph, planner, tasks, nbytes, collective, grow, near)


def lower(p: Plan) -> Schedule:
    """The timed IR of a plan: one operation per transmission edge of every tree."""
    g, pl = p.graph, p.planner
    t = g.topology
    coll_tasks = p.tasks
    b = ScheduleBuilder(t, p.collective)
    tau = g.tau
    on_link: dict[int, list[tuple[int, int]]] = {}
    edges = g.edges
    for op, (chunk, e, slot, parent) in enumerate(zip(pl.op_chunk, pl.op_edge, pl.op_slot,
                                                      pl.op_parent)):
        edge = edges[e]
        b.add(edge.src, edge.dst, chunk, route=edge.route,
              deps=(parent,) if parent >= 0 else (), start=slot * tau, step=slot)
        for l, a, _w in edge.occ:
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
    b.meta.update({
        "mteg": {
            "slot_s": tau,
            "occupancy": "exact" if g.exact else "slot",
            "trees": p.trees,
            "nearest": p.nearest,
            "chunk_bytes": g.chunk_bytes,
            "plan_slots": pl.finish,
            "plan_time_s": pl.finish * tau,
            "horizon_slots": pl.horizon,
            "initial_horizon_slots": pl.initial_horizon,
            "horizon_growths": pl.growths,
            "tasks": len(coll_tasks),
            "transmission_edges": len(edges),
            "max_rounding_s": float(max(rounding)) if rounding else 0.0,
            "links_without_order": unordered,
        }})
    return b.build()


@register("mteg", collectives=SUPPORTED,
          summary="MTEGCCA (seed 002): Takahashi–Matsuyama Steiner trees per broadcast on an "
                  "implicit multicast time-expanded graph; timed, conflict-free slots",
          options={"slot": "slot length tau (a time, e.g. 0.5us); default auto: one chunk on "
                           "the fastest link",
                   "horizon": "initial horizon H in slots: auto or an integer; doubled "
                              "automatically while a broadcast cannot be routed",
                   "occupancy": "exact (default: a link is busy exactly while it transmits) or "
                                "slot (whole slots: the seed's one transfer per (link, slot))",
                   "trees": "sequential (the seed: one broadcast tree after another), "
                            "concurrent (all broadcast trees grown together, nearest first) or "
                            "auto (default: both, the plan that finishes first)",
                   "nearest": "arrival (TM attaches the earliest-arriving terminal), cost (the "
                              "seed's TEG edge cost: transmission plus storage slots added to "
                              "the tree) or auto (default: both, the plan that finishes "
                              "first)"},
          size_aware=True)
def synthesize(topology: Topology, collective: Collective, *, size: float | None = None,
               slot: Any = None, horizon: Any = None, occupancy: Any = None,
               trees: Any = None, nearest: Any = None) -> Schedule:
    """MTEGCCA: Steiner trees on a multicast time-expanded graph (seed 002).

    With ``trees``/``nearest`` left to ``auto`` every combination is planned and the plan with
    the earliest completion (in slots; ties keep the seed's own variant, sequential + arrival)
    is lowered: a departure from the seed, which has one variant; planning is cheap next to
    lowering and verification, and no variant wins everywhere (concurrent trees on NDv2,
    cost-based attachment on DGX-2 and MI250 at large sizes, the seed's elsewhere).
    """
    return lower(best_plan(topology, collective, size, slot, horizon, occupancy, trees,
                           nearest))


def best_plan(topology: Topology, collective: Collective, size: float | None = None,
              slot: Any = None, horizon: Any = None, occupancy: Any = None,
              trees: Any = None, nearest: Any = None) -> Plan:
    """:func:`plan` for every variant ``auto`` stands for; the earliest-finishing plan."""
    best = None
    for g in _variants(trees, ("sequential", "concurrent")):
        for n in _variants(nearest, ("arrival", "cost")):
            p = plan(topology, collective, size, slot, horizon, occupancy, g, n)
            if best is None or p.planner.finish < best.planner.finish:
                best = p
    return best


def _variants(value: Any, choices: tuple[str, ...]) -> tuple[str, ...]:
    if value is None or str(value).strip().lower() == "auto":
        return choices
    return (str(value),)


def mteg_horizon(topology: Topology, collective: Collective, size: float | None = None,
                 tau: Any = None, occupancy: str = "slot") -> tuple[int, float]:
    """Completion of MTEGCCA's plan as ``(slots, seconds)`` with slots of length ``tau``.

    Seed 002 §3.2: a feasible MTEGCCA plan bounds the number of epochs an exact time-expanded
    solver (TE-CCL) needs from above: with epochs of length ``tau`` (default: one chunk on the
    fastest link), ``slots`` epochs suffice. ``tau`` is a time in seconds or a string
    (``"0.5us"``); ``size`` defaults to 1 MiB. The default ``occupancy="slot"`` plans with the
    seed's whole-slot resources (a link carries one transfer per slot, a transfer arrives
    ``ceil(alpha/tau) + ceil(chunk/(bw tau))`` slots after it leaves), which an epoch-based
    solver can reproduce epoch by epoch; ``"exact"`` gives the (tighter) plan ``synth`` uses.
    """
    p = best_plan(topology, collective, size, tau, occupancy=occupancy)
    return int(p.slots), float(p.seconds)
