"""The HiGHS helper: the options ``highs=`` may set, the solve settings of one run, the
model-size rules (skip a model too large for the time left, presolve off on large ones) and
the solve itself, in a reused helper process that is killed when it overruns its limit."""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ... import deadline
from ...errors import CollsynthError
from ..options import Option
from .common import Model

if TYPE_CHECKING:
    import subprocess


#: The HiGHS options ``highs=`` may set: numbers and switches that steer the search, each
#: checked here against the range HiGHS accepts. Nothing that names a file or writes one
#: (``log_file``, ``solution_file``, ``write_solution_to_file``, ...) is passed on;
#: ``output_flag:true`` sends HiGHS' log to stderr.
HIGHS_OPTIONS: dict[str, Option] = {
    o.name: o
    for o in (
        Option("time_limit", "time", minimum=0.0, help="HiGHS' own limit (the smaller wins)"),
        Option("mip_rel_gap", "float", minimum=0.0),
        Option("mip_abs_gap", "float", minimum=0.0),
        Option("threads", "int", minimum=0, maximum=256),
        Option("random_seed", "int", minimum=0, maximum=2**31 - 1),
        Option("presolve", "choice", choices=("off", "choose", "on")),
        Option("parallel", "choice", choices=("off", "choose", "on")),
        Option("solver", "choice", choices=("choose", "simplex", "ipm")),
        Option("simplex_strategy", "int", minimum=0, maximum=4),
        Option("mip_heuristic_effort", "float", minimum=0.0, maximum=1.0),
        Option("mip_detect_symmetry", "bool"),
        Option("mip_max_nodes", "int", minimum=0, maximum=2**31 - 1),
        Option("mip_max_stall_nodes", "int", minimum=0, maximum=2**31 - 1),
        Option("mip_max_leaves", "int", minimum=0, maximum=2**31 - 1),
        Option("mip_max_improving_sols", "int", minimum=1, maximum=2**31 - 1),
        Option("simplex_iteration_limit", "int", minimum=0, maximum=2**31 - 1),
        Option("ipm_iteration_limit", "int", minimum=0, maximum=2**31 - 1),
        Option("primal_feasibility_tolerance", "float", minimum=1e-10),
        Option("dual_feasibility_tolerance", "float", minimum=1e-10),
        Option("mip_feasibility_tolerance", "float", minimum=1e-10),
        Option("output_flag", "bool"),
    )
}


def parse_highs_options(value: Any) -> dict:
    """``name:value,name:value`` (or a dict) as HiGHS options with typed values; only the
    options of :data:`HIGHS_OPTIONS`, each once, within the range HiGHS accepts."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return {}
    if isinstance(value, dict):
        items = [(str(k), v) for k, v in value.items()]
    else:
        items = []
        for item in str(value).split(","):
            name, sep, raw = item.partition(":")
            if not sep or not name.strip():
                raise CollsynthError(f"teccl option highs={value!r}: {item!r} is not name:value")
            items.append((name.strip(), raw.strip()))
    out: dict[str, Any] = {}
    for name, raw in items:
        opt = HIGHS_OPTIONS.get(name)
        if opt is None:
            raise CollsynthError(
                f"teccl option highs: HiGHS option {name!r} cannot be set here (allowed: "
                f"{', '.join(sorted(HIGHS_OPTIONS))})"
            )
        if name in out:
            raise CollsynthError(f"teccl option highs: HiGHS option {name!r} is given twice")
        out[name] = opt.parse(raw, "teccl highs")
    return out


@dataclass
class SolveSettings:
    """How every solve of one run is made: shared time limit and HiGHS settings (and, for the
    MILP, whether to warm-start and to use the symmetric model)."""

    time_limit: float
    gap: float
    seed: int
    highs_options: dict
    max_nonzeros: float
    warm_start: bool = False
    symmetry: bool = False


#: Models with more nonzeros than this are solved without HiGHS's presolve (unless the
#: ``highs`` option says otherwise): on them it costs more than it saves within the time
#: limits used here. 8x5 mesh at 1 MB (765 k nonzeros, warm start 46 epochs): presolve 20 s,
#: then the 45-epoch optimum at 38 s; without it the optimum at 3.6 s. Smaller models keep it:
#: the 36 k nonzero symmetric model of DGX-2 x2 at 1 MB reaches 45 epochs only with it.
PRESOLVE_MAX_NNZ = 250_000


def presolve_by_size(model: Model, highs_options: dict) -> dict:
    """The HiGHS options for ``model``: presolve off above :data:`PRESOLVE_MAX_NNZ`."""
    if len(model.vals) > PRESOLVE_MAX_NNZ and "presolve" not in highs_options:
        return {**highs_options, "presolve": "off"}
    return highs_options


def too_large(layout: Any, K: int, remaining: float, max_nonzeros: float, info: dict) -> bool:
    """Whether the model of ``layout`` (at horizon ``K``) has more nonzeros than the
    ``remaining`` seconds allow (then recorded as a skipped horizon in ``info``)."""
    nnz = int(len(layout.model.vals))
    if max_nonzeros and nnz > max_nonzeros * remaining:
        info["horizons"].append(
            {
                "K": K,
                "status": "skipped (model too large for the time limit)",
                "columns": layout.model.num_cols,
                "rows": layout.model.num_rows,
                "nonzeros": nnz,
            }
        )
        return True
    return False


@dataclass
class SolveInfo:
    """What one solve returned: the status, the column values when there is a solution, the
    objective, dual bound and gap, and how the warm start fared."""

    status: str  # optimal, time_limit, infeasible, ...
    has_solution: bool
    x: np.ndarray | None
    objective: float = float("nan")
    dual_bound: float = float("nan")
    gap: float = float("nan")
    wall_s: float = 0.0
    warm_start: str = "none"
    extra: dict = field(default_factory=dict)


def solve(
    model: Model,
    *,
    time_limit: float,
    gap: float,
    seed: int = 0,
    start: np.ndarray | None = None,
    highs_options: dict | None = None,
    log: bool = False,
) -> SolveInfo:
    """Solve ``model`` with HiGHS (one thread, fixed seed: deterministic for the same input).

    The solve runs in a helper process (``python -m collsynth.synth.teccl._worker``, started
    once and reused), for two reasons. The time limit is kept: HiGHS checks its own limit
    rarely while it presolves a large model (minutes past a 60 s limit on 2 M nonzeros), so a
    solve still running :func:`hard_limit` seconds after it started is killed and reported as
    ``time_limit`` without a solution (the caller keeps its heuristic). And OR-Tools (imported
    by ForestColl's max-flow) ships its own ``libhighs.so.1``; once it is loaded, highspy's
    extension cannot load in the same process (same library name, different version), so the
    helper imports highspy first.
    """
    kwargs: dict[str, Any] = dict(
        model=model,
        time_limit=deadline.solver_budget(time_limit),
        gap=gap,
        seed=seed,
        start=start,
        highs_options=highs_options,
        log=log,
    )
    return _worker_call(kwargs, hard_limit(kwargs["time_limit"]))


#: A solve is killed this long after its own limit: ``HARD_GRACE_FACTOR * limit + HARD_GRACE_S``.
HARD_GRACE_FACTOR = 0.1
HARD_GRACE_S = 2.0

_WORKER: subprocess.Popen[bytes] | None = None


def hard_limit(time_limit: float) -> float:
    """Seconds after which a solve with HiGHS limit ``time_limit`` is killed."""
    return time_limit * (1.0 + HARD_GRACE_FACTOR) + HARD_GRACE_S


def _worker_call(kwargs: dict, hard: float) -> SolveInfo:
    import atexit
    import pickle
    import select
    import subprocess

    global _WORKER
    t0 = time.perf_counter()
    if kwargs.get("log") or (kwargs.get("highs_options") or {}).get("output_flag"):
        # the log goes to the helper's stderr: a fresh helper writes it where stderr is now
        # (it may have been redirected since the helper started)
        _stop_worker()
    if _WORKER is None or _WORKER.poll() is not None:
        _WORKER = subprocess.Popen(
            [sys.executable, "-m", "collsynth.synth.teccl._worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        atexit.register(_stop_worker)
    w = _WORKER
    assert w.stdin is not None and w.stdout is not None  # both opened as pipes above
    try:
        pickle.dump(kwargs, w.stdin, protocol=pickle.HIGHEST_PROTOCOL)
        w.stdin.flush()
        wait = hard - (time.perf_counter() - t0)
        ready, _, _ = select.select([w.stdout.fileno()], [], [], max(wait, 0.0))
        if not ready:  # HiGHS overran its limit: stop it, report no solution
            _stop_worker(kill=True)
            wall = time.perf_counter() - t0
            return SolveInfo("time_limit", False, None, wall_s=wall, extra={"killed": True})
        kind, value = pickle.load(w.stdout)
    except (deadline.TimeLimitError, KeyboardInterrupt):  # out of time, or interrupted
        _stop_worker(kill=True)  # it is mid-solve: its answer would be read by the next call
        raise
    except (EOFError, BrokenPipeError, OSError):
        _stop_worker()
        raise CollsynthError("the HiGHS helper process failed (is highspy installed?)") from None
    if kind == "ok":
        return value
    raise CollsynthError(value)


def _stop_worker(kill: bool = False) -> None:
    global _WORKER
    w, _WORKER = _WORKER, None
    if w is not None and w.poll() is None:
        if kill:
            w.kill()
            w.wait()
            return
        try:
            if w.stdin is not None:
                w.stdin.close()
            w.wait(timeout=5)
        except Exception:
            w.kill()


def solve_locally(
    model: Model,
    *,
    time_limit: float,
    gap: float,
    seed: int = 0,
    start: np.ndarray | None = None,
    highs_options: dict | None = None,
    log: bool = False,
) -> SolveInfo:
    """:func:`solve` in this process (what the helper process runs)."""
    try:
        import highspy
    except ImportError as e:  # pragma: no cover - dependency declared in pyproject
        raise CollsynthError(f"teccl needs the highspy package ({e})") from None
    t0 = time.perf_counter()
    log = bool(log) or bool((highs_options or {}).get("output_flag", False))
    with solver_output(log):  # the log (--opt highs=output_flag:true) goes to stderr
        return _solve_model(highspy, model, time_limit, gap, seed, start, highs_options, log, t0)


@contextlib.contextmanager
def solver_output(log: bool) -> Iterator[None]:
    """Route what native code prints on file descriptor 1 to stderr (``log``) or nowhere.

    highspy prints its banner when ``highspy.Highs()`` is constructed, before ``output_flag``
    can be set, and straight to the C library's stdout; stdout must carry only the command's
    result, so the descriptor itself is redirected while the solver runs.
    """
    sys.stdout.flush()
    saved = os.dup(1)
    target = os.dup(2) if log else os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(target, 1)
        yield
    finally:
        _flush_c_stdout()
        os.dup2(saved, 1)
        os.close(saved)
        os.close(target)


def _flush_c_stdout() -> None:
    try:
        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError):  # pragma: no cover - no C library to flush
        pass


def _solve_model(
    highspy: Any,
    model: Model,
    time_limit: float,
    gap: float,
    seed: int,
    start: np.ndarray | None,
    highs_options: dict | None,
    log: bool,
    t0: float,
) -> SolveInfo:
    solver = highspy.Highs()
    solver.setOptionValue("output_flag", bool(log))
    solver.setOptionValue("threads", 1)
    solver.setOptionValue("random_seed", int(seed))
    solver.setOptionValue("time_limit", float(max(time_limit, 0.01)))
    solver.setOptionValue("mip_rel_gap", float(gap))
    for k, v in (highs_options or {}).items():
        if k == "time_limit":  # HiGHS' own limit may shorten collsynth's, never lengthen it
            v = float(max(min(v, time_limit), 0.01))
        if solver.setOptionValue(k, v) != highspy.HighsStatus.kOk:
            raise CollsynthError(f"HiGHS rejected option {k}={v!r}")
    inf = highspy.kHighsInf
    lp = highspy.HighsLp()
    lp.num_col_ = model.num_cols
    lp.num_row_ = model.num_rows
    lp.col_cost_ = model.cost.astype(np.float64)
    lp.col_lower_ = np.where(np.isfinite(model.lower), model.lower, -inf).astype(np.float64)
    lp.col_upper_ = np.where(np.isfinite(model.upper), model.upper, inf).astype(np.float64)
    lp.row_lower_ = np.where(np.isfinite(model.row_lower), model.row_lower, -inf)
    lp.row_upper_ = np.where(np.isfinite(model.row_upper), model.row_upper, inf)
    order = np.lexsort((model.cols, model.rows))
    r, c, v = model.rows[order], model.cols[order], model.vals[order]
    start_ptr = np.zeros(model.num_rows + 1, dtype=np.int64)
    np.add.at(start_ptr, r + 1, 1)
    start_ptr = np.cumsum(start_ptr)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.num_col_ = model.num_cols
    lp.a_matrix_.num_row_ = model.num_rows
    lp.a_matrix_.start_ = start_ptr.astype(np.int32)
    lp.a_matrix_.index_ = c.astype(np.int32)
    lp.a_matrix_.value_ = v.astype(np.float64)
    is_mip = bool(model.integer.any())
    if is_mip:
        lp.integrality_ = [
            highspy.HighsVarType.kInteger if i else highspy.HighsVarType.kContinuous
            for i in model.integer.tolist()
        ]
    if solver.passModel(lp) == highspy.HighsStatus.kError:
        raise CollsynthError("HiGHS rejected the TE-CCL model")
    warm = "none"
    if start is not None and is_mip:
        sol = highspy.HighsSolution()
        sol.col_value = np.asarray(start, dtype=np.float64)
        sol.value_valid = True
        warm = "accepted" if solver.setSolution(sol) != highspy.HighsStatus.kError else "rejected"
    solver.run()
    model_status = solver.getModelStatus()
    name = solver.modelStatusToString(model_status).lower()
    info = solver.getInfo()
    has = info.primal_solution_status == 2  # kSolutionStatusFeasible
    status = {
        "optimal": "optimal",
        "infeasible": "infeasible",
        "time limit reached": "time_limit",
        "primal infeasible or unbounded": "infeasible",
    }.get(name, name.replace(" ", "_"))
    x = np.array(solver.getSolution().col_value) if has else None
    out = SolveInfo(status, has, x, wall_s=time.perf_counter() - t0, warm_start=warm)
    if has:
        out.objective = float(info.objective_function_value)
    if is_mip:
        out.dual_bound = float(info.mip_dual_bound)
        out.gap = float(info.mip_gap) if has else float("inf")
    else:
        out.gap = 0.0 if status == "optimal" else float("nan")
    return out
