"""The AllToAll / demand-matrix LP: TE-CCL's AllToAll LP (Liu et al., "Rethinking Machine
Learning Collective Communication as a Multi-Commodity Flow Problem", ACM SIGCOMM 2024, §4).

The commodity is the *source* rank ``s`` (exact when nothing is copied: a source's flow
decomposes into paths, each ending at one destination). Volumes are in chunks, continuous:

* ``f[s, l, k] >= 0``: volume of ``s``'s data starting on link ``l`` in epoch ``k``;
* ``P[s, v, k] >= 0``: volume GPU ``v`` still stores after epoch ``k``;
* ``T[s, d, k] >= 0``: volume destination ``d`` consumes (keeps) in epoch ``k``.

Rows: GPU conservation ``P[k] = P[k-1] + arrivals(k) - out(k) - T(k)`` (``P[-1]`` is the
source's supply); switch conservation ``out(k) = arrivals(k)`` (no buffer); capacity
``sum_s f[s, l, k] <= cap(l)``; demand ``sum_k T[s, d, k] = dem(s, d)``. A volume sent at
``k`` is usable from ``k + alpha_ep + 1`` (``alpha_ep`` after a cut-through switch hop).

The completion epoch ``K*`` is the smallest horizon with a feasible LP (found by growing then
bisecting ``K``); the final LP at ``K*`` minimises the volume-weighted delivery epoch plus a
small per-hop penalty (TE-CCL's ``-10/(k+1) t + 2/(K+1) f`` in spirit). Its flows are then
decomposed into paths per source and rounded to chunk byte ranges ``[lo/parts, hi/parts)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...schedule.dag import ragged_arange
from ...topology.model import Topology
from .common import INF, EpochOp, Model, RowBlocks, drop_loops
from .epochs import EpochGrid

_TOL = 1e-7


@dataclass
class LpLayout:
    """The LP at horizon ``K`` and where its columns are: flow column ``i`` is
    ``f[sources[flow_source[i]], flow_link[i], flow_epoch[i]]``."""

    K: int
    flow_source: np.ndarray  # index into sources
    flow_link: np.ndarray
    flow_epoch: np.ndarray
    p_index: np.ndarray  # (ranks[src], ranks, K+1)
    first_t_column: dict  # (source index, d) -> first T column (K+1 consecutive)
    model: Model
    sources: np.ndarray  # the source ranks with demand


def build(
    topology: Topology,
    grid: EpochGrid,
    dem: np.ndarray,
    K: int,
    dist: np.ndarray,
    to_gpu: np.ndarray,
    objective: bool = True,
) -> LpLayout:
    """The LP at horizon ``K`` (``objective=False``: a pure feasibility probe)."""
    t = topology
    n = t.num_ranks
    srcs = np.flatnonzero(dem.sum(axis=1) > 0)
    S = len(srcs)
    fs, fl, fk = _flow_columns(t, grid, srcs, K, dist, to_gpu)
    nf = len(fs)
    # P columns for every (source, GPU, epoch)
    p_index = nf + np.arange(S * n * (K + 1), dtype=np.int64).reshape(S, n, K + 1)
    ncol = nf + S * n * (K + 1)
    first_t_column = {}
    t_first = []
    for si, s in enumerate(srcs.tolist()):
        for dd in np.flatnonzero(dem[s] > 0).tolist():
            first_t_column[(si, dd)] = ncol
            t_first.append((si, dd, ncol))
            ncol += K + 1
    cost = np.zeros(ncol)
    lower = np.zeros(ncol)
    upper = np.full(ncol, np.inf)
    upper[:nf] = np.minimum(grid.cap[fl], dem.sum())
    # objective: delivery epoch (volume-weighted) + small per-hop penalty
    cost[:nf] = 1e-3
    for _si, _dd, c in t_first:
        cost[c : c + K + 1] = np.arange(K + 1, dtype=np.float64) + 1.0
    blocks = RowBlocks()
    _conservation_rows(blocks, t, grid, dem, srcs, fs, fl, fk, p_index, t_first, K)
    _switch_rows(blocks, t, grid, fs, fl, fk, K)
    # capacity
    ckey = fl * (K + 1) + fk
    keys, inv = np.unique(ckey, return_inverse=True)
    blocks.add(inv, np.arange(nf), np.ones(nf), -np.inf, grid.cap[keys // (K + 1)], len(keys))
    # demand
    m = len(t_first)
    if m:
        t_cs = _t_columns(t_first, K)
        blocks.add(
            np.repeat(np.arange(m), K + 1),
            t_cs,
            np.ones(len(t_cs)),
            np.array([dem[srcs[si], dd] for si, dd, _ in t_first]),
            np.array([dem[srcs[si], dd] for si, dd, _ in t_first]),
            m,
        )
    if not objective:
        cost[:] = 0.0
    model = blocks.model(cost, lower, upper, np.zeros(ncol, dtype=bool))
    return LpLayout(K, fs, fl, fk, p_index, first_t_column, model, srcs)


def _flow_columns(
    t: Topology, grid: EpochGrid, srcs: np.ndarray, K: int, dist: np.ndarray, to_gpu: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(source index, link, epoch)`` of every flow column that can matter."""
    d = grid.lp_delay
    tail, head = t.link_src, t.link_dst
    src_node = t.compute_nodes[srcs]
    lo = dist[src_node][:, tail]
    hi = K - d - np.where(to_gpu[head] >= INF, K + 1, to_gpu[head])
    ok = (lo < INF) & (head[None, :] != src_node[:, None]) & (lo <= hi[None, :])
    counts = np.where(ok, hi[None, :] - np.minimum(lo, K) + 1, 0)
    ss, ll = np.nonzero(counts)
    cnt = counts[ss, ll]
    fs = np.repeat(ss, cnt).astype(np.int64)  # index into srcs
    fl = np.repeat(ll, cnt).astype(np.int64)
    fk = ragged_arange(cnt, lo[ss, ll])
    return fs, fl, fk


def _t_columns(t_first: list[tuple[int, int, int]], K: int) -> np.ndarray:
    """The ``T`` columns of every (source, destination), epochs ``0 .. K`` each."""
    t_cs = [np.arange(c, c + K + 1) for _, _, c in t_first]
    return np.concatenate(t_cs) if t_cs else np.zeros(0, dtype=np.int64)


def _conservation_rows(
    blocks: RowBlocks,
    t: Topology,
    grid: EpochGrid,
    dem: np.ndarray,
    srcs: np.ndarray,
    fs: np.ndarray,
    fl: np.ndarray,
    fk: np.ndarray,
    p_index: np.ndarray,
    t_first: list[tuple[int, int, int]],
    K: int,
) -> None:
    """GPU conservation, row id = P column - nf:
    ``P[k] - P[k-1] + out(k) + T(k) - arr(k) = supply``."""
    nf = len(fs)
    S, n = len(srcs), t.num_ranks
    d = grid.lp_delay
    tail, head = t.link_src, t.link_dst
    npc = S * n * (K + 1)
    pcols = np.arange(nf, nf + npc)
    pk = np.tile(np.arange(K + 1), S * n)
    r1 = pcols - nf
    prev = pk > 0
    kinds = t.kind_codes
    o = np.flatnonzero(kinds[tail[fl]] == 0)
    o_rows = p_index[fs[o], t.rank_of_node[tail[fl[o]]], fk[o]] - nf
    a = np.flatnonzero(kinds[head[fl]] == 0)
    a_rows = p_index[fs[a], t.rank_of_node[head[fl[a]]], fk[a] + d[fl[a]]] - nf
    t_blocks = [p_index[si, dd, :] - nf for si, dd, _ in t_first]
    t_rows = np.concatenate(t_blocks) if t_blocks else np.zeros(0, dtype=np.int64)
    t_cs = _t_columns(t_first, K)
    rhs = np.zeros(npc)
    for si, s in enumerate(srcs.tolist()):
        rhs[p_index[si, s, 0] - nf] = dem[s].sum()
    blocks.add(
        np.concatenate((r1, r1[prev], o_rows, a_rows, t_rows)),
        np.concatenate((pcols, pcols[prev] - 1, o, a, t_cs)),
        np.concatenate(
            (
                np.ones(npc),
                -np.ones(int(prev.sum())),
                np.ones(len(o)),
                -np.ones(len(a)),
                np.ones(len(t_cs)),
            )
        ),
        rhs,
        rhs,
        npc,
    )


def _switch_rows(
    blocks: RowBlocks,
    t: Topology,
    grid: EpochGrid,
    fs: np.ndarray,
    fl: np.ndarray,
    fk: np.ndarray,
    K: int,
) -> None:
    """Switch conservation (no buffer): ``out(k) = arrivals(k)``."""
    d = grid.lp_delay
    tail, head = t.link_src, t.link_dst
    from_switch = np.flatnonzero(t.kind_codes[tail[fl]] != 0)
    into_switch = np.flatnonzero(t.kind_codes[head[fl]] != 0)
    if len(from_switch) or len(into_switch):
        N = t.num_nodes
        k_out = (fs[from_switch] * N + tail[fl[from_switch]]) * (K + 1) + fk[from_switch]
        k_in = (
            (fs[into_switch] * N + head[fl[into_switch]]) * (K + 1)
            + fk[into_switch]
            + d[fl[into_switch]]
        )
        keys, inv = np.unique(np.concatenate((k_out, k_in)), return_inverse=True)
        blocks.add(
            inv,
            np.concatenate((from_switch, into_switch)),
            np.concatenate((np.ones(len(from_switch)), -np.ones(len(into_switch)))),
            0.0,
            0.0,
            len(keys),
        )


def decompose(
    layout: LpLayout,
    topology: Topology,
    grid: EpochGrid,
    x: np.ndarray,
    chunk_ids: list[list[list[int]]],
    parts: int,
) -> tuple[list[EpochOp], int, dict]:
    """Paths per source, rounded to ``1/parts`` chunk byte ranges, as epoch ops."""
    t = topology
    srcs = layout.sources
    ops: list[EpochOp] = []
    stats = {"paths": 0, "dropped_volume": 0.0, "rounding_max": 0.0}
    done = 0
    for si, s in enumerate(srcs.tolist()):
        edges = _source_edges(layout, t, grid, x, si)
        root = int(t.compute_nodes[s]) * (layout.K + 2)
        paths_by_dest = _peel_paths(edges, root, t.num_nodes * (layout.K + 2), stats)
        # round to byte ranges and emit ops
        for dest in sorted(paths_by_dest):
            done = _emit(
                ops, paths_by_dest[dest], chunk_ids[s][dest], parts, t, grid.lp_delay, stats, done
            )
    return ops, done, stats


def _source_edges(
    layout: LpLayout, t: Topology, grid: EpochGrid, x: np.ndarray, si: int
) -> tuple[list[int], list[int], list[float], list[tuple]]:
    """Edges of source ``si``'s time-expanded network: from, to, amount, (kind, ...) — flows
    ``f``, storage ``h`` and deliveries ``t`` into the sink of the destination rank."""
    K = layout.K
    d = grid.lp_delay
    nf = len(layout.flow_source)
    fval = x[:nf]

    def vertex(v, k):
        return v * (K + 2) + k

    sink = t.num_nodes * (K + 2)
    e_from, e_to, e_amt, e_info = [], [], [], []
    sel = np.flatnonzero((layout.flow_source == si) & (fval > _TOL))
    for i in sel.tolist():
        l = int(layout.flow_link[i])
        k = int(layout.flow_epoch[i])
        e_from.append(vertex(int(t.link_src[l]), k))
        e_to.append(vertex(int(t.link_dst[l]), k + int(d[l])))
        e_amt.append(float(fval[i]))
        e_info.append(("f", l, k))
    for r in range(t.num_ranks):
        v = int(t.compute_nodes[r])
        pv = x[layout.p_index[si, r, :]]
        for k in range(K):
            if pv[k] > _TOL:
                e_from.append(vertex(v, k))
                e_to.append(vertex(v, k + 1))
                e_amt.append(float(pv[k]))
                e_info.append(("h", v, k))
        c0 = layout.first_t_column.get((si, r))
        if c0 is not None:
            tv = x[c0 : c0 + K + 1]
            for k in np.flatnonzero(tv > _TOL).tolist():
                e_from.append(vertex(v, k))
                e_to.append(sink + r)
                e_amt.append(float(tv[k]))
                e_info.append(("t", r, k))
    return e_from, e_to, e_amt, e_info


def _peel_paths(
    edges: tuple[list[int], list[int], list[float], list[tuple]], root: int, sink: int, stats: dict
) -> dict[int, list[tuple[float, list[tuple[int, int]]]]]:
    """Paths from ``root`` to the sinks, widest edge first, each taking its bottleneck
    volume: ``{destination: [(volume, [(link, epoch), ...]), ...]}``; volume that ends
    nowhere counts as dropped."""
    e_from, e_to, e_amt, e_info = edges
    amt = np.array(e_amt)
    adj: dict[int, list[int]] = {}
    for i, fr in enumerate(e_from):
        adj.setdefault(fr, []).append(i)
    paths_by_dest: dict[int, list[tuple[float, list[tuple[int, int]]]]] = {}
    for _ in range(4 * len(e_amt) + 4):
        node = root
        path: list[int] = []
        while node < sink:
            cand = [i for i in adj.get(node, ()) if amt[i] > _TOL]
            if not cand:
                break
            i = max(cand, key=lambda j: (amt[j], -j))
            path.append(i)
            node = e_to[i]
        if not path:
            break
        vol = float(min(amt[i] for i in path))
        for i in path:
            amt[i] -= vol
        if node < sink:
            stats["dropped_volume"] += vol
            continue
        dest = node - sink
        hops = [(e_info[i][1], e_info[i][2]) for i in path if e_info[i][0] == "f"]
        paths_by_dest.setdefault(dest, []).append((vol, hops))
    return paths_by_dest


def _emit(
    ops: list[EpochOp],
    plist: list[tuple[float, list[tuple[int, int]]]],
    ids: list[int],
    parts: int,
    t: Topology,
    d: np.ndarray,
    stats: dict,
    done: int,
) -> int:
    """Round one destination's path volumes to byte ranges ``[lo/parts, hi/parts)`` of its chunks
    ``ids`` and append each piece's transfers to ``ops``; returns the latest arrival."""
    total = len(ids)
    cum = np.cumsum([v for v, _ in plist])
    cum = cum * (total / cum[-1]) if cum[-1] > 0 else cum
    bounds = np.round(cum * parts).astype(np.int64)
    bounds[-1] = total * parts
    stats["rounding_max"] = max(stats["rounding_max"], float(np.max(np.abs(bounds / parts - cum))))
    prev_b = 0
    for (_vol, hops), b in zip(plist, bounds.tolist()):
        lo_b, hi_b = prev_b, b
        prev_b = b
        if hi_b <= lo_b:
            continue
        stats["paths"] += 1
        transfers = _transfers(t, hops, d)
        # split at chunk boundaries
        c = lo_b // parts
        while lo_b < hi_b:
            end = min(hi_b, (c + 1) * parts)
            part = (lo_b - c * parts, end - c * parts, parts)
            prev_op = -1
            for u, v, route, k0, arrive in transfers:
                ops.append(
                    EpochOp(
                        ids[c],
                        u,
                        v,
                        route,
                        k0,
                        arrive,
                        prev_op,
                        part if part != (0, parts, parts) else None,
                    )
                )
                prev_op = len(ops) - 1
                done = max(done, arrive)
            lo_b = end
            c += 1
    return done


def _transfers(t: Topology, hops: list[tuple[int, int]], d: np.ndarray):
    """Group a path's link hops into GPU-to-GPU transfers (through switches)."""
    out = []
    cur: list[int] = []
    k0 = 0
    for l, k in hops:
        if not cur:
            k0 = k
        cur.append(l)
        if t.kind_codes[t.link_dst[l]] == 0:
            u = int(t.rank_of_node[t.link_src[cur[0]]])
            v = int(t.rank_of_node[t.link_dst[l]])
            if u != v:  # a detour back to the sender moves nothing
                out.append((u, v, drop_loops(t, tuple(cur)), k0, k + int(d[l])))
            cur = []
    return out
