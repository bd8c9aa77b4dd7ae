"""RouteTable: best direct routes (fewest links, least alpha) spread ECMP-style over ties.

A brute-force reference enumerates every fewest-link path through switches/routers, keeps the
least-alpha ones and applies the documented ECMP rule with an independent pure-Python hash;
RouteTable (full rows and single-pair look-ups) must agree with it exactly.
"""

from __future__ import annotations

import math
import time
from collections import Counter, deque

import pytest

from collsynth.errors import CollsynthError
from collsynth.synth.baselines._common import Routes
from collsynth.topology import TopologyBuilder, load_topology, paths
from collsynth.topology.model import Topology
from collsynth.topology.paths import RouteTable, _ecmp_hash_int, ecmp_hash

_CACHE: dict[str, Topology] = {}
MASK = (1 << 64) - 1


def zoo(spec: str) -> Topology:
    if spec not in _CACHE:
        _CACHE[spec] = load_topology(spec)
    return _CACHE[spec]


# ------------------------------------------------------------------------------ reference
def py_hash(s: int, d: int, x: int) -> int:
    """The documented ECMP hash in plain Python integers."""
    h = ((s * 0x9E3779B97F4A7C15) ^ (d * 0xC2B2AE3D27D4EB4F) ^ (x * 0x165667B19E3779F9)) & MASK
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) & MASK
    h ^= h >> 33
    h = (h * 0xC4CEB9FE1A85EC53) & MASK
    h ^= h >> 33
    return h


def ps(topo: Topology, path) -> int:
    return sum(round(topo.links[l].alpha * 1e12) for l in path)


def brute_best_paths(topo: Topology, s: int) -> dict[int, list[tuple[int, ...]]]:
    """Every fewest-link, least-alpha path from rank ``s`` to each rank (independent BFS + DFS)."""
    src = topo.node_of_rank(s)
    # plain BFS for hop counts, expanding only the source and non-compute nodes
    hops = {src: 0}
    q = deque([src])
    while q:
        u = q.popleft()
        if u != src and topo.is_compute(u):
            continue
        for lid in topo.out_links[u]:
            v = topo.links[lid].dst
            if v not in hops:
                hops[v] = hops[u] + 1
                q.append(v)
    # enumerate all fewest-link paths to every compute node by DFS over the BFS layers
    paths: dict[int, list[tuple[int, ...]]] = {}

    def dfs(u: int, path: list[int]) -> None:
        if u != src and topo.is_compute(u):
            paths.setdefault(u, []).append(tuple(path))
            return
        for lid in topo.out_links[u]:
            v = topo.links[lid].dst
            if hops.get(v) == hops[u] + 1:
                path.append(lid)
                dfs(v, path)
                path.pop()

    dfs(src, [])
    best = {}
    for node, ps_list in paths.items():
        if node == src:
            continue
        lo = min(ps(topo, p) for p in ps_list)
        best[int(topo.rank_of_node[node])] = sorted(p for p in ps_list if ps(topo, p) == lo)
    return best


def ecmp_pick(topo: Topology, s: int, d: int, best: list[tuple[int, ...]]) -> tuple[int, ...]:
    """The documented rule: walk back from d, at node x take sorted candidates[hash mod k]."""
    L = len(best[0])
    alive = list(best)
    chosen: list[int] = []
    x = topo.node_of_rank(d)
    for pos in range(L - 1, -1, -1):
        cands = sorted({p[pos] for p in alive})
        lid = cands[py_hash(s, d, x) % len(cands)]
        chosen.append(lid)
        alive = [p for p in alive if p[pos] == lid]
        x = topo.links[lid].src
    assert x == topo.node_of_rank(s)
    return tuple(reversed(chosen))


def check_valid(topo: Topology, s: int, d: int, r: tuple[int, ...]) -> None:
    links = topo.links
    assert r, (s, d)
    assert links[r[0]].src == topo.node_of_rank(s)
    assert links[r[-1]].dst == topo.node_of_rank(d)
    for a, b in zip(r[:-1], r[1:]):
        assert links[a].dst == links[b].src
        assert not topo.is_compute(links[a].dst), "route passes through a compute node"


# ------------------------------------------------------------------------------ brute force
BRUTE = [
    "h800_rails:servers=4",
    "fat_tree:k=4",
    "a800_clos:servers=2",
    "dgx_a100:nodes=3",
    "wan",
    "dragonfly:groups=5",
    "star:n=6",
    "dgx2:chassis=2",
    "mi250:chassis=2",
    "ndv2:chassis=2",
    "torus2d:w=3,h=3",
]


@pytest.mark.parametrize("spec", BRUTE)
def test_routes_match_brute_force(spec, monkeypatch):
    topo = zoo(spec)
    table = RouteTable(topo)
    single = RouteTable(topo)  # single-pair look-ups (targeted first, then the row)
    n = topo.num_ranks
    ties = 0
    for s in range(n):
        best = brute_best_paths(topo, s)
        row = table.direct(s)
        assert list(row) == sorted(row), "direct() keys are in rank order"
        assert set(row) == set(best), s
        for d in range(n):
            if d == s:
                assert single.find(s, d) is None
                continue
            r = row.get(d)
            assert single.find(s, d) == r, (s, d)
            assert RouteTable(topo).find(s, d) == r, (s, d)  # a targeted search only
            with monkeypatch.context() as m:  # ... in numpy, not Python
                m.setattr(paths, "_SMALL_BUDGET", 0)
                assert RouteTable(topo).find(s, d) == r, (s, d)
            assert single.has_route(s, d) == (r is not None)
            if r is None:
                continue
            check_valid(topo, s, d, r)
            cands = best[d]
            assert len(r) == len(cands[0]), "fewest links"
            assert r in cands, "least alpha among fewest links"
            fl = [table.route_alpha(p) for p in cands]
            assert math.isclose(table.route_alpha(r), min(fl), rel_tol=1e-9, abs_tol=1e-18)
            assert r == ecmp_pick(topo, s, d, cands), (s, d)
            ties += len(cands) > 1
    if spec in ("h800_rails:servers=4", "fat_tree:k=4", "a800_clos:servers=2"):
        assert ties > n, "these fabrics have equal-cost alternatives"


def test_hash_matches_documented_formula():
    import numpy as np

    triples = [(0, 1, 2), (5, 1023, 3000), (1023, 0, 7), (123456, 654321, 999999), (0, 0, 0)]
    got = ecmp_hash(
        np.array([t[0] for t in triples]),
        np.array([t[1] for t in triples]),
        np.array([t[2] for t in triples]),
    )
    assert [int(x) for x in got] == [py_hash(*t) for t in triples]
    assert [_ecmp_hash_int(*t) for t in triples] == [py_hash(*t) for t in triples]
    assert int(ecmp_hash(3, 4, 5)[0]) == py_hash(3, 4, 5)


# ------------------------------------------------------------------------------ hand-made graphs
def test_fewest_links_beats_alpha_and_alpha_breaks_ties():
    b = TopologyBuilder("tiny")
    a, z = b.compute("a"), b.compute("z")
    s1, s2, s3, s4 = (b.switch(f"s{i}") for i in range(1, 5))
    b.link(a, s1, 1e9, 5e-6)  # 2 links, alpha 10 us: fewest links wins
    b.link(s1, z, 1e9, 5e-6)
    b.link(a, s2, 1e9, 1e-7)  # 3 links, alpha 0.3 us
    b.link(s2, s3, 1e9, 1e-7)
    b.link(s3, z, 1e9, 1e-7)
    b.link(z, s4, 1e9, 1e-6)  # z -> a: two 3-link paths, the lower alpha wins
    b.link(s4, s1, 1e9, 1e-6)
    b.link(s1, a, 1e9, 1e-6)
    b.link(s4, s2, 1e9, 1e-7)
    b.link(s2, a, 1e9, 1e-7)
    topo = b.build()
    t = RouteTable(topo)
    assert t.route(0, 1) == (0, 1)
    assert t.route(1, 0) == (5, 8, 9)


def test_rounding_noise_counts_as_a_tie():
    # 2-link paths via p and via q whose float alphas differ only by summation order
    x1, x2, x3 = 0.1e-6, 0.2e-6, 0.35e-6
    assert (x1 + (x2 + x3)) != ((x1 + x2) + x3)
    b = TopologyBuilder("noise")
    srcs = [b.compute(f"a{i}") for i in range(8)]
    dsts = [b.compute(f"z{i}") for i in range(8)]
    p, q, w = b.switch("p"), b.switch("q"), b.switch("w")
    for a in srcs:
        b.link(a, p, 1e9, x1)
        b.link(a, q, 1e9, x1 + x2)
        b.link(w, a, 1e9)  # a way back
    for z in dsts:
        b.link(p, z, 1e9, x2 + x3)
        b.link(q, z, 1e9, x3)
        b.link(z, w, 1e9)
    topo = b.build()
    t = RouteTable(topo)
    via = Counter()
    for s in range(8):
        best = brute_best_paths(topo, s)
        for d in range(8, 16):
            assert len(best[d]) == 2
            r = t.route(s, d)
            assert r == ecmp_pick(topo, s, d, best[d])
            via[topo.links[r[0]].dst] += 1
    assert via[p] > 16 and via[q] > 16, via


def test_parallel_links_spread():
    # 8 GPUs per side, two parallel trunks between the switches: pairs use both trunks
    b = TopologyBuilder("trunks")
    g = [b.compute(f"g{i}") for i in range(16)]
    sa, sb = b.switch("sa"), b.switch("sb")
    for i in range(8):
        b.bilink(g[i], sa, 1e9, 1e-6)
        b.bilink(g[8 + i], sb, 1e9, 1e-6)
    for _ in range(2):
        b.bilink(sa, sb, 1e9, 1e-6)
    topo = b.build()
    trunks = topo.links_between(sa, sb)
    assert len(trunks) == 2
    t = RouteTable(topo)
    used = Counter(t.route(s, d)[1] for s in range(8) for d in range(8, 16))
    assert set(used) == set(trunks)
    assert min(used.values()) >= 16


def test_no_route_through_compute_nodes():
    topo = zoo("ring:n=6")  # GPUs linked directly: only neighbours have direct routes
    t = RouteTable(topo)
    assert set(t.direct(0)) == {1, 5}
    assert not t.has_route(0, 3)
    with pytest.raises(CollsynthError, match="no route"):
        t.route(0, 3)
    assert Routes(topo).route(0, 3) is None


# ------------------------------------------------------------------------------ spreading
def _spine_usage(topo: Topology, role: str, pairs) -> Counter:
    t = RouteTable(topo)
    use: Counter = Counter()
    for s, d in pairs:
        for l in t.route(s, d):
            link = topo.links[l]
            if topo.nodes[link.dst].attrs.get("role") == role:  # links into a spine/core
                use[link.dst] += 1
    return use


def test_h800_rails_spreads_over_all_spines():
    topo = zoo("h800_rails:servers=4")
    n = topo.num_ranks
    rail = [topo.nodes[topo.node_of_rank(r)].attrs["rail"] for r in range(n)]
    chassis = [topo.nodes[topo.node_of_rank(r)].attrs["chassis"] for r in range(n)]
    pairs = [
        (s, d)
        for s in range(n)
        for d in range(n)
        if chassis[s] != chassis[d] and rail[s] != rail[d]
    ]  # these cross a spine
    use = _spine_usage(topo, "spine", pairs)
    spines = [i for i, nd in enumerate(topo.nodes) if nd.attrs.get("role") == "spine"]
    assert sorted(use) == spines
    assert sum(use.values()) == len(pairs)
    assert max(use.values()) / min(use.values()) < 1.3, use
    # every (leaf -> spine) uplink carries traffic, not only the lowest-id one
    t = RouteTable(topo)
    ups = Counter(
        l
        for s, d in pairs
        for l in t.route(s, d)
        if topo.nodes[topo.links[l].src].attrs.get("role") == "leaf"
        and topo.nodes[topo.links[l].dst].attrs.get("role") == "spine"
    )
    n_up = sum(
        1
        for l in topo.links
        if topo.nodes[l.src].attrs.get("role") == "leaf"
        and topo.nodes[l.dst].attrs.get("role") == "spine"
    )
    assert len(ups) == n_up == 64


def test_h800_rails_ring_neighbours_spread():
    # the ring AllGather's inter-server hops (gpu7 of server s -> gpu0 of server s+1)
    topo = zoo("h800_rails:servers=32")
    pairs = [(8 * s + 7, (8 * s + 8) % 256) for s in range(32)]
    use = _spine_usage(topo, "spine", pairs)
    assert len(use) == 8, use  # every spine carries some of them
    assert max(use.values()) <= 8, use  # 32 flows, 4 per spine on average


def test_fat_tree_spreads_over_all_cores():
    topo = zoo("fat_tree:k=4")
    n = topo.num_ranks
    pod = [topo.nodes[topo.node_of_rank(r)].attrs["pod"] for r in range(n)]
    pairs = [(s, d) for s in range(n) for d in range(n) if pod[s] != pod[d]]
    use = _spine_usage(topo, "core", pairs)
    cores = [i for i, nd in enumerate(topo.nodes) if nd.attrs.get("role") == "core"]
    assert sorted(use) == cores
    assert sum(use.values()) == len(pairs)
    # hashing, not round robin: 192 flows over 4 cores land within about +-20% of 48
    assert max(use.values()) / min(use.values()) < 1.5, use
    # within a pod (other edge switch), both aggregation switches are used
    agg = Counter()
    t = RouteTable(topo)
    for s in range(n):
        for d in range(n):
            if pod[s] == pod[d] and s // 2 != d // 2:
                r = t.route(s, d)
                assert len(r) == 4
                agg[topo.links[r[1]].dst] += 1
    assert len(agg) == 8, agg


# ------------------------------------------------------------------------------ determinism, API
@pytest.mark.parametrize("spec", ["h800_rails:servers=4", "fat_tree:k=4", "wan"])
def test_deterministic(spec):
    a, b = RouteTable(load_topology(spec)), RouteTable(load_topology(spec))
    n = a.topology.num_ranks
    for s in range(n):
        assert a.direct(s) == b.direct(s)
    # look-up order does not matter
    c = RouteTable(load_topology(spec))
    for s in reversed(range(n)):
        for d in reversed(range(n)):
            if d != s:
                assert c.find(s, d) == a.direct(s).get(d)


def test_api():
    topo = zoo("h800_rails:servers=2")
    t = RouteTable(topo)
    r = t.route(0, 9)
    assert t.route_alpha(r) == pytest.approx(sum(topo.links[l].alpha for l in r))
    assert t.route_bw(r) == min(topo.links[l].bw for l in r)
    assert t.has_route(0, 9) and not t.has_route(0, 0)
    assert all(type(l) is int for l in r)
    assert Routes(topo).route(0, 9) == r and Routes(topo).row(0) == t.direct(0)
    with pytest.raises(CollsynthError, match="out of range"):
        t.direct(topo.num_ranks)
    with pytest.raises(CollsynthError, match="out of range"):
        t.find(0, topo.num_ranks)


# ------------------------------------------------------------------------------ speed
@pytest.mark.parametrize("spec", ["star:n=1024", "h800_rails:servers=128"])
def test_1024_rows_are_fast(spec):
    topo = zoo(spec)
    t = RouteTable(topo)
    t0 = time.perf_counter()
    total = sum(len(t.direct(s)) for s in range(topo.num_ranks))
    elapsed = time.perf_counter() - t0
    assert total == 1024 * 1023
    assert elapsed < 8.0, elapsed  # about 1 s on a laptop core (the old search took 2-4 s)
    t0 = time.perf_counter()
    single = RouteTable(topo)
    ring = [single.route(s, (s + 1) % 1024) for s in range(1024)]
    assert time.perf_counter() - t0 < 4.0
    assert ring == [t.direct(s)[(s + 1) % 1024] for s in range(1024)]
