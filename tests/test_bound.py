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
    assert res.kind == "ingress"
    # plus the alpha of the nearest source (GPU -> NVSwitch -> GPU)
    d = alpha_distances(topo)
    assert res.time_s == pytest.approx(m / 16 * 15 / 325e9 + d[1:, 0].min(), rel=1e-12)


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
