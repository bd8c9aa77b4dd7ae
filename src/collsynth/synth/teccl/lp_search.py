"""The AllToAll LP's search (see the package docstring): the fewest feasible epochs, the
user's horizon grown while infeasible and then bisected between a lower bound and the
heuristic, the LP solved with its objective there and decomposed into paths."""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from ...collective import Collective
from ...errors import CollsynthError
from ...topology.model import Topology
from . import lp as _lp
from .common import INF, EpochOp, epoch_distances, to_gpu_distance, unicast_demand
from .epochs import EpochGrid
from .heuristic import spt_schedule
from .highs import SolveInfo, SolveSettings, solve, too_large
from .lower import greedy_epochs


def run_lp(
    topology: Topology,
    collective: Collective,
    grid: EpochGrid,
    size: float,
    user_epochs: int | None,
    parts: int,
    settings: SolveSettings,
) -> tuple[list[EpochOp], dict]:
    """The AllToAll LP: the fewest feasible epochs bisected between a lower bound and the
    heuristic, then solved with the objective and decomposed into paths (byte ranges of
    ``1/parts`` of a chunk)."""
    t = topology
    demand, chunk_ids = unicast_demand(collective)
    if demand.sum() <= 0:
        raise CollsynthError(f"{collective.describe()} moves no data")
    dist = epoch_distances(t, grid.lp_delay)
    to_gpu = to_gpu_distance(t, grid.lp_delay)
    pairs = np.argwhere(demand > 0)
    e = dist[t.compute_nodes[pairs[:, 0]], t.compute_nodes[pairs[:, 1]]]
    if np.any(e >= INF):
        raise CollsynthError("some demand cannot reach its destination")
    t0 = time.perf_counter()
    lower_bound, bound_time = _lower_bound(t, collective, size, grid, int(e.max()))
    from ...sim import simulate

    spt = spt_schedule(t, collective)
    heuristic_ops, heuristic_epochs = greedy_epochs(t, grid, spt)
    info: dict[str, Any] = {
        "lower_bound_epochs": lower_bound,
        "horizons": [],
        "heuristic": {
            "algorithm": "spt",
            "epochs": heuristic_epochs,
            "sim_time_s": simulate(spt, size, order="plan").time_s,
        },
        "bound_s": bound_time,
    }
    probe = _Probe(t, grid, demand, dist, to_gpu, t0, settings, info)
    lo, hi, final = _fewest_feasible_epochs(probe, lower_bound, heuristic_epochs, user_epochs)
    if final is None:
        # no LP solution in time: the epoch-placed heuristic (whole chunks)
        ops, done = heuristic_ops, heuristic_epochs
        stats = {"paths": len(heuristic_ops), "dropped_volume": 0.0, "rounding_max": 0.0}
        skipped = any(str(h["status"]).startswith("skipped") for h in info["horizons"])
        status = (
            "optimal_heuristic"
            if lo >= heuristic_epochs
            else "skipped_heuristic"
            if skipped
            else "time_limit_heuristic"
        )
    else:
        layout, result = final
        assert result.x is not None  # an optimal LP comes with its column values
        ops, done, stats = _lp.decompose(layout, t, grid, result.x, chunk_ids, parts)
        status = "optimal" if lo == hi else "time_limit"
    gap = 0.0 if lo >= hi else (hi - lo) / hi
    info.update(
        status=status,
        gap=gap,
        epochs_required=max(done, 1),
        horizon=hi,
        lp_completion_epochs=hi,
        decomposition=stats,
        proven_optimal=lo >= hi,
        makespan_gap=gap,
        lower_bound_epochs=lo,
    )
    return ops, info


def _lower_bound(
    t: Topology, collective: Collective, size: float, grid: EpochGrid, fewest: int
) -> tuple[int, float]:
    """The horizon's lower end: the fewest epochs of any path (``fewest``), and the
    bandwidth/latency lower bound (the LP moves at most bw * tau per link and epoch); above,
    the epoch-placed spt schedule is a feasible solution (a whole chunk over a slow link
    spreads over its window). Returns ``(epochs, bound in seconds or nan)``."""
    from ...bound import bound as lower_bound

    epochs = max(1, fewest)
    try:
        bound_time = lower_bound(t, collective, size).time_s
        epochs = max(epochs, int(math.floor(bound_time / grid.tau * (1 - 1e-9))))
    except CollsynthError:
        bound_time = float("nan")
    return epochs, bound_time


class _Probe:
    """Solves the LP at a horizon within what is left of the time limit (from ``t0``)."""

    def __init__(
        self,
        t: Topology,
        grid: EpochGrid,
        demand: np.ndarray,
        dist: np.ndarray,
        to_gpu: np.ndarray,
        t0: float,
        settings: SolveSettings,
        info: dict,
    ):
        self.t, self.grid, self.demand, self.dist, self.to_gpu = t, grid, demand, dist, to_gpu
        self.t0, self.settings, self.info = t0, settings, info

    def __call__(
        self, K: int, objective: bool = False
    ) -> tuple[bool | None, tuple[_lp.LpLayout, SolveInfo] | None]:
        """``(True, (layout, result))`` when optimal, ``(False, None)`` when infeasible,
        ``(None, None)`` when out of time, skipped or failed."""
        settings = self.settings
        remaining = settings.time_limit - (time.perf_counter() - self.t0)
        if remaining <= 0.01:
            return None, None
        layout = _lp.build(
            self.t, self.grid, self.demand, K, self.dist, self.to_gpu, objective=objective
        )
        if too_large(layout, K, remaining, settings.max_nonzeros, self.info):
            return None, None
        result = solve(
            layout.model,
            time_limit=remaining,
            gap=0.0,
            seed=settings.seed,
            highs_options=settings.highs_options,
        )
        self.info["horizons"].append(
            {
                "K": K,
                "status": result.status,
                "objective": objective,
                "columns": layout.model.num_cols,
                "rows": layout.model.num_rows,
                "wall_s": result.wall_s,
                **({"killed": True} if result.extra.get("killed") else {}),
            }
        )
        if result.status == "optimal":
            return True, (layout, result)
        if result.status == "infeasible":
            return False, None
        return None, None


def _fewest_feasible_epochs(
    probe: _Probe, lower_bound: int, heuristic_epochs: int, user_epochs: int | None
) -> tuple[int, int, tuple[_lp.LpLayout, SolveInfo] | None]:
    """The fewest feasible epochs: the user's horizon grown while infeasible, then bisection
    between ``lower_bound`` and the heuristic's ``heuristic_epochs``, then the solve with the
    objective there: ``(lo, hi, (layout, result) or None)``."""
    lo = lower_bound
    hi = heuristic_epochs
    found = None
    if user_epochs is not None and user_epochs < hi:
        K = max(user_epochs, lo)
        while K < hi:  # grow the user's horizon while infeasible
            feasible, solution = probe(K)
            if feasible is None:
                break
            if feasible:
                hi, found = K, solution
                break
            lo = K + 1
            K = max(K + 1, math.ceil(1.5 * K))
    while lo < hi:
        mid = (lo + hi) // 2
        feasible, solution = probe(mid)
        if feasible is None:
            break
        if feasible:
            hi, found = mid, solution
        else:
            lo = mid + 1
    final = None
    feasible, solution = (
        probe(hi, objective=True)
        if (found is not None or hi < heuristic_epochs or lo == hi)
        else (None, None)
    )
    if feasible:
        final = solution
    elif found is not None:
        final = found
    return lo, hi, final
