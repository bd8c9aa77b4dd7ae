"""AllReduce's transmission-count bound, provider ``transmissions`` (the directed gossip bound;
derivation in :mod:`collsynth.bound`), over ranks, over the topology's groups
(:func:`groupings`: chassis, servers, pods, datacenters) and over a partition of the ranks that
:func:`searched_partition` picks to make the bound as large as it can.

Any partition into ``m`` groups, each holding at least one rank, gives a valid bound
``2(m-1) M / min(Σ egress, Σ ingress)`` (a group merges its members' partial sums for free;
switches outside every group only forward). The largest over all partitions is, on a fabric
without switches whose links have the same bandwidth both ways, exactly the best in-tree +
out-tree AllReduce time (ForestColl's Appendix E LP): by Tutte and Nash-Williams, ``k``
spanning trees pack fractionally into a graph exactly when every partition ``P`` has
``c(δP) >= k (|P| - 1)`` (W. T. Tutte, "On the problem of decomposing a graph into n connected
factors", J. London Math. Soc. 1961; C. St. J. A. Nash-Williams, "Edge-disjoint spanning trees
of finite graphs", same volume), and a reduce-then-broadcast tree uses each of its edges once in
each direction. So where that LP is exact the search below can certify it; the search is a
greedy heuristic, and any partition it returns is a valid bound whether or not it is the best.
"""

from __future__ import annotations

import weakref

import numpy as np

from ..collective import Collective
from ..topology.model import Topology
from .model import Bound, register
from .simple import alpha_distances


@register("transmissions")
def transmission_bounds(topology: Topology, collective: Collective, size: float) -> list[Bound]:
    """AllReduce: ``2(m-1)`` transmissions of every byte between ``m`` groups over all the
    groups' egress (and ingress) bandwidth together, plus the smallest alpha between two ranks:
    for groups of one rank each, and for the chassis/dc/pod/server groups of the topology's
    node attributes (a group merges its members' partial sums for free, so the gossip argument
    holds between groups). The tightest one."""
    from ..collective import CollKind

    t = topology
    n = t.num_ranks
    if collective.kind is not CollKind.ALLREDUCE or n < 2 or t.in_network:
        return []  # (a switch that reduces or copies carries one stream for many)
    d = alpha_distances(t)
    alpha = float(d[~np.eye(n, dtype=bool)].min())
    best: Bound | None = None
    candidates = groupings(t)
    part = searched_partition(t)
    if part is not None:
        candidates.append(("partition", part))
    for attr, regions in candidates:
        m = len(regions)
        out_bw = sum(_region_bw(t, r, leaving=True) for r in regions)
        in_bw = sum(_region_bw(t, r, leaving=False) for r in regions)
        bw, side = (out_bw, "egress") if out_bw <= in_bw else (in_bw, "ingress")
        if bw <= 0:
            continue
        total = 2.0 * (m - 1) * size
        detail: dict = {"bytes": total, "bw": float(bw), "groups": m}
        detail["transmissions_per_byte"] = 2 * (m - 1)
        if attr == "partition":
            what = f"{m} groups' (a searched partition)"
            detail["partition"] = [
                sorted(t.nodes[v].name for v in r if t.nodes[v].is_compute) for r in regions
            ]
        else:
            what = "every rank's" if attr == "rank" else f"every {attr}'s"
        b = Bound("transmissions", total / bw + alpha, f"{what} {side}", detail)
        if best is None or b.time_s > best.time_s:
            best = b
    return [best] if best is not None else []


def groupings(t: Topology) -> list[tuple[str, list[set[int]]]]:
    """Disjoint node sets to count transmissions between: one per rank, and per value of each
    grouping attribute that every compute node has (a set: the compute nodes and switches with
    that value)."""
    out: list[tuple[str, list[set[int]]]] = [("rank", [{int(v)} for v in t.compute_nodes])]
    for attr in ("chassis", "server", "pod", "dc", "group"):
        if not all(attr in t.nodes[int(v)].attrs for v in t.compute_nodes):
            continue
        groups: dict[str, set[int]] = {}
        for v in range(t.num_nodes):
            a = t.nodes[v].attrs.get(attr)
            if a is not None:
                groups.setdefault(repr(a), set()).add(v)
        if len(groups) >= 2:
            out.append((attr, list(groups.values())))
    return out


def _region_bw(t: Topology, region: set[int], leaving: bool) -> float:
    """Bandwidth of the links leaving (or entering) ``region``."""
    inside = np.zeros(t.num_nodes, dtype=bool)
    inside[list(region)] = True
    cross = (
        inside[t.link_src] & ~inside[t.link_dst]
        if leaving
        else (~inside[t.link_src] & inside[t.link_dst])
    )
    return float(t.link_bw[cross].sum())


#: Most nodes (ranks and switches) :func:`searched_partition` searches: each of its merges scans
#: a nodes x nodes matrix.
MAX_PARTITION_NODES = 512


def searched_partition(t: Topology) -> list[set[int]] | None:
    """A partition of the nodes into groups, each with at least one rank (switches may stay
    outside every group), that makes ``2(m-1) / min(Σ egress, Σ ingress)`` large: the best met by
    two agglomerative searches that start from one group per node and merge two adjacent groups
    at a time, one merging the pair whose merger gives the largest value, the other the pair
    joined by the most bandwidth (dense islands first: GPUs of a package, servers, datacenters).
    A group without a rank does not count, and its links are nobody's egress until it joins one.
    ``None`` above :data:`MAX_PARTITION_NODES` nodes or with fewer than three ranks (the rank
    bound is then the only partition)."""
    if t.num_nodes > MAX_PARTITION_NODES or t.num_ranks < 3:
        return None
    if t not in _PARTITIONS:  # a topology is immutable: one search per topology (every size)
        a = _agglomerate(t, by_value=True)
        b = _agglomerate(t, by_value=False)
        _PARTITIONS[t] = a[1] if a[0] >= b[0] else b[1]
    return [set(g) for g in _PARTITIONS[t]]


_PARTITIONS: weakref.WeakKeyDictionary[Topology, list[set[int]]] = weakref.WeakKeyDictionary()


def _agglomerate(t: Topology, by_value: bool) -> tuple[float, list[set[int]]]:
    n = t.num_nodes
    d = np.zeros((n, n))
    np.add.at(d, (t.link_src, t.link_dst), t.link_bw)
    np.fill_diagonal(d, 0.0)
    ranked = np.zeros(n, dtype=bool)
    ranked[np.asarray(t.compute_nodes, dtype=np.int64)] = True
    alive = np.ones(n, dtype=bool)
    members: list[list[int]] = [[v] for v in range(n)]
    out_all = d.sum(axis=1)  # every group's links to the rest, ranked or not
    in_all = d.sum(axis=0)
    best_value, best_groups = -1.0, [set(members[g]) for g in np.flatnonzero(ranked)]
    while True:
        m = int((alive & ranked).sum())
        out = float(out_all[alive & ranked].sum())
        inn = float(in_all[alive & ranked].sum())
        c = min(out, inn)
        value = 2.0 * (m - 1) / c if c > 0 and m >= 2 else 0.0
        if value > best_value * (1 + 1e-12):
            best_value = value
            best_groups = [set(members[g]) for g in np.flatnonzero(alive & ranked)]
        if m < 2:
            break
        both = d + d.T
        adj = (both > 0) & alive[:, None] & alive[None, :]
        np.fill_diagonal(adj, False)
        if not adj.any():
            break
        ri, rj = ranked[:, None], ranked[None, :]
        if by_value:
            # the value after merging j into i, for every adjacent pair with i holding a rank:
            # a ranked j's links to i go inside; a rankless j's links out become i's
            m2 = np.where(rj, m - 1, m)
            out2 = np.where(rj, out - both, out - both + out_all[None, :])
            in2 = np.where(rj, inn - both, inn - both + in_all[None, :])
            c2 = np.minimum(out2, in2)
            with np.errstate(divide="ignore", invalid="ignore"):
                score = np.where((c2 > 0) & (m2 >= 2), 2.0 * (m2 - 1) / c2, 0.0)
            score = np.where(adj & ri, score, -np.inf)
            # two rankless groups: no change now, but they may join a ranked group together
            score = np.where(adj & ~ri & ~rj, value, score)
        else:
            score = np.where(adj & (ri | ~rj), both, -np.inf)
        i, j = np.unravel_index(int(np.argmax(score)), score.shape)
        if not np.isfinite(score[i, j]):
            break
        # merge j into i
        ranked[i] |= ranked[j]
        out_all[i] += out_all[j] - both[i, j]
        in_all[i] += in_all[j] - both[i, j]
        d[i] += d[j]
        d[:, i] += d[:, j]
        d[i, i] = 0.0
        d[j] = 0.0
        d[:, j] = 0.0
        alive[j] = False
        members[i].extend(members[j])
        members[j] = []
    return best_value, best_groups
