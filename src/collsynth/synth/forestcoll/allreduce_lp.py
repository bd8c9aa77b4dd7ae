"""ForestColl's AllReduce linear program (Zhao et al., "ForestColl: Throughput-Optimal Collective
Communications on Heterogeneous Network Fabrics", arXiv 2402.06787, Appendix E, LP (6)), on
HiGHS via SciPy.

AllReduce as ForestColl builds it: reduce in-trees then broadcast out-trees. LP (6) finds the
best such scheme when (i) every compute node ``v`` may root its own amount ``x_v`` of trees and
(ii) every link's bandwidth ``b_e`` is shared between the reduce trees (``c_re``) and the
broadcast trees (``c_bc``), both running at once:

    max  X = sum_v x_v
    s.t. F(s, t; c_bc, s->v capped by x_v) >= X     for every compute node t   (broadcast)
         F(t, s; c_re, v->s capped by x_v) >= X     for every compute node t   (reduce)
         c_re(e) + c_bc(e) <= b(e),  everything >= 0

each max-flow written as flow-conservation constraints with its own flow variables. The time
is ``T = M / X`` (bandwidth only, no alpha).

Departure from the appendix: on a topology with switches the paper adds a compute-to-compute
indirection layer (a multi-commodity flow per GPU pair) so that the LP's optimum is achievable
by trees; here the flows run through the switches directly. That relaxes the LP (every solution
of the paper's LP is a solution of this one), so on switch fabrics ``T`` is a *lower bound* on
the time of any in-tree + out-tree AllReduce (the class ForestColl's AllReduce belongs to),
possibly below what trees reach; on switch-free topologies it is the paper's LP. Either way it
is not a bound on every AllReduce schedule (``collsynth.bound``'s min-cut bound is), and the LP
is solved in floating point (HiGHS), so ``T`` carries the solver's tolerance (about 1e-9).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from ...errors import CollsynthError
from ...topology.model import Topology

#: Largest LP :func:`allreduce_lp` builds by default, in variables (``N + 2|E| + 2N(|E| + N)``;
#: about 8,000 solve in about a second, 23,000 took two minutes on ``h800_rails``).
MAX_VARIABLES = 12_000


def allreduce_lp(topo: Topology, *, max_variables: int = MAX_VARIABLES) -> dict[str, Any]:
    """Solve LP (6) on ``topo`` (see the module doc).

    Returns ``{"X_Bps": X, "inv_X": 1/X (seconds per byte of the AllReduce buffer),
    "x_Bps": per-rank x_v, "re_share": c_re/b per link, "re_Bps"/"bc_Bps": c_re and c_bc per
    link (bytes/second), "status", "variables",
    "constraints", "wall_s"}``. Raises CollsynthError if the LP would have more than
    ``max_variables`` variables or the solver fails.
    """
    from scipy.optimize import linprog

    comp = [int(v) for v in topo.compute_nodes]
    n = len(comp)
    if n < 2:
        raise CollsynthError("the AllReduce LP needs at least two compute nodes")
    t0 = time.perf_counter()
    V = topo.num_nodes
    E = len(topo.links)
    size = n + 2 * E + 2 * n * (E + n)
    if size > max_variables:
        raise CollsynthError(
            f"the AllReduce LP on {topo.name!r} would have {size} variables (limit {max_variables})"
        )
    scale = max(float(l.bw) for l in topo.links)  # conditioning: bandwidths <= 1
    b = np.array([float(l.bw) for l in topo.links]) / scale
    rows = _constraints(topo, comp, b)
    ncol = size  # x (n) | c_re (E) | c_bc (E) | two flows (E + n) per node
    A_ub, b_ub = rows.matrix(ncol)
    cost = np.zeros(ncol)
    cost[0:n] = -1.0
    res = linprog(cost, A_ub=A_ub, b_ub=b_ub, bounds=(0, None), method="highs")
    if res.status != 0 or res.x is None:
        raise CollsynthError(f"the AllReduce LP failed: {res.message}")
    xs = res.x[0:n] * scale
    X = float(xs.sum())
    if X <= 0:
        raise CollsynthError("the AllReduce LP found no bandwidth (is the topology connected?)")
    cre = res.x[n : n + E]
    cbc = res.x[n + E : n + 2 * E]
    share = np.divide(cre, b, out=np.zeros(E), where=b > 0)
    return {
        "X_Bps": X,
        "inv_X": 1.0 / X,
        "x_Bps": xs.tolist(),
        "re_share": share.tolist(),
        "re_Bps": (cre * scale).tolist(),
        "bc_Bps": (cbc * scale).tolist(),
        "status": "optimal",
        "variables": ncol,
        "constraints": rows.count,
        "switches": int(V - n),
        "exact": V == n,
        "wall_s": time.perf_counter() - t0,
    }


class _Rows:
    """The rows of ``A_ub x <= b_ub``, collected as sparse triplets and right-hand sides."""

    def __init__(self) -> None:
        self.rows: list[np.ndarray] = []
        self.cols: list[np.ndarray] = []
        self.vals: list[np.ndarray] = []
        self.rhs: list[np.ndarray] = []
        self.count = 0

    def add(self, r, c, v) -> None:
        """Entries ``v`` at rows ``r`` and columns ``c``."""
        self.rows.append(np.asarray(r, dtype=np.int64))
        self.cols.append(np.asarray(c, dtype=np.int64))
        self.vals.append(np.asarray(v, dtype=np.float64))

    def matrix(self, ncol: int):
        """``(A_ub as CSR, b_ub)``."""
        from scipy.sparse import coo_matrix

        A_ub = coo_matrix(
            (np.concatenate(self.vals), (np.concatenate(self.rows), np.concatenate(self.cols))),
            shape=(self.count, ncol),
        ).tocsr()
        return A_ub, np.concatenate(self.rhs)


def _constraints(topo: Topology, comp: list[int], b: np.ndarray) -> _Rows:
    """All rows of LP (6): the shared link capacities, then both max-flows of every node."""
    n = len(comp)
    V = topo.num_nodes
    E = len(topo.links)
    src = topo.link_src.astype(np.int64)
    dst = topo.link_dst.astype(np.int64)
    comp_arr = np.array(comp, dtype=np.int64)
    A = E + n  # arcs of one flow network
    # column layout: x (n) | c_re (E) | c_bc (E) | per t: bc flow (A) | per t: re flow (A)
    ore, obc = n, n + E
    ofb = n + 2 * E
    ofr = ofb + n * A
    R = _Rows()
    # c_re + c_bc <= b
    e_ids = np.arange(E)
    R.add(R.count + e_ids, ore + e_ids, np.ones(E))
    R.add(R.count + e_ids, obc + e_ids, np.ones(E))
    R.rhs.append(b)
    R.count += E
    # arc tails/heads of one network; virtual node s = V
    tails_bc = np.concatenate([src, np.full(n, V)])  # s -> v
    heads_bc = np.concatenate([dst, comp_arr])
    tails_re = np.concatenate([src, comp_arr])  # v -> s
    heads_re = np.concatenate([dst, np.full(n, V)])
    for j, t in enumerate(comp):
        for kind, base, tails, heads, cap_off in (
            ("bc", ofb, tails_bc, heads_bc, obc),
            ("re", ofr, tails_re, heads_re, ore),
        ):
            _flow_rows(R, kind, t, base + j * A, tails, heads, cap_off, n, E, V)
    return R


def _flow_rows(
    R: _Rows,
    kind: str,
    t: int,
    fcol0: int,
    tails: np.ndarray,
    heads: np.ndarray,
    cap_off: int,
    n: int,
    E: int,
    V: int,
) -> None:
    """The rows of one max-flow (``kind`` ``bc``: s to ``t``; ``re``: ``t`` to s) whose flow
    columns start at ``fcol0``: arc capacities, then conservation with the sink taking X."""
    A = E + n
    a_ids = np.arange(A)
    e_ids = np.arange(E)
    fcol = fcol0 + a_ids
    # capacities: f_e - c_e <= 0 on links; f - x_v <= 0 on the virtual arcs
    R.add(R.count + a_ids, fcol, np.ones(A))
    R.add(R.count + e_ids, cap_off + e_ids, -np.ones(E))
    R.add(R.count + E + np.arange(n), np.arange(n), -np.ones(n))
    R.rhs.append(np.zeros(A))
    R.count += A
    # conservation: out(v) - in(v) <= 0 at every real node except the flow's source
    # (t for the reduce flow); the sink must take in at least X:
    #   broadcast: sink t:  X - in(t) + out(t) <= 0
    #   reduce:    sink s:  X - in(s) <= 0
    # (node index V is s; its row is used only as the reduce sink)
    node_row = np.full(V + 1, -1, dtype=np.int64)
    nodes = [
        v for v in range(V + 1) if not (kind == "re" and v == t) and not (kind == "bc" and v == V)
    ]
    node_row[nodes] = R.count + np.arange(len(nodes))
    r_t = node_row[tails]
    keep = r_t >= 0
    R.add(r_t[keep], fcol[keep], np.ones(int(keep.sum())))  # out
    r_h = node_row[heads]
    keep = r_h >= 0
    R.add(r_h[keep], fcol[keep], -np.ones(int(keep.sum())))  # in
    sink = t if kind == "bc" else V
    R.add(np.full(n, node_row[sink]), np.arange(n), np.ones(n))  # + X
    R.rhs.append(np.zeros(len(nodes)))
    R.count += len(nodes)
