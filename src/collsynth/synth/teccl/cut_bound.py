"""The epoch cut bound: the fewest epochs any solution of the epoch model needs, by cuts
into every rank and every chassis, server, pod, dc or group region (Hall's condition for unit
jobs with release dates and deadlines on the links entering the region)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...arrays import unique
from ...topology.model import Topology
from .common import INF, Commodities


def epoch_cut_bound(
    topology: Topology,
    grid: Any,
    commodities: Commodities,
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
    if not len(commodities):
        return max(k_lo, 0)
    tail_len = grid.delay + np.where(to_gpu[t.link_dst] >= INF, INF // 2, to_gpu[t.link_dst])
    sets = _cut_sets(t, grid, commodities, dist)
    for K in range(max(k_lo, 0), k_hi):
        if all(_cuts_fit(grid, tail_len, K, *one) for one in sets):
            return K
    return max(k_lo, k_hi)


def _cut_sets(t: Topology, grid: Any, commodities: Commodities, dist: np.ndarray) -> list[tuple]:
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
        one = _region_cut(t, grid, commodities, dist, inside)
        if one is None:
            continue
        sets.append(one)
        tails = t.link_src[one[0]]
        mine = np.flatnonzero(inside & gpu)
        for i in holding.get(int(mine[0]), []) if len(mine) else []:
            outer = masks[i]
            if outer[mine].all() and (outer & gpu).sum() > len(mine) and outer[tails].all():
                two = _region_cut(t, grid, commodities, dist, inside, outer, cache)
                if two is not None:
                    sets.append(two)
    return sets


def _region_cut(
    t: Topology,
    grid: Any,
    commodities: Commodities,
    dist: np.ndarray,
    inside: np.ndarray,
    outer: np.ndarray | None = None,
    cache: dict | None = None,
) -> tuple | None:
    """One region's cut (see :func:`_cut_sets`); None when no chunk must enter it."""
    src_nodes = t.compute_nodes[commodities.src]
    enter = np.flatnonzero(~inside[t.link_src] & inside[t.link_dst])
    needs = np.array(
        [
            not inside[src_nodes[q]] and bool(inside[t.compute_nodes[ds]].any())
            for q, ds in enumerate(commodities.dests)
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
            for q, ds in enumerate(commodities.dests)
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
    release_thresholds = unique(release[ok])
    tail_thresholds = unique(tail[ok])
    count = (
        (release[ok][None, None, :] >= release_thresholds[:, None, None])
        & (tail[ok][None, None, :] >= tail_thresholds[None, :, None])
    ).sum(axis=2)
    return (enter, d.min(axis=0), release_thresholds, tail_thresholds, count)


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


def _cuts_fit(
    grid: Any,
    tail_len: np.ndarray,
    K: int,
    enter: np.ndarray,
    earliest: np.ndarray,
    release_thresholds: np.ndarray,
    tail_thresholds: np.ndarray,
    count: np.ndarray,
) -> bool:
    """Whether horizon ``K`` passes one region's cut conditions (the links ``enter`` into
    it, their ``earliest`` starts, and ``count[r, e]`` chunks released at the ``r``-th
    release threshold or later with a tail of the ``e``-th threshold or more)."""
    first = np.maximum(release_thresholds[:, None], np.minimum(earliest, K)[None, :])  # (R, L)
    last = np.minimum(K - tail_len[enter][None, :], K - tail_thresholds[:, None])  # (E, L)
    n = np.maximum(0, last[None, :, :] - first[:, None, :] + 1)  # (R, E, L)
    win = grid.window[enter]
    cap = (grid.per_window[enter] * -(-n // win)).sum(axis=2)
    return bool(np.all(cap >= count))
