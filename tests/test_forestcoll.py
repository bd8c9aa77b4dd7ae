"""ForestColl: exact optimum, fixed k, edge splitting, tree packing, full pipeline."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import pytest

from collsynth.collective import Collective
from collsynth.flow import (
    fixed_k,
    integer_bandwidths,
    optimal_allgather,
    simplest_between,
    transpose,
)
from collsynth.flow.maxflow import FlowNet, _dinic
from collsynth.schedule.trees import lower
from collsynth.sim import simulate
from collsynth.synth.forestcoll import forestcoll_trees, pack_trees, remove_switches
from collsynth.synth.order import with_link_orders
from collsynth.topology import TopologyBuilder, load_topology
from collsynth.verify import verify

GB = 10**9


# ------------------------------------------------------------------------------ helpers
def rand_topo(
    rng: random.Random, nc: int, ns: int, symmetric: bool, p: float = 0.35, maxbw: int = 6
):
    """Random graph of ``nc`` compute nodes and ``ns`` switches, strongly connected through a
    Hamiltonian cycle over all nodes, integer bandwidths in GB/s; ``symmetric`` -> every link
    has a reverse twin of the same bandwidth (Eulerian)."""
    kinds = ["c"] * nc + ["s"] * ns
    rng.shuffle(kinds)
    b = TopologyBuilder("rand")
    for i, kd in enumerate(kinds):
        (b.compute if kd == "c" else b.switch)(f"n{i}")
    n = len(kinds)
    perm = list(range(n))
    rng.shuffle(perm)
    pairs = {(perm[i], perm[(i + 1) % n]) for i in range(n)}
    for a in range(n):
        for c in range(n):
            if a != c and rng.random() < p:
                pairs.add((a, c))
    for a, c in sorted(pairs):
        bw = rng.randint(1, maxbw) * GB
        if symmetric:
            if (c, a) in pairs and c < a:
                continue
            b.bilink(a, c, bw)
        else:
            b.link(a, c, bw)
    return b.build()


def brute_force_inv_x(topo) -> Fraction:
    """Theorem 1 / eq. (1) by enumeration: max over S ⊂ V, S ⊉ V_c of |S ∩ V_c| / B+(S).

    Bandwidths are read as their shortest round-trip decimal, as ForestColl documents."""
    comp = {int(v) for v in topo.compute_nodes}
    best = Fraction(0)
    for mask in range(1, 1 << topo.num_nodes):
        s = {v for v in range(topo.num_nodes) if mask >> v & 1}
        if comp <= s or not (s & comp):
            continue
        out = sum(Fraction(repr(l.bw)) for l in topo.links if l.src in s and l.dst not in s)
        best = max(best, Fraction(len(s & comp)) / out)
    return best


def cut_ratio(topo, cut) -> Fraction:
    comp = {int(v) for v in topo.compute_nodes}
    out = sum(Fraction(l.bw) for l in topo.links if l.src in cut and l.dst not in cut)
    return Fraction(len(set(cut) & comp)) / out


def check_trees(topo, packed, logical, k):
    n = topo.num_ranks
    per_root = {}
    use = {}
    for root, mult, edges in packed:
        per_root[root] = per_root.get(root, 0) + mult
        assert len(edges) == n - 1
        reached = {root}
        for a, b in edges:  # edges come in growth order: parent already reached
            assert a in reached and b not in reached
            reached.add(b)
            use[(a, b)] = use.get((a, b), 0) + mult
        assert reached == set(range(n))
    assert per_root == {r: k for r in range(n)}
    for e, u in use.items():
        assert u <= logical.caps[e]


# ------------------------------------------------------------------------------ rationals, units
def test_simplest_between_is_the_smallest_denominator():
    rng = random.Random(1)
    for _ in range(300):
        a = Fraction(rng.randint(0, 400), rng.randint(1, 60))
        b = a + Fraction(rng.randint(0, 50), rng.randint(1, 900))
        s = simplest_between(a, b)
        assert a <= s <= b
        for q in range(1, s.denominator):
            assert math.ceil(a * q) > b * q  # no fraction with a smaller denominator
    assert simplest_between(Fraction(1, 3), Fraction(1, 3)) == Fraction(1, 3)
    assert simplest_between(Fraction(7, 5), Fraction(8, 5)) == Fraction(3, 2)


def test_integer_bandwidths_are_exact():
    ints, unit = integer_bandwidths([25e9, 12.5e9, 16e9, 300e9])
    assert unit == Fraction(500_000_000) and ints == [50, 25, 32, 600]
    ints, unit = integer_bandwidths([1e9 / 3, 2e9 / 3])
    assert [Fraction(repr(1e9 / 3)), Fraction(repr(2e9 / 3))] == [i * unit for i in ints]


def test_big_capacities_fall_back_to_exact_integers():
    rng = random.Random(3)
    for _ in range(20):
        n = 7
        arcs = [
            (a, b, rng.randint(1, 9))
            for a in range(n)
            for b in range(n)
            if a != b and rng.random() < 0.4
        ]
        t, h, c = zip(*arcs)
        small = FlowNet(n, t, h, c).solve(0, n - 1)
        assert small == _dinic(n, list(t), list(h), list(c), 0, n - 1)[0]
        big = FlowNet(n, t, h, [x << 70 for x in c])
        assert big._big and big.solve(0, n - 1) == small << 70


# ------------------------------------------------------------------------------ Theorem 1
@pytest.mark.parametrize("seed", range(6))
def test_optimum_equals_brute_force_on_random_graphs(seed):
    rng = random.Random(seed)
    for _ in range(12):
        topo = rand_topo(rng, rng.randint(2, 6), rng.randint(0, 3), rng.random() < 0.5)
        expect = brute_force_inv_x(topo)
        opt = optimal_allgather(topo)
        assert opt.inv_x == expect
        assert optimal_allgather(topo, accelerate=False).inv_x == expect  # Algorithm 1 literally
        assert cut_ratio(topo, opt.cut) == expect  # the bottleneck cut
        # Proposition 3: k minimal with integer tree capacities U * b_e
        assert opt.U / opt.k == opt.ratio
        assert all(c == opt.U * b for c, b in zip(opt.caps, opt.int_bw))
        assert opt.time(8e9) == pytest.approx(8e9 / topo.num_ranks * float(expect))


def test_optimum_with_non_decimal_bandwidths():
    b = TopologyBuilder("odd")
    x = [b.compute(f"g{i}") for i in range(3)]
    sw = b.switch("sw")
    for i, v in enumerate(x):
        b.bilink(v, sw, (i + 1) * 1e9 / 3)
    b.bilink(x[0], x[1], 0.7e9)
    topo = b.build()
    assert optimal_allgather(topo).inv_x == brute_force_inv_x(topo)


def test_dgx_a100_two_nodes_paper_value():
    # §5.3: T = M/16 * 15 / (325 GB/s) = M / 346.67 GB/s; bottleneck = one GPU's ingress
    topo = load_topology("dgx_a100:nodes=2")
    opt = optimal_allgather(topo)
    assert opt.inv_x == Fraction(15, 325 * GB)
    assert opt.algbw == pytest.approx(16 * 325e9 / 15)
    assert round(opt.algbw / 1e9, 2) == 346.67
    assert opt.cut_compute == 15 and len(opt.cut) == topo.num_nodes - 1
    assert opt.k == 13 and opt.y == Fraction(25 * GB, 15)
    assert opt.time(1e9) == pytest.approx(1e9 / 16 * 15 / 325e9)


def test_mi250_two_chassis_paper_values():
    # §4.5: optimum 354.13 GB/s with k = 83 trees per root; k = 2 gives 341.33 GB/s
    topo = load_topology("mi250:chassis=2")
    opt = optimal_allgather(topo)
    assert round(opt.algbw / 1e9, 2) == 354.13 and opt.k == 83
    assert opt.inv_x == Fraction(15, 83 * 2 * GB)
    two = fixed_k(topo, 2)
    assert round(two.algbw / 1e9, 2) == 341.33


def test_hand_derived_optima():
    # DGX-1: every GPU has 6 NVLinks of 25 GB/s -> single-GPU ingress 150 GB/s binds: 7 / 150
    assert optimal_allgather(load_topology("dgx1")).inv_x == Fraction(7, 150 * GB)
    # bidirectional ring of n: the cut "all but one node" exits through 2 links
    for n in (3, 5, 8):
        opt = optimal_allgather(load_topology(f"ring:n={n},bw=10e9"))
        assert opt.inv_x == Fraction(n - 1, 20 * GB)
    # 3x3 and 4x4 tori (degree 4): single-node ingress binds
    assert optimal_allgather(load_topology("torus2d:w=3,h=3,bw=50e9")).inv_x == Fraction(
        8, 200 * GB
    )
    assert optimal_allgather(load_topology("torus2d:w=4,h=4,bw=50e9")).inv_x == Fraction(
        15, 200 * GB
    )
    # star through one switch: ingress of one GPU
    assert optimal_allgather(load_topology("star:n=5")).inv_x == Fraction(4, 50 * GB)


# ------------------------------------------------------------------------------ Theorem 14
@pytest.mark.parametrize(
    "spec",
    ["dgx_a100:nodes=2", "mi250:chassis=2", "dgx1", "h800_rails:servers=2", "dgx2:chassis=2"],
)
def test_fixed_k(spec):
    topo = load_topology(spec)
    opt = optimal_allgather(topo)
    same = fixed_k(topo, opt.k)
    assert same.inv_x == opt.inv_x and same.U == opt.U and same.caps == opt.caps
    one = fixed_k(topo, 1)
    assert one.inv_x >= opt.inv_x
    assert fixed_k(topo, 1, accelerate=False).U == one.U
    # Theorem 15: U*/k <= 1/x* + 1/(k min_e b_e)   (integer units)
    for k in (1, 2, 3):
        r = fixed_k(topo, k)
        assert r.ratio <= opt.ratio + Fraction(1, k * min(opt.int_bw))
        assert r.caps == tuple(math.floor(r.U * b) for b in r.int_bw)


def test_fixed_k_on_random_graphs():
    rng = random.Random(11)
    for _ in range(15):
        topo = rand_topo(rng, rng.randint(2, 5), rng.randint(0, 2), rng.random() < 0.5)
        opt = optimal_allgather(topo)
        for k in (1, 2, 3):
            a, b = fixed_k(topo, k), fixed_k(topo, k, accelerate=False)
            assert a.U == b.U and a.inv_x >= opt.inv_x
        assert fixed_k(topo, opt.k).inv_x == opt.inv_x


# ------------------------------------------------------------------ the search in collsynth.flow
def skew_topology():
    """4 GPUs on one switch with unequal egress (10..40 GB/s) and two extra one-way links: the
    AllGather and ReduceScatter optima differ."""
    b = TopologyBuilder("skew")
    g = [b.compute(f"g{i}") for i in range(4)]
    sw = b.switch("sw")
    for i, v in enumerate(g):
        b.link(v, sw, (i + 1) * 10 * GB)
        b.link(sw, v, 25 * GB)
    b.link(g[0], g[1], 5 * GB)
    b.link(g[2], g[0], 7.5 * GB)
    return b.build()


# Exact values the optimality search gave while it lived in collsynth.synth.forestcoll, before
# it moved to collsynth.flow: AllGather (inv_x, k, U, cut_compute, cut_bw), ReduceScatter
# (transposed) inv_x, and fixed k = 2 (inv_x, U).
PINNED = {
    "dgx_a100:nodes=2": (
        "3/65000000000",
        13,
        "15",
        15,
        "325000000000",
        "3/65000000000",
        "7/150000000000",
        "7/3",
    ),
    "mi250:chassis=2": (
        "3/33200000000",
        83,
        "15",
        30,
        "332000000000",
        "3/33200000000",
        "3/32000000000",
        "3/8",
    ),
    "dgx1": ("7/150000000000", 6, "7", 7, "150000000000", "7/150000000000", "1/20000000000", "5/2"),
    "ndv2:chassis=2": (
        "1/1562500000",
        1,
        "8",
        8,
        "12500000000",
        "1/1562500000",
        "1/1562500000",
        "16",
    ),
    "wan:dcs=2,gpus=4": (
        "1/3125000000",
        1,
        "4",
        4,
        "12500000000",
        "1/3125000000",
        "1/3125000000",
        "8",
    ),
    "dgx2:chassis=2": (
        "31/125000000000",
        10,
        "31",
        31,
        "125000000000",
        "31/125000000000",
        "31/125000000000",
        "31/5",
    ),
    "h800_rails:servers=2": (
        "3/50000000000",
        4,
        "3",
        15,
        "250000000000",
        "3/50000000000",
        "3/50000000000",
        "3/2",
    ),
}


@pytest.mark.parametrize("spec", sorted(PINNED))
def test_optimality_search_keeps_its_exact_values(spec):
    inv_x, k, U, cut_compute, cut_bw, rs_inv_x, k2_inv_x, k2_U = PINNED[spec]
    topo = load_topology(spec)
    opt = optimal_allgather(topo)
    assert (opt.inv_x, opt.k, opt.U) == (Fraction(inv_x), k, Fraction(U))
    assert (opt.cut_compute, opt.cut_bw) == (cut_compute, Fraction(cut_bw))
    assert optimal_allgather(transpose(topo)).inv_x == Fraction(rs_inv_x)
    two = fixed_k(topo, 2)
    assert (two.inv_x, two.U) == (Fraction(k2_inv_x), Fraction(k2_U))


def test_optimality_search_keeps_its_exact_values_when_transposing_matters():
    topo = skew_topology()
    ag, rs = optimal_allgather(topo), optimal_allgather(transpose(topo))
    assert (ag.inv_x, ag.k, ag.U) == (Fraction(3, 25 * GB), 10, 3)
    assert ag.cut_names == ("g0", "g1", "g3", "sw")  # everything but g2 (25 GB/s in)
    assert (rs.inv_x, rs.k, rs.U) == (Fraction(1, 5 * GB), 2, 1)
    assert rs.cut_names == ("g1", "g2", "g3", "sw")  # everything but g0 (15 GB/s out)
    assert fixed_k(topo, 3).U == Fraction(9, 10)
    assert fixed_k(transpose(topo), 3).U == Fraction(3, 2)


def test_one_implementation_of_the_search():
    import importlib.util

    import collsynth.flow as flow
    import collsynth.synth.forestcoll as fc

    for name in (
        "Optimum",
        "optimal_allgather",
        "fixed_k",
        "integer_bandwidths",
        "simplest_between",
        "transpose",
    ):
        assert getattr(fc, name) is getattr(flow, name)
    for gone in ("collsynth.synth.forestcoll._flow", "collsynth.synth.forestcoll.optimality"):
        assert importlib.util.find_spec(gone) is None


# ------------------------------------------------------------------------------ Theorem 8
ZOO = [
    "dgx_a100:nodes=2",
    "mi250:chassis=2",
    "dgx2:chassis=2",
    "star:n=5",
    "fat_tree:k=4",
    "ndv2:chassis=4",
    "h800_rails:servers=2",
]


@pytest.mark.parametrize("spec", ZOO)
def test_edge_splitting_keeps_the_optimum(spec):
    topo = load_topology(spec)
    opt = optimal_allgather(topo)
    logical, routing = remove_switches(topo, opt)
    assert logical.preserved and logical.k == opt.k
    assert optimal_allgather(logical).inv_x == opt.inv_x
    node = topo.node_of_rank
    for (u, v), c in logical.caps.items():
        assert sum(x for _, x in routing[(u, v)]) == c  # routing covers every unit
        for path, x in routing[(u, v)]:
            assert x > 0 and topo.links[path[0]].src == node(u)
            assert topo.links[path[-1]].dst == node(v)
            for a, b in zip(path, path[1:]):
                assert topo.links[a].dst == topo.links[b].src
                assert not topo.is_compute(topo.links[b].src)  # only switches inside
            assert len({topo.links[l].src for l in path}) == len(path)  # no node twice
    for l, used in logical.link_usage().items():
        assert used <= opt.caps[l]


def test_theorem8_gamma_is_the_maximum_safe_split():
    """Splitting gamma keeps k trees per root (Theorem 5 test); gamma + 1 does not."""
    from collsynth.synth.forestcoll.splitting import _Splitter

    rng = random.Random(2)
    partial = 0
    for _ in range(40):
        topo = rand_topo(rng, rng.randint(2, 6), rng.randint(1, 3), rng.random() < 0.6)
        opt = optimal_allgather(topo) if rng.random() < 0.5 else fixed_k(topo, rng.randint(1, 3))
        sp = _Splitter(topo, opt.caps, opt.k)
        if not sp.feasible():
            continue
        for w in [v for v in range(topo.num_nodes) if not sp.is_compute[v]]:
            for u in list(sp.inn[w]):
                for t in list(sp.outn[w]):
                    g0 = min(sp.cap[(u, w)], sp.cap[(w, t)])
                    g = sp.exact_gamma(u, w, t, g0)
                    partial += g < g0
                    for amount, safe in ((g, True), (g + 1, False)):
                        if 0 < amount <= g0:
                            saved = sp._snapshot(u, w, t)
                            sp._split(u, w, t, amount)
                            assert sp.feasible() == safe
                            sp._restore(saved)
    assert partial > 20


def test_edge_splitting_on_random_eulerian_graphs():
    rng = random.Random(7)
    for _ in range(25):
        topo = rand_topo(rng, rng.randint(2, 6), rng.randint(1, 3), True)
        opt = optimal_allgather(topo)
        logical, _ = remove_switches(topo, opt)
        assert logical.preserved and logical.dropped["stuck"] == 0  # Theorem 7
        assert optimal_allgather(logical).inv_x == opt.inv_x
        for l, used in logical.link_usage().items():
            assert used <= opt.caps[l]


# ------------------------------------------------------------------------------ Theorem 12
@pytest.mark.parametrize(
    "spec,k",
    [
        ("dgx_a100:nodes=2", None),
        ("mi250:chassis=2", 1),
        ("mi250:chassis=2", None),
        ("dgx1", None),
        ("dgx2:chassis=2", None),
    ],
)
def test_packing(spec, k):
    topo = load_topology(spec)
    opt = optimal_allgather(topo) if k is None else fixed_k(topo, k)
    logical, _ = remove_switches(topo, opt)
    packed = pack_trees(logical)
    check_trees(topo, packed, logical, opt.k)


def test_packing_on_random_graphs():
    rng = random.Random(5)
    for _ in range(20):
        topo = rand_topo(rng, rng.randint(2, 6), rng.randint(0, 2), True)
        opt = optimal_allgather(topo)
        logical, _ = remove_switches(topo, opt)
        check_trees(topo, pack_trees(logical), logical, opt.k)


# ------------------------------------------------------------------------------ pipeline
@pytest.mark.parametrize(
    "spec,k",
    [
        ("dgx_a100:nodes=2", None),
        ("dgx1", None),
        ("h800_rails:servers=2", None),
        ("ndv2:chassis=4", None),
        ("star:n=5", None),
        ("ring:n=6", None),
    ],
)
def test_pipeline_simulates_close_to_the_bound(spec, k):
    topo = load_topology(spec)
    form, opt, info = forestcoll_trees(topo, k)
    assert info["congestion"]["ok"] and info["congestion"]["inv_x"] == opt.inv_x
    assert info["k"] == opt.k and info["fallback"] is None
    n = topo.num_ranks
    assert {t.root for t in form.trees} == set(range(n))
    for r in range(n):
        assert sum(t.mult for t in form.trees if t.root == r) == opt.k
    sched = lower(topo, Collective.make("allgather", n), form, pipeline=1)
    verify(sched)
    sched = with_link_orders(lower(topo, Collective.make("allgather", n), form, pipeline=16), 1e9)
    verify(sched)
    t = simulate(sched, 1e9).time_s  # realized, in the planned link orders
    bound = opt.time(1e9)
    assert bound * (1 - 1e-9) <= t <= bound * 1.02


@pytest.mark.parametrize("k", [1, 2])
def test_pipeline_mi250_fixed_k(k):
    topo = load_topology("mi250:chassis=2")
    form, opt, info = forestcoll_trees(topo, k)
    assert opt.fixed_k and opt.k == k and info["congestion"]["ok"]
    assert info["congestion"]["inv_x"] <= opt.inv_x
    assert info["timings_s"]["total"] < 5
    sched = lower(topo, Collective.make("allgather", 32), form, pipeline=8)
    verify(sched)
    assert simulate(sched, 1e9).time_s >= opt.time(1e9) * (1 - 1e-9)


def test_pipeline_random_graphs_and_non_eulerian_fallback():
    rng = random.Random(0)
    fallbacks = 0
    for i in range(45):
        sym = i % 3 == 0
        topo = rand_topo(rng, rng.randint(2, 6), rng.randint(0, 3), sym)
        form, opt, info = forestcoll_trees(topo)
        bound = optimal_allgather(topo)
        cong = info["congestion"]
        assert cong["ok"] and cong["inv_x"] <= opt.inv_x
        if info["fallback"] is None:
            assert opt.inv_x == bound.inv_x
        else:
            assert not sym and info["fallback"]["slowdown"] >= 1
            fallbacks += 1
        verify(lower(topo, Collective.make("allgather", topo.num_ranks), form))
    assert fallbacks >= 1  # the seed includes non-Eulerian graphs that need it


def test_reduce_scatter_in_trees():
    for spec in ("dgx_a100:nodes=2", "dgx2:chassis=2"):
        topo = load_topology(spec)
        form, opt, info = forestcoll_trees(topo, direction="in")
        assert all(t.direction == "in" for t in form.trees) and info["congestion"]["ok"]
        assert opt.inv_x == optimal_allgather(transpose(topo)).inv_x
        sched = lower(topo, Collective.make("reducescatter", topo.num_ranks), form, pipeline=4)
        verify(sched)
        assert simulate(sched, 1e9).time_s >= opt.time(1e9) * (1 - 1e-9)
    rng = random.Random(9)
    for _ in range(8):
        topo = rand_topo(rng, rng.randint(2, 5), rng.randint(0, 2), False)
        form, opt, _ = forestcoll_trees(topo, direction="in")
        verify(lower(topo, Collective.make("reducescatter", topo.num_ranks), form))


def test_allreduce_from_in_and_out_trees():
    topo = load_topology("dgx_a100:nodes=2")
    out_form, _, _ = forestcoll_trees(topo)
    in_form, _, _ = forestcoll_trees(topo, direction="in")
    both = type(out_form)(out_form.trees + in_form.trees)
    verify(lower(topo, Collective.make("allreduce", 16), both, pipeline=2))


def test_deterministic():
    topo = load_topology("mi250:chassis=2")
    a = forestcoll_trees(topo, 2)[0].to_dict()
    b = forestcoll_trees(topo, 2)[0].to_dict()
    assert a == b


# ------------------------------------------------------------------------------ symmetry
def test_automorphisms_are_verified_and_free():
    from collsynth.synth.forestcoll import automorphisms

    topo = load_topology("dgx_a100:nodes=4")
    P, L = automorphisms(topo)
    assert len(P) == 16  # chassis shift (4) x GPU/NIC index shift by 2 (4)
    links = topo.links
    for p, lp in zip(P, L):
        for l in links:
            m = links[int(lp[l.id])]
            assert (m.src, m.dst) == (p[l.src], p[l.dst]) and (m.bw, m.alpha) == (l.bw, l.alpha)
        assert sorted(lp.tolist()) == list(range(len(links)))
    comp = topo.compute_nodes.tolist()
    assert all(len({int(P[g][v]) for g in range(16)}) == 16 for v in comp)  # free on ranks
    assert automorphisms(rand_topo(random.Random(1), 4, 1, True)) is None


@pytest.mark.parametrize(
    "spec,k,direction",
    [
        ("dgx_a100:nodes=4", 1, "out"),
        ("dgx_a100:nodes=4", 1, "in"),
        ("dgx_a100:nodes=2", None, "out"),
    ],
)
def test_symmetric_trees_meet_the_optimum(spec, k, direction):
    topo = load_topology(spec)
    form, opt, info = forestcoll_trees(topo, k, direction, symmetry=True)
    assert info["symmetry"]["group_order"] > 1 and info["logical_arcs"] is None
    assert info["congestion"]["ok"] and info["congestion"]["meets_bound"]
    n = topo.num_ranks
    for r in range(n):
        ts = [t for t in form.trees if t.root == r]
        assert sum(t.mult for t in ts) == opt.k
        for t in ts:
            assert len(t.edges) == n - 1
    coll = "allgather" if direction == "out" else "reducescatter"
    sched = lower(topo, Collective.make(coll, n), form, pipeline=4)
    verify(sched)
    assert simulate(sched, 1e9).time_s >= opt.time(1e9) * (1 - 1e-9)
    ref = forestcoll_trees(topo, k, direction, symmetry=False)[1]
    assert ref.inv_x == opt.inv_x


def test_symmetry_falls_back_to_the_exact_pipeline():
    topo = load_topology("mi250:chassis=2")  # chassis swap only: the greedy gets stuck
    form, opt, info = forestcoll_trees(topo, 1, symmetry=True)
    assert "rejected" in info["symmetry"] and info["logical_arcs"] is not None
    assert info["congestion"]["ok"]


def test_symmetry_scales():
    topo = load_topology("dgx_a100:nodes=32")  # 256 GPUs
    form, opt, info = forestcoll_trees(topo, 1)
    assert info["symmetry"]["group_order"] == 128
    assert info["congestion"]["ok"] and info["congestion"]["meets_bound"]
    assert len(form.trees) == 256 and info["timings_s"]["total"] < 30


def test_automorphisms_from_derived_attributes():
    """Shifts are found although other attributes derive from the shifted one: a torus
    node's linear index (``local``) changes with ``x``; an MI250 GCD's ``package`` is
    ``local // 2`` and the xGMI wiring is invariant under ``local -> local + 8``."""
    from collsynth.synth.forestcoll import automorphisms

    topo = load_topology("torus2d:w=4,h=4")
    P, _ = automorphisms(topo)
    assert len(P) == 16  # all translations: one orbit of ranks
    assert len({int(P[g][0]) for g in range(16)}) == 16
    topo = load_topology("mi250:chassis=2")
    P, _ = automorphisms(topo)
    assert len(P) == 4  # chassis swap x (local + 8)
    names = {topo.nodes[int(P[g][topo.index("c0.gpu0")])].name for g in range(4)}
    assert names == {"c0.gpu0", "c0.gpu8", "c1.gpu0", "c1.gpu8"}


@pytest.mark.parametrize(
    "spec,k", [("torus2d:w=8,h=8", None), ("torus3d", None), ("mi250:chassis=4,inter=teccl", None)]
)
def test_symmetric_trees_on_torus_and_mi250(spec, k):
    """Tori (translations) and the TE-CCL MI250 model (chassis x local+8) take the symmetric
    path; the trees hold exactly the optimum and schedule a verified AllGather."""
    topo = load_topology(spec)
    form, opt, info = forestcoll_trees(topo, k, symmetry=True)
    assert "rejected" not in info["symmetry"], info["symmetry"]
    assert info["congestion"]["ok"] and info["congestion"]["meets_bound"]
    assert info["congestion"]["inv_x"] == forestcoll_trees(topo, k, symmetry=False)[1].inv_x
    n = topo.num_ranks
    assert all(sum(t.mult for t in form.trees if t.root == r) == opt.k for r in range(n))
    verify(lower(topo, Collective.make("allgather", n), form, pipeline=1))


# ------------------------------------------------------------------ Appendix E AllReduce LP
def test_allreduce_lp_hand_derived():
    """Full mesh of N nodes, b per link and direction: RS + AG trees take 2M/(N b), and so
    does the LP (x_v = b/2 each, half of every link for each direction of the trees). On a
    4-node line the LP beats RS + AG (30 ms) and meets the middle link's cut M/b: roots sit
    at the ends in unequal numbers, as Appendix E's point (i) allows."""
    from collsynth.synth.forestcoll import allreduce_lp

    M = 1e9
    t = load_topology("full:n=4")
    b = t.links[0].bw
    assert M * allreduce_lp(t)["inv_X"] == pytest.approx(2 * M / (4 * b), rel=1e-7)
    t = load_topology("line:n=4")
    b = t.links[0].bw
    got = allreduce_lp(t)
    assert got["exact"] and M * got["inv_X"] == pytest.approx(M / b, rel=1e-7)
    rs_ag = optimal_allgather(t).time(M) + optimal_allgather(transpose(t)).time(M)
    assert rs_ag == pytest.approx(1.5 * M / b, rel=1e-9)


@pytest.mark.parametrize("seed", range(6))
def test_allreduce_lp_between_min_cut_and_trees(seed):
    """On random graphs (with and without switches) the LP time lies between the min-cut
    bound (any AllReduce) and ForestColl's RS + AG tree time (one of the LP's solutions)."""
    from collsynth.bound.cut import cut_bounds
    from collsynth.synth.forestcoll import allreduce_lp

    rng = random.Random(100 + seed)
    t = rand_topo(rng, rng.randint(3, 6), rng.randint(0, 2), True)
    M = 1e9
    lp = M * allreduce_lp(t)["inv_X"]
    cut = cut_bounds(t, Collective.make("allreduce", t.num_ranks), M)[0]
    rs_ag = optimal_allgather(t).time(M) + optimal_allgather(transpose(t)).time(M)
    assert cut.detail["bandwidth_time_s"] * (1 - 1e-7) <= lp <= rs_ag * (1 + 1e-7)


def test_allreduce_lp_refuses_big_problems():
    from collsynth.errors import CollsynthError
    from collsynth.synth.forestcoll import allreduce_lp

    with pytest.raises(CollsynthError, match="variables"):
        allreduce_lp(load_topology("dgx_a100:nodes=8"))


def test_tight_sets_are_exactly_tight():
    """On mi250:chassis=2 the bottleneck is a GCD package: the smallest tight set around every
    GCD is its package, whose entering capacity equals what the outside trees need."""
    from collsynth.synth.forestcoll.symmetry import _tight_sets

    topo = load_topology("mi250:chassis=2")
    opt = optimal_allgather(topo)
    comp = [int(v) for v in topo.compute_nodes]
    sets = _tight_sets(topo, opt, comp)
    assert len(sets) == len(comp)
    n = len(comp)
    for x in sets:
        names = sorted(topo.nodes[v].name for v in x)
        chassis, gcd = names[0].split(".gpu")
        assert names == sorted([f"{chassis}.gpu{int(gcd)}", f"{chassis}.gpu{int(gcd) + 1}"])
        entering = sum(opt.caps[l.id] for l in topo.links if l.dst in x and l.src not in x)
        assert entering == opt.k * (n - len(x))
    # started with them, the symmetric greedy packs the optimum where it got stuck without
    from collsynth.synth.forestcoll import automorphisms, symmetric_trees, tree_congestion

    group = automorphisms(topo)
    assert symmetric_trees(topo, opt, group) is None
    routed, info = symmetric_trees(topo, opt, group, tight=True)
    cong = tree_congestion(topo, opt, routed)
    assert cong["ok"] and cong["inv_x"] == opt.inv_x


@pytest.mark.parametrize("spec", ["dgx_a100:nodes=4", "mi250:chassis=4,inter=teccl"])
def test_compiled_and_plain_tree_search_agree(spec, monkeypatch):
    """The greedy search runs compiled (numba) on large fabrics and as plain Python on arrays
    below ``COMPILE_MIN_RANKS``: the same trees either way."""
    from collsynth.synth.forestcoll import symmetry

    topo = load_topology(spec)
    compiled = forestcoll_trees(topo, 1, symmetry=True)[0]
    monkeypatch.setattr(symmetry, "COMPILE_MIN_RANKS", 10**9)
    plain = forestcoll_trees(topo, 1, symmetry=True)[0]
    assert compiled == plain and len(plain) == topo.num_ranks


def test_enter_once_sets_beyond_one_word():
    """ "Enter once" bit sets of more than 63 sets are split into 63-bit words."""
    from collsynth.synth.forestcoll.symmetry import _words

    masks = [0, 1, (1 << 63) | 5, (1 << 130) - 1]
    w = _words(masks, 3)
    back = [sum(int(x) << (63 * i) for i, x in enumerate(row)) for row in w.tolist()]
    assert back == masks
