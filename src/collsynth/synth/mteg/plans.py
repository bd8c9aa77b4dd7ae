"""A finished slot plan (:class:`Plan`), one planning pass over every task
(:func:`route_all`, the paper's steps 3–5) and the as-soon-as-possible completion by which plans
are compared (:func:`asap_seconds`)."""

from __future__ import annotations

from dataclasses import dataclass

from ...collective import Collective
from .model import SlotGraph
from .steiner import Planner
from .tasks import Task


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

    def adopt(self, other: Plan) -> None:
        """Take ``other``'s planner (a re-planning of the same tasks) and its cached
        :attr:`asap`."""
        self.planner = other.planner
        self._asap = other._asap

    def better_than(self, other: Plan) -> bool:
        """Strictly earlier as soon as possible (relative 1e-12), then in the slot plan."""
        a, b = self.asap, other.asap
        if abs(a - b) > 1e-12 * max(a, b):
            return a < b
        return self.seconds < other.seconds * (1 - 1e-12)


def route_all(
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
