"""SyCCL first version: symmetry detection, chunk allocation, verified AllGather, refusals."""

from fractions import Fraction

import numpy as np
import pytest

from collsynth.collective import CollKind, Collective
from collsynth.errors import CollsynthError
from collsynth.sim import simulate
from collsynth.synth import synthesize
from collsynth.synth.syccl import detect
from collsynth.synth.syccl.algo import allocate, sketch_loads
from collsynth.topology.model import TopologyBuilder
from collsynth.topology.spec import load_topology
from collsynth.verify import ensure_verified

GB = 1e9


def _ag(t):
    return Collective(CollKind.ALLGATHER, t.num_ranks)


def test_detect_h800_and_a800():
    f = detect(load_topology("h800_rails:servers=2"))
    assert f.servers == 2 and f.island_size == 8
    assert f.island_bw == 200 * GB and f.net_bw == 50 * GB
    assert f.rails[3] == [3, 11]
    a = detect(load_topology("a800_clos:servers=2"))
    # two GPUs share each 25 GB/s NIC: 12.5 GB/s each
    assert a.net_bw == 12.5 * GB and a.island_bw == 180 * GB


def test_chunk_allocation_by_hand():
    # h800, 2 servers: S=2, m=8. rail>island: net 1, island 14; island>rail: net 8, island 7.
    sizes = {"island": 8, "rail": 2}
    la = sketch_loads(("rail", "island"), sizes)
    lb = sketch_loads(("island", "rail"), sizes)
    assert la == {"island": 14, "rail": 1} and lb == {"island": 7, "rail": 8}
    caps = {"island": Fraction(200), "rail": Fraction(50)}
    t, unit = allocate([la, lb], caps)
    # equalise: (t + 8(1-t))/50 = (14t + 7(1-t))/200  ->  4(8-7t) = 7+7t  ->  t = 5/7
    assert t == [Fraction(5, 7), Fraction(2, 7)]
    # time per unit 3/50 = 15 pieces / (200+50): the ingress bound
    assert unit == Fraction(3, 50) == Fraction(15, 250)


@pytest.mark.parametrize("spec", ["a800_clos:servers=2", "h800_rails:servers=2",
                                  "h800_rails:servers=4"])
def test_allgather_verified_and_not_worse_than_ring(spec):
    t = load_topology(spec)
    c = _ag(t)
    ring = synthesize("ring", t, c)
    for size in (1e6, 1 * GB):
        s = synthesize("syccl", t, c, size=size)
        ensure_verified(s)
        assert s.has_parts
        assert simulate(s, size).time_s <= simulate(ring, size).time_s * (1 + 1e-9)


def test_refuses_irregular():
    t = load_topology("random_regular:n=8,d=3")
    with pytest.raises(CollsynthError) as e:
        synthesize("syccl", t, _ag(t))
    assert "\n" not in str(e.value) and "syccl" in str(e.value)
    # two islands of unequal size
    b = TopologyBuilder("lopsided")
    g = [b.compute(f"g{i}") for i in range(5)]
    s0, s1, net = b.switch("s0"), b.switch("s1"), b.switch("net")
    for x in g[:3]:
        b.bilink(x, s0, 100.0)
    for x in g[3:]:
        b.bilink(x, s1, 100.0)
    for x in g:
        b.bilink(x, net, 10.0)
    t2 = b.build()
    with pytest.raises(CollsynthError, match="unequal sizes") as e2:
        synthesize("syccl", t2, _ag(t2))
    assert "\n" not in str(e2.value)


def test_refuses_bad_workers_and_unsupported():
    t = load_topology("h800_rails:servers=2")
    with pytest.raises(CollsynthError):
        synthesize("syccl", t, _ag(t), workers="x")
    with pytest.raises(CollsynthError):
        synthesize("syccl", t, Collective(CollKind.ALLREDUCE, t.num_ranks))


def test_deterministic():
    t = load_topology("h800_rails:servers=2")
    a = synthesize("syccl", t, _ag(t), size=GB, workers=2)
    b = synthesize("syccl", t, _ag(t), size=GB)
    for name in ("src", "dst", "chunk", "route_links", "dep_ids", "part_lo", "part_hi"):
        assert np.array_equal(getattr(a, name), getattr(b, name))
    assert a.meta["syccl"]["fractions"] == ["5/7", "2/7"]


def test_reducescatter_by_reversal():
    t = load_topology("h800_rails:servers=2")
    c = Collective(CollKind.REDUCESCATTER, t.num_ranks)
    s = synthesize("syccl", t, c, size=GB)
    ensure_verified(s)
    assert simulate(s, GB).time_s <= simulate(synthesize("ring", t, c), GB).time_s


def test_hand_built_symmetric_fabric_without_attributes():
    # 3 islands of 4 GPUs on a GPU-only switch each; GPU j of every island on network switch j
    b = TopologyBuilder("handmade")
    isl = [[b.compute(f"x{s}_{j}") for j in range(4)] for s in range(3)]
    for s in range(3):
        sw = b.switch(f"nv{s}")
        for g in isl[s]:
            b.bilink(g, sw, 100e9, 1e-6)
    for j in range(4):
        leaf = b.switch(f"leaf{j}")
        for s in range(3):
            nic = b.switch(f"nic{s}_{j}")
            b.bilink(isl[s][j], nic, 20e9, 1e-6)
            b.bilink(nic, leaf, 20e9, 1e-6)
    t = b.build()
    f = detect(t)
    assert f.servers == 3 and f.island_size == 4 and f.net_bw == 20e9
    s = synthesize("syccl", t, _ag(t), size=GB)
    ensure_verified(s)
    assert simulate(s, GB).time_s <= simulate(synthesize("ring", t, _ag(t)), GB).time_s
