"""Join operations: one shared dependency list (the IR, its files, the verifier, the simulator,
the exporters and the executor), and the tree lowering that uses them for AllReduce."""

from __future__ import annotations

import numpy as np
import pytest

from collsynth.collective import Collective
from collsynth.errors import CollsynthError
from collsynth.export import check_msccl_xml, to_msccl_xml
from collsynth.runtime.check import compare, element_dtype
from collsynth.runtime.fake import run_in_process
from collsynth.runtime.plan import size_quantum
from collsynth.schedule.io import load_schedule, save_schedule
from collsynth.schedule.ir import OpKind, Schedule, ScheduleBuilder
from collsynth.sim import simulate
from collsynth.synth import synthesize
from collsynth.topology import load_topology
from collsynth.topology.model import Topology
from collsynth.verify import ancestry as ancestry_module
from collsynth.verify import check_schedule, verify
from conftest import REDUCE_ENGINES, RL, allreduce_rs_ag, reduce_into, rejects, ring4


def joined_allreduce(t: Topology, drop: int | None = None, join_route: bool = False) -> Schedule:
    """``allreduce_rs_ag`` with each chunk's broadcasts waiting on one join at its owner;
    ``drop``: the join of chunk 0 leaves out that many of its reductions."""
    b = ScheduleBuilder(t, Collective.make("allreduce", 4))
    for ch in range(4):
        into = reduce_into(b, t, ch, ch)
        deps = into[: len(into) - drop] if drop and ch == 0 else into
        route = [RL(t, ch, (ch + 1) % 4)] if join_route and ch == 0 else None
        j = b.add(ch, ch, ch, kind="join", deps=deps, route=route)
        o1, o2, o3 = (ch + 1) % 4, (ch + 2) % 4, (ch + 3) % 4
        x = b.add(ch, o1, ch, route=[RL(t, ch, o1)], deps=[j])
        b.add(o1, o2, ch, route=[RL(t, o1, o2)], deps=[x])
        b.add(ch, o3, ch, route=[RL(t, ch, o3)], deps=[j])
    return b.build()


def same_ops(a: Schedule, b: Schedule) -> None:
    for name in ("src", "dst", "chunk", "kind", "route_ptr", "route_links", "dep_ptr", "dep_ids"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name


def test_join_verifies_and_expands_to_the_plain_schedule(reduce_engine):
    t = ring4()
    s = joined_allreduce(t)
    assert s.has_joins and s.stats()["join_ops"] == 4
    rep = verify(s, reduce_engine=reduce_engine)
    assert rep.ok and rep.ops == 28
    plain = s.expand_joins()
    assert not plain.has_joins
    same_ops(plain, allreduce_rs_ag(t))
    assert plain.expand_joins() is plain
    assert "join chunk 0 at" in s.describe_op(3)


def test_join_of_joins_expands_transitively():
    t = ring4()
    b = ScheduleBuilder(t, Collective.make("broadcast", 4, root=0))
    a = b.add(0, 1, 0, route=[RL(t, 0, 1)])
    j1 = b.add(1, 1, 0, kind="join", deps=[a])
    j2 = b.add(1, 1, 0, kind=OpKind.JOIN, deps=[j1, a])
    b.add(1, 2, 0, route=[RL(t, 1, 2)], deps=[j2])
    b.add(0, 3, 0, route=[RL(t, 0, 3)], deps=[j1])
    s = b.build()
    assert verify(s).ok
    e = s.expand_joins()
    assert e.num_ops == 3 and e.deps(1).tolist() == [0] and e.deps(2).tolist() == [0]


def test_planted_join_missing_a_reduction_is_a_race(reduce_engine):
    rejects(joined_allreduce(ring4(), drop=1), "race", reduce_engine=reduce_engine)


def test_planted_join_with_a_route_is_refused():
    rejects(joined_allreduce(ring4(), join_route=True), "route", match="a join moves no data")


def test_planted_join_across_two_ranks_is_refused():
    t = ring4()
    b = ScheduleBuilder(t, Collective.make("allgather", 4))
    b.add(0, 1, 0, kind="join", route=[])
    rejects(b.build(), "structure", op=0, match="join names two ranks")


def test_planted_data_behind_a_join_that_does_not_deliver_it():
    t = ring4()
    b = ScheduleBuilder(t, Collective.make("allgather", 4))
    a = b.add(0, 1, 0, route=[RL(t, 0, 1)])
    j = b.add(2, 2, 0, kind="join", deps=[a])  # the data went to rank 1, not 2
    b.add(2, 3, 0, route=[RL(t, 2, 3)], deps=[j])
    rejects(b.build(), "data-not-held", op=2)


def test_copy_collective_waits_through_a_join():
    t = ring4()
    b = ScheduleBuilder(t, Collective.make("broadcast", 4, root=0))
    a = b.add(0, 1, 0, route=[RL(t, 0, 1)])
    j = b.add(1, 1, 0, kind="join", deps=[a])
    b.add(1, 2, 0, route=[RL(t, 1, 2)], deps=[j])
    b.add(0, 3, 0, route=[RL(t, 0, 3)])
    assert verify(b.build()).ok


@pytest.mark.parametrize("ext", ["json", "npz"])
def test_joins_survive_files(tmp_path, ext, reduce_engine):
    s = joined_allreduce(ring4())
    path = str(tmp_path / f"s.{ext}")
    save_schedule(s, path)
    back = load_schedule(path)
    same_ops(back, s)
    assert verify(back, reduce_engine=reduce_engine).ok


@pytest.mark.parametrize(
    "kw",
    [
        {"order": "auto"},
        {"order": "fcfs"},
        {"order": "fair"},
        {"op_cost_s": 2e-6},
        {"reduce_bw": 5e9},
        {"compiled": False},
    ],
)
def test_simulated_join_costs_nothing(kw):
    t = ring4()
    s, plain = joined_allreduce(t), allreduce_rs_ag(t)
    a, b = simulate(s, 1e6, **kw), simulate(plain, 1e6, **kw)
    assert a.time_s == b.time_s and a.hops == b.hops
    moving = s.kind != OpKind.JOIN
    assert np.array_equal(a.op_finish_s[moving], b.op_finish_s)
    assert np.array_equal(a.op_start_s[moving], b.op_start_s)
    assert np.array_equal(a.link_busy_s, b.link_busy_s)
    # a join finishes when the last reduction into its rank does
    for j in np.flatnonzero(~moving).tolist():
        assert a.op_finish_s[j] == a.op_finish_s[s.deps(j)].max()


@pytest.fixture(scope="module")
def tree_allreduce() -> Schedule:
    t = load_topology("dgx_a100:nodes=4")
    return synthesize("forestcoll", t, Collective.make("allreduce", t.num_ranks), size=1e6)


def test_tree_allreduce_uses_joins_where_they_save(tree_allreduce, reduce_engine):
    s = tree_allreduce
    assert s.has_joins
    assert verify(s, reduce_engine=reduce_engine).ok
    plain = s.expand_joins()
    assert verify(plain, reduce_engine=reduce_engine).ok
    assert len(s.dep_ids) < len(plain.dep_ids)
    # every join gathers at least two reductions for at least two broadcasts
    joins = np.flatnonzero(s.kind == OpKind.JOIN)
    fan_in = np.diff(s.dep_ptr)[joins]
    fan_out = np.bincount(s.dep_ids, minlength=s.num_ops)[joins]
    assert np.all(fan_in * fan_out > fan_in + fan_out)
    assert simulate(s, 1e6).time_s == simulate(plain, 1e6).time_s


def test_exporters_and_executor_take_joins(tree_allreduce):
    s = tree_allreduce
    t = s.topology
    assert check_msccl_xml(to_msccl_xml(s), t) == check_msccl_xml(to_msccl_xml(s.expand_joins()), t)
    small = joined_allreduce(ring4())
    res = run_in_process(small, 4 * size_quantum(small, 4), net_seed=1)
    coll = small.collective
    for r in range(4):
        got, want = res["outputs"][r], res["expected"][r]
        dt = element_dtype(coll, np.dtype(np.float32))
        assert compare(coll, r, res["chunk_bytes"], dt, got, want) is None


def test_unknown_kind_is_refused():
    with pytest.raises(CollsynthError, match="copy, reduce or join"):
        OpKind.parse("multicast")
    with pytest.raises(CollsynthError, match="copy, reduce or join"):
        OpKind.parse(3)


def _drop_dependency(s: Schedule, entry: int) -> Schedule:
    from dataclasses import replace

    owner = int(np.searchsorted(s.dep_ptr, entry, side="right") - 1)
    ptr = s.dep_ptr.copy()
    ptr[owner + 1 :] -= 1
    return replace(s, dep_ptr=ptr, dep_ids=np.delete(s.dep_ids, entry))


def test_both_executors_give_the_same_verdicts_on_broken_reductions(tree_allreduce):
    """Dependencies dropped at random from a tree AllReduce (with joins) and from a ring one:
    the compiled executor refuses exactly what the Python one does, with the same message."""
    rng = np.random.default_rng(7)
    ring = synthesize("ring", load_topology("dgx1"), Collective.make("allreduce", 8, 2))
    refused = 0
    for s in (tree_allreduce, ring):
        for entry in rng.choice(len(s.dep_ids), size=12, replace=False).tolist():
            broken = _drop_dependency(s, int(entry))
            verdicts = []
            for engine in REDUCE_ENGINES:
                rep = check_schedule(broken, reduce_engine=engine)
                verdicts.append((rep.ok, rep.error, rep.redundant_deliveries))
            assert verdicts[0] == verdicts[1]
            refused += not verdicts[0][0]
    assert refused >= 12  # most dropped dependencies break something


def test_visit_marks_wrap_around(tree_allreduce, monkeypatch):
    """The 32-bit visit marks are cleared and numbered again when they run out: with a tiny
    limit both executors still accept the tree AllReduce and refuse a broken one alike."""
    monkeypatch.setattr(ancestry_module, "STAMP_WRAP", 3)
    first_copy = int(np.flatnonzero(tree_allreduce.kind == OpKind.COPY)[0])
    broken = _drop_dependency(tree_allreduce, int(tree_allreduce.dep_ptr[first_copy]))
    for engine in REDUCE_ENGINES:
        assert verify(tree_allreduce, reduce_engine=engine).ok
        assert check_schedule(broken, reduce_engine=engine).error_check == "race"
