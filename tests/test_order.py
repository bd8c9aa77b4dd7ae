"""The planned order made executable (``synth/order.py``) and the realized model that serves
it: per-link orders from the planned timing, served per connection by the simulator, posted per
pair by the executor, and kept per pair by the exporters."""

from __future__ import annotations

import numpy as np
import pytest

from collsynth.bound import bound
from collsynth.collective import Collective
from collsynth.export.lowering import linear_order
from collsynth.runtime.plan import build_rank_plan
from collsynth.schedule.ir import ScheduleBuilder
from collsynth.sim import ORBIT_TIES, REALIZED, simulate
from collsynth.synth import synthesize
from collsynth.synth.order import (
    FROM_FIRST_READY,
    FROM_PLAN,
    _one_pair_per_link,
    link_orders_by,
    paced,
    pacing_links,
    unpaced,
    with_link_orders,
    without_chosen_order,
)
from collsynth.topology import load_topology
from collsynth.verify import verify

GB = 1e9


def _forest(spec: str, coll: str, size: float = GB):
    t = load_topology(spec)
    c = Collective.make(coll, t.num_ranks)
    return synthesize("forestcoll", t, c, size=size, link_order=False), size


@pytest.mark.parametrize("coll", ["allgather", "reducescatter", "allreduce"])
def test_planned_orders_make_direct_links_realize_the_plan(coll):
    # DGX-1's links are GPU to GPU: one connection per link, so the realized model with the
    # planned link orders is exactly the planned one; first ready first served is not
    base, size = _forest("dgx1", coll)
    assert _one_pair_per_link(base)  # synthesis takes the planned time for this realized one
    plan = simulate(base, size, order="plan").time_s
    ordered = with_link_orders(base, size)
    verify(ordered)
    assert simulate(ordered, size, order=REALIZED).time_s == pytest.approx(plan, rel=1e-9)
    b = bound(base.topology, base.collective, size).time_s
    assert b / simulate(ordered, size).time_s >= 0.99
    if coll == "reducescatter":  # the case the order matters most for
        assert simulate(base, size, order=REALIZED).time_s > 1.2 * plan


def test_synthesize_gives_ordered_schedules_and_records_the_size():
    t = load_topology("ring:n=4")
    s = synthesize("ring", t, Collective.make("allgather", 4), size=2e6)
    assert s.link_order
    assert s.meta["link_order"]["size_bytes"] == 2e6
    bare = synthesize("ring", t, Collective.make("allgather", 4), link_order=False)
    assert not bare.link_order


def test_orders_list_every_user_once_and_follow_one_key():
    base, size = _forest("ring:n=6", "allreduce", 1e6)
    s = with_link_orders(base, size)
    model = "plan" if s.meta["link_order"]["from"] == FROM_PLAN else "fair"
    # synthesis simulates a symmetric schedule with ties broken by orbit (its orders come
    # out symmetric): the key is that simulation's
    res = simulate(base, size, order=model, symmetric=ORBIT_TIES)
    users: dict[int, set[int]] = {}
    for op in range(s.num_ops):
        for link in s.route(op).tolist():
            users.setdefault(link, set()).add(op)
    assert set(s.link_order) == set(users)
    for link, seq in s.link_order.items():
        assert sorted(seq.tolist()) == sorted(users[link])
        keys = list(zip(res.op_start_s[seq], res.op_finish_s[seq]))
        assert keys == sorted(keys)


def test_order_key_ties_follow_op_ids():
    t = load_topology("line:n=2")
    b = ScheduleBuilder(t, Collective.make("broadcast", 2, 3))
    ops = [b.add(0, 1, c) for c in range(3)]
    s = b.build()
    lo = link_orders_by(s, np.zeros(3), np.zeros(3))
    assert [v.tolist() for v in lo.values()] == [ops]


def _two_pairs_on_one_link():
    """GPU0 sends chunks 0 and 1 to GPU2, GPU1 sends chunk 2 to GPU2, through one switch:
    two connections share the switch's link to GPU2."""
    t = load_topology("star:n=3,bw=1GB/s,alpha=0")
    coll = Collective.custom(3, [(0, [2]), (0, [2]), (1, [2])])
    b = ScheduleBuilder(t, coll)
    a0 = b.add(0, 2, 0)
    a1 = b.add(0, 2, 1)
    c = b.add(1, 2, 2)
    return b, (a0, a1, c)


def test_realized_model_serves_a_connection_in_its_link_order():
    b, (a0, a1, c) = _two_pairs_on_one_link()
    s = b.build()
    down = int(s.route(c)[-1])  # switch -> GPU2, shared by both pairs
    up = int(s.route(a0)[0])
    b.set_link_order(up, [a1, a0])
    b.set_link_order(down, [c, a1, a0])
    s = b.build()
    verify(s)
    size = 3e6  # 1 MB per chunk: 1 ms alone on a link
    r = simulate(s, size)
    # pair (0, 2) carries a1 then a0; pair (1, 2) shares the downlink with it: a1 and c share
    # it for 2 ms (both done at 2 ms), then a0 alone
    assert r.op_finish_s[a1] == pytest.approx(2e-3)
    assert r.op_finish_s[c] == pytest.approx(2e-3)
    assert r.op_finish_s[a0] == pytest.approx(3e-3)
    # without orders the pair goes first ready (op id order), the rest as before
    bare = simulate(_two_pairs_on_one_link()[0].build(), size)
    assert bare.op_finish_s[a0] == pytest.approx(2e-3)
    assert bare.op_finish_s[a1] == pytest.approx(3e-3)


def test_realized_model_waits_for_the_turn_of_an_unready_transfer():
    # the pair's first transfer in the order becomes ready late: the second waits for it
    t = load_topology("line:n=3,bw=1GB/s,alpha=0")
    coll = Collective.custom(3, [(0, [2]), (1, [2])])
    b = ScheduleBuilder(t, coll)
    relay = b.add(0, 1, 0)
    late = b.add(1, 2, 0, deps=[relay])
    early = b.add(1, 2, 1)
    link = int(b.build().route(late)[0])
    b.set_link_order(link, [late, early])
    s = b.build()
    verify(s)
    r = simulate(s, 2e6)
    assert r.op_finish_s[late] == pytest.approx(2e-3)
    assert r.op_finish_s[early] == pytest.approx(3e-3)
    assert simulate(s, 2e6, order="fcfs").op_finish_s[early] == pytest.approx(1e-3)


def test_executor_posts_each_pair_in_order_and_pairs_independently():
    b, (a0, a1, c) = _two_pairs_on_one_link()
    s = b.build()
    up = int(s.route(a0)[0])
    b.set_link_order(up, [a1, a0])
    b.set_link_order(int(s.route(c)[-1]), [c, a1, a0])
    s = b.build()
    p = build_rank_plan(s, 0, 1024, 4, 1 << 30)
    local = {int(o): j for j, o in enumerate(p.ops)}
    assert local[a1] in p.post_pre[local[a0]]
    p1 = build_rank_plan(s, 1, 1024, 4, 1 << 30)
    j = {int(o): k for k, o in enumerate(p1.ops)}[c]
    assert p1.post_pre[j] == []  # another sender's place on the shared link holds nothing


@pytest.mark.parametrize("spec,coll", [("dgx1", "reducescatter"), ("ring:n=6", "allgather")])
def test_msccl_order_keeps_every_pair_order(spec, coll):
    base, size = _forest(spec, coll, 1e6)
    s = with_link_orders(base, size)
    pos = np.empty(s.num_ops, dtype=np.int64)
    pos[linear_order(s)] = np.arange(s.num_ops)
    a, b = s.pair_order_edges()
    assert len(a)
    assert np.all(pos[a] < pos[b])
    assert np.all(s.src[a] == s.src[b]) and np.all(s.dst[a] == s.dst[b])


def test_realized_model_compiled_and_plain_agree_with_orders():
    base, size = _forest("ring:n=6", "reducescatter", 1e6)
    s = with_link_orders(base, size)
    a = simulate(s, size, compiled=True)
    b = simulate(s, size, compiled=False)
    assert np.array_equal(a.op_finish_s, b.op_finish_s)
    assert np.array_equal(a.hop_start_s, b.hop_start_s)


def test_first_ready_wins_where_sharing_upsets_the_plan_and_is_reproduced_exactly():
    # two DGX-2 chassis: NVSwitch ports are shared by many pairs; the plan's order makes pairs
    # wait for transfers that come later under sharing, first ready does not
    base, size = _forest("dgx2:chassis=2", "allgather")
    assert not _one_pair_per_link(base)
    s = with_link_orders(base, size)
    info = s.meta["link_order"]
    assert info["from"] == FROM_FIRST_READY
    assert info["realized_time_s"]["first_ready"] < info["realized_time_s"]["planned"]
    written = simulate(s, size)  # the first-ready order, written down, gives its time exactly
    assert written.time_s == pytest.approx(simulate(base, size).time_s, rel=1e-12)
    assert bound(base.topology, base.collective, size).time_s / written.time_s >= 0.99
    assert not without_chosen_order(s).link_order


def test_compare_rows_say_their_model_and_give_the_planned_time(capsys):
    from collsynth.cli import main

    rc = main(["compare", "-t", "ring:n=4", "-c", "reducescatter", "--sizes", "1MB",
               "--algos", "ring,forestcoll", "--planned", "--json", "--no-timing"])  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 0
    import json

    data = json.loads(out)
    assert data["model"] == REALIZED
    for row in data["rows"]:
        assert row["model"] == REALIZED and row["planned_time_s"] > 0
        assert row["time_s"] >= row["bound_time_s"] * (1 - 1e-9)


def test_reduce_then_broadcast_holds_each_ranks_copies_for_its_reductions():
    """The phased AllReduce: one join per rank that waits for every reduction the rank sends
    or receives, and every copy the rank sends waits for the join; it verifies and keeps the
    algorithm's steps in order (joins between the phases)."""
    from collsynth.schedule.ir import OpKind
    from collsynth.synth.order import reduce_then_broadcast

    base, _ = _forest("ring:n=6", "allreduce", size=1e6)
    phased = reduce_then_broadcast(base)
    assert phased is not None
    verify(phased)
    n, r = base.num_ops, base.topology.num_ranks
    assert phased.num_ops == n + r
    joins = np.arange(n, n + r)
    assert np.all(phased.kind[joins] == OpKind.JOIN)
    red = np.flatnonzero(base.kind == OpKind.REDUCE)
    for j in joins.tolist():
        rank = int(phased.src[j])
        want = red[(base.src[red] == rank) | (base.dst[red] == rank)]
        assert sorted(phased.deps(j).tolist()) == sorted(want.tolist())
    for o in np.flatnonzero(base.kind == OpKind.COPY).tolist():
        join = n + int(base.src[o])
        assert join in phased.deps(o).tolist()
        assert set(base.deps(o).tolist()) <= set(phased.deps(o).tolist())
    assert phased.step is not None and base.step is not None
    assert phased.step[joins].min() > base.step[red].max()


def test_reduce_then_broadcast_applies_only_where_it_is_safe():
    from collsynth.synth.order import reduce_then_broadcast

    ag, _ = _forest("ring:n=4", "allgather", size=1e6)
    assert reduce_then_broadcast(ag) is None  # not an AllReduce
    ar, _ = _forest("ring:n=4", "allreduce", size=1e6)
    timed = ar.__class__(**{**ar.__dict__, "start": np.zeros(ar.num_ops)})
    assert reduce_then_broadcast(timed) is None  # planned start times would move
    # a reduction that waits for a copy of its own rank: the barrier would deadlock
    t = load_topology("line:n=2")
    b = ScheduleBuilder(t, Collective.make("allreduce", 2, 1))
    c0 = b.add(0, 1, 0, kind="copy")
    b.add(1, 0, 1, kind="reduce", deps=[c0])
    assert reduce_then_broadcast(b.build()) is None


def test_reduce_then_broadcast_by_groups_pipelines_the_phases():
    """Groups of chunks: one join per rank and group, a rank's copies of a group wait for its
    join of that group; chained, its reductions of the next group wait for it too."""
    from collsynth.schedule.ir import OpKind
    from collsynth.synth.order import reduce_then_broadcast

    base, _ = _forest("ring:n=6", "allreduce", size=1e6)
    n, r = base.num_ops, base.topology.num_ranks
    groups = np.arange(base.collective.num_chunks) % 2
    for chain in (False, True):
        s = reduce_then_broadcast(base, groups, chain=chain)
        assert s is not None and s.step is None
        verify(s)
        joins = np.arange(n, s.num_ops)
        assert len(joins) == 2 * r and np.all(s.kind[joins] == OpKind.JOIN)
        join_of = {(int(s.src[j]), int(groups[base.chunk[s.deps(j)[0]]])): j
                   for j in joins.tolist()}  # fmt: skip
        for j in joins.tolist():  # every reduction a join waits for is of its one group
            assert len({int(groups[base.chunk[d]]) for d in s.deps(j).tolist()}) == 1
        for o in range(n):
            g = int(groups[base.chunk[o]])
            extra = set(s.deps(o).tolist()) - set(base.deps(o).tolist())
            if base.kind[o] == OpKind.COPY:
                assert extra == {join_of[(int(base.src[o]), g)]}
            elif base.kind[o] == OpKind.REDUCE and chain and g == 1:
                assert extra == {join_of[(int(base.src[o]), 0)]}
            else:
                assert not extra


def test_overlapping_phases_are_tried_pipelined_by_whole_rounds():
    """A schedule whose algorithm planned its phases to overlap (``meta[OVERLAP_PHASES]``) is
    also tried pipelined by 2, 4 and 8 groups of whole pipeline rounds, where they divide the
    rounds; the fastest form in the realized model is kept and every form's time recorded."""
    from dataclasses import replace

    from collsynth.synth.order import OVERLAP_PHASES, _chunk_groups, with_link_orders

    t = load_topology("ring:n=6")
    c = Collective.make("allreduce", t.num_ranks)
    base = synthesize("forestcoll", t, c, size=GB, k=1, pipeline=4, link_order=False)
    flagged = replace(base, meta=dict(base.meta, **{OVERLAP_PHASES: {"rounds": 4}}))
    groups = _chunk_groups(flagged, 2)
    assert groups is not None and np.array_equal(groups, (np.arange(len(groups)) % 4) // 2)
    assert _chunk_groups(flagged, 8) is None  # 8 groups would cut the 4 rounds
    s = with_link_orders(flagged, GB)
    verify(s)
    times = s.meta["phases"]["realized_time_s"]
    assert len(times) == 4  # as planned, phased, 2 and 4 groups
    assert s.meta["link_order"]["time_s"] == pytest.approx(min(times.values()), rel=1e-12)
    assert simulate(s, GB).time_s == pytest.approx(min(times.values()), rel=1e-9)
    assert "phases" in with_link_orders(base, GB).meta
    assert len(with_link_orders(base, GB).meta["phases"]["realized_time_s"]) == 2


def test_allreduce_keeps_the_phased_form_where_it_realizes_faster():
    """ForestColl's AllReduce on two MI250 chassis (one tree per root, 8 pieces): the phases
    interleaved realize 1.39x the bound, reduce-then-broadcast 1.35x (with the interleaved
    form's senders paced, 1.36x against 1.35x); synthesis keeps the faster, records both, and the schedule's
    realized time is the recorded one."""
    t = load_topology("mi250:chassis=2")
    c = Collective.make("allreduce", t.num_ranks)
    s = synthesize("forestcoll", t, c, size=GB, k=1, pipeline=8)
    verify(s)
    phases = s.meta["phases"]
    times = phases["realized_time_s"]
    assert phases["form"] == "reduce, then broadcast, per rank"
    assert times["reduce, then broadcast, per rank"] < times["as planned"]
    assert simulate(s, GB).time_s == pytest.approx(min(times.values()), rel=1e-9)
    assert (
        s.num_ops
        == synthesize("forestcoll", t, c, size=GB, k=1, pipeline=8, link_order=False).num_ops
        + t.num_ranks
    )


def _paced_forest():
    """ForestColl's AllGather on four DGX A100 at 1 GB with one chunk per tree (as it is at
    1,024 GPUs, where the operation budget allows no pipelining): every GPU sends a transfer
    or two to each of many receivers over its one NIC."""
    t = load_topology("dgx_a100:nodes=4")
    c = Collective.make("allgather", t.num_ranks)
    return synthesize("forestcoll", t, c, size=GB, pipeline=1)


def test_pacing_its_senders_realizes_trees_without_pipelining_faster():
    s = _paced_forest()
    verify(s)
    info = s.meta["link_order"]
    pace = info["pacing"]
    assert info["from"] == FROM_PLAN and pace["window"] >= 1
    # faster than the orders alone, and the time recorded is the schedule's realized time
    assert info["time_s"] < 0.99 * min(info["realized_time_s"].values())
    assert simulate(s, GB).time_s == pytest.approx(info["time_s"], rel=1e-12)
    assert pace["realized_time_s"][str(pace["window"])] == info["time_s"]
    # paced links: one sender each, two or more receivers, slower than the fastest such link
    for link in pace["links"]:
        ops = s.link_order[link]
        assert len(set(s.src[ops].tolist())) == 1 and len(set(s.dst[ops].tolist())) >= 2
    bw = {s.topology.links[link].bw for link in pace["links"]}
    assert bw == {25e9}  # the GPUs' NIC links, not their NVSwitch links


def test_pacing_adds_only_dependencies_between_a_senders_own_transfers_in_link_order():
    s = _paced_forest()
    base = unpaced(s)
    assert "pacing" not in base.meta["link_order"] and base.link_order is s.link_order
    w = s.meta["link_order"]["pacing"]["window"]
    added = 0
    for op in range(s.num_ops):
        mine, theirs = s.deps(op).tolist(), base.deps(op).tolist()
        assert mine[: len(theirs)] == theirs  # the algorithm's own first, unchanged
        for d in mine[len(theirs) :]:
            added += 1
            assert s.src[d] == s.src[op]
            assert any(
                d in seq and op in seq and seq.tolist().index(op) - seq.tolist().index(d) == w
                for seq in s.link_order.values()
            )
    assert added > 0
    # paced again the same way: the same schedule
    again = paced(base, s.meta["link_order"]["pacing"]["links"], w)
    assert np.array_equal(again.dep_ptr, s.dep_ptr) and np.array_equal(again.dep_ids, s.dep_ids)
    # the plan is the algorithm's own: pacing and orders off, the planned time as before
    plain = synthesize("forestcoll", s.topology, s.collective, size=GB, pipeline=1,
                       link_order=False)  # fmt: skip
    assert simulate(without_chosen_order(s), GB, order="plan").time_s == pytest.approx(
        simulate(plain, GB, order="plan").time_s, rel=1e-12
    )
    assert np.array_equal(without_chosen_order(s).dep_ids, plain.dep_ids)


def test_pacing_needs_shared_sender_links_and_refuses_an_existing_dependency():
    # trees pipelined at 1 GB: hundreds of transfers per receiver, nothing to pace
    base, size = _forest("dgx_a100:nodes=2", "allgather")
    s = with_link_orders(base, size)
    assert pacing_links(s, s.link_order) == [] and "pacing" not in s.meta["link_order"]
    assert paced(base, [0], 2) is None  # no link orders: nothing to pace by
    # planned start times (pacing would move them): not paced; in-network groups likewise
    # (tests/test_groups.py: NVLS schedules verify)
    from dataclasses import replace as _replace

    p = _paced_forest()
    assert pacing_links(p, p.link_order)
    timed = _replace(p, start=np.zeros(p.num_ops))
    assert pacing_links(timed, timed.link_order) == []
    # a pacing pair that is a dependency already: refused (it could not be taken off again)
    p = _paced_forest()
    base = unpaced(p)
    link = p.meta["link_order"]["pacing"]["links"][0]
    a, b = (int(x) for x in base.link_order[link][:2])
    deps = [base.deps(o).tolist() + ([a] if o == b else []) for o in range(base.num_ops)]
    ptr = np.zeros(base.num_ops + 1, dtype=np.int64)
    ptr[1:] = np.cumsum([len(d) for d in deps])
    from dataclasses import replace

    with_pair = replace(base, dep_ptr=ptr, dep_ids=np.array(sum(deps, []), dtype=np.int64))
    assert paced(with_pair, [link], 1) is None


def test_step_order_still_refuses_a_same_step_dependency_that_is_not_pacing():
    from dataclasses import replace

    from collsynth.errors import VerificationError

    s = _paced_forest()
    assert s.step is not None
    step = s.step
    # two transfers of different senders at one step: no pacing shape, so step-order fails
    a = int(np.flatnonzero(step == step.min())[0])
    b = next(int(o) for o in np.flatnonzero(step == step[a]) if s.src[o] != s.src[a])
    deps = [s.deps(o).tolist() + ([a] if o == b else []) for o in range(s.num_ops)]
    ptr = np.zeros(s.num_ops + 1, dtype=np.int64)
    ptr[1:] = np.cumsum([len(d) for d in deps])
    bad = replace(s, dep_ptr=ptr, dep_ids=np.array(sum(deps, []), dtype=np.int64))
    with pytest.raises(VerificationError, match="step-order"):
        verify(bad)


def test_a_paced_schedule_runs_and_exports():
    from collsynth.export.check import check_msccl_xml
    from collsynth.export.msccl import to_msccl_xml
    from collsynth.export.mscclpp import to_mscclpp_plan
    from collsynth.export.mscclpp_check import check_mscclpp_plan
    from collsynth.runtime.fake import run_in_process
    from collsynth.runtime.plan import size_quantum

    s = _paced_forest()
    assert len(unpaced(s).dep_ids) < len(s.dep_ids)
    res = run_in_process(s, size_quantum(s, 4) * 2, net_seed=5)
    assert all(np.array_equal(o, e) for o, e in zip(res["outputs"], res["expected"]))
    check_msccl_xml(to_msccl_xml(s), s.topology)
    check_mscclpp_plan(to_mscclpp_plan(s))


def _alternatives_algorithm(name: str, first: str, second: str):
    """Register ``name``: an algorithm giving ``first``'s then ``second``'s schedule as
    near-tied alternatives (taken off again by the caller)."""
    from collsynth.synth import Alternatives, register

    @register(name, summary="test: two alternatives")
    def algo(topology, collective):
        return Alternatives(
            tuple(synthesize(a, topology, collective, link_order=False) for a in (first, second))
        )

    return algo


@pytest.mark.alternatives
def test_synthesis_keeps_the_alternative_that_realizes_fastest():
    from collsynth.synth import ALGORITHMS, synthesize_alternatives
    from collsynth.synth.order import fastest, realized_time

    t = load_topology("dgx_a100")
    c = Collective.make("allgather", t.num_ranks)
    _alternatives_algorithm("test-alts", "direct", "ring")
    try:
        made = synthesize_alternatives("test-alts", t, c)
        assert [m.meta["algorithm"] for m in made] == ["test-alts", "test-alts"]
        assert synthesize("test-alts", t, c, link_order=False).num_ops == made[0].num_ops
        size = 64e6
        times = [simulate(with_link_orders(m, size), size, order=REALIZED).time_s for m in made]
        assert times[1] < times[0]  # the second (the ring) is the faster here
        kept = synthesize("test-alts", t, c, size=size)
        info = kept.meta["alternatives"]
        assert info["given"] == 2 and info["kept"] == 1
        assert info["realized_time_s"] == pytest.approx(times, rel=1e-12)
        assert kept.num_ops == made[1].num_ops and kept.link_order
        assert realized_time(kept, size) == pytest.approx(times[1], rel=1e-12)
        verify(kept)
        # the same schedule twice: a tie keeps the first, and one schedule is only ordered
        tie = fastest((made[0], made[0]), size)
        assert tie.meta["alternatives"]["kept"] == 0
        assert "alternatives" not in fastest((made[1],), size).meta
    finally:
        ALGORITHMS.pop("test-alts", None)


@pytest.mark.alternatives
def test_forestcoll_gives_its_near_ties_and_the_fastest_realized_is_kept():
    from collsynth.synth import synthesize_alternatives
    from collsynth.synth.forestcoll import algo as fc

    t = load_topology("dgx1")
    c = Collective.make("allreduce", t.num_ranks)
    size = 8e6
    made = synthesize_alternatives("forestcoll", t, c, size=size)
    assert 2 <= len(made) <= fc.TIE_MAX
    est = [m.meta["forestcoll"]["estimated_time_s"] for m in made]
    assert est == sorted(est) and est[-1] <= est[0] * (1 + fc.TIE)
    choices = {(m.meta["forestcoll"]["k"], m.meta["forestcoll"]["pipeline"]) for m in made}
    assert len(choices) == len(made)  # distinct choices, not copies
    kept = synthesize("forestcoll", t, c, size=size)
    info = kept.meta["alternatives"]
    assert info["given"] == len(made) and len(info["realized_time_s"]) == len(made)
    assert info["realized_time_s"][info["kept"]] == min(info["realized_time_s"])
    assert simulate(kept, size, order=REALIZED).time_s == pytest.approx(
        min(info["realized_time_s"]), rel=1e-9
    )
    verify(kept)
    # without a size (the paper's schedule) there is one choice, and no alternatives
    assert len(synthesize_alternatives("forestcoll", t, c)) == 1
