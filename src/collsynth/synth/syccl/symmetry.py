"""Structural symmetry detection for SyCCL: the island and rail dimensions of a fabric.

Works on the topology alone (node kinds, links, bandwidths); zoo names and node attributes are
not consulted.

* **Island dimension.** A switch whose every neighbour (in and out) is a compute node, and
  that does not reach every GPU (then it is a flat network), is an *island switch* (an
  NVSwitch); GPUs linked directly to each other are also in one island.
  Islands are the connected components of "shares an island switch / has a direct GPU link".
  Every island must have the same size ``m >= 2``, every GPU the same island bandwidth (in and
  out), and every pair inside an island must be one hop apart through the island (a direct link
  or a shared island switch).
* **Rail dimension.** Inside every island GPUs are numbered by rank order (local index j). The
  rail group j is GPU j of every island. The candidate mapping "island s -> island s + 1 by
  local index" is then *verified as an automorphism of the whole fabric*, by the topology
  layer that ForestColl and TE-CCL use too
  (:func:`collsynth.topology.symmetry.automorphism_from_ranks`: it places the switches from
  the GPUs' images, from the structure alone, and checks every link); its powers map every
  island onto every other. Every GPU must also have the same network signature (bandwidths
  of its non-island links and how many GPUs share each network neighbour: SyCCL gives every
  GPU one network share), and every pair of a rail group must have a network route (not
  through an island switch) of the same hop count, the fewest between any two GPUs of
  different islands.

A fabric failing any check raises :class:`CollsynthError` with a one-line reason (SyCCL's
stated limitation: no isomorphic groups, no decomposition). Fabrics whose symmetric mapping is
not rank order inside islands are refused too (a limitation of this first version).

The islands themselves are a decomposition specific to SyCCL: the connected components
(:func:`collsynth.topology.symmetry.components`) of the island links.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NoReturn

import numpy as np

from ...errors import CollsynthError
from ...topology.model import Topology
from ...topology.paths import RouteTable
from ...topology.symmetry import automorphism_from_ranks, components


def _fail(msg: str) -> NoReturn:
    raise CollsynthError(
        f"syccl: {msg}; the fabric is not symmetric enough for SyCCL's "
        f"decomposition (use ring, hier_ring or teccl)"
    )


@dataclass
class Fabric:
    """The detected dimensions. ``islands[s][j]`` is the rank of GPU j of island s."""

    islands: list[list[int]]
    island_bw: float  # per GPU ingress bandwidth inside its island (bytes/s)
    net_bw: float  # per GPU share of network bandwidth (bytes/s)
    island_routes: dict = field(default_factory=dict)  # (a, b) -> tuple of links
    net_routes: dict = field(default_factory=dict)  # (a, b) -> tuple of links

    @property
    def servers(self) -> int:
        return len(self.islands)

    @property
    def island_size(self) -> int:
        return len(self.islands[0])

    @property
    def rails(self) -> list[list[int]]:
        return [[isl[j] for isl in self.islands] for j in range(self.island_size)]

    def describe(self) -> dict:
        return {
            "islands": self.servers,
            "island_size": self.island_size,
            "island_bw": self.island_bw,
            "net_bw": self.net_bw,
            "ratio": self.island_bw / self.net_bw if self.net_bw else None,
        }


def detect(topology: Topology, routes: RouteTable | None = None) -> Fabric:
    """The island x rail structure of ``topology`` (``routes``: a route table to use and
    fill, shared with the caller)."""
    t = topology
    rank_of = {t.node_of_rank(r): r for r in range(t.num_ranks)}
    nbrs = _neighbours(t)
    island_sw = _island_switches(t, nbrs)
    island_link, islands = _islands(t, rank_of, nbrs, island_sw)
    island_bw, out_links = _island_bandwidth(t, rank_of, island_link)
    island_routes = _island_routes(t, islands, out_links, island_sw)
    _check_network_ports(t, islands, island_link, nbrs)
    net_bw = _network_bandwidth(t, islands, island_link, nbrs)
    rt = routes if routes is not None else RouteTable(t)
    net_routes = _rail_routes(t, islands, island_link, rt)
    return Fabric(islands, island_bw, net_bw, island_routes, net_routes)


def _neighbours(t: Topology) -> dict[int, set[int]]:
    """Every node's neighbours, in and out."""
    nbrs: dict[int, set[int]] = {}
    for lk in t.links:
        nbrs.setdefault(lk.src, set()).add(lk.dst)
        nbrs.setdefault(lk.dst, set()).add(lk.src)
    return nbrs


def _island_switches(t: Topology, nbrs: dict[int, set[int]]) -> set[int]:
    """Switches whose every neighbour is a GPU and that do not reach every GPU."""
    n = t.num_ranks
    return {
        x
        for x in range(t.num_nodes)
        if not t.is_compute(x)
        and len(nbrs.get(x, ())) >= 2
        and all(t.is_compute(y) for y in nbrs[x])
        and len(nbrs[x]) < n
    }


def _islands(
    t: Topology, rank_of: dict[int, int], nbrs: dict[int, set[int]], island_sw: set[int]
) -> tuple[list[bool], list[list[int]]]:
    """Which links are island links, and the islands (equal sizes >= 2, at least two)."""
    n = t.num_ranks
    same_island: list[tuple[int, int]] = []  # pairs of ranks
    island_link = [False] * len(t.links)
    for lk in t.links:
        if lk.src in island_sw or lk.dst in island_sw:
            island_link[lk.id] = True
        elif t.is_compute(lk.src) and t.is_compute(lk.dst):
            island_link[lk.id] = True
            same_island.append((rank_of[lk.src], rank_of[lk.dst]))
    for x in sorted(island_sw):
        members = sorted(rank_of[y] for y in nbrs[x])
        same_island += [(members[0], r) for r in members[1:]]
    islands = components(range(n), same_island)
    sizes = sorted({len(i) for i in islands})
    if len(sizes) > 1:
        _fail(f"islands have unequal sizes {sizes}")
    if sizes[0] < 2:
        _fail("no NVSwitch/NVLink island (no switch with only GPU neighbours, no GPU-GPU link)")
    if len(islands) < 2:
        _fail("a single island has no rail dimension")
    return island_link, islands


def _island_bandwidth(
    t: Topology, rank_of: dict[int, int], island_link: list[bool]
) -> tuple[float, dict[int, list]]:
    """Per GPU island ingress bandwidth (equal for every GPU, in and out) and the island
    links out of every node."""
    n = t.num_ranks
    in_bw = [0.0] * n
    out_bw = [0.0] * n
    out_links: dict[int, list] = {}
    for lk in t.links:
        if not island_link[lk.id]:
            continue
        out_links.setdefault(lk.src, []).append(lk)
        if t.is_compute(lk.src):
            out_bw[rank_of[lk.src]] += lk.bw
        if t.is_compute(lk.dst):
            in_bw[rank_of[lk.dst]] += lk.bw
    if len({round(b, 3) for b in in_bw}) > 1 or len({round(b, 3) for b in out_bw}) > 1:
        _fail("GPUs have unequal island bandwidths")
    return in_bw[0], out_links


def _island_routes(
    t: Topology, islands: list[list[int]], out_links: dict[int, list], island_sw: set[int]
) -> dict[tuple[int, int], tuple[int, ...]]:
    """One-hop routes inside islands: a direct link, else through a shared island switch
    (fastest links first)."""
    island_routes: dict[tuple[int, int], tuple[int, ...]] = {}
    for isl in islands:
        for a in isl:
            na = t.node_of_rank(a)
            for b in isl:
                if a == b:
                    continue
                nb = t.node_of_rank(b)
                best: tuple[int, ...] | None = None
                for l1 in sorted(out_links.get(na, []), key=lambda k: (-k.bw, k.id)):
                    if l1.dst == nb:
                        best = (l1.id,)
                        break
                if best is None:
                    for l1 in sorted(out_links.get(na, []), key=lambda k: (-k.bw, k.id)):
                        if l1.dst in island_sw:
                            l2 = next(
                                (
                                    k
                                    for k in sorted(
                                        out_links.get(l1.dst, []), key=lambda k: (-k.bw, k.id)
                                    )
                                    if k.dst == nb
                                ),
                                None,
                            )
                            if l2 is not None:
                                best = (l1.id, l2.id)
                                break
                if best is None:
                    _fail(
                        f"{t.rank_name(a)} and {t.rank_name(b)} are in one island but not "
                        f"one hop apart through it"
                    )
                island_routes[(a, b)] = best
    return island_routes


def _check_network_ports(
    t: Topology, islands: list[list[int]], island_link: list[bool], nbrs: dict[int, set[int]]
) -> None:
    """Every GPU has the same network signature, and the islands are images of one another
    under an automorphism of the fabric that keeps local indices
    (:func:`collsynth.topology.symmetry.automorphism_from_ranks`)."""
    # network signature per GPU: (bw of each non-island out/in link, sharers of its neighbour)
    sig = []
    net_out: dict[int, list] = {}
    net_in: dict[int, list] = {}
    for lk in t.links:
        if not island_link[lk.id]:
            net_out.setdefault(lk.src, []).append(lk)
            net_in.setdefault(lk.dst, []).append(lk)
    gpu_nbrs = {y: sum(1 for z in nbrs[y] if t.is_compute(z)) for y in nbrs}
    for r in range(t.num_ranks):
        x = t.node_of_rank(r)
        outs = sorted((lk.bw, gpu_nbrs[lk.dst]) for lk in net_out.get(x, ()))
        ins = sorted(lk.bw for lk in net_in.get(x, ()))
        sig.append((tuple(outs), tuple(ins)))
    if len(set(sig)) > 1:
        _fail("GPUs have unequal network attachments")
    if not sig[0][0]:
        _fail("GPUs have no network links outside their islands")
    # the islands are alike: moving every island's GPU j to the next island's GPU j is an
    # automorphism of the whole fabric (its powers map every island onto every other)
    count = len(islands)
    table = np.array(islands, dtype=np.int64)
    shift = np.arange(t.num_ranks, dtype=np.int64)
    shift[table] = table[(np.arange(count) + 1) % count]
    if automorphism_from_ranks(t, shift) is None:
        _fail("moving each island's GPUs to the next island's (by local index) is not an "
              "automorphism of the fabric")  # fmt: skip


def _network_bandwidth(
    t: Topology, islands: list[list[int]], island_link: list[bool], nbrs: dict[int, set[int]]
) -> float:
    """Per-GPU network capacity: each non-island out link, divided among the GPUs sharing the
    neighbour when the neighbour's onward (non-GPU) capacity is smaller."""
    x0 = t.node_of_rank(islands[0][0])
    net_bw = 0.0
    for lk in t.links:
        if lk.src != x0 or island_link[lk.id]:
            continue
        y = lk.dst
        if t.is_compute(y):
            net_bw += lk.bw
            continue
        sharers = len([z for z in nbrs[y] if t.is_compute(z)])
        onward = sum(k.bw for k in t.links if k.src == y and not t.is_compute(k.dst))
        net_bw += min(lk.bw, onward / sharers) if onward > 0 else lk.bw
    return net_bw


def _rail_routes(
    t: Topology, islands: list[list[int]], island_link: list[bool], rt: RouteTable
) -> dict[tuple[int, int], tuple[int, ...]]:
    """Network routes within rail groups: outside the islands, all of the same hop count, the
    fewest among cross-island pairs."""
    n = t.num_ranks
    isl_of = {r: s for s, isl in enumerate(islands) for r in isl}
    fewest = None
    for r in (islands[0][0],):
        for q in range(n):
            if isl_of[q] != isl_of[r]:
                f = rt.find(r, q)
                if f is not None and (fewest is None or len(f) < fewest):
                    fewest = len(f)
    net_routes: dict[tuple[int, int], tuple[int, ...]] = {}
    for j in range(len(islands[0])):
        group = [isl[j] for isl in islands]
        for a in group:
            for b in group:
                if a == b:
                    continue
                route = rt.direct(a).get(b)  # the source's whole row, cached
                if route is None:
                    _fail(f"no network route {t.rank_name(a)} -> {t.rank_name(b)}")
                if any(island_link[k] for k in route):
                    _fail(f"route {t.rank_name(a)} -> {t.rank_name(b)} crosses an island")
                if len(route) != fewest:
                    _fail(
                        f"rail pair {t.rank_name(a)} -> {t.rank_name(b)} is {len(route)} hops, "
                        f"not the fewest ({fewest})"
                    )
                net_routes[(a, b)] = tuple(int(k) for k in route)
    return net_routes
