"""In-network groups: multicast (a switch copies one stream to several ports) and in-switch
reduction (a switch combines streams into one), in the topology, the IR and its files, the
verifier (with planted defects) and the simulator."""

from __future__ import annotations

import numpy as np
import pytest

from collsynth.bound import bound
from collsynth.collective import Collective
from collsynth.errors import CollsynthError
from collsynth.schedule.io import load_schedule, save_schedule
from collsynth.schedule.ir import Schedule, ScheduleBuilder
from collsynth.sim import simulate
from collsynth.synth.order import without_chosen_order
from collsynth.topology import TopologyBuilder
from collsynth.topology.model import Topology
from collsynth.verify import verify
from conftest import rejects

BW, ALPHA = 10e9, 1e-6


def planned_sim(s, size, **kw):
    """The schedule in its plan: the planned order, without the link orders synthesis chose for
    execution (what these tests check the algorithm's own estimates against)."""
    return simulate(without_chosen_order(s), size, order="plan", **kw)


def star(multicast: bool = True, reduce: bool = True, n: int = 4) -> Topology:
    """``n`` GPUs, each linked both ways to one switch with the given capabilities."""
    b = TopologyBuilder("star")
    gs = [b.compute(f"g{i}") for i in range(n)]
    sw = b.switch("sw", multicast=multicast, reduce=reduce)
    for g in gs:
        b.bilink(g, sw, BW, ALPHA, "nvswitch")
    return b.build()


def up(t: Topology, r: int) -> int:
    return t.links_between(t.node_of_rank(r), t.index("sw"))[0]


def down(t: Topology, r: int) -> int:
    return t.links_between(t.index("sw"), t.node_of_rank(r))[0]


def broadcast(t: Topology, grouped: bool = True, deps_differ: bool = False) -> Schedule:
    b = ScheduleBuilder(t, Collective.make("broadcast", t.num_ranks, root=0))
    first = None
    for r in range(1, t.num_ranks):
        deps = [first] if deps_differ and first is not None else []
        op = b.add(0, r, 0, route=[up(t, 0), down(t, r)], group=7 if grouped else None, deps=deps)
        first = op if first is None else first
    return b.build()


def reduce_to_root(t: Topology, grouped: bool = True) -> Schedule:
    b = ScheduleBuilder(t, Collective.make("reduce", t.num_ranks, root=0))
    for r in range(1, t.num_ranks):
        b.add(r, 0, 0, route=[up(t, r), down(t, 0)], kind="reduce", group=3 if grouped else None)
    return b.build()


def test_switch_capabilities_are_read_and_checked():
    t = star(multicast=True, reduce=False)
    sw = t.index("sw")
    assert t.multicast_nodes[sw] and not t.reduce_nodes[sw] and t.in_network
    assert not star(False, False).in_network
    assert star().fingerprint != star(False, False).fingerprint
    b = TopologyBuilder("bad")
    b.compute("g0", multicast=True)
    b.compute("g1")
    with pytest.raises(CollsynthError, match="only a switch"):
        b.build()
    b = TopologyBuilder("bad")
    b.switch("sw", reduce="yes")
    with pytest.raises(CollsynthError, match="must be true or false"):
        b.build()


def test_multicast_verifies_and_crosses_the_uplink_once():
    t = star()
    s = broadcast(t)
    assert verify(s).ok and s.has_groups
    size = 1e6
    grouped, plain = simulate(s, size), simulate(s.expand_groups(), size)
    # one stream up, three copies down in parallel: bytes/bw + two alphas
    assert grouped.time_s == pytest.approx(size / BW + 2 * ALPHA, rel=1e-12)
    assert plain.time_s == pytest.approx(3 * size / BW + 2 * ALPHA, rel=1e-12)
    assert grouped.hops == 4 and plain.hops == 6
    assert grouped.link_busy_s[up(t, 0)] == pytest.approx(size / BW)
    assert np.allclose(grouped.op_finish_s, grouped.time_s)


def test_in_switch_reduction_verifies_and_crosses_the_downlink_once():
    t = star()
    s = reduce_to_root(t)
    assert verify(s).ok
    size = 1e6
    grouped, plain = simulate(s, size), simulate(s.expand_groups(), size)
    assert grouped.time_s == pytest.approx(size / BW + 2 * ALPHA, rel=1e-12)
    assert plain.time_s == pytest.approx(3 * size / BW + 2 * ALPHA, rel=1e-12)
    assert grouped.link_busy_s[down(t, 0)] == pytest.approx(size / BW)
    # every member's contribution is at the root when the combined stream is
    assert np.all(grouped.op_finish_s == grouped.time_s)


@pytest.mark.parametrize(
    "kw", [{"order": "fcfs"}, {"order": "fair"}, {"op_cost_s": 3e-6}, {"reduce_bw": 5e9}]
)
@pytest.mark.parametrize("make", [broadcast, reduce_to_root])
def test_groups_compiled_and_plain_agree(make, kw):
    s = make(star())
    a, b = simulate(s, 1e6, compiled=True, **kw), simulate(s, 1e6, compiled=False, **kw)
    assert a.time_s == b.time_s and np.array_equal(a.op_finish_s, b.op_finish_s)
    assert simulate(s.expand_groups(), 1e6, **kw).time_s >= a.time_s


def test_planted_multicast_at_a_switch_that_cannot():
    rejects(broadcast(star(multicast=False)), "group", match="part at sw, which cannot multicast")


def test_planted_reduction_at_a_switch_that_cannot():
    rejects(reduce_to_root(star(reduce=False)), "group", match="meet at sw, which cannot reduce")


def test_planted_multicast_members_waiting_for_different_operations():
    rejects(broadcast(star(), deps_differ=True), "group", match="different operations")


def test_planted_multicast_to_a_port_the_switch_lacks():
    """A branch that leaves the switch by a link the switch does not have (g2's uplink)."""
    t = star()
    b = ScheduleBuilder(t, Collective.make("broadcast", 4, root=0))
    b.add(0, 1, 0, route=[up(t, 0), down(t, 1)], group=1)
    b.add(0, 2, 0, route=[up(t, 0), up(t, 2)], group=1)
    b.add(0, 3, 0, route=[up(t, 0), down(t, 3)], group=1)
    rejects(b.build(), "route", op=1)


def test_planted_group_mixing_senders_or_chunks():
    t = star()
    b = ScheduleBuilder(t, Collective.make("allgather", 4))
    b.add(0, 1, 0, route=[up(t, 0), down(t, 1)], group=1)
    b.add(2, 3, 2, route=[up(t, 2), down(t, 3)], group=1)
    rejects(b.build(), "group", match="differ in chunk")


@pytest.mark.parametrize("ext", ["json", "npz"])
def test_groups_survive_files(tmp_path, ext):
    s = broadcast(star())
    path = str(tmp_path / f"s.{ext}")
    save_schedule(s, path)
    back = load_schedule(path)
    assert np.array_equal(back.group, s.group)
    assert simulate(back, 1e6).time_s == simulate(s, 1e6).time_s


def test_transmission_bound_stays_off_where_switches_reduce():
    coll = Collective.make("allreduce", 4)
    assert any(b.kind == "transmissions" for b in bound(star(False, False), coll, 1e6).bounds)
    assert not any(b.kind == "transmissions" for b in bound(star(), coll, 1e6).bounds)


def test_exporters_refuse_and_the_executor_sends_each_copy():
    from collsynth.export import to_msccl_xml, to_mscclpp_plan
    from collsynth.runtime.check import compare, element_dtype
    from collsynth.runtime.fake import run_in_process
    from collsynth.runtime.plan import size_quantum

    s = broadcast(star())
    with pytest.raises(CollsynthError, match="cannot express a switch that copies"):
        to_msccl_xml(s)
    with pytest.raises(CollsynthError, match="only to glres .* this is a broadcast schedule"):
        to_mscclpp_plan(s)
    res = run_in_process(s, 4 * size_quantum(s, 4), net_seed=2)
    dt = element_dtype(s.collective, np.dtype(np.float32))
    for r in range(4):
        got, want = res["outputs"][r], res["expected"][r]
        assert compare(s.collective, r, res["chunk_bytes"], dt, got, want) is None


@pytest.mark.parametrize("kind", ["allreduce", "reducescatter", "allgather"])
def test_nvls_on_dgx_h100_verifies_and_uses_the_switch(kind):
    from collsynth.synth import synthesize
    from collsynth.topology import load_topology

    t = load_topology("dgx_h100")
    s = synthesize("nvls", t, Collective.make(kind, 8), size=64e6)
    assert verify(s).ok and s.has_groups
    res = simulate(s, 64e6)
    assert res.time_s >= bound(t, s.collective, 64e6).time_s
    # the same operations one by one are slower: every copy crosses the links itself
    # in the planned order; links shared fairly carry the same operations one by one as fast
    # for ReduceScatter and AllGather here (the senders' up-links bind either way), docs/mteg.md
    assert planned_sim(s.expand_groups(), 64e6).time_s > 1.2 * planned_sim(s, 64e6).time_s


def test_nvls_allreduce_beats_every_schedule_without_in_network_reduction():
    """DGX H100, 1 GB: any schedule without in-switch reduction needs 2(N-1)/N · M / 450 GB/s
    (3.89 ms, the transmission bound on the same machine with nvls=0); NVLS moves M each way
    per GPU, pipelined in P = 16 pieces: (1 + 1/P) · M / bw, so the model predicts a factor
    of 1.75 / (1 + 1/16) = 1.647."""
    from collsynth.synth import synthesize
    from collsynth.topology import load_topology

    coll = Collective.make("allreduce", 8)
    plain = bound(load_topology("dgx_h100:nvls=0"), coll, 1e9)
    assert plain.kind == "transmissions"
    s = synthesize("nvls", load_topology("dgx_h100"), coll, size=1e9)
    assert s.meta["nvls"]["pipeline"] == 16
    factor = plain.time_s / planned_sim(s, 1e9).time_s
    assert factor == pytest.approx(1.75 / (1 + 1 / 16), rel=0.01)


def test_nvls_needs_a_capable_switch():
    from collsynth.synth import synthesize
    from collsynth.topology import load_topology

    with pytest.raises(CollsynthError, match="nvls needs one switch that reduces"):
        synthesize("nvls", load_topology("dgx_h100:nvls=0"), Collective.make("allreduce", 8))


def timed_broadcast(t: Topology, late: float = 0.0) -> Schedule:
    """The multicast broadcast with a plan: every member starts at 0 (one late by ``late``),
    lasting one chunk over the uplink; the uplink's planned order names its carrier only."""
    size = 1e6
    b = ScheduleBuilder(t, Collective.make("broadcast", 4, root=0))
    b.size = size
    ops = [
        b.add(0, r, 0, route=[up(t, 0), down(t, r)], group=1, start=late if r == 3 else 0.0)
        for r in range(1, 4)
    ]
    b.set_link_order(up(t, 0), ops[:1])
    return b.build()


def test_timed_multicast_counts_the_shared_link_once():
    t = star()
    s = timed_broadcast(t)
    assert not s.carried_hops()[2] and s.carried_hops()[0]  # op 1's uplink hop rides on op 0's
    rep = verify(s)
    assert rep.ok and "capacity" in rep.checks and "link-order" in rep.checks
    assert planned_sim(s, 1e6).time_s == pytest.approx(1e6 / BW + 2 * ALPHA, rel=1e-12)
    # one by one, the uplink carries three copies: the planned order names each (after the
    # one that carried them), and the timed plan is over the uplink's capacity
    e = s.expand_groups()
    assert e.link_order is not None and sorted(e.link_order[0].tolist()) == [0, 1, 2]
    rejects(e, "capacity")


def test_planted_timed_multicast_members_starting_apart():
    rejects(timed_broadcast(star(), late=1e-6), "causality", op=2, match="one stream leaves")


def test_teccl_switch_copies_become_multicasts_where_the_switch_can():
    """TE-CCL's switch copying (``switch_copy``): on a switch that multicasts, the copies of a
    broadcast are one group (the root's uplink once: 1 MB / 10 GB/s + two alphas, the bound);
    on one that cannot, separate transfers as before."""
    from collsynth.synth import synthesize

    coll = Collective.make("broadcast", 4, root=0)
    plain = synthesize("teccl", star(), coll, size=1e6, time_limit=20)
    copy = synthesize("teccl", star(), coll, size=1e6, switch_copy=True, time_limit=20)
    assert copy.has_groups and not plain.has_groups and verify(copy).ok
    assert planned_sim(copy, 1e6).time_s == pytest.approx(1e6 / BW + 2 * ALPHA, rel=1e-9)
    assert planned_sim(plain, 1e6).time_s == pytest.approx(2e6 / BW + 4 * ALPHA, rel=1e-9)
    assert copy.meta["teccl"]["plan_s"] == pytest.approx(planned_sim(copy, 1e6).time_s, rel=1e-9)
    no_mc = synthesize("teccl", star(multicast=False), coll, size=1e6, switch_copy=True,
                       time_limit=20)  # fmt: skip
    assert not no_mc.has_groups and verify(no_mc).ok


# ---------------------------------------------------------------- MSCCL++ switch channels
def nvls_plan(inplace: bool = False) -> dict:
    import json

    from collsynth.export import to_mscclpp_plan
    from collsynth.synth import synthesize
    from collsynth.topology import load_topology

    s = synthesize("nvls", load_topology("dgx_h100"), Collective.make("allreduce", 8), size=64e6)
    return json.loads(to_mscclpp_plan(s, inplace=inplace))


def check_plan(doc: dict):
    import json

    from collsynth.export.mscclpp_check import check_mscclpp_plan

    return check_mscclpp_plan(json.dumps(doc))


def ops_of(doc: dict, r: int) -> list:
    return doc["gpus"][r]["threadblocks"][0]["ops"]


@pytest.mark.parametrize("inplace", [False, True])
def test_nvls_allreduce_exports_to_glres_and_checks(inplace):
    doc = nvls_plan(inplace)
    rep = check_plan(doc)
    assert rep.ok and rep.ngpus == 8 and rep.inplace is inplace
    for r, g in enumerate(doc["gpus"]):
        sw = [c for c in g["channels"] if c["channel_type"] == "switch"]
        assert sw == [{"channel_type": "switch", "buffer_type": "i" if inplace else "o",
                       "rank_groups": [{"size": 8, "ranks": list(range(8))}]}]  # fmt: skip
        gl = [op for op in ops_of(doc, r) if op["name"] == "glres"]
        # each rank reduces and multicasts its own share (its P pipeline pieces) in one run
        P = g["input_chunks"] // 8
        assert P == 2  # 64 MB: 8 MB per rank in 4 MB pieces
        assert [(op["src_buff"][0]["index"], op["src_buff"][0]["size"]) for op in gl] == [
            (r * P, P)
        ]


def test_planted_nvls_plan_defects_are_caught():
    from collsynth.export.mscclpp_check import PlanCheckError

    def broken(edit, match):
        doc = nvls_plan()
        edit(doc)
        with pytest.raises(PlanCheckError, match=match):
            check_plan(doc)

    def no_first_wait(doc):  # rank 3 reads others' outputs before their copies are published
        ops = ops_of(doc, 3)
        i = next(k for k, op in enumerate(ops) if op["name"] == "wait")
        del ops[i]

    def twice(doc):  # rank 1 reduces rank 0's share again at the end: counted twice
        ops_of(doc, 1).append(dict(next(o for o in ops_of(doc, 0) if o["name"] == "glres")))

    def unordered(doc):  # ... or before the last barrier: it races with rank 0's own glres
        ops_of(doc, 1).insert(-1, dict(next(o for o in ops_of(doc, 0) if o["name"] == "glres")))

    def missing(doc):  # rank 5 does not reduce its share
        doc["gpus"][5]["threadblocks"][0]["ops"] = [
            op for op in ops_of(doc, 5) if op["name"] != "glres"
        ]

    def undeclared(doc):  # rank 6 leaves the multicast group
        g = doc["gpus"][6]
        g["channels"] = [c for c in g["channels"] if c["channel_type"] != "switch"]

    def over_memory(doc):
        next(o for o in ops_of(doc, 2) if o["name"] == "glres")["channel_type"] = "memory"

    def bad_id(doc):
        next(o for o in ops_of(doc, 2) if o["name"] == "glres")["src_buff"][0][
            "switch_channel_id"
        ] = 3

    broken(no_first_wait, "race: .*reads rank")
    broken(twice, "counts rank")
    broken(unordered, "race: .*reads rank 0's o.0. while gpus.0.")
    broken(missing, "postcondition: rank 0 ends with")
    broken(undeclared, "switch channel .* not declared by rank 6|switch channel 0 is not")
    broken(over_memory, "glres runs over a switch channel")
    broken(bad_id, "switch channel 3 is not in the block's list")


def test_mscclpp_refuses_groups_that_glres_cannot_express():
    from collsynth.export import to_mscclpp_plan
    from collsynth.synth import synthesize
    from collsynth.topology import load_topology

    t = load_topology("dgx_h100")
    for kind in ("reducescatter", "allgather"):
        s = synthesize("nvls", t, Collective.make(kind, 8), size=64e6)
        with pytest.raises(CollsynthError, match=f"only to glres .* {kind} schedule"):
            to_mscclpp_plan(s)
