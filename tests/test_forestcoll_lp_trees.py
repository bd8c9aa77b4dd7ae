"""AllReduce trees from ForestColl's Appendix E LP: per-root tree counts, the packing with
per-root multiplicities, lowering with ``shares="mult"``, and the synthesizer's choice."""

import numpy as np
import pytest

from collsynth.bound import bound
from collsynth.collective import Collective
from collsynth.errors import CollsynthError
from collsynth.schedule.ir import OpKind
from collsynth.schedule.trees import Tree, TreeForm, lower
from collsynth.sim import simulate
from collsynth.synth import synthesize
from collsynth.synth.forestcoll import allreduce_lp, optimal_allgather, pack_trees
from collsynth.synth.forestcoll.algo import LP_SCALES
from collsynth.synth.forestcoll.lp_trees import _apportion, allreduce_lp_trees
from collsynth.topology import load_topology
from collsynth.verify import verify


class _Caps:
    def __init__(self, n, caps):
        self.num_ranks = n
        self.caps = caps


def _spans(n, root, edges):
    seen = {root}
    for a, b in edges:
        assert a in seen and b not in seen  # grown from the root, each rank once
        seen.add(b)
    return seen == set(range(n))


def test_packing_with_per_root_counts():
    # a bidirectional ring of 4 with 2 trees per arc: 4 trees in all fit (each needs 3 arcs
    # of the 8, the arcs hold 16), split 2/1/0/1 between the roots
    n = 4
    caps = {(i, (i + 1) % n): 2 for i in range(n)} | {((i + 1) % n, i): 2 for i in range(n)}
    packed = pack_trees(_Caps(n, dict(caps)), [2, 1, 0, 1])
    per_root = {}
    used = dict.fromkeys(caps, 0)
    for root, mult, edges in packed:
        per_root[root] = per_root.get(root, 0) + mult
        assert _spans(n, root, edges)
        for e in edges:
            used[e] += mult
    assert per_root == {0: 2, 1: 1, 3: 1}
    assert all(used[e] <= caps[e] for e in caps)
    with pytest.raises(CollsynthError, match="cannot grow"):
        pack_trees(_Caps(n, dict(caps)), [5, 5, 5, 5])
    with pytest.raises(CollsynthError, match="counts"):
        pack_trees(_Caps(n, dict(caps)), [0, 0, 0, 0])


def test_apportion_keeps_the_total():
    assert _apportion(np.array([1.5, 1.5, 1.0]), 4) == [2, 1, 1]
    assert sum(_apportion(np.array([0.3, 2.2, 7.5]), 10)) == 10


def test_mesh_trees_reach_the_lp_and_beat_rs_ag():
    topo = load_topology("mesh2d:w=4,h=4")
    n = topo.num_ranks
    lp = allreduce_lp(topo)
    form, info = allreduce_lp_trees(topo, lp=lp)
    K = info["K"]
    assert K == 16 * n and sum(info["ks"]) == K
    # the corners (degree 2) root fewer trees than the middle (degree 4)
    assert info["ks"][0] < info["ks"][5]
    # every root's in-trees and out-trees agree, and each direction spans K trees
    for d in (0, 1):
        roots = {}
        for t in form.trees:
            if int(t.direction == "in") == d:
                roots[t.root] = roots.get(t.root, 0) + t.mult
        assert [roots.get(v, 0) for v in range(n)] == info["ks"]
    # the trees carry their loads: recount them from the edges
    load = np.zeros(len(topo.links))
    for t in form.trees:
        for _, _, route in t.edges:
            assert len(route) == 1
            load[route[0]] += t.mult
    assert info["inv_time"] == pytest.approx(float(np.max(load / topo.link_bw)) / K)
    # at least the LP's time, at most a little above it (rounding), and below RS + AG
    assert info["inv_X"] * (1 - 1e-9) <= info["inv_time"] <= info["inv_X"] * 1.05
    rs_ag = 2 * float(optimal_allgather(topo).inv_x) / n
    assert info["inv_time"] < rs_ag / 1.1


def test_lp_trees_refuse_switches():
    with pytest.raises(CollsynthError, match="without switches"):
        allreduce_lp_trees(load_topology("dgx_a100:nodes=2"))


def test_synthesizer_picks_the_lp_trees_on_the_mesh():
    topo = load_topology("mesh2d:w=3,h=3")
    coll = Collective.make("allreduce", topo.num_ranks)
    size = 1e9
    s = synthesize("forestcoll", topo, coll, size=size, pipeline="16")
    verify(s)
    fc = s.meta["forestcoll"]
    assert fc["allreduce"] == "lp" and fc["lp_trees"]["K"] == fc["k"] * topo.num_ranks
    assert fc["k"] in LP_SCALES
    rsag = synthesize("forestcoll", topo, coll, size=size, k="2", pipeline="16")
    verify(rsag)
    assert rsag.meta["forestcoll"]["allreduce"] == "rs+ag"
    t_lp = simulate(s, size).time_s
    t_rsag = simulate(rsag, size).time_s
    b = bound(topo, coll, size).time_s
    assert t_lp >= b * (1 - 1e-9)
    assert t_lp < t_rsag / 1.1
    # at 1 MB the LP's trees carry pieces too small to pipeline well: whichever the estimate
    # picks, it is no slower than RS + AG by more than a percent
    small = synthesize("forestcoll", topo, coll, size=1e6)
    small_rsag = synthesize("forestcoll", topo, coll, size=1e6, k="2")
    assert simulate(small, 1e6).time_s <= 1.01 * simulate(small_rsag, 1e6).time_s


def test_synthesizer_keeps_rs_ag_where_ranks_are_alike():
    topo = load_topology("ring:n=6")
    coll = Collective.make("allreduce", 6)
    s = synthesize("forestcoll", topo, coll, size=1e6, pipeline="1")
    assert s.meta["forestcoll"]["allreduce"] == "rs+ag"


def test_mult_shares_lowering():
    topo = load_topology("ring:n=4")
    n = 4
    links = {(int(a), int(b)): i for i, (a, b) in enumerate(zip(topo.link_src, topo.link_dst))}

    def path(root, direction):  # a chain around the ring from root
        order = [(root + i) % n for i in range(n)]
        pairs = list(zip(order, order[1:]))
        if direction == "in":
            pairs = [(b, a) for a, b in reversed(pairs)]
        return tuple((a, b, (links[(a, b)],)) for a, b in pairs)

    # rank 0 reduces and broadcasts half the buffer, ranks 1 and 3 a quarter each, rank 2 none
    ks = {0: 2, 1: 1, 3: 1}
    trees = [Tree(r, path(r, d), k, d) for d in ("in", "out") for r, k in ks.items()]
    form = TreeForm(trees)
    coll = Collective.make("allreduce", n)
    s = lower(topo, coll, form, pipeline=2, shares="mult")
    verify(s)
    assert s.collective.chunks_per_rank == 2  # 4 trees x 2 pieces over 4 ranks
    # the buffer's chunks 0-3 (half) go up rank 0's in-tree, 4-5 rank 1's, 6-7 rank 3's
    root_edges = {r: {(a, b) for a, b, _ in path(r, "in")} for r in ks}
    owner = [0, 0, 0, 0, 1, 1, 3, 3]
    red = s.kind == int(OpKind.REDUCE)
    for a, b, c in zip(s.src[red].tolist(), s.dst[red].tolist(), s.chunk[red].tolist()):
        assert (a, b) in root_edges[owner[c]]
    assert int(red.sum()) == 8 * (n - 1)
    with pytest.raises(CollsynthError, match="AllReduce trees only"):
        lower(topo, Collective.make("allgather", n), form, shares="mult")
    bad = TreeForm([Tree(0, path(0, "in"), 2, "in"), Tree(0, path(0, "out"), 1, "out")])
    with pytest.raises(CollsynthError, match="must agree"):
        lower(topo, coll, bad, shares="mult")
    with pytest.raises(CollsynthError, match="do not split"):
        lower(
            topo, coll, TreeForm([Tree(0, path(0, d), 1, d) for d in ("in", "out")]), shares="mult"
        )
    with pytest.raises(CollsynthError, match="shares must be"):
        lower(topo, coll, form, shares="bytes")
