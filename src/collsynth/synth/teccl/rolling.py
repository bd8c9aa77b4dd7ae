"""TE-CCL's rolling time horizon: the multicast MILP solved window by window.

Liu et al. ("Rethinking Machine Learning Collective Communication as a Multi-Commodity Flow
Problem", ACM SIGCOMM 2024, §5) scale the MILP by solving it over a few epochs at a time,
each round starting from where the chunks are after the rounds before it and rewarding
progress. Here a window covers ``window`` epochs from epoch ``k0``:

* it starts from the state the committed flows leave (:func:`state_at`): which ranks hold
  each commodity at ``k0`` (they send freely, like its source), which arrivals are under way
  (at GPUs and into switches), and how much of each link's sliding window is already used;
* a window that cannot reach the goal maximises TE-CCL's reward (every destination holding
  its chunk, for every epoch it holds it: early deliveries) with no destination rows; only
  the flows of its first ``step`` epochs are committed, the rest is look-ahead, and its
  uncommitted tail, shifted by ``step``, is the next window's warm start;
* the last window, whose horizon is the goal epoch, has the destination rows and the
  makespan objective.

Each window is a small model (the columns of ``window`` epochs, not ``K``), so instances
whose whole model is too large for the time limit still get a solver schedule; the price is
that the result is not proven optimal (a window cannot see what its commitments cost later).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np

from ...topology.model import Topology
from . import milp as _milp
from .common import INF, Commodities, EpochOp, solve
from .epochs import EpochGrid


#: Relative MIP gap a window that is not the last stops at (its reward only steers).
WINDOW_GAP = 0.01


@dataclass
class Flows:
    """Flows committed so far: commodity, link and absolute epoch of each (one per copy)."""

    q: np.ndarray
    l: np.ndarray  # noqa: E741
    k: np.ndarray

    @classmethod
    def empty(cls) -> Flows:
        z = np.zeros(0, dtype=np.int64)
        return cls(z, z, z)

    def add(self, q: np.ndarray, l: np.ndarray, k: np.ndarray) -> Flows:  # noqa: E741
        return Flows(
            np.concatenate((self.q, q)), np.concatenate((self.l, l)), np.concatenate((self.k, k))
        )


def state_at(
    t: Topology,
    grid: EpochGrid,
    com: Commodities,
    done: Flows,
    k0: int,
    K: int,
    final: bool,
    link_class: np.ndarray | None = None,
    weight: np.ndarray | None = None,
) -> _milp.WindowState:
    """The state a window of ``K`` epochs from ``k0`` starts from, after the flows ``done``
    (all started before ``k0``)."""
    st = _milp.start_state(t, com, K)
    st.final = final
    S = t.num_nodes
    d = grid.delay
    arrive = done.k + d[done.l]
    head = t.link_dst[done.l]
    gpu = t.kind_codes[head] == 0
    # GPUs: held from k0, or under way (a late one counts at K: the window cannot use it)
    r = t.rank_of_node[head[gpu]]
    a, q = arrive[gpu], done.q[gpu]
    st.holds[q[a <= k0], r[a <= k0]] = True
    later = a > k0
    rel = np.minimum(a[later] - k0, K)
    np.add.at(st.pending, (q[later], r[later], rel), 1.0)
    st.reach[q[a <= k0], t.compute_nodes[r[a <= k0]]] = 0
    np.minimum.at(st.reach, (q[later], t.compute_nodes[r[later]]), rel)
    # switches: chunks arriving from k0 on are forwarded by this window
    sw = ~gpu & (arrive >= k0)
    rel_s = np.minimum(arrive[sw] - k0, K)
    keys = (done.q[sw] * S + head[sw]) * (K + 1) + rel_s
    st.switch_keys, st.switch_count = np.unique(keys, return_counts=True)
    np.minimum.at(st.reach, (done.q[sw], head[sw]), rel_s)
    # capacity: the sliding windows of flows started before k0 that reach into this window
    cls = np.arange(len(t.links)) if link_class is None else link_class
    wt = np.ones(len(t.links)) if weight is None else weight
    st.used = np.zeros((int(cls.max()) + 1 if len(cls) else 0, K + 1))
    w = grid.window[done.l]
    for off in range(int(w.max()) if len(w) else 0):
        ep = done.k + off
        hit = (off < w) & (ep >= k0) & (ep - k0 <= K)
        np.add.at(st.used, (cls[done.l[hit]], ep[hit] - k0), wt[done.l[hit]])
    return st


def _warm(layout, st: _milp.WindowState, grid: EpochGrid, t: Topology, fl: Flows) -> Any:
    """The column vector of window flows ``fl`` (relative epochs) in ``layout``, with the
    buffers they and the arrivals under way imply; None if a flow has no column."""
    K = layout.K
    L = len(t.links)
    key = (layout.fq * L + layout.fl) * (K + 1) + layout.fk
    order = np.argsort(key)
    want = (fl.q * L + fl.l) * (K + 1) + fl.k
    i = np.minimum(np.searchsorted(key[order], want), max(len(key) - 1, 0))
    if not len(key) or np.any(key[order][i] != want):
        return None
    x = np.zeros(layout.model.num_cols)
    np.add.at(x, order[i], 1.0)
    arr = np.zeros_like(st.pending)
    gpu = t.kind_codes[t.link_dst[fl.l]] == 0
    a = fl.k[gpu] + grid.delay[fl.l[gpu]]
    inside = a <= K
    np.add.at(arr, (fl.q[gpu][inside], t.rank_of_node[t.link_dst[fl.l[gpu]]][inside],
                    a[inside]), 1.0)  # fmt: skip
    held = np.cumsum(arr + st.pending, axis=2)
    h = layout.h_index
    have = h >= 0
    x[h[have]] = held[have]
    if np.any(x[h[have]] > 1):
        return None
    return x


def rolling_horizon(
    t: Topology,
    grid: EpochGrid,
    com: Commodities,
    dist: np.ndarray,
    to_gpu: np.ndarray,
    goal: int,
    switch_copy: bool,
    solver: Any,
    window: int,
    step: int,
    classes: tuple = (None, None),
    info: dict | None = None,
) -> tuple[list[EpochOp], int] | None:
    """Windows of ``window`` epochs, ``step`` committed at a time, the last one ending at
    epoch ``goal`` (a feasible horizon: the heuristic's), within ``solver.time_limit``
    seconds: ``(ops, completion epoch)`` of the commodities ``com``, or None when a window
    fails (time limit, or the last window infeasible from where the others left it).
    ``info`` (a dict) receives one entry per window."""
    log: list[dict] = [] if info is None else info.setdefault("windows", [])
    t0 = time.perf_counter()
    done = Flows.empty()
    tail = Flows.empty()  # the last window's uncommitted flows (relative to the next one)
    k0 = 0
    extra = 0  # epochs added to the last window while it is infeasible
    while True:
        left = solver.time_limit - (time.perf_counter() - t0)
        final = goal - k0 <= window
        K = goal - k0 + extra if final else window
        n_left = 1 if final else 2 + math.ceil((goal - k0 - window) / step)
        st = state_at(t, grid, com, done, k0, K, final, *classes)
        layout = _milp.build(
            t, grid, com, K, dist, to_gpu, switch_copy,
            "makespan" if final else "paper", *classes, state=st,
        )  # fmt: skip
        start = None if final else _warm(layout, st, grid, t, tail)
        budget = left if final else left / n_left
        entry: dict[str, Any] = {"k0": k0, "K": K, "nonzeros": int(len(layout.model.vals))}
        log.append(entry)
        if budget <= 0.01:
            entry["status"] = "not solved (time limit)"
            return None
        res = solve(
            layout.model,
            time_limit=budget,
            gap=max(solver.gap, WINDOW_GAP) if not final else solver.gap,
            seed=solver.seed,
            start=start,
            highs_options=solver.highs_options,
        )
        entry.update(status=res.status, wall_s=res.wall_s, warm_start=res.warm_start)
        if final and res.status == "infeasible" and extra < window:
            extra = min(window, max(1, 2 * extra))  # too little left: a longer last window
            continue
        if not res.has_solution:
            return None
        assert res.x is not None  # a solution comes with its column values
        mult = np.rint(res.x[: len(layout.fq)]).astype(np.int64)
        on = np.repeat(np.arange(len(mult)), np.maximum(mult, 0))
        fq, fl, fk = layout.fq[on], layout.fl[on], layout.fk[on]
        keep = np.ones(len(on), dtype=bool) if final else fk < step
        done = done.add(fq[keep], fl[keep], fk[keep] + k0)
        if final:
            break
        tail = Flows(fq[~keep], fl[~keep], fk[~keep] - step)
        k0 += step
    every = SimpleNamespace(fq=done.q, fl=done.l, fk=done.k)
    return _milp.decode(every, t, com, grid, np.ones(len(done.q)), switch_copy)  # type: ignore[arg-type]


__all__ = ["Flows", "rolling_horizon", "state_at", "INF"]
