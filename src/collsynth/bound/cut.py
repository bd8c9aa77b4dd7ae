"""Exact cut bounds (max-flow / min-cut), from ForestColl (Zhao et al., 'ForestColl:
Throughput-Optimal Collective Communications on Heterogeneous Network Fabrics', arXiv 2402.06787;
§3, Theorem 1), computed by :mod:`collsynth.flow`.

For a node set ``S`` holding compute nodes on both sides, let ``B+(S)`` be the bandwidth of the
links leaving ``S`` and ``alpha_min(S)`` the smallest alpha among them. Every bound below is a
certified lower bound on the simulator's model: bytes cross a cut no faster than its bandwidth,
and the last byte still needs one link's propagation delay after it has been sent.

* AllGather: the ``|S ∩ Vc|`` shards of size ``M/N`` held inside ``S`` must all leave it:
  ``T >= (M/N) |S ∩ Vc| / B+(S) + alpha_min(S)``; ForestColl's Algorithm 1 finds the exact
  maximum over all cuts (and its schedules reach it at large sizes).
* ReduceScatter: the same on the transposed topology (the shards owned outside ``S`` need every
  contribution from inside).
* AllReduce: the nodes outside ``S`` need a value combining the contributions inside ``S`` for
  every byte, so ``T >= M / B+(S) + alpha_min(S)`` for the minimum cut ``S`` separating compute
  nodes (a global min cut: ``2(N-1)`` max-flows). Tree-based AllReduce can be slower than this
  bound; ForestColl's in-tree + out-tree time is reported separately by its synthesizer.
* Broadcast / Reduce: ``T >= M / min_t maxflow(root, t)`` (resp. ``(t, root)``) plus alpha.
"""

from __future__ import annotations

from collections.abc import Iterable
from fractions import Fraction

import numpy as np

from ..arrays import unique
from ..collective import Collective, CollKind
from ..topology.model import Topology
from .model import Bound, register


def _alpha_min_out(topo: Topology, side: set[int]) -> float:
    alphas = [l.alpha for l in topo.links if l.src in side and l.dst not in side]
    return min(alphas) if alphas else 0.0


def _flow_net(topo: Topology):
    # collsynth.flow loads OR-Tools: import it only when a cut bound is computed
    from ..flow import FlowNet, integer_bandwidths

    int_bw, unit = integer_bandwidths([l.bw for l in topo.links])
    net = FlowNet(topo.num_nodes, topo.link_src.tolist(), topo.link_dst.tolist(), int_bw)
    return net, unit


def _min_cut_from(topo: Topology, pairs: Iterable[tuple[int, int]]) -> tuple[Fraction, set[int]]:
    """Smallest max-flow over (source node, sink node) pairs, with the source side of its cut."""
    net, unit = _flow_net(topo)
    best = None
    best_side: set[int] = set()
    for s, t in pairs:
        f = net.solve(s, t)
        if best is None or f < best:
            best = f
            best_side = set(net.source_side())
    assert best is not None, "no (source, sink) pairs"  # callers pass at least one pair
    return Fraction(best) * unit, best_side


def _names(topo: Topology, side: set[int], limit: int = 6) -> str:
    names = [topo.nodes[v].name for v in sorted(side) if topo.is_compute(v)]
    more = f", ... ({len(names)} compute nodes)" if len(names) > limit else ""
    return "cut {" + ", ".join(names[:limit]) + more + "}"


@register("cut")
def cut_bounds(topology: Topology, collective: Collective, size: float) -> list[Bound]:
    from ..flow import optimal_allgather, transpose

    kind = collective.kind
    t = topology
    if kind in (CollKind.ALLGATHER, CollKind.REDUCESCATTER):
        g = t if kind is CollKind.ALLGATHER else transpose(t)
        opt = optimal_allgather(g)
        side = set(opt.cut) if opt.cut is not None else set()
        # on the transposed graph the cut's out-links are the original topology's in-links
        alpha = _alpha_min_out(g, side) if side else 0.0
        time = opt.time(size) + alpha
        detail = {
            "bandwidth_time_s": opt.time(size),
            "cut_bw": float(opt.cut_bw or 0),
            "cut_compute": opt.cut_compute,
        }
        if kind is CollKind.ALLGATHER and side:
            inside = {int(t.rank_of_node[v]) for v in side if t.is_compute(v)}
            windowed = windowed_cut_time(t, side, crossing_bytes(collective, size, inside))
            detail["windowed_s"] = windowed
            time = max(time, windowed)
        return [Bound("cut", time, _names(t, side) if side else "", detail)]
    comp = [int(v) for v in t.compute_nodes]
    root = collective.root
    if kind is CollKind.ALLREDUCE:
        s0 = comp[0]
        pairs = [(s0, v) for v in comp[1:]] + [(v, s0) for v in comp[1:]]
    elif kind is CollKind.BROADCAST:
        assert root is not None  # rooted collective
        r = t.node_of_rank(int(root))
        pairs = [(r, v) for v in comp if v != r]
    elif kind is CollKind.REDUCE:
        assert root is not None  # rooted collective
        r = t.node_of_rank(int(root))
        pairs = [(v, r) for v in comp if v != r]
    else:
        return []
    bw, side = _min_cut_from(t, pairs)
    bw_time = size / float(bw)
    return [
        Bound(
            "cut",
            bw_time + _alpha_min_out(t, side),
            _names(t, side),
            {"bandwidth_time_s": bw_time, "cut_bw": float(bw)},
        )
    ]


def windowed_cut_time(topology: Topology, side: set[int], nbytes: float) -> float:
    """AllGather: the least ``T`` by which ``nbytes`` that start at the ranks in ``side`` and
    that every rank outside it needs can cross the links leaving ``side``, each link ``l``
    (bandwidth ``B_l``, alpha ``a_l``, from ``u_l`` to ``v_l``) busy only inside its window:
    no byte reaches ``u_l`` before ``f_l`` (the alpha distance to it from the nearest rank in
    ``side``), and a byte that crosses ``l`` for rank ``r`` still needs ``a_l + d(v_l, r)``
    after (``d``: alpha distance). For every rank ``r`` outside, each byte crosses some link
    inside its window for ``r``, so ``nbytes <= Σ_l B_l max(0, T - f_l - a_l - d(v_l, r))``;
    the largest ``T`` over ``r`` that this forces. Tighter than the cut's ``nbytes / Σ B_l +
    min a_l`` where getting to the cut and on from it takes longer than one link's alpha
    (an NDv2 chassis behind one InfiniBand NIC)."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import dijkstra

    t = topology
    inside = np.zeros(t.num_nodes, dtype=bool)
    inside[list(side)] = True
    cross = np.flatnonzero(inside[t.link_src] & ~inside[t.link_dst])
    ranks_in = [int(v) for v in t.compute_nodes if inside[v]]
    ranks_out = [int(v) for v in t.compute_nodes if not inside[v]]
    if nbytes <= 0 or not len(cross) or not ranks_in or not ranks_out:
        return 0.0
    n = t.num_nodes
    graph = csr_matrix((t.link_alpha + 1e-300, (t.link_src, t.link_dst)), shape=(n, n))
    heads = sorted(set(t.link_dst[cross].tolist()))
    d_from = dijkstra(graph, directed=True, indices=ranks_in).min(axis=0)  # to each node
    d_head = dict(zip(heads, dijkstra(graph, directed=True, indices=heads)))
    bw = t.link_bw[cross]
    head_at = {h: i for i, h in enumerate(heads)}
    dist_on = np.array([d_head[h] for h in heads])[
        [head_at[int(h)] for h in t.link_dst[cross]]
    ]  # (cut link, node): alpha distance from the link's head
    base = d_from[t.link_src[cross]] + t.link_alpha[cross]
    offsets = base[None, :] + dist_on[:, ranks_out].T  # (rank outside, cut link)
    best = 0.0
    for row in np.unique(offsets, axis=0):  # symmetric fabrics: a few distinct rows
        ok = np.isfinite(row)
        if ok.any():
            best = max(best, _fill_time(row[ok], bw[ok], nbytes))
    return best


def _fill_time(offsets: np.ndarray, bw: np.ndarray, nbytes: float) -> float:
    """The least ``T`` with ``Σ_l bw_l max(0, T - offsets_l) >= nbytes``."""
    order = np.argsort(offsets, kind="stable")
    o, b = offsets[order], bw[order]
    rate, carried = 0.0, 0.0
    for i in range(len(o)):
        if i:
            carried += rate * (o[i] - o[i - 1])
        rate += float(b[i])
        nxt = o[i + 1] if i + 1 < len(o) else np.inf
        if carried + rate * (nxt - o[i]) >= nbytes:
            return float(o[i] + (nbytes - carried) / rate)
    return float("inf")  # pragma: no cover - the last segment is unbounded


def crossing_bytes(collective: Collective, size: float, inside: set[int]) -> float:
    """Bytes that must leave the rank set ``inside`` in any schedule.

    A chunk that starts inside and is needed outside crosses at least once (copies can be made
    after crossing). For reductions, every chunk some rank outside must end with needs a value
    combining the inside contributions: one chunk's bytes per such chunk.
    """
    cb = collective.chunk_bytes(size)
    post_r, post_c = collective.postcondition()
    inside_mask = np.zeros(collective.num_ranks, dtype=bool)
    inside_mask[list(inside)] = True
    outside_need = ~inside_mask[post_r]
    if collective.reduces:
        if not inside_mask.any():
            return 0.0
        return float(len(unique(post_c[outside_need]))) * cb
    src = collective.chunk_source[post_c]
    crossing = outside_need & inside_mask[src]
    return float(len(unique(post_c[crossing]))) * cb


def _group_cuts(topology: Topology) -> list[set[int]]:
    """Candidate node sets: each chassis/dc/pod/server group, with and without the switches
    that carry the same group attribute."""
    cuts: list[set[int]] = []
    t = topology
    for attr in ("chassis", "dc", "pod", "server", "group"):
        if not all(attr in t.nodes[int(v)].attrs for v in t.compute_nodes):
            continue
        groups: dict = {}
        for v in range(t.num_nodes):
            a = t.nodes[v].attrs.get(attr)
            if a is not None:
                groups.setdefault(repr(a), set()).add(v)
        if len(groups) < 2:
            continue
        for members in groups.values():
            comp = {v for v in members if t.is_compute(v)}
            if comp:
                cuts.append(comp)
                if members != comp:
                    cuts.append(set(members))
    return cuts


@register("demand-cut")
def demand_cut_bounds(topology: Topology, collective: Collective, size: float) -> list[Bound]:
    """``T >= crossing(S) / B+(S) + alpha_min(S)`` over candidate cuts ``S``: chassis/datacenter
    groups (for every collective, AllToAll included)."""
    t = topology
    best = None
    # the built-in collectives are symmetric: what must cross depends only on how many ranks
    # are inside (and whether the root is), so equal groups cost one count
    need_of: dict[tuple, float] = {}
    for side in _group_cuts(t):
        ranks = {int(t.rank_of_node[v]) for v in side if t.is_compute(v)}
        key = (
            (len(ranks), collective.root in ranks)
            if collective.kind is not CollKind.CUSTOM
            else tuple(sorted(ranks))
        )
        if key not in need_of:
            need_of[key] = crossing_bytes(collective, size, ranks)
        need = need_of[key]
        if need <= 0:
            continue
        inside = np.zeros(t.num_nodes, dtype=bool)
        inside[list(side)] = True
        leaving = inside[t.link_src] & ~inside[t.link_dst]
        out_bw = float(t.link_bw[leaving].sum())
        if out_bw <= 0:
            continue
        val = need / out_bw + float(t.link_alpha[leaving].min())
        if best is None or val > best[0]:
            best = (val, side, need, out_bw)
    if best is None:
        return []
    val, side, need, out_bw = best
    return [Bound("demand-cut", val, _names(t, side), {"bytes": need, "cut_bw": out_bw})]
