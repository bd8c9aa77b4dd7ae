"""Lower bounds: hand-derived values, and no simulated schedule ever beats them."""

import pytest

from collsynth.bound import alpha_distances, bound, demands
from collsynth.collective import Collective
from collsynth.errors import CollsynthError
from collsynth.sim import simulate
from collsynth.synth import load_all, synthesize
from collsynth.topology import load_topology
from collsynth.verify import verify

ALL = ["allgather", "reducescatter", "allreduce", "broadcast", "reduce", "alltoall", "gather",
       "scatter"]


def test_dgx_a100_allgather_ingress_bound_is_one_gpu_ingress():
    # seed 003 §5.3: the bottleneck is one GPU's ingress, 300 + 25 GB/s: T = M/16 * 15 / 325GB/s
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


@pytest.mark.parametrize("spec", ["ring:n=6", "dgx1", "dgx_a100:nodes=2", "mi250",
                                  "ndv2:chassis=2", "star:n=8", "wan:dcs=2,gpus=4",
                                  "torus2d:w=3,h=3"])
def test_no_schedule_beats_the_bound(spec):
    topo = load_topology(spec)
    algos = load_all()
    checked = 0
    for kind in ALL:
        coll = Collective.make(kind, topo.num_ranks, 1)
        for name, algo in sorted(algos.items()):
            if coll.kind not in algo.collectives:
                continue
            try:
                sched = synthesize(name, topo, coll)
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
