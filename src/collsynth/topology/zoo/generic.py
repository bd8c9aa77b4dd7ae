"""Generic fabrics of the zoo: ring, line, full, star, meshes and tori, hypercube, fat tree,
dragonfly and random regular graphs.

Each constructor documents its defaults. Bandwidths are bytes/s per direction, alphas seconds.
"""

from __future__ import annotations

import itertools
import math

from ..model import Topology, TopologyBuilder
from ..registry import Param, zoo
from .common import GB, US, fail

_BW = Param("bw", 50 * GB, "bandwidth of each link, per direction")
_ALPHA = Param("time", 0.7 * US, "latency of each link")


@zoo("ring", n=Param("int", 8, "number of compute nodes", min=2, max=65536), bw=_BW, alpha=_ALPHA)
def ring(n: int, bw: float, alpha: float) -> Topology:
    """Bidirectional ring of n compute nodes (node i linked to i+1 mod n, both ways)."""
    b = TopologyBuilder(f"ring{n}")
    ids = [b.compute(f"gpu{i}", local=i) for i in range(n)]
    if n == 2:
        b.bilink(ids[0], ids[1], bw, alpha, "link")
    else:
        for i in range(n):
            b.bilink(ids[i], ids[(i + 1) % n], bw, alpha, "link")
    return b.build()


@zoo("line", n=Param("int", 8, "number of compute nodes", min=2, max=65536), bw=_BW, alpha=_ALPHA)
def line(n: int, bw: float, alpha: float) -> Topology:
    """Bidirectional line (chain) of n compute nodes: gpu i <-> gpu i+1.

    Defaults: n=8, every link 50 GB/s per direction with alpha 0.7 us.
    """
    b = TopologyBuilder(f"line{n}")
    ids = [b.compute(f"gpu{i}", local=i) for i in range(n)]
    for i in range(n - 1):
        b.bilink(ids[i], ids[i + 1], bw, alpha, "link")
    return b.build()


@zoo("full", n=Param("int", 8, "number of compute nodes", min=2, max=2048), bw=_BW, alpha=_ALPHA)
def full(n: int, bw: float, alpha: float) -> Topology:
    """Fully connected n compute nodes: every pair linked both ways.

    Defaults: n=8, every link 50 GB/s per direction with alpha 0.7 us.
    """
    b = TopologyBuilder(f"full{n}")
    ids = [b.compute(f"gpu{i}", local=i) for i in range(n)]
    for i, j in itertools.combinations(range(n), 2):
        b.bilink(ids[i], ids[j], bw, alpha, "link")
    return b.build()


@zoo("star", n=Param("int", 8, "number of compute nodes", min=2, max=65536), bw=_BW, alpha=_ALPHA)
def star(n: int, bw: float, alpha: float) -> Topology:
    """Star: n compute nodes each linked both ways to one switch ``sw0`` (role ``switch``).

    Defaults: n=8, every link 50 GB/s per direction with alpha 0.7 us.
    """
    b = TopologyBuilder(f"star{n}")
    ids = [b.compute(f"gpu{i}", local=i) for i in range(n)]
    hub = b.switch("sw0", role="switch")
    for x in ids:
        b.bilink(x, hub, bw, alpha, "link")
    return b.build()


def _grid_pairs(dims: tuple[int, ...], wrap: bool) -> list[tuple[int, int]]:
    """Unordered neighbour pairs of a grid (row-major, first dimension fastest).

    With ``wrap`` a dimension of size >= 3 closes into a ring; sizes 1 and 2 never produce a
    self link or a duplicate pair.
    """
    strides = [1]
    for d in dims[:-1]:
        strides.append(strides[-1] * d)
    pairs = []
    for coord in itertools.product(*[range(d) for d in reversed(dims)]):
        coord = tuple(reversed(coord))
        idx = sum(c * s for c, s in zip(coord, strides))
        for k, size in enumerate(dims):
            c = coord[k]
            if c + 1 < size:
                nb = idx + strides[k]
            elif wrap and size >= 3:
                nb = idx - c * strides[k]
            else:
                continue
            pairs.append((min(idx, nb), max(idx, nb)))
    return pairs


def _grid(
    kind: str, name: str, dims: tuple[int, ...], wrap: bool, bw: float, alpha: float
) -> Topology:
    total = math.prod(dims)
    if total < 2:
        fail(f"{kind} needs at least 2 nodes (got {'x'.join(map(str, dims))})")
    axes = "xyz"
    b = TopologyBuilder(name)
    ids = []
    for i in range(total):
        coord, rest = {}, i
        for k, size in enumerate(dims):
            coord[axes[k]] = rest % size
            rest //= size
        ids.append(b.compute(f"gpu{i}", local=i, **coord))
    for u, v in _grid_pairs(dims, wrap):
        b.bilink(ids[u], ids[v], bw, alpha, "link")
    return b.build()


@zoo(
    "mesh2d",
    w=Param("int", 4, "width", min=1, max=1024),
    h=Param("int", 4, "height", min=1, max=1024),
    bw=_BW,
    alpha=_ALPHA,
)
def mesh2d(w: int, h: int, bw: float, alpha: float) -> Topology:
    """2-D mesh of w x h compute nodes, neighbours linked both ways (no wrap-around).

    Node ``gpu{i}`` sits at x = i mod w, y = i // w (attrs ``x``, ``y``). Defaults: 4 x 4, every
    link 50 GB/s per direction with alpha 0.7 us. (A true mesh, unlike TE-CCL's ``Mesh``, which
    wraps row ends into the next row.)
    """
    return _grid("mesh2d", f"mesh{w}x{h}", (w, h), False, bw, alpha)


@zoo(
    "torus2d",
    w=Param("int", 4, "width", min=1, max=1024),
    h=Param("int", 4, "height", min=1, max=1024),
    bw=_BW,
    alpha=_ALPHA,
)
def torus2d(w: int, h: int, bw: float, alpha: float) -> Topology:
    """2-D torus of w x h compute nodes (wrap-around in each dimension of size >= 3).

    Node ``gpu{i}`` sits at x = i mod w, y = i // w. A dimension of size 2 has one link between
    its two nodes (no duplicate wrap link), size 1 none; so the degree is 4 when w, h >= 3.
    Defaults: 4 x 4, every link 50 GB/s per direction with alpha 0.7 us.
    """
    return _grid("torus2d", f"torus{w}x{h}", (w, h), True, bw, alpha)


@zoo(
    "torus3d",
    x=Param("int", 4, "size in x", min=1, max=64),
    y=Param("int", 4, "size in y", min=1, max=64),
    z=Param("int", 4, "size in z", min=1, max=64),
    bw=_BW,
    alpha=_ALPHA,
)
def torus3d(x: int, y: int, z: int, bw: float, alpha: float) -> Topology:
    """3-D torus of x * y * z compute nodes (wrap-around in each dimension of size >= 3).

    Node ``gpu{i}`` sits at (i mod x, (i // x) mod y, i // (x*y)). Sizes 1 and 2 behave as in
    ``torus2d``; degree 6 when all sizes are >= 3. Defaults: 4 x 4 x 4, every link 50 GB/s per
    direction with alpha 0.7 us.
    """
    return _grid("torus3d", f"torus{x}x{y}x{z}", (x, y, z), True, bw, alpha)


@zoo(
    "hypercube",
    d=Param("int", 4, "dimension (2^d compute nodes)", min=1, max=16),
    bw=_BW,
    alpha=_ALPHA,
)
def hypercube(d: int, bw: float, alpha: float) -> Topology:
    """Hypercube of 2^d compute nodes: i <-> i xor 2^k for every bit k, both ways (degree d).

    Defaults: d=4 (16 nodes), every link 50 GB/s per direction with alpha 0.7 us.
    """
    n = 1 << d
    b = TopologyBuilder(f"hypercube{d}")
    ids = [b.compute(f"gpu{i}", local=i) for i in range(n)]
    for i in range(n):
        for k in range(d):
            j = i ^ (1 << k)
            if i < j:
                b.bilink(ids[i], ids[j], bw, alpha, "link")
    return b.build()


@zoo("fat_tree", k=Param("int", 4, "switch radix (even)", min=2, max=64), bw=_BW, alpha=_ALPHA)
def fat_tree(k: int, bw: float, alpha: float) -> Topology:
    """Classic k-ary fat tree: k pods of k/2 edge + k/2 aggregation switches, (k/2)^2 cores.

    k^3/4 hosts (compute nodes), k/2 per edge switch. In each pod every edge switch links to every
    aggregation switch; aggregation switch a of every pod links to cores a*k/2 ... a*k/2 + k/2 - 1.
    All links both ways. Nodes: hosts ``pod{p}.gpu{i}`` (attrs ``pod``, ``edge``, ``local``),
    ``pod{p}.edge{e}`` (role ``edge``), ``pod{p}.agg{a}`` (role ``agg``), ``core{c}`` (role
    ``core``). Defaults: k=4 (16 hosts, 20 switches), every link 50 GB/s per direction with alpha
    0.7 us.
    """
    if k % 2:
        fail(f"fat_tree parameter k {k} must be even")
    half = k // 2
    b = TopologyBuilder(f"fat_tree{k}")
    hosts = [
        [b.compute(f"pod{p}.gpu{i}", pod=p, edge=i // half, local=i) for i in range(half * half)]
        for p in range(k)
    ]
    cores = [b.switch(f"core{c}", role="core") for c in range(half * half)]
    for p in range(k):
        edges = [b.switch(f"pod{p}.edge{e}", role="edge", pod=p, local=e) for e in range(half)]
        aggs = [b.switch(f"pod{p}.agg{a}", role="agg", pod=p, local=a) for a in range(half)]
        for i, hst in enumerate(hosts[p]):
            b.bilink(hst, edges[i // half], bw, alpha, "link")
        for e in edges:
            for a in aggs:
                b.bilink(e, a, bw, alpha, "link")
        for a, agg in enumerate(aggs):
            for c in range(a * half, (a + 1) * half):
                b.bilink(agg, cores[c], bw, alpha, "link")
    return b.build()


def dragonfly_global_pairs(a: int, h: int, groups: int) -> list[tuple[int, int, int, int]]:
    """Global links ``(group g, router r, group t, router q)`` of the absolute arrangement."""
    out = []
    for g, t in itertools.combinations(range(groups), 2):
        # Group g's global port toward t is t-1 (t > g), group t's port toward g is g; port p
        # belongs to router p // h.
        out.append((g, (t - 1) // h, t, g // h))
    return out


@zoo(
    "dragonfly",
    a=Param("int", 4, "routers per group", min=1, max=32),
    p=Param("int", 2, "compute nodes per router", min=1, max=32),
    h=Param("int", 2, "global links per router", min=1, max=32),
    groups=Param("int", None, "number of groups (at most a*h+1, the default)", min=1),
    bw=_BW,
    alpha=_ALPHA,
)
def dragonfly(a: int, p: int, h: int, groups: int | None, bw: float, alpha: float) -> Topology:
    """Dragonfly: groups of a fully linked routers, p compute nodes each, one link per group pair.

    Routers are switch nodes ``g{g}.r{r}`` (role ``router``); compute nodes ``g{g}.gpu{i}`` with
    i = r*p + j (attrs ``group``, ``router``, ``local``). g = a*h+1 groups by default (``groups``
    may be smaller). Global links use the absolute (consecutive) arrangement: group g numbers its
    a*h global ports 0 ... a*h-1, port q belongs to router q // h and leads to group q if q < g,
    else q+1; so every pair of groups has exactly one global link and each router has at most h.
    All links both ways. Defaults: a=4, p=2, h=2 (9 groups, 36 routers, 72 compute nodes), every
    link 50 GB/s per direction with alpha 0.7 us.
    """
    gmax = a * h + 1
    if groups is None:
        groups = gmax
    if groups > gmax:
        fail(f"dragonfly parameter groups {groups} must be at most a*h+1 = {gmax}")
    b = TopologyBuilder(f"dragonfly_a{a}p{p}h{h}g{groups}")
    routers = []
    for g in range(groups):
        rs = []
        for r in range(a):
            rid = b.switch(f"g{g}.r{r}", role="router", group=g, local=r)
            for j in range(p):
                i = r * p + j
                c = b.compute(f"g{g}.gpu{i}", group=g, router=r, local=i)
                b.bilink(c, rid, bw, alpha, "link")
            rs.append(rid)
        for r1, r2 in itertools.combinations(range(a), 2):
            b.bilink(rs[r1], rs[r2], bw, alpha, "link")
        routers.append(rs)
    for g, r, t, q in dragonfly_global_pairs(a, h, groups):
        b.bilink(routers[g][r], routers[t][q], bw, alpha, "link")
    return b.build()


_RR_ATTEMPTS = 1000


@zoo(
    "random_regular",
    n=Param("int", 16, "number of compute nodes", min=2, max=65536),
    d=Param("int", 3, "degree of every node", min=1, max=64),
    seed=Param("int", 0, "random seed", min=0),
    bw=_BW,
    alpha=_ALPHA,
)
def random_regular(n: int, d: int, seed: int, bw: float, alpha: float) -> Topology:
    """Random connected d-regular graph on n compute nodes (networkx.random_regular_graph).

    Draws with seed, seed+1, ... until the graph is connected (at most 1000 tries), so the
    result is deterministic. Needs d < n and n*d even; d=1 is connected only for n=2.
    Defaults: n=16, d=3, seed=0, every link 50 GB/s per direction with alpha 0.7 us.
    """
    import networkx as nx

    if d >= n:
        fail(f"random_regular needs d < n (got d={d}, n={n})")
    if (n * d) % 2:
        fail(f"random_regular needs n*d even (got n={n}, d={d})")
    if d == 1 and n > 2:
        fail(f"random_regular with d=1 is never connected for n={n} > 2")
    for attempt in range(_RR_ATTEMPTS):
        graph = nx.random_regular_graph(d, n, seed=seed + attempt)
        if nx.is_connected(graph):
            break
    else:
        fail(
            f"random_regular found no connected {d}-regular graph on {n} nodes "
            f"in {_RR_ATTEMPTS} tries"
        )
    b = TopologyBuilder(f"random_regular_n{n}d{d}s{seed}", meta={"seed_used": seed + attempt})
    ids = [b.compute(f"gpu{i}", local=i) for i in range(n)]
    for u, v in sorted((min(e), max(e)) for e in graph.edges()):
        b.bilink(ids[u], ids[v], bw, alpha, "link")
    return b.build()
