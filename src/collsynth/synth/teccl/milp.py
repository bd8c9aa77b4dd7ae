"""The multicast epoch MILP: TE-CCL's AllGather MILP (Liu et al., "Rethinking Machine Learning
Collective Communication as a Multi-Commodity Flow Problem", ACM SIGCOMM 2024, §3-4).

One commodity per chunk ``q`` (source rank ``s_q``, destination ranks ``D_q``); epochs
``0 .. K-1``. Columns:

* ``f[q, l, k]`` in {0, 1} (into a switch: integer up to the link's window capacity, one copy
  per destination behind the switch): chunk ``q`` starts crossing ``l`` in epoch ``k``. Only created
  where it can matter: ``k`` no earlier than the fewest epochs from ``s_q`` to the link's tail,
  the chunk can still reach a GPU by ``K``, and ``l`` does not enter ``s_q``.
* ``H[q, v, k]`` in [0, 1] for GPUs ``v != s_q``, ``k = 0 .. K``: ``v`` holds ``q`` from the
  start of epoch ``k`` (TE-CCL's buffer; ``H <= 1`` means a chunk arrives at most once). It is
  integral whenever ``f`` is. ``H[q, d, k]`` for ``d`` in ``D_q`` is TE-CCL's demand-met.
* ``u[k]`` in [0, 1] (makespan objective): epoch ``k`` is still needed.

Rows:

* buffer: ``H[q,v,k] = H[q,v,k-1] + sum of f[q,l,k'] into v with k' + delay(l) = k``;
* GPU send with copy (TE-CCL: max over out-links <= buffer): ``f[q,l,k] <= U(l) H[q,tail(l),k]``;
  the source sends freely;
* switch (no buffer, forwards in the epoch a chunk arrives): ``sum_out f[q,·,k] <= sum of
  arrivals at k`` — or, with ``switch_copy``, each out-link ``<=`` the arrivals;
* capacity: ``sum over q and the last window(l) epochs of f[q,l,·] <= per_window(l)``;
* destination: ``H[q,d,K] = 1`` for every ``d`` in ``D_q``;
* makespan: ``u[k] + H[q,d,k] >= 1``.

Objective ``makespan`` (default): minimise ``W * sum u + sum over demands and epochs of
(1 - H)`` with ``W`` larger than the second sum — the completion epoch first (TE-CCL's
``BINARY_USED_EPOCHS``), then every delivery as early as possible (TE-CCL's ``PAPER``
reward). Objective ``paper``: only the second sum (TE-CCL's default ``PAPER`` objective).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...schedule.dag import ragged_arange
from ...topology.model import Topology
from .common import INF, Commodities, EpochOp, Model, RowBlocks, drop_loops
from .epochs import EpochGrid


@dataclass
class MilpLayout:
    """The model at horizon ``K`` and where its columns are: flow column ``i`` is
    ``f[flow_commodity[i], flow_link[i], flow_epoch[i]]``."""

    K: int
    flow_commodity: np.ndarray
    flow_link: np.ndarray
    flow_epoch: np.ndarray
    h_index: np.ndarray  # (Q, ranks, K+1) column of H, -1 for the source
    u_start: int  # first u column (or -1)
    W: float
    demand_q: np.ndarray
    demand_d: np.ndarray  # ranks
    model: Model


def build(
    topology: Topology,
    grid: EpochGrid,
    commodities: Commodities,
    K: int,
    dist: np.ndarray,
    to_gpu: np.ndarray,
    switch_copy: bool = False,
    objective: str = "makespan",
    link_class: np.ndarray | None = None,
    weight: np.ndarray | None = None,
) -> MilpLayout:
    """The MILP at horizon ``K`` (columns and rows: see the module doc). With ``link_class``
    and ``weight`` (the symmetric model, :mod:`.symmetry`), capacity rows are per link class
    and a flow on link ``l`` counts ``weight[l]`` times."""
    t = topology
    columns = _columns(t, grid, commodities, K, dist, to_gpu, objective)
    cost, lower, upper, integer, f_upper = _bounds_and_cost(
        t, grid, commodities, columns, dist, objective
    )
    blocks = RowBlocks()
    _buffer_rows(blocks, t, grid, columns)
    _send_rows(blocks, t, commodities, columns, f_upper)
    _switch_rows(blocks, t, grid, columns, switch_copy)
    _capacity_rows(blocks, grid, columns, link_class, weight)
    if objective == "makespan" and K > 0:
        _makespan_rows(blocks, columns)
    model = blocks.model(cost, lower, upper, integer)
    return MilpLayout(
        K,
        columns.flow_commodity,
        columns.flow_link,
        columns.flow_epoch,
        columns.h_index,
        columns.u_start,
        columns.W,
        columns.demand_q,
        columns.demand_d,
        model,
    )


def column_count(
    topology: Topology,
    grid: EpochGrid,
    commodities: Commodities,
    K: int,
    dist: np.ndarray,
    to_gpu: np.ndarray,
    objective: str = "makespan",
) -> int:
    """Columns the model at horizon ``K`` would have (without building its rows)."""
    return _columns(topology, grid, commodities, K, dist, to_gpu, objective).num_columns


@dataclass
class _Columns:
    """The column layout: flows ``f`` (commodity, link, epoch), buffers ``H`` and ``u``."""

    K: int
    flow_commodity: np.ndarray
    flow_link: np.ndarray
    flow_epoch: np.ndarray
    h_index: np.ndarray  # (Q, ranks, K+1) column of H, -1 for the source
    buffer_commodity: np.ndarray  # commodity of each (commodity, rank) block of H
    buffer_rank: np.ndarray  # rank of each block
    demand_q: np.ndarray
    demand_d: np.ndarray  # ranks
    u_start: int  # first u column (or -1)
    W: float
    num_columns: int

    @property
    def num_flows(self) -> int:
        """Number of flow columns (the first ones)."""
        return len(self.flow_commodity)

    @property
    def num_buffers(self) -> int:
        """Number of buffer columns (after the flows)."""
        return len(self.buffer_commodity) * (self.K + 1)

    def demand_columns(self) -> np.ndarray:
        """H columns of every demand in epochs ``0 .. K-1``, one row per demand."""
        K = self.K
        if not K:
            return np.zeros((len(self.demand_q), 0), dtype=np.int64)
        return self.h_index[self.demand_q, self.demand_d, :K]


def _columns(
    t: Topology,
    grid: EpochGrid,
    commodities: Commodities,
    K: int,
    dist: np.ndarray,
    to_gpu: np.ndarray,
    objective: str,
) -> _Columns:
    """Flow columns where they can matter, buffer columns of every non-source GPU, demands
    and (makespan) the ``u`` columns."""
    Q = len(commodities)
    R = t.num_ranks
    src_node = t.compute_nodes[commodities.src]
    tail, head = t.link_src, t.link_dst
    d = grid.delay
    # ---------------------------------------------------------------- flow columns
    lo = dist[src_node][:, tail]  # (Q, L)
    hi = K - d - np.where(to_gpu[head] >= INF, K + 1, to_gpu[head])  # (L,)
    ok = (lo < INF) & (head[None, :] != src_node[:, None])
    counts = np.where(ok, np.maximum(0, hi[None, :] - np.minimum(lo, K) + 1), 0)
    counts = np.where(ok & (lo <= hi[None, :]), counts, 0)
    qq, ll = np.nonzero(counts)
    cnt = counts[qq, ll]
    fq = np.repeat(qq, cnt).astype(np.int64)
    fl = np.repeat(ll, cnt).astype(np.int64)
    fk = ragged_arange(cnt, lo[qq, ll])
    nf = len(fq)
    # ---------------------------------------------------------------- buffer columns
    h_index = np.full((Q, R, K + 1), -1, dtype=np.int64)
    has_h = np.ones((Q, R), dtype=bool)
    has_h[np.arange(Q), commodities.src] = False
    nh = int(has_h.sum()) * (K + 1)
    h_index[has_h] = nf + np.arange(nh, dtype=np.int64).reshape(-1, K + 1)
    hq, hr = np.nonzero(has_h)
    ncol = nf + nh
    # demands
    demand_q = (
        np.concatenate(
            [np.full(len(ds), q, dtype=np.int64) for q, ds in enumerate(commodities.dests)]
        )
        if Q
        else np.zeros(0, int)
    )
    demand_d = np.concatenate(commodities.dests) if Q else np.zeros(0, int)
    nd = len(demand_q)
    u0 = -1
    W = 0.0
    if objective == "makespan":
        u0 = ncol
        ncol += K
        W = float(nd * K + 1)
    return _Columns(K, fq, fl, fk, h_index, hq, hr, demand_q, demand_d, u0, W, ncol)


def _bounds_and_cost(
    t: Topology,
    grid: EpochGrid,
    commodities: Commodities,
    columns: _Columns,
    dist: np.ndarray,
    objective: str,
) -> tuple[np.ndarray, ...]:
    """Column bounds, integrality and the objective: ``(cost, lower, upper, integer, upper
    bound of every flow column)``."""
    K, nf, ncol = columns.K, columns.num_flows, columns.num_columns
    head = t.link_dst
    cost = np.zeros(ncol)
    lower = np.zeros(ncol)
    upper = np.ones(ncol)
    integer = np.zeros(ncol, dtype=bool)
    integer[:nf] = True
    # into a switch, one chunk may go several times in one epoch (a copy per destination
    # behind the switch, since switches do not copy by default); into a GPU once at most
    f_upper = np.where(
        t.kind_codes[head[columns.flow_link]] != 0, grid.per_window[columns.flow_link], 1
    ).astype(np.float64)
    upper[:nf] = f_upper
    # H bounds: zero before the earliest arrival, one at K for demands
    src_node = t.compute_nodes[commodities.src]
    earliest = dist[
        src_node[columns.buffer_commodity], t.compute_nodes[columns.buffer_rank]
    ]  # per (q, r) pair
    h_block = columns.h_index[columns.buffer_commodity, columns.buffer_rank]  # (pairs, K+1)
    before = np.arange(K + 1)[None, :] < earliest[:, None]
    upper[h_block[before]] = 0.0
    dem_cols_K = columns.h_index[columns.demand_q, columns.demand_d, K]
    lower[dem_cols_K] = 1.0
    # objective
    if objective == "makespan":
        cost[columns.u_start : columns.u_start + K] = columns.W
        np.add.at(cost, columns.demand_columns().ravel(), -1.0)
    else:  # paper: reward demand met at the end of every epoch (H at k+1)
        np.add.at(cost, columns.h_index[columns.demand_q, columns.demand_d, 1:].ravel(), -1.0)
    return cost, lower, upper, integer, f_upper


def _buffer_rows(blocks: RowBlocks, t: Topology, grid: EpochGrid, columns: _Columns) -> None:
    """``H[q,v,k] = H[q,v,k-1] + arrivals at k`` (row id = H column - nf)."""
    K, nf, nh = columns.K, columns.num_flows, columns.num_buffers
    fq, fl, fk = columns.flow_commodity, columns.flow_link, columns.flow_epoch
    hcols = np.arange(nf, nf + nh, dtype=np.int64)
    hk = np.tile(np.arange(K + 1, dtype=np.int64), len(columns.buffer_commodity))
    r1 = hcols - nf
    prev = hk > 0
    f_head_gpu = t.kind_codes[t.link_dst[fl]] == 0
    arr_rank = t.rank_of_node[t.link_dst[fl]]
    fa = np.flatnonzero(f_head_gpu)
    arr_k = fk[fa] + grid.delay[fl[fa]]
    arr_rows = columns.h_index[fq[fa], arr_rank[fa], arr_k] - nf
    blocks.add(
        np.concatenate((r1, r1[prev], arr_rows)),
        np.concatenate((hcols, hcols[prev] - 1, fa)),
        np.concatenate((np.ones(nh), -np.ones(int(prev.sum())), -np.ones(len(fa)))),
        0.0,
        0.0,
        nh,
    )


def _send_rows(
    blocks: RowBlocks, t: Topology, commodities: Commodities, columns: _Columns, f_upper: np.ndarray
) -> None:
    """GPU send with copy: ``f[q,l,k] <= U(l) H[q,tail(l),k]`` (the source sends freely)."""
    fq, fl, fk = columns.flow_commodity, columns.flow_link, columns.flow_epoch
    tail_gpu = t.kind_codes[t.link_src[fl]] == 0
    tail_rank = t.rank_of_node[t.link_src[fl]]
    fs = np.flatnonzero(tail_gpu & (tail_rank != commodities.src[fq]))
    ns = len(fs)
    blocks.add(
        np.concatenate((np.arange(ns), np.arange(ns))),
        np.concatenate((fs, columns.h_index[fq[fs], tail_rank[fs], fk[fs]])),
        np.concatenate((np.ones(ns), -f_upper[fs])),
        -np.inf,
        0.0,
        ns,
    )


def _switch_rows(
    blocks: RowBlocks, t: Topology, grid: EpochGrid, columns: _Columns, switch_copy: bool
) -> None:
    """Switches forward in the epoch a chunk arrives: out-flows <= arrivals (together, or
    each out-link alone with ``switch_copy``)."""
    K, fq, fl, fk = columns.K, columns.flow_commodity, columns.flow_link, columns.flow_epoch
    tail, head = t.link_src, t.link_dst
    f_tail_sw = np.flatnonzero(t.kind_codes[tail[fl]] != 0)
    f_head_sw = np.flatnonzero(t.kind_codes[head[fl]] != 0)
    if not (len(f_tail_sw) or len(f_head_sw)):
        return
    S = t.num_nodes
    key_out = (fq[f_tail_sw] * S + tail[fl[f_tail_sw]]) * (K + 1) + fk[f_tail_sw]
    k_in = fk[f_head_sw] + grid.delay[fl[f_head_sw]]
    key_in = (fq[f_head_sw] * S + head[fl[f_head_sw]]) * (K + 1) + np.minimum(k_in, K)
    if not switch_copy:
        keys, inv = np.unique(np.concatenate((key_out, key_in)), return_inverse=True)
        no = len(key_out)
        blocks.add(
            inv,
            np.concatenate((f_tail_sw, f_head_sw)),
            np.concatenate((np.ones(no), -np.ones(len(key_in)))),
            -np.inf,
            0.0,
            len(keys),
        )
    else:
        order = np.argsort(key_in, kind="stable")
        ks = key_in[order]
        start = np.searchsorted(ks, key_out, side="left")
        end = np.searchsorted(ks, key_out, side="right")
        cnt = end - start
        no = len(key_out)
        r_out = np.arange(no)
        r_in = np.repeat(r_out, cnt)
        c_in = f_head_sw[order[ragged_arange(cnt, start)]]
        blocks.add(
            np.concatenate((r_out, r_in)),
            np.concatenate((f_tail_sw, c_in)),
            np.concatenate((np.ones(no), -np.ones(len(c_in)))),
            -np.inf,
            0.0,
            no,
        )


def _capacity_rows(
    blocks: RowBlocks,
    grid: EpochGrid,
    columns: _Columns,
    link_class: np.ndarray | None = None,
    weight: np.ndarray | None = None,
) -> None:
    """Sliding-window capacity: flows on a link (class) in its last ``window`` epochs, each
    counted ``weight`` times, <= per window."""
    K, nf = columns.K, columns.num_flows
    L = len(grid.window)
    cls = np.arange(L, dtype=np.int64) if link_class is None else link_class
    wt = np.ones(L) if weight is None else weight
    w = grid.window[columns.flow_link]
    reps = np.repeat(np.arange(nf), w)
    offs = ragged_arange(w)
    tk = columns.flow_epoch[reps] + offs
    keep = tk <= K  # a cut-through switch-to-GPU hop may use epoch K itself
    reps, tk = reps[keep], tk[keep]
    ckey = cls[columns.flow_link[reps]] * (K + 1) + tk
    keys, inv = np.unique(ckey, return_inverse=True)
    # a member link of each class (they share their capacity figures)
    member = np.zeros(int(cls.max()) + 1 if L else 0, dtype=np.int64)
    member[cls[::-1]] = np.arange(L - 1, -1, -1)
    blocks.add(
        inv,
        reps,
        wt[columns.flow_link[reps]],
        -np.inf,
        grid.per_window[member[keys // (K + 1)]].astype(float),
        len(keys),
    )


def _makespan_rows(blocks: RowBlocks, columns: _Columns) -> None:
    """``u[k] + H[q,d,k] >= 1`` for every demand and epoch."""
    K = columns.K
    n_mk = len(columns.demand_q) * K
    rr = np.arange(n_mk)
    ucol = columns.u_start + np.tile(np.arange(K), len(columns.demand_q))
    blocks.add(
        np.concatenate((rr, rr)),
        np.concatenate((ucol, columns.demand_columns().ravel())),
        np.ones(2 * n_mk),
        1.0,
        np.inf,
        n_mk,
    )


def warm_vector(
    layout: MilpLayout,
    topology: Topology,
    commodities: Commodities,
    grid: EpochGrid,
    ops: list[EpochOp],
    commodity_of_chunk: dict[int, int],
) -> np.ndarray | None:
    """The column vector of an epoch-op solution (None when it does not fit the model)."""
    t = topology
    K = layout.K
    x = np.zeros(layout.model.num_cols)
    L = len(t.links)
    key = (layout.flow_commodity * L + layout.flow_link) * (K + 1) + layout.flow_epoch
    order = np.argsort(key)
    skey = key[order]
    last = 0
    for op in ops:
        q = commodity_of_chunk[op.chunk]
        k = op.k0
        for l in op.route:
            kk = (q * L + l) * (K + 1) + k
            i = np.searchsorted(skey, kk)
            if i >= len(skey) or skey[i] != kk:
                return None
            x[order[i]] += 1.0
            k += int(grid.delay[l])
        if op.arrive > K:
            return None
        cols = layout.h_index[q, op.dst, op.arrive :]
        if np.any(cols < 0):
            return None
        x[cols] = 1.0
        last = max(last, op.arrive)
    if layout.u_start >= 0:
        x[layout.u_start : layout.u_start + min(last, K)] = 1.0
    return x


def decode(
    layout: MilpLayout,
    topology: Topology,
    commodities: Commodities,
    grid: EpochGrid,
    x: np.ndarray,
    switch_copy: bool = False,
) -> tuple[list[EpochOp], int]:
    """Epoch ops of a MILP solution (flows that do not lead to a demand are pruned) and the
    completion epoch."""
    t = topology
    mult = np.rint(x[: len(layout.flow_commodity)]).astype(np.int64)
    on = np.repeat(np.arange(len(mult)), np.maximum(mult, 0))  # a flow of n: n copies
    fq, fl, fk = layout.flow_commodity[on], layout.flow_link[on], layout.flow_epoch[on]
    d = grid.delay
    kinds = t.kind_codes
    # switch out-flows waiting to be matched: (q, switch node, epoch) -> [link ids]
    outs: dict[tuple[int, int, int], list[int]] = {}
    for q, l, k in zip(fq.tolist(), fl.tolist(), fk.tolist()):
        if kinds[t.link_src[l]] != 0:
            outs.setdefault((q, int(t.link_src[l]), k), []).append(l)
    for waiting in outs.values():
        waiting.sort()
    raw: list[tuple[int, int, int, tuple[int, ...], int, int, int]] = []  # q u v route k0 arrive g
    starts = [
        (q, l, k)
        for q, l, k in zip(fq.tolist(), fl.tolist(), fk.tolist())
        if kinds[t.link_src[l]] == 0
    ]
    starts.sort(key=lambda z: (z[2], z[0], z[1]))

    copied_by_incapable = [False]

    def extend(
        q: int, route: tuple[int, ...], k: int, node: int
    ) -> list[tuple[tuple[int, ...], int]]:
        """All GPU-to-GPU routes continuing ``route`` from switch ``node`` at epoch ``k``."""
        key = (q, node, k)
        avail = outs.get(key)
        if not avail:
            return []
        take = list(avail) if switch_copy else [avail.pop(0)]
        if len(take) > 1 and not t.multicast_nodes[node]:
            copied_by_incapable[0] = True
        res: list[tuple[tuple[int, ...], int]] = []
        for l2 in take:
            k2 = k + int(d[l2])
            nxt = int(t.link_dst[l2])
            r2 = route + (l2,)
            if kinds[nxt] == 0:
                res.append((r2, k2))
            else:
                res.extend(extend(q, r2, k2, nxt))
        return res

    group = 0
    for q, l, k in starts:
        u = int(t.rank_of_node[t.link_src[l]])
        nxt = int(t.link_dst[l])
        paths: list[tuple[tuple[int, ...], int]]
        copied_by_incapable[0] = False
        if kinds[nxt] == 0:
            paths = [((l,), k + int(d[l]))]
        else:
            paths = extend(q, (l,), k + int(d[l]), nxt)
        # copies made by switches that can multicast are one stream up to where they part
        g = group if len(paths) > 1 and not copied_by_incapable[0] else -1
        group += g >= 0
        for route, arrive in paths:
            if g < 0:
                route = drop_loops(t, route)
            v = int(t.rank_of_node[t.link_dst[route[-1]]])
            if v == u:
                continue
            raw.append((q, u, v, route, k, arrive, g))
    return _link_and_prune(raw, commodities, t)


def _link_and_prune(raw, commodities: Commodities, t: Topology) -> tuple[list[EpochOp], int]:
    """Dependencies (the first delivery of the chunk to the sender) and pruning of transfers
    that feed no destination."""
    raw.sort(key=lambda z: (z[4], z[0], z[1], z[2], z[3]))
    first: dict[tuple[int, int], int] = {}
    ops: list[EpochOp] = []
    for q, u, v, route, k0, arrive, group in raw:
        chunk = int(commodities.chunk[q])
        if (q, v) in first or v == int(commodities.src[q]):
            continue  # a second arrival (or back to the source) is useless
        dep = -1 if u == int(commodities.src[q]) else first.get((q, u), -2)
        if dep == -2:
            continue  # sender never received it (cannot happen in a feasible solution)
        first[(q, v)] = len(ops)
        ops.append(EpochOp(chunk, u, v, route, k0, arrive, dep, group=group))
    need = np.zeros(len(ops), dtype=bool)
    dests = {q: set(ds.tolist()) for q, ds in enumerate(commodities.dests)}
    commodity_of_chunk = {int(c): q for q, c in enumerate(commodities.chunk.tolist())}
    for i in range(len(ops) - 1, -1, -1):
        o = ops[i]
        if o.dst in dests[commodity_of_chunk[o.chunk]] or need[i]:
            need[i] = True
            if o.dep >= 0:
                need[o.dep] = True
    keep = np.flatnonzero(need)
    remap = {int(old): new for new, old in enumerate(keep.tolist())}
    out = []
    for old in keep.tolist():
        o = ops[old]
        o.dep = remap[o.dep] if o.dep >= 0 else -1
        out.append(o)
    done = max((o.arrive for o in out), default=0)
    return out, done
