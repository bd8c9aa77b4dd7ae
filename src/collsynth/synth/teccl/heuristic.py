"""The heuristic schedules placed into epochs: the MILP's warm start and every search's
horizon (the spt schedule, and for AllGather and Broadcast rarest-first flooding and the MTEG
schedule, whichever finishes first)."""

from __future__ import annotations

from ...collective import Collective, CollKind
from ...errors import CollsynthError
from ...schedule.ir import Schedule
from ...topology.model import Topology
from .common import EpochOp
from .epochs import EpochGrid
from .lower import flood_epochs, greedy_epochs


def spt_schedule(topology: Topology, collective: Collective) -> Schedule:
    """The ``spt`` schedule (fewest-transfer trees): the heuristics' starting point."""
    from .. import synthesize

    return synthesize("spt", topology, collective, link_order=False)


#: Largest AllGather/Broadcast for which the MTEG schedule is also tried as the warm start.
MTEG_MAX_RANKS = 128


def milp_heuristic(
    topology: Topology, grid: EpochGrid, collective: Collective, size: float
) -> tuple[list[EpochOp], int, dict, list[Schedule]]:
    """The warm start and horizon: the spt schedule placed into epochs, or for AllGather and
    Broadcast rarest-first flooding or the MTEG schedule placed into epochs (up to
    ``MTEG_MAX_RANKS`` ranks) when they finish earlier: ``(ops, epochs, facts, the IR
    schedules tried)``."""
    from ...sim import simulate
    from .. import synthesize

    t = topology
    spt = spt_schedule(t, collective)
    tried = [spt]
    spt_time = simulate(spt, size, order="plan").time_s
    best_ops, best_epochs = greedy_epochs(t, grid, spt)
    facts = {
        "algorithm": "spt",
        "sim_time_s": spt_time,
        "epochs": best_epochs,
        "spt_epochs": best_epochs,
    }
    if collective.kind in (CollKind.ALLGATHER, CollKind.BROADCAST):
        flood = flood_epochs(t, grid, collective, best_epochs)
        if flood is not None:
            facts["flood_epochs"] = flood[1]
            if flood[1] < best_epochs:
                best_ops, best_epochs = flood
                facts.update(algorithm="flood", epochs=best_epochs)
        if collective.num_ranks <= MTEG_MAX_RANKS:
            try:
                mteg = synthesize("mteg", t, collective, size=size, link_order=False)
            except CollsynthError:
                mteg = None  # (a fabric MTEG cannot route: the others stand)
            if mteg is not None:
                tried.append(mteg)
                mteg_ops, mteg_epochs = greedy_epochs(t, grid, mteg)
                facts["mteg_epochs"] = mteg_epochs
                if mteg_epochs < best_epochs:
                    best_ops, best_epochs = mteg_ops, mteg_epochs
                    facts.update(algorithm="mteg", epochs=best_epochs)
    return best_ops, best_epochs, facts, tried
