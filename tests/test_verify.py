"""Tests of the independent schedule verifier (collsynth.verify), on hand-built schedules.

Hand-built schedules that are correct must verify; schedules broken in one specific way must
be rejected by the rule that names that way (``VerificationError.check``), with a message
naming the offending operation. Tests whose schedules execute reductions run once per
reduction engine (``reduce_engine``).
"""

from __future__ import annotations

import json
import re

import pytest

from collsynth.collective import Collective
from collsynth.errors import CollsynthError
from collsynth.schedule.io import schedule_from_dict, schedule_to_dict
from collsynth.schedule.ir import ScheduleBuilder
from collsynth.synth import synthesize
from collsynth.topology import load_topology
from collsynth.verify import check_schedule, verify
from collsynth.verify import reducing as reducing_module
from collsynth.verify import routes as routes_module
from conftest import (
    GB,
    REDUCE_ENGINES,
    RL,
    US,
    L,
    allreduce_rs_ag,
    builder,
    full_featured_schedule,
    racy_read,
    reduce_into,
    rejects,
    ring4,
    ring_allgather,
    round_trip_cases,
    subset,
    switch4,
    two_planes,
    wan,
    zoo,
)


# ------------------------------------------------------------------------------ accepted
def test_ring_allgather_by_steps():
    s = ring_allgather(ring4())
    assert s.num_ops == 4 * 3
    rep = verify(s)
    assert rep.ok and rep.ops == 12 and rep.link_hops == 12
    assert "step-order" in rep.checks and "postcondition" in rep.checks
    assert rep.redundant_deliveries == 0 and rep.planned_finish_s is None
    assert s.stats()["steps"] == 3


def test_ring_allgather_on_larger_ring_with_deps_only():
    rep = verify(ring_allgather(zoo("ring:n=7"), with_steps=False))
    assert rep.ok and rep.ops == 7 * 6 and "step-order" not in rep.checks


def test_switch_routed_allgather():
    t = switch4()
    b = builder(t, "allgather")
    for i in range(4):
        for j in range(4):
            if i != j:
                b.add(i, j, i, route=[L(t, f"g{i}", "sw"), L(t, "sw", f"g{j}")])
    rep = verify(b.build())
    assert rep.ok and rep.link_hops == 24


def test_router_routed_transfer():
    t = wan()
    b = ScheduleBuilder(t, Collective.custom(4, [(0, [3]), (1, [0])]))
    b.add(0, 3, 0, route=[L(t, "g0", "r0"), L(t, "r0", "r1"), L(t, "r1", "g3")])
    b.add(1, 0, 1)  # default route: g1 -> r0 -> g0
    s = b.build()
    assert s.route(1).tolist() == [L(t, "g1", "r0"), L(t, "r0", "g0")]
    assert verify(s).ok


def test_relay_through_gpu():
    t = ring4()
    b = ScheduleBuilder(t, Collective.custom(4, [(0, [2])]))
    a = b.add(0, 1, 0, route=[RL(t, 0, 1)])
    b.add(1, 2, 0, route=[RL(t, 1, 2)], deps=[a])
    rep = verify(b.build())
    assert rep.ok and rep.ops == 2


def test_tree_reducescatter(reduce_engine):
    t = ring4()
    b = builder(t, "reducescatter")
    for ch in range(4):
        reduce_into(b, t, ch, ch)
    s = b.build()
    assert s.stats()["reduce_ops"] == 12
    rep = verify(s, reduce_engine=reduce_engine)
    assert rep.ok and "duplicate-contribution" in rep.checks and "race" in rep.checks


def test_allreduce_reduce_scatter_then_allgather(reduce_engine):
    rep = verify(allreduce_rs_ag(ring4()), reduce_engine=reduce_engine)
    assert rep.ok and rep.ops == 24


def test_broadcast_with_two_chunks():
    t = ring4()
    b = builder(t, "broadcast", cpr=2, root=1)
    for ch in range(2):
        x = b.add(1, 2, ch, route=[RL(t, 1, 2)])
        b.add(2, 3, ch, route=[RL(t, 2, 3)], deps=[x])
        b.add(1, 0, ch, route=[RL(t, 1, 0)])
    assert verify(b.build()).ok


def test_reduce_to_root(reduce_engine):
    t = ring4()
    b = builder(t, "reduce", root=2)
    reduce_into(b, t, 0, 2)
    assert verify(b.build(), reduce_engine=reduce_engine).ok


def test_redundant_delivery_is_accepted_and_counted():
    t = ring4()
    b = ScheduleBuilder(t, Collective.custom(4, [(0, [1])]))
    b.add(0, 1, 0, route=[RL(t, 0, 1)])
    b.add(0, 1, 0, route=[RL(t, 0, 1)])
    b.add(1, 0, 0, route=[RL(t, 1, 0)], deps=[0])  # back to the source, which had it
    rep = verify(b.build())
    assert rep.ok and rep.redundant_deliveries == 2


def test_timed_back_to_back_respects_capacity():
    t = switch4(bw=10 * GB, alpha=1 * US)
    size = 1e6  # custom: one chunk = the whole size
    natural = size / (10 * GB)
    b = ScheduleBuilder(t, Collective.custom(4, [(0, [1, 2])]))
    b.size = size
    up = L(t, "g0", "sw")
    b.add(0, 1, 0, route=[up, L(t, "sw", "g1")], start=0.0)
    b.add(0, 2, 0, route=[up, L(t, "sw", "g2")], start=natural)
    s = b.build()
    assert s.timed
    rep = verify(s)
    assert rep.ok and "capacity" in rep.checks and "causality" in rep.checks
    assert rep.planned_finish_s == pytest.approx(2 * natural + 2 * US)


def test_timed_half_rate_sharing_a_link():
    t = switch4(bw=10 * GB, alpha=1 * US)
    size = 1e6
    natural = size / (10 * GB)
    b = ScheduleBuilder(t, Collective.custom(4, [(0, [1, 2])]))
    b.size = size
    up = L(t, "g0", "sw")
    b.add(0, 1, 0, route=[up, L(t, "sw", "g1")], start=0.0, duration=2 * natural)
    b.add(0, 2, 0, route=[up, L(t, "sw", "g2")], start=0.0, duration=2 * natural)
    rep = verify(b.build())
    assert rep.ok and rep.planned_finish_s == pytest.approx(2 * natural + 2 * US)


def test_timed_relay_waits_for_delivery():
    t = ring4()  # 50 GB/s, 0.7 us per link
    size = 5e6
    link = t.links[RL(t, 0, 1)]
    done = link.alpha + size / link.bw
    b = ScheduleBuilder(t, Collective.custom(4, [(0, [2])]))
    b.size = size
    a = b.add(0, 1, 0, route=[RL(t, 0, 1)], start=0.0)
    b.add(1, 2, 0, route=[RL(t, 1, 2)], deps=[a], start=done)
    assert verify(b.build()).planned_finish_s == pytest.approx(2 * done)


def test_byte_range_halves_on_two_paths_through_relays():
    t = ring4()
    b = ScheduleBuilder(t, Collective.custom(4, [(0, [2])]))
    x = b.add(0, 1, 0, route=[RL(t, 0, 1)], part=(0, 1, 2))
    b.add(1, 2, 0, route=[RL(t, 1, 2)], part=(0, 1, 2), deps=[x])
    y = b.add(0, 3, 0, route=[RL(t, 0, 3)], part=(1, 2, 2))
    b.add(3, 2, 0, route=[RL(t, 3, 2)], part=(1, 2, 2), deps=[y])
    s = b.build()
    assert s.has_parts and s.op_fraction().tolist() == [0.5] * 4
    assert verify(s).ok


def test_byte_range_halves_on_two_switch_planes():
    t = two_planes()
    b = builder(t, "allgather")
    for i in range(3):
        for j in range(3):
            if i != j:
                b.add(i, j, i, route=[L(t, f"g{i}", "sw0"), L(t, "sw0", f"g{j}")], part=(0, 1, 2))
                b.add(i, j, i, route=[L(t, f"g{i}", "sw1"), L(t, "sw1", f"g{j}")], part=(1, 2, 2))
    assert verify(b.build()).ok


def test_byte_ranges_with_different_denominators():
    t = ring4()
    b = ScheduleBuilder(t, Collective.custom(4, [(0, [1])]))
    b.add(0, 1, 0, route=[RL(t, 0, 1)], part=(0, 1, 3))
    b.add(0, 1, 0, route=[RL(t, 0, 1)], part=(1, 2, 2))
    b.add(0, 1, 0, route=[RL(t, 0, 1)], part=(2, 4, 12))  # overlaps the first third
    rejects(b.build(), "missing-delivery", op=None, match=r"segment 2 of 4")  # 1/3..1/2 missing
    b.add(0, 1, 0, route=[RL(t, 0, 1)], part=(4, 6, 12))
    assert verify(b.build()).ok


def test_byte_range_relay_of_a_part_delivered_as_a_whole():
    t = ring4()
    b = ScheduleBuilder(t, Collective.custom(4, [(0, [2])]))
    x = b.add(0, 1, 0, route=[RL(t, 0, 1)])  # whole chunk to the relay
    b.add(1, 2, 0, route=[RL(t, 1, 2)], part=(0, 1, 2), deps=[x])
    b.add(1, 2, 0, route=[RL(t, 1, 2)], part=(1, 2, 2), deps=[x])
    assert verify(b.build()).ok


def test_reduction_by_byte_ranges(reduce_engine):
    t = ring4()
    b = builder(t, "reduce", root=0)
    for part in ((0, 1, 2), (1, 2, 2)):
        a = b.add(2, 1, 0, route=[RL(t, 2, 1)], kind="reduce", part=part)
        b.add(1, 0, 0, route=[RL(t, 1, 0)], kind="reduce", deps=[a], part=part)
        b.add(3, 0, 0, route=[RL(t, 3, 0)], kind="reduce", part=part)
    assert verify(b.build(), reduce_engine=reduce_engine).ok


def test_valid_link_order():
    t = switch4()
    b = ScheduleBuilder(t, Collective.custom(4, [(0, [1, 2, 3])]))
    up = L(t, "g0", "sw")
    for j in (1, 2, 3):
        b.add(0, j, 0, route=[up, L(t, "sw", f"g{j}")])
    b.set_link_order(up, [2, 0, 1])
    b.set_link_order(L(t, "sw", "g1"), [0])
    rep = verify(b.build())
    assert rep.ok and "link-order" in rep.checks


def test_empty_link_order_list_for_unused_link():
    t = switch4()
    b = ScheduleBuilder(t, Collective.custom(4, [(0, [1])]))
    b.add(0, 1, 0)
    b.set_link_order(L(t, "g3", "sw"), [])
    assert verify(b.build()).ok


def test_full_featured_schedule_verifies(reduce_engine):
    s = full_featured_schedule()
    rep = verify(s, reduce_engine=reduce_engine)
    assert rep.ok
    assert {"link-order", "step-order", "causality", "capacity"} <= set(rep.checks)


# ------------------------------------------------------------------------------ rejected
def test_reject_send_before_data_arrives_without_dependency():
    t = ring4()
    b = ScheduleBuilder(t, Collective.custom(4, [(0, [2])]))
    b.add(0, 1, 0, route=[RL(t, 0, 1)])
    b.add(1, 2, 0, route=[RL(t, 1, 2)])  # no dependency on op 0
    rejects(b.build(), "data-not-held", op=1, match="only through op 0")


def test_reject_send_of_data_never_received():
    t = ring4()
    b = builder(t, "allgather")
    b.add(1, 2, 0, route=[RL(t, 1, 2)])  # rank 1 never gets chunk 0
    rejects(b.build(), "data-not-held", op=0, match="never receives")


def test_reject_relay_depending_on_the_wrong_op():
    t = ring4()
    b = ScheduleBuilder(t, Collective.custom(4, [(0, [2]), (3, [0])]))
    b.add(3, 0, 1, route=[RL(t, 3, 0)])
    b.add(0, 1, 0, route=[RL(t, 0, 1)])
    b.add(1, 2, 0, route=[RL(t, 1, 2)], deps=[0])  # depends on an unrelated delivery
    rejects(b.build(), "data-not-held", op=2)


def test_reject_part_relay_sending_more_than_it_received():
    t = ring4()
    b = ScheduleBuilder(t, Collective.custom(4, [(0, [2])]))
    x = b.add(0, 1, 0, route=[RL(t, 0, 1)], part=(0, 1, 2))  # only the first half
    b.add(1, 2, 0, route=[RL(t, 1, 2)], deps=[x])  # forwards the whole chunk
    rejects(b.build(), "data-not-held", op=1, match="never receives")


def test_reject_missing_half():
    t = ring4()
    b = ScheduleBuilder(t, Collective.custom(4, [(0, [1])]))
    b.add(0, 1, 0, route=[RL(t, 0, 1)], part=(0, 1, 2))
    rejects(b.build(), "missing-delivery", op=None, match=r"segment 1 of 2")


@pytest.mark.parametrize(
    "make_route, match",
    [
        (lambda t: [999], "link 999 does not exist"),
        (lambda t: [-1], "link -1 does not exist"),
        (lambda t: [RL(t, 1, 2)], "not at the sender"),
        (lambda t: [RL(t, 0, 3)], "not at the receiver"),
        (lambda t: [], "empty route"),
    ],
)
def test_reject_bad_routes_on_ring(make_route, match):
    t = ring4()
    b = ScheduleBuilder(t, Collective.custom(4, [(0, [1]), (0, [3])]))
    b.add(0, 3, 1, route=[RL(t, 0, 3)])
    b.add(0, 1, 0, route=make_route(t))
    rejects(b.build(), "route", op=1, match=match)


def test_reject_route_through_compute_node():
    t = ring4()
    b = ScheduleBuilder(t, Collective.custom(4, [(0, [2])]))
    b.add(0, 2, 0, route=[RL(t, 0, 1), RL(t, 1, 2)])
    rejects(b.build(), "route", op=0, match="passes through compute node 'gpu1'")


def test_reject_non_contiguous_route():
    t = wan()
    b = ScheduleBuilder(t, Collective.custom(4, [(0, [3])]))
    b.add(0, 3, 0, route=[L(t, "g0", "r0"), L(t, "r1", "g3")])  # skips r0 -> r1
    rejects(b.build(), "route", op=0, match="not followed by a link leaving its end node")


def test_reject_route_visiting_a_node_twice():
    t = wan()
    b = ScheduleBuilder(t, Collective.custom(4, [(0, [1])]))
    b.add(0, 1, 0, route=[L(t, "g0", "r0"), L(t, "r0", "r1"), L(t, "r1", "r0"), L(t, "r0", "g1")])
    rejects(b.build(), "route", op=0, match="visits a node twice")


def test_reject_switch_route_to_wrong_receiver():
    t = switch4()
    b = ScheduleBuilder(t, Collective.custom(4, [(0, [1])]))
    b.add(0, 1, 0, route=[L(t, "g0", "sw"), L(t, "sw", "g2")])
    rejects(b.build(), "route", op=0, match="not at the receiver")


def test_default_route_fails_when_there_is_none():
    t = ring4()
    b = ScheduleBuilder(t, Collective.custom(4, [(0, [2])]))
    with pytest.raises(CollsynthError, match="no route from gpu0 to gpu2"):
        b.add(0, 2, 0)


def test_reject_capacity_overuse():
    t = switch4(bw=10 * GB, alpha=1 * US)
    size = 1e6
    natural = size / (10 * GB)
    b = ScheduleBuilder(t, Collective.custom(4, [(0, [1, 2])]))
    b.size = size
    up = L(t, "g0", "sw")
    b.add(0, 1, 0, route=[up, L(t, "sw", "g1")], start=0.0)
    b.add(0, 2, 0, route=[up, L(t, "sw", "g2")], start=natural / 2)  # overlaps op 0
    rejects(b.build(), "capacity", op=1, match=r"link \d+ \(g0->sw\)")


def test_reject_capacity_overuse_on_a_later_hop():
    """Two ops from different senders into one receiver overlap on the switch's out-link."""
    t = switch4(bw=10 * GB, alpha=1 * US)
    size = 1e6
    b = ScheduleBuilder(t, Collective.custom(4, [(1, [0]), (2, [0])]))
    b.size = size
    b.add(1, 0, 0, start=0.0)
    b.add(2, 0, 1, start=0.0)
    rejects(b.build(), "capacity", op=1, match=r"\(sw->g0\)")


def test_reject_duration_shorter_than_transfer():
    t = switch4(bw=10 * GB)
    b = ScheduleBuilder(t, Collective.custom(4, [(0, [1])]))
    b.size = 1e6
    b.add(0, 1, 0, start=0.0, duration=0.5 * 1e6 / (10 * GB))
    rejects(b.build(), "capacity", op=0, match="shorter than its transfer time")


def test_reject_causality():
    t = ring4()
    b = ScheduleBuilder(t, Collective.custom(4, [(0, [2])]))
    b.size = 1e6
    a = b.add(0, 1, 0, route=[RL(t, 0, 1)], start=0.0)
    b.add(1, 2, 0, route=[RL(t, 1, 2)], deps=[a], start=1e-6)  # op 0 takes 20.7 us
    rejects(b.build(), "causality", op=1, match="before op 0")


@pytest.mark.parametrize(
    "size, start1, match",
    [
        (None, 0.0, "no positive data size"),
        (1e6, None, r"op 1 .* has no start time while other operations do"),
        (1e6, -1.0, r"op 1 .*: start time -1.0 is not a non-negative number"),
    ],
)
def test_reject_bad_timing_fields(size, start1, match):
    t = ring4()
    b = ScheduleBuilder(t, Collective.custom(4, [(0, [1, 3])]))
    b.size = size
    b.add(0, 1, 0, route=[RL(t, 0, 1)], start=0.0)
    b.add(0, 3, 0, route=[RL(t, 0, 3)], start=start1)
    rejects(b.build(), "structure", match=match)


def test_reject_missing_delivery():
    t = ring4()
    s = ring_allgather(t)
    # drop the last-step delivery of chunk 0 to rank 3 (nothing forwards it further)
    keep = [i for i in range(s.num_ops) if not (s.dst[i] == 3 and s.chunk[i] == 0)]
    assert len(keep) == s.num_ops - 1
    e = rejects(subset(s, keep), "missing-delivery", op=None)
    assert "rank gpu3 never receives chunk 0" in str(e)


def test_reject_empty_schedule(reduce_engine):
    rejects(
        builder(ring4(), "broadcast").build(),
        "missing-delivery",
        op=None,
        reduce_engine=reduce_engine,
    )
    rejects(
        builder(ring4(), "allreduce").build(),
        "incomplete-reduction",
        op=None,
        reduce_engine=reduce_engine,
    )


def test_reject_duplicate_contribution(reduce_engine):
    t = ring4()
    b = builder(t, "reduce", root=0)
    a = b.add(1, 0, 0, route=[RL(t, 1, 0)], kind="reduce")
    b.add(1, 0, 0, route=[RL(t, 1, 0)], kind="reduce", deps=[a])  # rank 1 added again
    rejects(
        b.build(), "duplicate-contribution", op=1, match="rank.s. 1 ", reduce_engine=reduce_engine
    )


def test_reject_duplicate_contribution_through_two_paths(reduce_engine):
    t = ring4()
    b = builder(t, "reduce", root=0)
    a = b.add(2, 1, 0, route=[RL(t, 2, 1)], kind="reduce")
    c = b.add(1, 0, 0, route=[RL(t, 1, 0)], kind="reduce", deps=[a])
    b.add(2, 3, 0, route=[RL(t, 2, 3)], kind="reduce")
    b.add(3, 0, 0, route=[RL(t, 3, 0)], kind="reduce", deps=[2, c])  # 2 reaches 0 twice
    rejects(
        b.build(), "duplicate-contribution", op=3, match="rank.s. 2", reduce_engine=reduce_engine
    )


def test_reject_incomplete_reduction(reduce_engine):
    t = ring4()
    b = builder(t, "reducescatter")
    for ch in range(4):
        reduce_into(b, t, ch, ch)
    s = b.build()
    # drop the last op: owner 3 misses the contribution of rank 2
    e = rejects(
        subset(s, list(range(s.num_ops - 1))),
        "incomplete-reduction",
        op=None,
        reduce_engine=reduce_engine,
    )
    assert "rank gpu3 ends with chunk 3" in str(e) and "rank(s) 2" in str(e)


def test_reject_copy_that_overwrites_partial_sum(reduce_engine):
    t = ring4()
    b = builder(t, "reduce", root=0)
    c = b.add(2, 1, 0, route=[RL(t, 2, 1)], kind="reduce")
    a = b.add(1, 0, 0, route=[RL(t, 1, 0)], kind="reduce", deps=[c])
    b.add(3, 0, 0, route=[RL(t, 3, 0)], kind="copy", deps=[a])  # overwrites rank 0's sum
    e = rejects(b.build(), "incomplete-reduction", op=None, reduce_engine=reduce_engine)
    assert "missing the contribution of rank(s) 0, 1, 2" in str(e)


def test_reject_dependency_cycle():
    t = ring4()
    b = ScheduleBuilder(t, Collective.custom(4, [(0, [1, 2])]))
    b.add(0, 1, 0, route=[RL(t, 0, 1)], deps=[2])
    b.add(0, 3, 0, route=[RL(t, 0, 3)], deps=[0])
    b.add(3, 2, 0, route=[RL(t, 3, 2)], deps=[1])
    rejects(b.build(), "dependency-cycle", match=r"dependency cycle through op [012]\b")


def test_reject_self_dependency():
    t = ring4()
    b = ScheduleBuilder(t, Collective.custom(4, [(0, [1])]))
    b.add(0, 1, 0, route=[RL(t, 0, 1)])
    b.add(0, 1, 0, route=[RL(t, 0, 1)], deps=[0, 1])
    rejects(b.build(), "dependency-cycle", op=1, match="op 1 depends on itself")


def test_reject_race_read_while_written(reduce_engine):
    t = ring4()
    b = builder(t, "reduce", root=0)
    b.add(2, 1, 0, route=[RL(t, 2, 1)], kind="reduce")
    b.add(1, 0, 0, route=[RL(t, 1, 0)], kind="reduce")  # reads rank 1 while op 0 writes it
    b.add(3, 0, 0, route=[RL(t, 3, 0)], kind="reduce")
    rejects(
        b.build(),
        "race",
        op=1,
        match="while op 0 may still be writing",
        reduce_engine=reduce_engine,
    )


def test_reject_race_write_while_read(reduce_engine):
    t = ring4()
    b = builder(t, "reduce", root=0)
    b.add(1, 0, 0, route=[RL(t, 1, 0)], kind="reduce")  # reads rank 1 ...
    b.add(2, 1, 0, route=[RL(t, 2, 1)], kind="reduce")  # ... while this writes into it
    rejects(
        b.build(),
        "race",
        op=1,
        match="while op 0 may still be reading",
        reduce_engine=reduce_engine,
    )


def test_reject_race_two_unordered_copies(reduce_engine):
    t = ring4()
    b = builder(t, "allreduce")
    for ch in range(4):
        reduce_into(b, t, ch, ch)  # ops 3*ch .. 3*ch+2; ops 3*ch+1 and 3*ch+2 finish chunk ch
    b.add(0, 1, 0, route=[RL(t, 0, 1)], deps=[1, 2])  # op 12: the full chunk 0 to rank 1
    b.add(2, 1, 0, route=[RL(t, 2, 1)], deps=[0, 1])  # op 13: overwrites it, unordered
    rejects(b.build(), "race", op=13, match="and op 12 both write", reduce_engine=reduce_engine)


def test_reject_race_read_hidden_behind_an_ordered_reduce(reduce_engine):
    """Op 0 reads rank 1; op 1 reduces into rank 1 after it; op 2 reduces into rank 1 with no
    order to op 0's read, so op 0 may send rank 3's contribution that op 3 sends again."""
    rejects(
        racy_read(),
        "race",
        op=2,
        match="while op 0 may still be reading",
        reduce_engine=reduce_engine,
    )


@pytest.mark.parametrize("y_first", [False, True])
def test_reject_race_reduce_unordered_with_an_earlier_copy(y_first, reduce_engine):
    """A copy into rank 1, a reduce ordered after it, and a reduce ordered with neither: the
    copy may overwrite the last one's contribution, whatever the op numbering."""
    t = switch4()
    b = builder(t, "allreduce")
    if y_first:
        b.add(3, 1, 0, kind="reduce")  # y
    w = b.add(0, 1, 0, kind="copy")  # rank 1 := rank 0's data
    b.add(2, 1, 0, kind="reduce", deps=[w])  # rank 1 += 2, after the copy
    if not y_first:
        b.add(3, 1, 0, kind="reduce")  # y: rank 1 += 3, unordered with w
    e = rejects(
        b.build(),
        "race",
        op=1 if y_first else 2,
        match="one of them overwrites",
        reduce_engine=reduce_engine,
    )
    assert re.search(r"and op 0 both write", str(e))


def test_concurrent_reduces_into_one_buffer_are_allowed(reduce_engine):
    t = switch4()
    b = builder(t, "reduce", root=0)
    for r in (1, 2, 3):
        b.add(r, 0, 0, kind="reduce")  # three unordered reduces into rank 0
    assert verify(b.build(), reduce_engine=reduce_engine).ok


def test_reject_race_copy_concurrent_with_reduce(reduce_engine):
    t = switch4()
    b = builder(t, "reduce", root=0)
    b.add(1, 0, 0, kind="reduce")
    b.add(2, 0, 0, kind="copy")  # overwrites rank 0's buffer while op 0 adds into it
    b.add(3, 0, 0, kind="reduce", deps=[0, 1])
    rejects(
        b.build(),
        "race",
        op=1,
        match="both write .* one of them overwrites",
        reduce_engine=reduce_engine,
    )


def test_reject_reduce_in_non_reducing_collective():
    t = ring4()
    b = builder(t, "broadcast", root=0)
    b.add(0, 1, 0, route=[RL(t, 0, 1)])
    b.add(0, 3, 0, route=[RL(t, 0, 3)], kind="reduce")
    rejects(b.build(), "structure", op=1, match="reduce operation in a non-reducing")


@pytest.mark.parametrize(
    "args, match",
    [
        (dict(src=4, dst=0, chunk=0), "source rank 4 does not exist"),
        (dict(src=0, dst=-1, chunk=0), "destination rank -1 does not exist"),
        (dict(src=1, dst=1, chunk=0), "sends from rank 1 to itself"),
        (dict(src=0, dst=1, chunk=4), "chunk 4 does not exist"),
        (dict(src=0, dst=1, chunk=0, part=(1, 1, 2)), "byte range"),
        (dict(src=0, dst=1, chunk=0, part=(0, 3, 2)), "byte range"),
        (dict(src=0, dst=1, chunk=0, part=(-1, 1, 2)), "byte range"),
        (dict(src=0, dst=1, chunk=0, part=(0, 1, 0)), "byte range"),
        (dict(src=0, dst=1, chunk=0, deps=[7]), "depends on op 7, which does not exist"),
        (dict(src=0, dst=1, chunk=0, deps=[-1]), "depends on op -1"),
    ],
)
def test_reject_structure(args, match):
    t = ring4()
    b = builder(t, "allgather")
    b.add(0, 3, 0, route=[RL(t, 0, 3)])
    b.add(route=[RL(t, 0, 1)], **args)
    rejects(b.build(), "structure", op=1, match=match)


def test_reject_collective_for_another_topology():
    s = ring_allgather(ring4())
    from dataclasses import replace

    bad = replace(s, collective=Collective.make("allgather", 5))
    rejects(bad, "structure", op=None, match="5 ranks but topology")


def test_reject_link_order_omitting_an_op():
    t = switch4()
    b = ScheduleBuilder(t, Collective.custom(4, [(0, [1, 2, 3])]))
    up = L(t, "g0", "sw")
    for j in (1, 2, 3):
        b.add(0, j, 0, route=[up, L(t, "sw", f"g{j}")])
    b.set_link_order(up, [0, 2])
    rejects(b.build(), "link-order", op=1, match="omits op 1")


@pytest.mark.parametrize(
    "order, match",
    [
        ([0, 1, 5], "names op 5, which does not exist"),
        ([0, 1, 1, 2], "lists op 1 .* twice"),
        ([0, 1, 2, 3], "lists op 3 .*which does not use that link"),
    ],
)
def test_reject_bad_link_order_lists(order, match):
    t = switch4()
    b = ScheduleBuilder(t, Collective.custom(4, [(0, [1, 2, 3]), (1, [0])]))
    up = L(t, "g0", "sw")
    for j in (1, 2, 3):
        b.add(0, j, 0, route=[up, L(t, "sw", f"g{j}")])
    b.add(1, 0, 1)
    b.set_link_order(up, order)
    e = rejects(b.build(), "link-order")
    assert re.search(match, str(e)), str(e)


def test_reject_link_order_for_missing_link():
    t = switch4()
    b = ScheduleBuilder(t, Collective.custom(4, [(0, [1])]))
    b.add(0, 1, 0)
    b.set_link_order(len(t.links) + 3, [])
    rejects(b.build(), "link-order", op=None, match="does not exist")


def test_reject_link_order_deadlock():
    t = switch4()
    b = ScheduleBuilder(t, Collective.custom(4, [(0, [1, 2])]))
    up = L(t, "g0", "sw")
    b.add(0, 1, 0, route=[up, L(t, "sw", "g1")])
    b.add(0, 2, 0, route=[up, L(t, "sw", "g2")], deps=[0])
    b.set_link_order(up, [1, 0])  # op 1 first on the link, but it waits for op 0
    rejects(b.build(), "link-order", match=r"deadlock\) at op [01]\b")


def test_reject_link_order_deadlock_across_two_links():
    """The dependencies alone are acyclic (0 -> 1 -> 4 -> 2), and so are the link orders alone,
    but sw->g1 serving op 2 before op 0 closes the cycle 0 -> 1 -> 4 -> 2 -> 0."""
    t = switch4()
    b = ScheduleBuilder(t, Collective.custom(4, [(0, [1, 2]), (3, [1])]))
    a = b.add(0, 1, 0)
    c = b.add(0, 2, 0, deps=[a])
    d = b.add(3, 1, 1)
    b.set_link_order(L(t, "sw", "g1"), [d, a])  # op 0 after op 2 on sw->g1
    assert verify(b.build()).ok
    b.add(1, 3, 0, deps=[a])  # op 3: on g1->sw and sw->g3
    b.set_link_order(L(t, "sw", "g3"), [3])
    b.set_link_order(L(t, "g3", "sw"), [d])
    assert verify(b.build()).ok
    e = b.add(2, 3, 0, deps=[c])  # op 4 into g3 via sw->g3
    b.set_link_order(L(t, "sw", "g3"), [e, 3])
    b.set_link_order(L(t, "g1", "sw"), [3])
    assert verify(b.build()).ok
    # the same schedule, except that op 2 now waits for op 4
    b2 = ScheduleBuilder(t, Collective.custom(4, [(0, [1, 2]), (3, [1])]))
    b2.add(0, 1, 0)
    b2.add(0, 2, 0, deps=[a])
    b2.add(3, 1, 1, deps=[e])
    b2.add(1, 3, 0, deps=[a])
    b2.add(2, 3, 0, deps=[c])
    b2.link_order = dict(b.link_order)
    rejects(b2.build(), "link-order", match="deadlock")


def test_reject_step_order():
    s_ok = ring_allgather(ring4())
    d = schedule_to_dict(s_ok)
    # op 4 (step 1) depends on op 3 (step 0); put it in step 0
    assert d["ops"]["deps"][4] and d["ops"]["step"][4] == 1
    d["ops"]["step"][4] = 0
    rejects(schedule_from_dict(d), "step-order", op=4, match="at step 0 depends on op")


def test_steps_unset_for_some_ops_are_ignored():
    d = schedule_to_dict(ring_allgather(ring4()))
    d["ops"]["step"] = [None] * d["ops"]["count"]
    assert verify(schedule_from_dict(d)).ok


def test_check_order_structure_before_data():
    """A schedule with several problems reports the first check in the documented order."""
    t = ring4()
    b = builder(t, "allgather")
    b.add(1, 2, 0, route=[RL(t, 1, 2)])  # data not held
    b.add(0, 2, 0, route=[RL(t, 0, 1), RL(t, 1, 2)])  # route through a GPU
    rejects(b.build(), "route", op=1)


def test_check_schedule_ok_report_to_dict():
    rep = check_schedule(ring_allgather(ring4()))
    d = rep.to_dict()
    assert d["ok"] is True and d["error"] is None and d["ops"] == 12
    json.dumps(d)


WINDOWED = [
    "test_tree_reducescatter",
    "test_allreduce_reduce_scatter_then_allgather",
    "test_reduce_to_root",
    "test_reduction_by_byte_ranges",
    "test_reject_duplicate_contribution",
    "test_reject_duplicate_contribution_through_two_paths",
    "test_reject_incomplete_reduction",
    "test_reject_copy_that_overwrites_partial_sum",
    "test_reject_race_read_while_written",
    "test_reject_race_write_while_read",
    "test_reject_race_two_unordered_copies",
    "test_reject_race_read_hidden_behind_an_ordered_reduce",
    "test_reject_race_copy_concurrent_with_reduce",
]


ROUTE_TESTS = [
    "test_reject_route_through_compute_node",
    "test_reject_non_contiguous_route",
    "test_reject_route_visiting_a_node_twice",
    "test_reject_switch_route_to_wrong_receiver",
    "test_switch_routed_allgather",
    "test_router_routed_transfer",
]


PIECES = {"REDUCE_WINDOW_BUFFERS": reducing_module, "ROUTE_BLOCK_OPS": routes_module}


@pytest.mark.parametrize(
    "setting, name, reduce_engine",
    [("REDUCE_WINDOW_BUFFERS", n, e) for n in WINDOWED for e in REDUCE_ENGINES]
    + [("ROUTE_BLOCK_OPS", n, "auto") for n in ROUTE_TESTS + ["bad routes on ring"]],
)
def test_verdicts_hold_a_piece_at_a_time(setting, name, reduce_engine, monkeypatch):
    """Large schedules are checked a piece at a time: reductions a window of segments at a
    time (``REDUCE_WINDOW_BUFFERS``), routes a block of operations at a time
    (``ROUTE_BLOCK_OPS``). With the smallest pieces (one segment per window, one operation per
    block: the ring's defect sits in the second) every such test gives the same verdict."""
    monkeypatch.setattr(PIECES[setting], setting, 1)
    if name in WINDOWED:
        globals()[name](reduce_engine)
        return
    if name != "bad routes on ring":
        globals()[name]()
        return
    for make_route, match in [
        (lambda t: [999], "link 999 does not exist"),
        (lambda t: [RL(t, 1, 2)], "not at the sender"),
        (lambda t: [RL(t, 0, 3)], "not at the receiver"),
    ]:
        test_reject_bad_routes_on_ring(make_route, match)


def test_windows_count_the_same_redundant_deliveries(reduce_engine, monkeypatch):
    s = synthesize("ring", load_topology("dgx1"), Collective.make("allreduce", 8, 2))
    s2 = round_trip_cases()["trees"]()
    whole = [verify(x, reduce_engine=reduce_engine) for x in (s, s2)]
    monkeypatch.setattr(reducing_module, "REDUCE_WINDOW_BUFFERS", 8)  # one segment per window
    windowed = [verify(x, reduce_engine=reduce_engine) for x in (s, s2)]
    for a, b in zip(whole, windowed):
        assert a.ok and b.ok and a.redundant_deliveries == b.redundant_deliveries
        assert a.checks == b.checks
