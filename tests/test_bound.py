"""Lower bounds: hand-derived values, and no simulated schedule ever beats them."""

import pytest

from collsynth.bound import alpha_distances, bound, demands
from collsynth.collective import Collective
from collsynth.errors import CollsynthError
from collsynth.sim import simulate
from collsynth.synth import load_all, synthesize
from collsynth.topology import load_topology
from collsynth.verify import verify

ALL = [
    "allgather",
    "reducescatter",
    "allreduce",
    "broadcast",
    "reduce",
    "alltoall",
    "gather",
    "scatter",
]


def test_dgx_a100_allgather_ingress_bound_is_one_gpu_ingress():
    # ForestColl §5.3: the bottleneck is one GPU's ingress, 300 + 25 GB/s: T = M/16 * 15 / 325GB/s
    topo = load_topology("dgx_a100:nodes=2")
    m = 1e9
    res = bound(topo, Collective.make("allgather", 16), m)
    ingress = next(b for b in res.bounds if b.kind == "ingress")
    # plus the alpha of the nearest source (GPU -> NVSwitch -> GPU)
    d = alpha_distances(topo)
    assert ingress.time_s == pytest.approx(m / 16 * 15 / 325e9 + d[1:, 0].min(), rel=1e-12)
    # the same cut, windowed (bytes reach the links into c0.gpu0 and go on from them no
    # sooner than the alphas allow), binds by a hair
    assert res.kind == "cut" and res.best.witness.startswith("cut {c0.gpu1,")
    assert ingress.time_s < res.time_s < ingress.time_s * (1 + 1e-4)


def test_latency_bound_on_a_line():
    # broadcast from one end of a line: the last byte leaves the root after M/b and needs
    # (n-1) alphas to reach the far end
    topo = load_topology("line:n=5,bw=10GB/s,alpha=2us")
    res = bound(topo, Collective.make("broadcast", 5, root=0), 1e3)
    lat = next(b for b in res.bounds if b.kind == "latency")
    assert lat.time_s == pytest.approx(1e3 / 10e9 + 4 * 2e-6)
    assert res.time_s == pytest.approx(lat.time_s)  # (the far end's ingress bound ties)


def test_demands_per_collective():
    n, m = 4, 4e6
    b_in, b_out, pair = demands(Collective.make("allgather", n), m)
    assert list(b_in) == pytest.approx([3e6] * 4) and list(b_out) == pytest.approx([1e6] * 4)
    b_in, b_out, _ = demands(Collective.make("allreduce", n), m)
    assert list(b_in) == pytest.approx([m] * 4) and list(b_out) == pytest.approx([m] * 4)
    b_in, b_out, _ = demands(Collective.make("reducescatter", n), m)
    assert list(b_in) == pytest.approx([1e6] * 4) and list(b_out) == pytest.approx([3e6] * 4)
    b_in, b_out, _ = demands(Collective.make("reduce", n, root=2), m)
    assert b_in[2] == pytest.approx(m) and b_out[2] == 0 and b_out[0] == pytest.approx(m)
    b_in, b_out, pair = demands(Collective.make("alltoall", n), m)
    assert list(b_in) == pytest.approx([3e6] * 4) and pair[0, 1] == pytest.approx(1e6)


@pytest.mark.parametrize(
    "spec",
    [
        "ring:n=6",
        "dgx1",
        "dgx_a100:nodes=2",
        "mi250",
        "ndv2:chassis=2",
        "star:n=8",
        "wan:dcs=2,gpus=4",
        "torus2d:w=3,h=3",
    ],
)
def test_no_schedule_beats_the_bound(spec):
    topo = load_topology(spec)
    algos = load_all()
    checked = 0
    for kind in ALL:
        coll = Collective.make(kind, topo.num_ranks, 1)
        for name, algo in sorted(algos.items()):
            if coll.kind not in algo.collectives:
                continue
            try:  # the MILP with a short time limit: any feasible schedule must respect it
                sched = synthesize(
                    name, topo, coll, **({"time_limit": 1} if name == "teccl" else {})
                )
            except CollsynthError:
                continue  # not applicable to this topology
            verify(sched)
            for size in (1e3, 1e6, 1e9):
                t = simulate(sched, size).time_s
                b = bound(topo, sched.collective, size).time_s
                assert t >= b * (1 - 1e-9), (name, kind, size, t, b)
                checked += 1
    assert checked > 0


def test_bad_size():
    topo = load_topology("ring:n=4")
    with pytest.raises(CollsynthError):
        bound(topo, Collective.make("allgather", 4), 0)
    with pytest.raises(CollsynthError):
        bound(topo, Collective.make("allgather", 5), 1e6)


def test_cut_bound_allgather_matches_forestcoll_and_paper():
    # ForestColl §5.3: 2-node DGX A100 AllGather optimum M/346.67GB/s (one GPU's ingress 325GB/s)
    topo = load_topology("dgx_a100:nodes=2")
    res = bound(topo, Collective.make("allgather", 16), 1e9)
    cut = next(b for b in res.bounds if b.kind == "cut")
    assert cut.detail["bandwidth_time_s"] == pytest.approx(1e9 / 16 * 15 / 325e9, rel=1e-12)
    assert cut.time_s > cut.detail["bandwidth_time_s"]  # plus one link's alpha


# Cut bounds (1 GB) computed while the max-flow lived in collsynth.synth.forestcoll, before it
# moved to collsynth.flow: AllReduce and Broadcast from rank 0 give the same (time, witness).
_C0 = "cut {c0.gpu0, c0.gpu1, c0.gpu2, c0.gpu3, c0.gpu4, c0.gpu5, ... "
PINNED_CUTS = {
    "dgx_a100:nodes=2": (0.00500035, _C0 + "(8 compute nodes)}"),
    "mi250:chassis=2": (0.00390755, _C0 + "(16 compute nodes)}"),
    "dgx1": (0.006667366666666667, "cut {gpu0}"),
    "ndv2:chassis=2": (0.0800013, _C0 + "(8 compute nodes)}"),
    "wan:dcs=2,gpus=4": (0.08075, "cut {dc0.gpu0, dc0.gpu1, dc0.gpu2, dc0.gpu3}"),
    "torus2d:w=3,h=3": (0.0050007, "cut {gpu0}"),
}


@pytest.mark.parametrize("spec", sorted(PINNED_CUTS))
def test_cut_bounds_keep_their_values(spec):
    time_s, witness = PINNED_CUTS[spec]
    topo = load_topology(spec)
    for kind in ("allreduce", "broadcast"):
        coll = Collective.make(kind, topo.num_ranks, **({"root": 0} if kind == "broadcast" else {}))
        cut = bound(topo, coll, 1e9, providers=["cut"]).bounds[0]
        assert cut.time_s == pytest.approx(time_s, rel=1e-12)
        assert cut.witness == witness


def test_alltoall_demand_cut_across_the_ib_link():
    # ndv2:chassis=2: each of the 8 GPUs of chassis 0 sends M/16 to each of the 8 GPUs of
    # chassis 1, all through the one 12.5 GB/s IB link out of chassis 0
    topo = load_topology("ndv2:chassis=2")
    m = 1e9
    res = bound(topo, Collective.make("alltoall", 16), m)
    assert res.kind == "demand-cut"
    assert res.time_s == pytest.approx(64 * m / 16 / 12.5e9 + 1.3e-6, rel=1e-9)


def _brute_min_cut(topo):
    import itertools

    comp = set(int(v) for v in topo.compute_nodes)
    best = None
    nodes = range(topo.num_nodes)
    for k in range(1, topo.num_nodes):
        for side in itertools.combinations(nodes, k):
            side = set(side)
            if not (side & comp) or comp <= side:
                continue
            out = sum(l.bw for l in topo.links if l.src in side and l.dst not in side)
            best = out if best is None else min(best, out)
    return best


@pytest.mark.parametrize("seed", range(6))
def test_allreduce_cut_bound_is_the_global_min_cut(seed):
    import random

    from collsynth.topology import TopologyBuilder

    rng = random.Random(seed)
    b = TopologyBuilder(f"rand{seed}")
    n_gpu, n_sw = rng.randint(2, 4), rng.randint(0, 2)
    nodes = [b.compute(f"g{i}") for i in range(n_gpu)] + [b.switch(f"s{i}") for i in range(n_sw)]
    for i in range(len(nodes)):  # a ring keeps it strongly connected
        b.link(nodes[i], nodes[(i + 1) % len(nodes)], rng.randint(1, 5) * 1e9, 1e-6)
    for _ in range(rng.randint(0, 6)):
        u, v = rng.sample(nodes, 2)
        b.link(u, v, rng.randint(1, 5) * 1e9, 1e-6)
    topo = b.build()
    res = bound(topo, Collective.make("allreduce", n_gpu), 1e9, providers=["cut"])
    cut = res.bounds[0]
    assert cut.detail["cut_bw"] == pytest.approx(_brute_min_cut(topo))


def test_allreduce_transmission_bound_by_hand():
    """ring:n=8 (100 GB/s out of and into every GPU): 2 * 7 transmissions of every byte over
    8 * 100 GB/s, plus the nearest pair's alpha; it binds, and on this symmetric ring it is
    exactly the ReduceScatter bound plus the AllGather bound."""
    topo = load_topology("ring:n=8")
    res = bound(topo, Collective.make("allreduce", 8), 1e9)
    tx = next(b for b in res.bounds if b.kind == "transmissions")
    alpha = alpha_distances(topo)[0, 1]
    assert tx.time_s == pytest.approx(14e9 / 800e9 + alpha, rel=1e-12)
    assert res.kind == "transmissions" and tx.detail["transmissions_per_byte"] == 14
    halves = [
        bound(topo, Collective.make(k, 8), 1e9, providers=["cut"]).time_s
        for k in ("reducescatter", "allgather")
    ]
    assert sum(halves) == pytest.approx(tx.time_s, rel=1e-3)  # (alphas apart)


def test_allreduce_transmission_bound_uses_the_scarcer_direction():
    """Two GPUs, 10 GB/s from g0 to g1 and 30 GB/s back: 2 transmissions of every byte over
    40 GB/s of egress (= ingress) in all."""
    from collsynth.topology import TopologyBuilder

    b = TopologyBuilder("pair")
    g0, g1 = b.compute("g0"), b.compute("g1")
    b.link(g0, g1, 10e9, 1e-6)
    b.link(g1, g0, 30e9, 1e-6)
    topo = b.build()
    tx = bound(topo, Collective.make("allreduce", 2), 1e9, providers=["transmissions"]).bounds[0]
    assert tx.time_s == pytest.approx(2e9 / 40e9 + 1e-6, rel=1e-12)
    for kind in ("allgather", "broadcast"):  # AllReduce only
        other = bound(topo, Collective.make(kind, 2), 1e9, providers=["transmissions"])
        assert other.kind == "trivial"


def test_allreduce_transmission_bound_between_chassis():
    """Three chassis of two GPUs in a ring (100 GB/s each way inside, 10 GB/s each way between
    neighbours): between the 3 chassis every byte crosses 4 times, over 60 GB/s of chassis
    egress in all, which binds ahead of the per-rank count (10 crossings over 660 GB/s) and of
    the cut (a chassis: one crossing each way over 20 GB/s)."""
    from collsynth.topology import TopologyBuilder

    b = TopologyBuilder("three-chassis")
    g = [b.compute(f"c{i // 2}.gpu{i % 2}", chassis=i // 2) for i in range(6)]
    for c in range(3):
        b.bilink(g[2 * c], g[2 * c + 1], 100e9, 1e-6, "nvlink")
        b.bilink(g[2 * c + 1], g[(2 * c + 2) % 6], 10e9, 5e-6, "ib")
    topo = b.build()
    coll = Collective.make("allreduce", 6)
    res = bound(topo, coll, 1e9)
    tx = next(x for x in res.bounds if x.kind == "transmissions")
    assert res.kind == "transmissions" and tx.witness == "every chassis's egress"
    assert tx.detail["groups"] == 3 and tx.detail["transmissions_per_byte"] == 4
    assert tx.time_s == pytest.approx(4e9 / 60e9 + 1e-6, rel=1e-12)
    cut = next(x for x in res.bounds if x.kind == "cut")
    assert cut.time_s == pytest.approx(1e9 / 20e9 + 5e-6, rel=1e-9)
    for algo in ("ring", "forestcoll"):
        s = synthesize(algo, topo, coll, size=1e9)
        assert simulate(s, 1e9).time_s >= tx.time_s


def test_allreduce_transmission_bound_finds_the_partition_itself():
    """The three-chassis ring again, with no chassis attribute to name the groups: the searched
    partition finds the three pairs itself and binds with the same 4 crossings over 60 GB/s."""
    from collsynth.bound.transmissions import searched_partition
    from collsynth.topology import TopologyBuilder

    b = TopologyBuilder("three-pairs")
    g = [b.compute(f"gpu{i}") for i in range(6)]
    for c in range(3):
        b.bilink(g[2 * c], g[2 * c + 1], 100e9, 1e-6, "nvlink")
        b.bilink(g[2 * c + 1], g[(2 * c + 2) % 6], 10e9, 5e-6, "ib")
    topo = b.build()
    assert sorted(sorted(s) for s in searched_partition(topo)) == [[0, 1], [2, 3], [4, 5]]
    res = bound(topo, Collective.make("allreduce", 6), 1e9)
    tx = next(x for x in res.bounds if x.kind == "transmissions")
    assert res.kind == "transmissions" and tx.witness.startswith("3 groups'")
    assert tx.detail["partition"] == [["gpu0", "gpu1"], ["gpu2", "gpu3"], ["gpu4", "gpu5"]]
    assert tx.time_s == pytest.approx(4e9 / 60e9 + 1e-6, rel=1e-12)


def test_partition_bound_meets_the_tree_lp_where_it_is_exact():
    """On switch-free fabrics with links equal both ways, the best partition equals the best
    in-tree + out-tree AllReduce (Tutte / Nash-Williams): the searched one reaches ForestColl's
    exact Appendix E LP on mi250 (where the per-rank count is 8 % short of it), dgx1 and mesh2d."""
    from collsynth.synth.forestcoll import allreduce_lp

    for spec in ("mi250", "dgx1", "mesh2d"):
        topo = load_topology(spec)
        lp = allreduce_lp(topo)
        assert lp["exact"]
        tx = bound(topo, Collective.make("allreduce", topo.num_ranks), 1e9, ["transmissions"])
        alpha = float(tx.best.time_s - tx.best.detail["bytes"] / tx.best.detail["bw"])
        assert tx.time_s - alpha == pytest.approx(1e9 * lp["inv_X"], rel=1e-9), spec
    mi250 = load_topology("mi250")
    rank_only = 2 * 15 * 1e9 / float(mi250.link_bw.sum())  # every link leaves a GPU
    assert 1e9 * allreduce_lp(mi250)["inv_X"] > 1.08 * rank_only


@pytest.mark.parametrize("spec", ["mi250", "mi250:chassis=2", "a800_clos", "dgx2", "wan"])
def test_partition_bound_holds_under_schedules(spec):
    """No AllReduce schedule beats the transmissions bound, searched partition included."""
    topo = load_topology(spec)
    coll = Collective.make("allreduce", topo.num_ranks)
    tx = bound(topo, coll, 1e9, ["transmissions"]).time_s
    for algo in ("ring", "forestcoll"):
        s = synthesize(algo, topo, coll, size=1e9)
        assert simulate(s, 1e9).time_s >= tx * (1 - 1e-9), algo
