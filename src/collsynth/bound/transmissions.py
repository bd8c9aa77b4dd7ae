"""AllReduce's transmission-count bound, provider ``transmissions`` (the directed gossip bound;
derivation in :mod:`collsynth.bound`), over ranks and over the topology's groups
(:func:`groupings`: chassis, servers, pods, datacenters)."""

from __future__ import annotations

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
    for attr, regions in groupings(t):
        m = len(regions)
        out_bw = sum(_region_bw(t, r, leaving=True) for r in regions)
        in_bw = sum(_region_bw(t, r, leaving=False) for r in regions)
        bw, side = (out_bw, "egress") if out_bw <= in_bw else (in_bw, "ingress")
        if bw <= 0:
            continue
        total = 2.0 * (m - 1) * size
        what = "every rank's" if attr == "rank" else f"every {attr}'s"
        b = Bound(
            "transmissions",
            total / bw + alpha,
            f"{what} {side}",
            {"bytes": total, "bw": float(bw), "groups": m, "transmissions_per_byte": 2 * (m - 1)},
        )
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
