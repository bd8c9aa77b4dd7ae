"""AllReduce trees shaped by ForestColl's AllReduce LP (Zhao et al., "ForestColl: Throughput-
Optimal Collective Communications on Heterogeneous Network Fabrics", arXiv 2402.06787, Appendix
E, LP (6)): :func:`allreduce_lp_trees`.

ReduceScatter followed by AllGather gives every rank ``1/N`` of the buffer to reduce and
broadcast, and runs the two phases one after the other. LP (6) (:func:`.allreduce_lp`) lets
rank ``v`` root an amount ``x_v`` of the buffer of its own and shares every link's bandwidth
between the reduce in-trees (``c_re``) and the broadcast out-trees (``c_bc``), which run at
once. Where ranks differ in bandwidth (the corners and edges of a 2D mesh, for one) the LP's
time ``M / X`` is below ReduceScatter + AllGather's: on ``mesh2d`` (4x4) by a factor 1.2, down to
the AllReduce transmission bound.

From the LP's solution to trees:

1. Scale to ``K`` trees in all (``K = scale * N``; the synthesizer tries several scales,
   ``LP_SCALES`` in :mod:`.algo`): rank ``v`` roots ``k_v`` in-trees and
   ``k_v`` out-trees, the largest-remainder rounding of ``x_v K / X``; each tree then carries
   ``1 / K`` of the buffer.
2. Arc capacities in trees: ``ceil(c_re(e) K / X)`` for the in-trees, ``ceil(c_bc(e) K / X)`` for
   the out-trees (plus a slack of one more tree per arc, then two, when the rounding leaves
   the packing infeasible).
3. Pack the out-trees with per-root multiplicities ``k_v`` (Algorithm 5 with Theorem 12 for
   any root multiplicities, :func:`.pack_trees`) and the in-trees the same way on the transposed
   topology.

The rounding costs at most a few trees per link in ``K``; :func:`allreduce_lp_trees` reports
the time the packed trees achieve (``inv_time``: the most loaded link's trees over ``K`` and its
bandwidth), which is what the synthesizer compares with ReduceScatter + AllGather. The trees
are lowered with ``shares="mult"`` (:func:`collsynth.schedule.trees.lower`): each tree's share
of the buffer is its multiplicity over ``K``.

Only switch-free topologies with at most one link per ordered rank pair: there the LP is exact
(the paper's) and every tree edge is one link. With switches the LP is a relaxation
(:mod:`.allreduce_lp`) and trees through them would need the edge splitting of
:mod:`.splitting` for two shared capacities at once.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from ...errors import CollsynthError
from ...schedule.trees import Tree, TreeForm
from ...topology.model import Topology
from .allreduce_lp import allreduce_lp
from .packing import pack_trees

#: Trees per rank (``K / N``) the rounding of the LP's solution aims for.
SCALE = 16
#: Extra trees per arc tried when the rounded capacities cannot hold the packing.
MAX_SLACK = 2


class _Caps:
    """What :func:`.pack_trees` needs of a logical topology: ranks and integer arc capacities."""

    def __init__(self, n: int, caps: dict[tuple[int, int], int]):
        self.num_ranks = n
        self.caps = caps


def _apportion(share: np.ndarray, total: int) -> list[int]:
    """Integers summing to ``total``, each the floor or ceiling of ``share`` (largest
    remainders first; ties by rank)."""
    base = np.floor(share + 1e-9).astype(np.int64)
    left = total - int(base.sum())
    frac = share - base
    order = sorted(range(len(share)), key=lambda i: (-frac[i], i))
    for i in order[: max(0, left)]:
        base[i] += 1
    return [int(x) for x in base]


def _pair_links(topo: Topology) -> dict[tuple[int, int], int]:
    """Link id per ordered rank pair; CollsynthError when the topology has switches or
    parallel links."""
    if topo.num_nodes != topo.num_ranks:
        raise CollsynthError("LP AllReduce trees need a topology without switches")
    rank = topo.rank_of_node
    out: dict[tuple[int, int], int] = {}
    for i, (s, d) in enumerate(zip(topo.link_src.tolist(), topo.link_dst.tolist())):
        key = (int(rank[s]), int(rank[d]))
        if key in out:
            raise CollsynthError("LP AllReduce trees need at most one link per rank pair")
        out[key] = i
    return out


def allreduce_lp_trees(
    topo: Topology, *, scale: int = SCALE, lp: dict[str, Any] | None = None
) -> tuple[TreeForm, dict[str, Any]]:
    """In-trees and out-trees for AllReduce from LP (6) (see the module doc).

    Returns ``(TreeForm, info)``: the form holds, per rank ``v``, in-trees and out-trees of
    total multiplicity ``k_v`` each (lower it with ``shares="mult"``); ``info`` holds ``K``,
    ``ks``, the LP's ``inv_X`` (seconds per buffer byte), the packed trees' ``inv_time``
    (the same, achieved: at least ``inv_X``), tree heights and timings. Raises CollsynthError
    where the topology has switches or parallel links, the LP is too big, or no packing fits.
    """
    t0 = time.perf_counter()
    links = _pair_links(topo)
    n = topo.num_ranks
    if scale < 1:
        raise CollsynthError(f"scale must be positive, got {scale}")
    if lp is None:
        lp = allreduce_lp(topo)
    X = float(lp["X_Bps"])
    K = scale * n
    ks = _apportion(np.asarray(lp["x_Bps"]) * (K / X), K)
    need = {
        "in": np.asarray(lp["re_Bps"]) * (K / X),
        "out": np.asarray(lp["bc_Bps"]) * (K / X),
    }
    t1 = time.perf_counter()
    packed: dict[str, list] = {}
    slacks: dict[str, int] = {}
    for direction in ("in", "out"):
        for slack in range(MAX_SLACK + 1):
            caps: dict[tuple[int, int], int] = {}
            for (a, b), e in links.items():
                g = math.ceil(float(need[direction][e]) - 1e-6)
                if g > 0:  # in-trees are packed as out-trees of the transposed topology
                    caps[(b, a) if direction == "in" else (a, b)] = g + slack
            try:
                packed[direction] = pack_trees(_Caps(n, caps), ks)
                slacks[direction] = slack
                break
            except CollsynthError:
                continue
        else:
            raise CollsynthError(
                f"LP AllReduce trees: the rounded capacities cannot hold the {direction}-trees"
            )
    t2 = time.perf_counter()
    trees = [
        Tree(root, tuple((b, a, (links[(b, a)],)) for a, b in edges), mult, "in")
        for root, mult, edges in packed["in"]
    ] + [
        Tree(root, tuple((a, b, (links[(a, b)],)) for a, b in edges), mult, "out")
        for root, mult, edges in packed["out"]
    ]
    form = TreeForm(trees)
    load = np.zeros(len(topo.links))
    for t in trees:
        for _, _, route in t.edges:
            assert route is not None  # every edge is given its one link above
            load[route[0]] += t.mult
    inv_time = float(np.max(load / topo.link_bw) / K)
    heights = form.heights(n)
    into = form.columns["tree_in"] == 1
    return form, {
        "K": K,
        "ks": ks,
        "slack": slacks,
        "inv_X": float(lp["inv_X"]),
        "inv_time": inv_time,
        "rounding_loss": inv_time / float(lp["inv_X"]),
        "trees": {"in": len(packed["in"]), "out": len(packed["out"])},
        "heights": {
            "in": int(heights[into].max()),
            "out": int(heights[~into].max()),
            "mean": float(np.mean(heights)),
        },
        "timings_s": {"lp": float(lp.get("wall_s", 0.0)), "round": t1 - t0, "pack": t2 - t1},
    }


__all__ = ["allreduce_lp_trees"]
