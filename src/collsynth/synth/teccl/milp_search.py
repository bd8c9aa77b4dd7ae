"""The multicast MILP's search (see the package docstring): the heuristic's horizon, the
epoch lower bounds, the symmetric model where the fabric allows it, the horizon grown while
infeasible, the full model warm-started from the symmetric solution in the time left, and
the solution decoded and compacted into epoch ops."""

from __future__ import annotations

import math
import time
from dataclasses import replace
from typing import Any

import numpy as np

from ...collective import Collective
from ...errors import CollsynthError
from ...topology.model import Topology
from . import milp as _milp
from . import symmetry as _symmetry
from .common import INF, Commodities, EpochOp, epoch_distances, to_gpu_distance
from .cut_bound import epoch_cut_bound
from .epochs import EpochGrid
from .heuristic import milp_heuristic
from .highs import SolveSettings, presolve_by_size, solve, too_large
from .lower import compact_epochs

#: Seconds a solve may take when the warm start already meets the lower bound (it can only
#: move deliveries earlier).
POLISH_S = 10.0
#: The symmetric model's share of the time limit when the full model (about NNZ_PER_COLUMN
#: nonzeros per column) would be admitted in the rest FULL_MARGIN times over (so that it
#: likely solves there); otherwise the symmetric model gets all of it.
SYM_SHARE = 0.5
NNZ_PER_COLUMN = 4
FULL_MARGIN = 4


def run_milp(
    topology: Topology,
    collective: Collective,
    grid: EpochGrid,
    size: float,
    user_epochs: int | None,
    objective: str,
    switch_copy: bool,
    settings: SolveSettings,
) -> tuple[list[EpochOp], dict]:
    """The multicast MILP from the heuristic's horizon (see the package docstring): the best
    epoch ops found and the run's facts."""
    t = topology
    commodities = Commodities.of(collective)
    if not len(commodities):
        raise CollsynthError(f"{collective.describe()} moves no data")
    dist = epoch_distances(t, grid.delay)
    to_gpu = to_gpu_distance(t, grid.delay)
    fewest = fewest_epochs(t, commodities, dist)
    heuristic_ops, heuristic_epochs, heuristic, tried = milp_heuristic(t, grid, collective, size)
    lower_bound = epoch_cut_bound(t, grid, commodities, dist, to_gpu, fewest, heuristic_epochs)
    info: dict[str, Any] = {
        "heuristic": heuristic,
        "lower_bound_epochs": lower_bound,
        "fewest_epochs": fewest,
        "horizons": [],
    }
    K = user_epochs if user_epochs is not None else heuristic_epochs
    run_start = time.perf_counter()
    if heuristic_epochs <= lower_bound and user_epochs is None:
        # the heuristic meets the lower bound: its completion is optimal; a short solve only
        # moves deliveries earlier (the reward), where the model is small enough for it
        info["heuristic_meets_bound"] = True
        # (admitted only with FULL_MARGIN headroom: a polish killed at its limit is wasted)
        settings = replace(
            settings,
            time_limit=min(settings.time_limit, POLISH_S),
            max_nonzeros=settings.max_nonzeros / FULL_MARGIN,
        )
    sym = _symmetry.find(t, commodities, grid) if settings.symmetry else None
    warm = (heuristic_ops, heuristic_epochs)
    if sym is not None:
        info["symmetric_model"] = sym.to_dict(commodities)
        # a symmetric warm start (the heuristic's own is not symmetric, so infeasible there)
        symmetric_start = None
        for schedule in tried:
            one = _symmetry.greedy_epochs(t, grid, schedule, sym, commodities)
            if one is not None and (symmetric_start is None or one[1] < symmetric_start[1]):
                symmetric_start = one
        if symmetric_start is not None:
            info["symmetric_model"]["warm_start_epochs"] = symmetric_start[1]
            if symmetric_start[1] <= heuristic_epochs:  # (a longer one only makes it larger)
                warm = (_symmetry.expand(sym, commodities, symmetric_start[0]), heuristic_epochs)
    symmetric_settings = settings
    if sym is not None:
        # keep time for the full model after the symmetric one where it would be admitted
        full_nonzeros = NNZ_PER_COLUMN * _milp.column_count(
            t, grid, commodities, K, dist, to_gpu, objective
        )
        rest = (1 - SYM_SHARE) * settings.time_limit
        if settings.max_nonzeros and full_nonzeros * FULL_MARGIN <= settings.max_nonzeros * rest:
            symmetric_settings = replace(settings, time_limit=SYM_SHARE * settings.time_limit)
    best_ops, best_done, status, gap_out, K, kept = _solve_horizons(
        t, grid, commodities, dist, to_gpu, K, warm, switch_copy, objective, symmetric_settings,
        info, sym,
    )  # fmt: skip
    left = settings.time_limit - (time.perf_counter() - run_start)
    if sym is not None and best_done > info["lower_bound_epochs"] and left > 1.0:
        # the full model from the symmetric solution, in the time left: its dual bound holds
        # for every schedule (and it may find a non-symmetric improvement)
        best_ops, best_done, status, gap_out, kept = _full_polish(
            t, grid, commodities, dist, to_gpu, (best_ops, best_done, status, gap_out, kept),
            switch_copy, objective, replace(settings, time_limit=left), info,
        )  # fmt: skip
    # where the schedule came from: the solver's own, or the heuristics' (HiGHS returning its
    # warm start unimproved counts as the heuristics')
    info["schedule_from"] = "heuristic" if kept else "solver"
    if best_done > heuristic_epochs:  # the heuristic beats what the solver found in time
        best_ops, best_done = heuristic_ops, heuristic_epochs
        status = f"{status}_heuristic" if not status.endswith("heuristic") else status
        info["schedule_from"] = "heuristic"
    lower_bound = info["lower_bound_epochs"]
    makespan_gap = max(0.0, (best_done - lower_bound) / best_done) if best_done else 0.0
    info["mip_gap"] = float(gap_out)
    if sym is not None and status == "optimal" and best_done > lower_bound:
        status = "optimal_symmetric"  # HiGHS's bound holds among symmetric schedules only
    if objective == "makespan":
        # the completion epoch's gap to the best bound that holds for every schedule (epoch
        # cut bound, fewest epochs, HiGHS's dual bound of a full model): what the user waits
        # for; the MIP gap also counts the early-delivery reward
        gap_out = makespan_gap
        if best_done <= lower_bound:
            status = "optimal"  # the completion is proven optimal (the reward may not be)
    elif sym is not None:
        gap_out = makespan_gap
    info.update(
        status=status,
        gap=float(gap_out) if np.isfinite(gap_out) else makespan_gap,
        epochs_required=best_done,
        horizon=K,
        makespan_gap=makespan_gap,
        proven_optimal=bool(best_done <= lower_bound),
    )
    return best_ops, info


def _full_polish(
    t: Topology,
    grid: EpochGrid,
    commodities: Commodities,
    dist: np.ndarray,
    to_gpu: np.ndarray,
    found: tuple,
    switch_copy: bool,
    objective: str,
    settings: SolveSettings,
    info: dict,
) -> tuple:
    """The full MILP at the symmetric solution's completion epoch, warm-started from it:
    ``found`` (ops, completion, status, gap, whether it is the heuristics' warm start) or what
    the full model improves to. Its horizon is recorded with ``model: full``."""
    ops, done, status, gap, kept = found
    n = len(info["horizons"])
    full_ops, full_done, full_status, full_gap, _, full_kept = _solve_horizons(
        t, grid, commodities, dist, to_gpu, done, (ops, done), switch_copy, objective, settings,
        info, None,
    )  # fmt: skip
    for horizon in info["horizons"][n:]:
        horizon["model"] = "full"
    if full_done <= done and not full_status.endswith("heuristic"):
        # (the full model keeping the symmetric solution keeps its origin)
        return full_ops, full_done, full_status, full_gap, kept and full_kept
    return ops, done, status, gap, kept


def fewest_epochs(t: Topology, commodities: Commodities, dist: np.ndarray) -> int:
    """The fewest epochs in which every chunk can reach all its destinations."""
    src_nodes = t.compute_nodes[commodities.src]
    fewest = 0
    for q, ds in enumerate(commodities.dests):
        e = dist[src_nodes[q], t.compute_nodes[ds]]
        if np.any(e >= INF):
            raise CollsynthError(
                f"chunk {int(commodities.chunk[q])} cannot reach all its destinations"
            )
        fewest = max(fewest, int(e.max()))
    return fewest


def _solve_horizons(
    t: Topology,
    grid: EpochGrid,
    commodities: Commodities,
    dist: np.ndarray,
    to_gpu: np.ndarray,
    K: int,
    warm: tuple[list, int],
    switch_copy: bool,
    objective: str,
    settings: SolveSettings,
    info: dict,
    sym: _symmetry.Symmetry | None = None,
):
    """Solve at horizon ``K``, grown while below the epoch lower bound or infeasible, until a
    solution, the time limit or a model too large: ``(ops, completion epoch, status, MIP gap,
    last K, whether the result is the warm start itself)`` (the heuristic ``warm`` while
    nothing better is found). With ``sym`` the model has one commodity per orbit
    (:mod:`.symmetry`)."""
    warm_ops, warm_epochs = warm
    lower_bound = info["lower_bound_epochs"]
    model_commodities = commodities if sym is None else sym.representatives(commodities)
    commodity_of_chunk = {int(c): q for q, c in enumerate(model_commodities.chunk.tolist())}
    classes = (None, None) if sym is None else (sym.link_class, sym.weight)
    t0 = time.perf_counter()
    best_ops, best_done, status, gap_out = warm_ops, warm_epochs, "heuristic", float("nan")
    kept = True  # the result is the warm start (or the heuristic) itself
    while True:
        remaining = settings.time_limit - (time.perf_counter() - t0)
        if K < lower_bound:
            info["horizons"].append({"K": K, "status": "infeasible (below the lower bound)"})
            K = min(max(K + 1, math.ceil(1.5 * K)), max(warm_epochs, lower_bound))
            continue
        if remaining <= 0.01:
            info["horizons"].append({"K": K, "status": "not solved (time limit)"})
            status = "time_limit_heuristic"
            break
        layout = _milp.build(
            t, grid, model_commodities, K, dist, to_gpu, switch_copy, objective, *classes
        )
        if too_large(layout, K, remaining, settings.max_nonzeros, info):
            status = "skipped_heuristic"
            break
        start = None
        if settings.warm_start and K >= warm_epochs:
            mine = [o for o in warm_ops if o.chunk in commodity_of_chunk]  # (representatives')
            start = _milp.warm_vector(layout, t, model_commodities, grid, mine, commodity_of_chunk)
        result = solve(
            layout.model,
            time_limit=remaining,
            # (the makespan objective, W x epochs - reward, is about K times the reward:
            # the gap is the reward's, as in TE-CCL's objective)
            gap=settings.gap / max(1, K) if objective == "makespan" else settings.gap,
            seed=settings.seed,
            start=start,
            highs_options=presolve_by_size(layout.model, settings.highs_options),
        )
        entry = {
            "K": K,
            "status": result.status,
            "columns": layout.model.num_cols,
            "rows": layout.model.num_rows,
            "nonzeros": int(len(layout.model.vals)),
            "warm_start": result.warm_start,
            "wall_s": result.wall_s,
        }
        if result.extra.get("killed"):
            entry["killed"] = True  # HiGHS overran its limit (see highs.hard_limit)
        info["horizons"].append(entry)
        if result.has_solution:
            assert result.x is not None  # a solution comes with its column values
            ops, done = _decode_solution(
                layout, t, model_commodities, grid, result.x, switch_copy, entry, sym, commodities
            )
            if start is not None:  # did HiGHS find better than what it was given?
                warm_objective = float(layout.model.cost @ start)
                entry["improved_warm_start"] = bool(
                    result.objective < warm_objective - 1e-9 * max(1.0, abs(warm_objective))
                )
            if done <= best_done or status == "heuristic":
                best_ops, best_done = ops, done
                status = result.status
                gap_out = result.gap
                kept = not entry.get("improved_warm_start", True)
            if objective == "makespan" and np.isfinite(result.dual_bound) and sym is None:
                # (a symmetric model's bound holds only for symmetric schedules)
                # objective = W * epochs - (early-delivery reward in [0, W)): epochs >= dual / W
                bound = math.ceil(result.dual_bound / layout.W - 1e-9)
                info["lower_bound_epochs"] = max(info["lower_bound_epochs"], bound)
            break
        if result.status == "infeasible":
            if K >= warm_epochs:  # cannot happen: the heuristic fits; keep it
                status = "heuristic"
                break
            K = min(max(K + 1, math.ceil(1.5 * K)), warm_epochs)
            continue
        status = f"{result.status}_heuristic"
        break
    return best_ops, best_done, status, gap_out, K, kept


def _decode_solution(
    layout: _milp.MilpLayout,
    t: Topology,
    commodities: Commodities,
    grid: EpochGrid,
    x: np.ndarray,
    switch_copy: bool,
    entry: dict,
    sym: _symmetry.Symmetry | None = None,
    full: Commodities | None = None,
) -> tuple[list[EpochOp], int]:
    """Epoch ops of a MILP solution (mapped to every commodity of ``full`` by ``sym`` for a
    symmetric model), compacted when that finishes no later: ``(ops, completion epoch)``."""
    ops, done = _milp.decode(layout, t, commodities, grid, x, switch_copy)
    if sym is not None and full is not None:
        ops = _symmetry.expand(sym, full, ops)
    entry["epochs_required"] = done
    compact_ops, compact_done = compact_epochs(t, grid, ops)
    if compact_done <= done:
        ops, done = compact_ops, compact_done
        entry["epochs_after_compaction"] = done
    return ops, done
