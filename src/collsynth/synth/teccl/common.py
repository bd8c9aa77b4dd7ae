"""Shared pieces: commodities, epoch operations, epoch distances and the HiGHS driver."""

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
from ...arrays import unique
from ...collective import Collective, CollKind
from ...errors import CollsynthError
from ...topology.model import Topology

if TYPE_CHECKING:
    import subprocess

INF = np.iinfo(np.int64).max // 4


@dataclass
class EpochOp:
    """A GPU-to-GPU transfer planned in epochs: the unit the MILP/LP solutions decode into."""

    chunk: int
    src: int  # rank
    dst: int  # rank
    route: tuple[int, ...]  # link ids (through switches only)
    k0: int  # epoch of the first hop
    arrive: int  # epoch from which the receiver may use it
    dep: int = -1  # index of the EpochOp that delivered the data to src
    part: tuple[int, int, int] | None = None
    group: int = -1  # a multicast: transfers a switch copies from one stream (-1: none)


@dataclass
class Commodities:
    """Multicast commodities of the MILP: one per chunk (source rank, destination ranks)."""

    chunk: np.ndarray
    src: np.ndarray
    dests: list[np.ndarray]

    @classmethod
    def of(cls, collective: Collective) -> Commodities:
        srcs = collective.chunk_source
        chunks, s_out, d_out = [], [], []
        for c in range(collective.num_chunks):
            s = int(srcs[c])
            d = np.array([x for x in collective.destinations(c) if x != s], dtype=np.int64)
            if len(d):
                chunks.append(c)
                s_out.append(s)
                d_out.append(d)
        return cls(np.array(chunks, dtype=np.int64), np.array(s_out, dtype=np.int64), d_out)

    def __len__(self) -> int:
        return len(self.chunk)


def unicast_demand(collective: Collective) -> tuple[np.ndarray, list[list[list[int]]]]:
    """(dem[s, d] in chunks, chunk ids per (s, d)) for collectives whose chunks each have one
    destination (AllToAll, Scatter, Gather, demand matrices)."""
    n = collective.num_ranks
    dem = np.zeros((n, n))
    ids: list[list[list[int]]] = [[[] for _ in range(n)] for _ in range(n)]
    srcs = collective.chunk_source
    for c in range(collective.num_chunks):
        s = int(srcs[c])
        dsts = [x for x in collective.destinations(c) if x != s]
        if len(dsts) > 1:
            raise CollsynthError(
                f"teccl mode=lp needs one destination per chunk; chunk {c} of "
                f"{collective.describe()} has {len(dsts)} (use mode=milp)"
            )
        if dsts:
            dem[s, dsts[0]] += 1
            ids[s][dsts[0]].append(c)
    return dem, ids


def epoch_distances(topology: Topology, delay: np.ndarray) -> np.ndarray:
    """Fewest epochs from every node to every node along links with the given delays
    (INF where unreachable). Delays may be 0 (cut-through switch hops)."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import dijkstra

    t = topology
    n = t.num_nodes
    w = delay.astype(np.float64) + 1e-6  # keep zero-delay links as edges
    order = np.lexsort((w, t.link_dst, t.link_src))
    src, dst, ww = t.link_src[order], t.link_dst[order], w[order]
    keep = np.ones(len(order), dtype=bool)
    keep[1:] = (src[1:] != src[:-1]) | (dst[1:] != dst[:-1])
    g = csr_matrix((ww[keep], (src[keep], dst[keep])), shape=(n, n))
    dist = dijkstra(g, directed=True)
    out = np.where(np.isfinite(dist), np.round(dist), INF)
    return out.astype(np.int64)


def to_gpu_distance(topology: Topology, delay: np.ndarray) -> np.ndarray:
    """Fewest epochs from each node to reach some compute node (0 for compute nodes)."""
    t = topology
    r = np.where(t.kind_codes == 0, 0, INF).astype(np.int64)
    sw_src = t.kind_codes[t.link_src] != 0
    ls, ld, dd = t.link_src[sw_src], t.link_dst[sw_src], delay[sw_src]
    for _ in range(t.num_nodes):
        cand = np.where(r[ld] >= INF, INF, r[ld] + dd)
        new = r.copy()
        np.minimum.at(new, ls, cand)
        if np.array_equal(new, r):
            break
        r = new
    return r


def epoch_cut_bound(
    topology: Topology,
    grid: Any,
    com: Commodities,
    dist: np.ndarray,
    to_gpu: np.ndarray,
    k_lo: int,
    k_hi: int,
) -> int:
    """The fewest epochs any solution of the epoch model needs by a cut argument (at least
    ``k_lo``; ``k_hi`` when no smaller horizon passes): for every rank and every chassis,
    server, pod, dc or group region ``S`` (:func:`collsynth.bound.groupings`), each chunk
    from outside with a destination inside must cross a link into ``S``, no earlier than its
    *release* ``r_q`` (the fewest epochs from its source to the tail of a link into ``S``).
    Its first crossing must also leave time to reach its farthest destination inside: after
    it, every destination ``d`` gets the chunk no sooner than the smallest delay of a link
    into ``S`` plus the fewest epochs from the nearest head of such a link to ``d``; so the
    first crossing starts by ``K - tail_q`` (the chunk's *tail*). Link ``l`` starts at most
    ``per_window[l]`` crossings in any ``window[l]`` epochs, and late enough to reach a GPU
    by the horizon. For every release threshold ``r`` and tail threshold ``e``, the chunks
    released at ``r`` or later with a tail of ``e`` or more must fit the crossings that start
    from ``r`` to ``K - e`` (Hall's condition for unit jobs with release dates and
    deadlines). A region entered only from within a larger one (a GPU of a chassis behind its
    switch) gets the cut again with later releases for the chunks from outside the larger
    one: they must cross into it first, and its links start only so many crossings per
    window (:func:`_crossing_releases`). Valid for every schedule of the model, symmetric or
    not."""
    t = topology
    if not len(com):
        return max(k_lo, 0)
    tail_len = grid.delay + np.where(to_gpu[t.link_dst] >= INF, INF // 2, to_gpu[t.link_dst])
    sets = _cut_sets(t, grid, com, dist)
    for K in range(max(k_lo, 0), k_hi):
        if all(_cuts_fit(grid, tail_len, K, *one) for one in sets):
            return K
    return max(k_lo, k_hi)


def _cut_sets(t: Topology, grid: Any, com: Commodities, dist: np.ndarray) -> list[tuple]:
    """Per region (see :func:`epoch_cut_bound`): ``(links entering it, their earliest
    start, release thresholds, tail thresholds, chunks with release and tail at or above
    each pair)``; and again for every region entered only from within a larger one, with the
    releases the larger one's crossings allow (:func:`_crossing_releases`)."""
    from ...bound import groupings

    masks = []
    for _, regions in groupings(t):
        for region in regions:
            inside = np.zeros(t.num_nodes, dtype=bool)
            inside[list(region)] = True
            masks.append(inside)
    gpu = t.kind_codes == 0
    holding: dict[int, list[int]] = {}  # GPU -> the regions holding it
    for i, m in enumerate(masks):
        for v in np.flatnonzero(m & gpu).tolist():
            holding.setdefault(v, []).append(i)
    cache: dict = {}
    sets: list[tuple] = []
    for inside in masks:
        one = _region_cut(t, grid, com, dist, inside)
        if one is None:
            continue
        sets.append(one)
        tails = t.link_src[one[0]]
        mine = np.flatnonzero(inside & gpu)
        for i in holding.get(int(mine[0]), []) if len(mine) else []:
            outer = masks[i]
            if outer[mine].all() and (outer & gpu).sum() > len(mine) and outer[tails].all():
                two = _region_cut(t, grid, com, dist, inside, outer, cache)
                if two is not None:
                    sets.append(two)
    return sets


def _region_cut(
    t: Topology,
    grid: Any,
    com: Commodities,
    dist: np.ndarray,
    inside: np.ndarray,
    outer: np.ndarray | None = None,
    cache: dict | None = None,
) -> tuple | None:
    """One region's cut (see :func:`_cut_sets`); None when no chunk must enter it."""
    src_nodes = t.compute_nodes[com.src]
    enter = np.flatnonzero(~inside[t.link_src] & inside[t.link_dst])
    needs = np.array(
        [
            not inside[src_nodes[q]] and bool(inside[t.compute_nodes[ds]].any())
            for q, ds in enumerate(com.dests)
        ]
    )
    if not needs.any() or not len(enter):
        return None
    d = dist[src_nodes[needs]][:, t.link_src[enter]]  # (chunks, links)
    release = d.min(axis=1)
    # the nearest head of an entering link to every node, then each chunk's farthest
    # destination inside
    near = dist[unique(t.link_dst[enter])].min(axis=0)
    far = np.array(
        [
            int(near[t.compute_nodes[ds[inside[t.compute_nodes[ds]]]]].max())
            for q, ds in enumerate(com.dests)
            if needs[q]
        ]
    )
    tail = np.where(far >= INF, 0, far + int(grid.delay[enter].min()))
    if outer is not None:
        # chunks from outside ``outer`` reach a link into the region only after crossing into
        # ``outer``: the i-th earliest of them no sooner than the i-th earliest crossing plus
        # the way on (so only the sorted releases are known: their tails are taken as the
        # smallest among them)
        far_out = ~outer[src_nodes[needs]]
        if not far_out.any():
            return None
        q_out = np.flatnonzero(needs)[far_out]
        cache = {} if cache is None else cache
        targets = unique(t.link_src[enter])  # (part of the key: the way on depends on them)
        key = (outer.tobytes(), q_out.tobytes(), targets.tobytes())
        if key not in cache:
            cache[key] = _crossing_releases(t, grid, src_nodes[q_out], dist, outer, targets)
        got = cache[key]
        release[far_out] = np.maximum(np.sort(release[far_out]), got)
        tail[far_out] = tail[far_out].min()
    ok = release < INF
    r_th = unique(release[ok])
    e_th = unique(tail[ok])
    count = (
        (release[ok][None, None, :] >= r_th[:, None, None])
        & (tail[ok][None, None, :] >= e_th[None, :, None])
    ).sum(axis=2)
    return (enter, d.min(axis=0), r_th, e_th, count)


def _crossing_releases(
    t: Topology,
    grid: Any,
    src_nodes: np.ndarray,
    dist: np.ndarray,
    outer: np.ndarray,
    targets: np.ndarray,
) -> np.ndarray:
    """Sorted lower bounds on when chunks from ``src_nodes`` (all outside ``outer``) can
    reach any of the nodes ``targets`` inside it: the i-th earliest crossing into ``outer``
    (unit jobs released at their fewest epochs to a crossing link's tail, list-scheduled in
    release order on the crossing links, at most ``per_window`` starts in any ``window``
    epochs each — the earliest every order statistic can be), plus the fewest epochs from a
    crossing to a target (the link's delay and the way on from its head)."""
    cross = np.flatnonzero(~outer[t.link_src] & outer[t.link_dst])
    if not len(cross):
        return np.full(len(src_nodes), INF, dtype=np.int64)
    on = dist[t.link_dst[cross]][:, targets].min(axis=1)
    way = int((grid.delay[cross] + np.where(on >= INF, INF // 2, on)).min())
    rel = dist[src_nodes][:, t.link_src[cross]].min(axis=1)
    lo = dist[src_nodes][:, t.link_src[cross]].min(axis=0)
    starts: list[list[int]] = [[] for _ in cross]
    out = []
    for r in np.sort(rel).tolist():
        if r >= INF:
            out.append(INF)
            continue
        best, arg = INF, -1
        for j in range(len(cross)):
            p, w, s = int(grid.per_window[cross[j]]), int(grid.window[cross[j]]), starts[j]
            e = max(r, int(lo[j]), s[-p] + w if len(s) >= p else 0)
            if e < best:
                best, arg = e, j
        starts[arg].append(best)
        out.append(best + way)
    return np.array(out, dtype=np.int64)


def _cuts_fit(grid: Any, tail_len: np.ndarray, K: int, enter, lo, r_th, e_th, count) -> bool:
    """Whether horizon ``K`` passes one region's cut conditions."""
    first = np.maximum(r_th[:, None], np.minimum(lo, K)[None, :])  # (R, L)
    last = np.minimum(K - tail_len[enter][None, :], K - e_th[:, None])  # (E, L)
    n = np.maximum(0, last[None, :, :] - first[:, None, :] + 1)  # (R, E, L)
    win = grid.window[enter]
    cap = (grid.per_window[enter] * -(-n // win)).sum(axis=2)
    return bool(np.all(cap >= count))


def ragged_arange(lo: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Concatenation of ``arange(lo[i], lo[i] + counts[i])``."""
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    starts = np.repeat(lo - np.concatenate(([0], np.cumsum(counts)[:-1])), counts)
    return np.arange(total, dtype=np.int64) + starts


# ---------------------------------------------------------------------------------- HiGHS
class RowBlocks:
    """Constraint rows gathered block by block (COO triplets plus row bounds), row ids offset
    as blocks are added; :meth:`model` turns them into a :class:`Model`."""

    def __init__(self) -> None:
        self.rows: list = []
        self.cols: list = []
        self.vals: list = []
        self.lo: list = []
        self.up: list = []
        self.nrow = 0

    def add(self, r, c, v, lo, up, m: int) -> None:
        """``m`` rows: entries ``(r + offset, c, v)``, bounds ``lo <= row <= up``."""
        self.rows.append(np.asarray(r, dtype=np.int64) + self.nrow)
        self.cols.append(np.asarray(c, dtype=np.int64))
        self.vals.append(np.asarray(v, dtype=np.float64))
        self.lo.append(np.broadcast_to(np.asarray(lo, dtype=np.float64), (m,)))
        self.up.append(np.broadcast_to(np.asarray(up, dtype=np.float64), (m,)))
        self.nrow += m

    def model(self, cost, lower, upper, integer) -> Model:
        return Model(
            cost,
            lower,
            upper,
            integer,
            np.concatenate(self.rows),
            np.concatenate(self.cols),
            np.concatenate(self.vals),
            np.concatenate(self.lo).astype(float),
            np.concatenate(self.up).astype(float),
        )


@dataclass
class Model:
    """A linear model in CSR form, built with numpy: columns then rows as triplets."""

    cost: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    integer: np.ndarray  # bool per column
    rows: np.ndarray  # triplet row ids
    cols: np.ndarray
    vals: np.ndarray
    row_lower: np.ndarray
    row_upper: np.ndarray

    @property
    def num_cols(self) -> int:
        return len(self.cost)

    @property
    def num_rows(self) -> int:
        return len(self.row_lower)


@dataclass
class SolveInfo:
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


def _solve_local(
    model: Model,
    *,
    time_limit: float,
    gap: float,
    seed: int = 0,
    start: np.ndarray | None = None,
    highs_options: dict | None = None,
    log: bool = False,
) -> SolveInfo:
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
    h = highspy.Highs()
    h.setOptionValue("output_flag", bool(log))
    h.setOptionValue("threads", 1)
    h.setOptionValue("random_seed", int(seed))
    h.setOptionValue("time_limit", float(max(time_limit, 0.01)))
    h.setOptionValue("mip_rel_gap", float(gap))
    for k, v in (highs_options or {}).items():
        if k == "time_limit":  # HiGHS' own limit may shorten collsynth's, never lengthen it
            v = float(max(min(v, time_limit), 0.01))
        if h.setOptionValue(k, v) != highspy.HighsStatus.kOk:
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
    if h.passModel(lp) == highspy.HighsStatus.kError:
        raise CollsynthError("HiGHS rejected the TE-CCL model")
    warm = "none"
    if start is not None and is_mip:
        sol = highspy.HighsSolution()
        sol.col_value = np.asarray(start, dtype=np.float64)
        sol.value_valid = True
        warm = "accepted" if h.setSolution(sol) != highspy.HighsStatus.kError else "rejected"
    h.run()
    ms = h.getModelStatus()
    name = h.modelStatusToString(ms).lower()
    info = h.getInfo()
    has = info.primal_solution_status == 2  # kSolutionStatusFeasible
    status = {
        "optimal": "optimal",
        "infeasible": "infeasible",
        "time limit reached": "time_limit",
        "primal infeasible or unbounded": "infeasible",
    }.get(name, name.replace(" ", "_"))
    x = np.array(h.getSolution().col_value) if has else None
    out = SolveInfo(status, has, x, wall_s=time.perf_counter() - t0, warm_start=warm)
    if has:
        out.objective = float(info.objective_function_value)
    if is_mip:
        out.dual_bound = float(info.mip_dual_bound)
        out.gap = float(info.mip_gap) if has else float("inf")
    else:
        out.gap = 0.0 if status == "optimal" else float("nan")
    return out


def check_supported(collective: Collective) -> None:
    if collective.reduces:
        raise CollsynthError(f"teccl does not support {collective.kind.value} (reductions)")
    if collective.kind not in (
        CollKind.ALLGATHER,
        CollKind.BROADCAST,
        CollKind.ALLTOALL,
        CollKind.GATHER,
        CollKind.SCATTER,
        CollKind.CUSTOM,
    ):
        raise CollsynthError(f"teccl does not support {collective.kind.value}")
