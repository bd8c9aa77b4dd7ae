"""MTEGCCA (seed 002): the implicit multicast time-expanded graph and TM Steiner trees."""

from __future__ import annotations

import json

import numpy as np
import pytest

from collsynth.cli import main
from collsynth.collective import Collective
from collsynth.errors import CollsynthError
from collsynth.sim import simulate
from collsynth.synth import get, synthesize
from collsynth.synth.mteg import Planner, SlotGraph, decompose, lower, mteg_horizon, plan
from collsynth.synth.order import without_chosen_order
from collsynth.topology import TopologyBuilder, load_topology
from collsynth.verify import ensure_verified

GB = 1e9
MiB = float(1 << 20)


def planned_sim(s, size, **kw):
    """The schedule in its plan: the planned order, without the link orders synthesis chose for
    execution (what these tests check the algorithm's own estimates against)."""
    return simulate(without_chosen_order(s), size, order="plan", **kw)


def figure2():
    """A network in the spirit of seed 002 Figure 2: fast links take one slot, slow two.

    A-B, B-C, C-H, D-E, E-F, F-G, G-H: 50 GB/s; A-D, A-F: 25 GB/s; no alpha. A 50 GB chunk
    makes tau = 1 s.
    """
    b = TopologyBuilder("fig2")
    ids = {x: b.compute(x) for x in "ABCDEFGH"}
    for u, v in ("AB", "BC", "CH", "DE", "EF", "FG", "GH"):
        b.bilink(ids[u], ids[v], 50 * GB, 0.0)
    for u, v in ("AD", "AF"):
        b.bilink(ids[u], ids[v], 25 * GB, 0.0)
    return b.build()


def ops_of(s):
    """Operations as comparable tuples (sender, receiver, chunk, route, step)."""
    return [
        (int(s.src[i]), int(s.dst[i]), int(s.chunk[i]), tuple(s.route(i).tolist()), int(s.step[i]))
        for i in range(s.num_ops)
    ]


def check_timed(s, size):
    """Verified; simulator agrees with the slot plan (see docs/mteg.md, 'Plan and simulator')."""
    rep = ensure_verified(s)
    assert "capacity" in rep.checks and "link-order" in rep.checks
    m = s.meta["mteg"]
    plan_s = m["plan_time_s"]
    asap = planned_sim(s, size).time_s
    replay = planned_sim(s, size, release=True).time_s
    # held to the planned starts, the simulator replays the plan at exact durations
    assert replay == pytest.approx(rep.planned_finish_s, rel=1e-9)
    # the plan rounds the last transfer up to whole slots: at most one slot for chunk/bw plus
    # the alpha rounding, both included in max_rounding_s
    assert replay <= plan_s * (1 + 1e-9)
    assert plan_s - replay <= m["max_rounding_s"] * (1 + 1e-9) + 1e-15
    assert m["max_rounding_s"] < 2 * m["slot_s"]
    # as soon as possible with the same link orders can only be earlier (links whose window
    # order disagrees with the departure order carry no explicit order; none in these tests)
    assert m["links_without_order"] == 0
    assert asap <= replay * (1 + 1e-9)
    return rep, asap, replay


# ------------------------------------------------------------------------------ Figure 2
def test_figure2_multicast_by_hand():
    t = figure2()
    A, B, C, F, H = (t.rank_of_node[t.index(x)] for x in "ABCFH")
    coll = Collective.custom(8, [(A, [F, H])])
    s = synthesize("mteg", t, coll, size=50 * GB)
    m = s.meta["mteg"]
    assert m["slot_s"] == pytest.approx(1.0)
    # TM: F is nearest (A->F, 2 slots), then H via A->B->C->H (3 slots) beats F->G->H (4)
    assert [(o[0], o[1], o[4]) for o in ops_of(s)] == [(A, F, 0), (A, B, 0), (B, C, 1), (C, H, 2)]
    assert s.deps(0).tolist() == [] and s.deps(1).tolist() == []
    assert s.deps(2).tolist() == [1] and s.deps(3).tolist() == [2]
    assert s.start.tolist() == pytest.approx([0.0, 0.0, 1.0, 2.0])
    assert m["plan_slots"] == 3 and m["plan_time_s"] == pytest.approx(3.0)
    rep, asap, replay = check_timed(s, 50 * GB)
    assert asap == pytest.approx(3.0) and replay == pytest.approx(3.0)
    assert mteg_horizon(t, coll, 50 * GB) == (3, pytest.approx(3.0))


def test_figure2_seed_edge_cost():
    """With the seed's TEG edge cost, H joins through F (F_2 -> G_3 -> H_4 costs 2 from the
    tree) rather than through B and C (A_0 -> ... -> H_3 costs 3): fewer transmissions, later."""
    t = figure2()
    A, F, G, H = (t.rank_of_node[t.index(x)] for x in "AFGH")
    coll = Collective.custom(8, [(A, [F, H])])
    s = synthesize("mteg", t, coll, size=50 * GB, nearest="cost")
    assert [(o[0], o[1], o[4]) for o in ops_of(s)] == [(A, F, 0), (F, G, 2), (G, H, 3)]
    assert s.meta["mteg"]["plan_slots"] == 4 and s.meta["mteg"]["nearest"] == "cost"
    check_timed(s, 50 * GB)


def test_figure2_contention_moves_second_chunk():
    """Two chunks from A to H: the second cannot use A->B at slot 0 and leaves a slot later."""
    t = figure2()
    A, H = (t.rank_of_node[t.index(x)] for x in "AH")
    coll = Collective.custom(8, [(A, [H]), (A, [H])])
    s = synthesize("mteg", t, coll, size=100 * GB)  # 50 GB per chunk
    check_timed(s, 100 * GB)
    assert s.meta["mteg"]["plan_slots"] == 4
    first_hops = sorted(int(s.step[i]) for i in range(s.num_ops) if s.src[i] == A)
    assert first_hops == [0, 1]


# ------------------------------------------------------------------------------ AllGather
@pytest.mark.parametrize(
    "spec, chunks", [("ring:n=8", 1), ("ring:n=6", 3), ("dgx1", 1), ("dgx1", 2)]
)
def test_allgather_verified_and_simulated(spec, chunks):
    t = load_topology(spec)
    coll = Collective.make("allgather", t.num_ranks, chunks)
    s = synthesize("mteg", t, coll, size=MiB)
    assert s.num_ops == t.num_ranks * chunks * (t.num_ranks - 1)  # a tree per broadcast
    assert s.size == MiB and s.timed
    check_timed(s, MiB)


def test_allgather_through_switches():
    for spec in ("ndv2:chassis=3", "star:n=6", "fat_tree:k=4"):
        t = load_topology(spec)
        coll = Collective.make("allgather", t.num_ranks)
        s = synthesize("mteg", t, coll, size=4 * MiB)
        check_timed(s, 4 * MiB)
        assert int(np.diff(s.route_ptr).max()) >= 2


def test_seed_slot_model_also_verifies():
    t = load_topology("ndv2:chassis=3")
    coll = Collective.make("allgather", t.num_ranks)
    exact = synthesize("mteg", t, coll, size=MiB)
    seed = synthesize("mteg", t, coll, size=MiB, occupancy="slot")
    check_timed(seed, MiB)
    assert seed.meta["mteg"]["occupancy"] == "slot"
    assert exact.meta["mteg"]["plan_slots"] <= seed.meta["mteg"]["plan_slots"]


def test_broadcasts_ordered_largest_first_then_rounds():
    coll = Collective.custom(4, [(0, [1]), (1, [0, 2, 3]), (2, [0, 1])])
    tasks = decompose(coll, 10.0)
    assert [t.chunk for t in tasks] == [1, 2, 0]
    ag = decompose(Collective.make("allgather", 3, 2), 1.0)
    assert [(t.round, t.source) for t in ag] == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
    # AllToAll: a shift pattern, the first round aims at three different ranks
    a2a = decompose(Collective.make("alltoall", 3), 1.0)
    assert [(t.source, t.dests) for t in a2a[:3]] == [(0, (1,)), (1, (2,)), (2, (0,))]


# ------------------------------------------------------------------------------ broadcast
@pytest.mark.parametrize("spec", ["dgx1", "ndv2:chassis=3", "torus2d:w=3,h=3"])
@pytest.mark.parametrize("nearest", ["arrival", "cost"])
def test_broadcast_and_prim_equals_general_tm(spec, nearest):
    t = load_topology(spec)
    coll = Collective.make("broadcast", t.num_ranks, 4, root=1)
    s = synthesize("mteg", t, coll, size=8 * MiB, nearest=nearest)
    check_timed(s, 8 * MiB)
    # the Prim-like broadcast growth is exactly TM with one search per terminal
    g = SlotGraph(t, coll.chunk_bytes(8 * MiB))
    fast, general = Planner(g, nearest=nearest), Planner(g, nearest=nearest)
    for c in range(4):
        fast.route(c, 1, range(t.num_ranks))
        general.route(c, 1, range(t.num_ranks), general=True)
    assert (fast.op_edge, fast.op_slot, fast.op_parent) == (
        general.op_edge,
        general.op_slot,
        general.op_parent,
    )


def test_multicast_subset_with_relays():
    t = load_topology("ndv2:chassis=3")
    coll = Collective.custom(t.num_ranks, [(3, [9, 17, 20]), (12, [0, 23]), (3, [22])])
    s = synthesize("mteg", t, coll, size=3 * MiB)
    check_timed(s, 3 * MiB)
    # relays through ranks that are not destinations are allowed
    assert set(s.dst.tolist()) - {9, 17, 20, 0, 23, 22}


@pytest.mark.parametrize("kind", ["gather", "scatter", "alltoall"])
def test_other_copy_collectives(kind):
    t = load_topology("dgx1")
    coll = Collective.make(kind, t.num_ranks)
    check_timed(synthesize("mteg", t, coll, size=MiB), MiB)


@pytest.mark.parametrize("nearest", ["arrival", "cost"])
def test_concurrent_trees(nearest):
    t = load_topology("ndv2:chassis=3")
    n = t.num_ranks
    coll = Collective.make("allgather", n, 2)
    s = synthesize("mteg", t, coll, size=MiB, trees="concurrent", nearest=nearest)
    check_timed(s, MiB)
    assert s.meta["mteg"]["trees"] == "concurrent" and s.num_ops == n * 2 * (n - 1)
    # full broadcasts grow together, then the multicasts one by one
    mixed = Collective.custom(n, [(0, range(n)), (5, [1, 2]), (7, range(n))])
    check_timed(synthesize("mteg", t, mixed, size=MiB, trees="concurrent", nearest=nearest), MiB)
    # with a single broadcast there is nothing to interleave
    one = Collective.make("broadcast", n, 1, root=4)
    assert ops_of(
        synthesize("mteg", t, one, size=MiB, trees="concurrent", nearest=nearest)
    ) == ops_of(synthesize("mteg", t, one, size=MiB, nearest=nearest))


# ------------------------------------------------------------------------------ horizon
def test_horizon_grows_and_changes_nothing():
    t = load_topology("ndv2:chassis=2")
    coll = Collective.make("allgather", t.num_ranks)
    auto = synthesize("mteg", t, coll, size=MiB)
    tiny = synthesize("mteg", t, coll, size=MiB, horizon="1")
    m = tiny.meta["mteg"]
    assert m["initial_horizon_slots"] == 1 and m["horizon_growths"] >= 5
    assert m["horizon_slots"] >= m["plan_slots"] > m["horizon_slots"] // 2
    assert ops_of(tiny) == ops_of(auto)
    # the general (multicast) search grows it too
    sub = Collective.custom(t.num_ranks, [(0, [15]), (5, [10, 12])])
    a = synthesize("mteg", t, sub, size=MiB)
    b = synthesize("mteg", t, sub, size=MiB, horizon=1)
    assert b.meta["mteg"]["horizon_growths"] > 0 and ops_of(a) == ops_of(b)
    # by cost nothing is pruned: the horizon only grows when the chosen path ends past it
    for coll in (sub, Collective.make("allgather", t.num_ranks)):
        a = synthesize("mteg", t, coll, size=MiB, nearest="cost")
        b = synthesize("mteg", t, coll, size=MiB, nearest="cost", horizon=1)
        assert b.meta["mteg"]["horizon_growths"] > 0 and ops_of(a) == ops_of(b)


def test_mteg_horizon_bounds_epochs():
    t = load_topology("ndv2:chassis=3")
    coll = Collective.make("allgather", t.num_ranks)
    slots, secs = mteg_horizon(t, coll, 8 * MiB)
    s = synthesize("mteg", t, coll, size=8 * MiB, occupancy="slot")
    assert slots == s.meta["mteg"]["plan_slots"]
    exact = mteg_horizon(t, coll, 8 * MiB, occupancy="exact")
    assert exact[0] == synthesize("mteg", t, coll, size=8 * MiB).meta["mteg"]["plan_slots"]
    assert exact[0] <= slots
    assert secs == pytest.approx(slots * s.meta["mteg"]["slot_s"])
    # a caller's epoch length
    slots2, secs2 = mteg_horizon(t, coll, 8 * MiB, tau=0.5e-6)
    assert secs2 == pytest.approx(slots2 * 0.5e-6) and slots2 >= secs2 / 0.5e-6 - 1e-9
    assert mteg_horizon(t, coll, 8 * MiB, tau="0.5us") == (slots2, pytest.approx(secs2))


def test_slot_option_and_finer_slots():
    t = load_topology("ring:n=8")
    coll = Collective.make("allgather", 8)
    coarse = synthesize("mteg", t, coll, size=MiB)
    fine = synthesize("mteg", t, coll, size=MiB, slot="0.25us")
    assert fine.meta["mteg"]["slot_s"] == pytest.approx(0.25e-6)
    check_timed(fine, MiB)
    # a finer grid wastes less on rounding alpha up to whole slots
    assert fine.meta["mteg"]["plan_time_s"] < coarse.meta["mteg"]["plan_time_s"]


# ------------------------------------------------------------------------------ misc
def test_deterministic():
    t = load_topology("ndv2:chassis=3")
    coll = Collective.make("allgather", t.num_ranks, 2)
    a = synthesize("mteg", t, coll, size=MiB)
    b = synthesize("mteg", t, coll, size=MiB)
    assert ops_of(a) == ops_of(b)
    assert np.array_equal(a.start, b.start) and np.array_equal(a.dep_ids, b.dep_ids)
    assert {k: v.tolist() for k, v in a.link_order.items()} == {
        k: v.tolist() for k, v in b.link_order.items()
    }


def test_registered_and_size_aware():
    a = get("mteg")
    assert a.size_aware and set(a.options) == {
        "slot",
        "horizon",
        "occupancy",
        "trees",
        "nearest",
        "negotiate",
        "price",
        "switch_copy",
    }
    t = load_topology("ring:n=4")
    s = synthesize("mteg", t, Collective.make("allgather", 4))  # default size 1 MiB
    assert s.size == MiB and s.meta["algorithm"] == "mteg"


@pytest.mark.parametrize(
    "opts, needle",
    [
        ({"slot": "-1us"}, "slot"),
        ({"slot": "fast"}, "slot"),
        ({"slot": "0"}, "slot"),
        ({"horizon": "0"}, "horizon"),
        ({"horizon": "many"}, "horizon"),
        ({"occupancy": "fluid"}, "occupancy"),
        ({"bogus": "1"}, "bogus"),
        ({"trees": "parallel"}, "trees"),
        ({"nearest": "closest"}, "nearest"),
    ],
)
def test_bad_options_one_line(opts, needle):
    t = load_topology("ring:n=4")
    with pytest.raises(CollsynthError) as e:
        synthesize("mteg", t, Collective.make("allgather", 4), size=MiB, **opts)
    msg = str(e.value)
    assert "\n" not in msg and needle in msg


def test_mixed_route_offsets_keep_a_consistent_order():
    """A dragonfly mixes routes of different lengths through routers: links whose window order
    disagrees with the departure order get no explicit order, and the schedule still verifies
    and replays exactly."""
    t = load_topology("dragonfly:a=4,p=1,h=1")
    coll = Collective.make("allgather", t.num_ranks)
    s = synthesize("mteg", t, coll, size=MiB, trees="sequential", nearest="arrival", price="off")
    assert s.meta["mteg"]["links_without_order"] > 0
    rep = ensure_verified(s)
    replay = simulate(s, MiB, release=True).time_s
    assert replay == pytest.approx(rep.planned_finish_s, rel=1e-9)
    assert replay <= s.meta["mteg"]["plan_time_s"] * (1 + 1e-9)


def test_reductions_rejected_and_bad_size():
    t = load_topology("ring:n=4")
    with pytest.raises(CollsynthError, match="mteg"):
        synthesize("mteg", t, Collective.make("allreduce", 4))
    with pytest.raises(CollsynthError, match="size"):
        plan(t, Collective.make("allgather", 4), size=-5)


def test_cli_synth_with_slot(capsys, tmp_path):
    out = str(tmp_path / "m.json")
    rc = main(
        [
            "synth",
            "-t",
            "dgx1",
            "-c",
            "allgather",
            "--algo",
            "mteg",
            "--size",
            "2MiB",
            "--opt",
            "slot=0.5us",
            "-o",
            out,
            "--json",
        ]
    )
    o, e = capsys.readouterr()
    assert rc == 0 and e == "", e
    assert json.loads(o)["verified"] is True
    rc = main(
        [
            "synth",
            "-t",
            "dgx1",
            "-c",
            "allgather",
            "--algo",
            "mteg",
            "--opt",
            "slot=soon",
            "-o",
            out,
        ]
    )
    o, e = capsys.readouterr()
    assert rc == 2 and len(e.strip().splitlines()) == 1 and "slot" in e


def test_auto_keeps_the_earliest_variant():
    t = load_topology("ndv2:chassis=2")
    coll = Collective.make("allgather", t.num_ranks)
    auto = synthesize("mteg", t, coll, size=8 * MiB)
    # slot=auto may plan each variant with a different slot: compare completion times
    times = [
        synthesize("mteg", t, coll, size=8 * MiB, trees=g, nearest=n).meta["mteg"]["plan_time_s"]
        for g in ("sequential", "concurrent")
        for n in ("arrival", "cost")
    ]
    assert auto.meta["mteg"]["plan_time_s"] == pytest.approx(min(times), rel=1e-12)


# ------------------------------------------------------------------ negotiation, slot refinement
def test_dgx1_1gb_within_ten_percent_of_teccl_milp():
    """Negotiation and slot refinement reach the MILP on the case the greedy missed: DGX-1 AllGather, 1 GB, 1 chunk/rank.

    The TE-CCL MILP (HiGHS, proven optimal, about a second) needs 3 epochs of 2.5 ms (one
    125 MB chunk on a 50 GB/s NVLink) plus three hops of alpha: 7.5021 ms. Greedy TM trees
    alone need 4 chunk times (10.0 ms, 1.33x): every tree grabs its source's slow links at
    slot 0. Negotiation plus the refined slot reach the MILP's 3 chunk times.
    """
    t = load_topology("dgx1")
    coll = Collective.make("allgather", 8)
    size = GB
    te = synthesize("teccl", t, coll, size=size, gap=0, time_limit=30)
    assert te.meta["teccl"]["status"] == "optimal"
    te_sim = simulate(te, size).time_s
    assert te_sim == pytest.approx(3 * 2.5e-3 + 3 * 0.7e-6, rel=1e-6)

    s = synthesize("mteg", t, coll, size=size)  # the default: every option auto
    check_timed(s, size)
    sim = simulate(s, size).time_s
    assert sim <= 1.10 * te_sim
    m = s.meta["mteg"]["negotiation"]
    assert m["best_slots"] < m["first_slots"] and m["best_round"] >= 1
    # the seed's greedy on its own (seed slot, no negotiation) is the 4-chunk-time plan
    seed = synthesize(
        "mteg", t, coll, size=size, slot="2.5ms", negotiate=0, trees="sequential", nearest="arrival"
    )
    assert simulate(seed, size).time_s == pytest.approx(4 * 2.5e-3, rel=1e-3)
    assert seed.meta["mteg"]["negotiation"]["rounds"] == 0


def test_negotiation_never_worse_and_deterministic():
    for spec, size in (
        ("dgx1", 1e6),
        ("ndv2:chassis=1", 64 * MiB),
        ("mi250:chassis=1", GB),
        ("ring:n=6", MiB),
    ):
        t = load_topology(spec)
        coll = Collective.make("allgather", t.num_ranks)
        for slot in ("auto", "1us"):
            off = plan(t, coll, size, slot=slot, negotiate="off")
            on = plan(t, coll, size, slot=slot, negotiate=8)
            # the first round is the seed's plan, and only a strictly earlier plan replaces it
            assert on.negotiation["first_slots"] == off.slots
            assert on.negotiation["first_asap_s"] == off.asap
            assert on.asap <= off.asap and on.negotiation["rounds"] <= 8
        a = synthesize("mteg", t, coll, size=size)
        b = synthesize("mteg", t, coll, size=size)
        check_timed(a, size)
        assert ops_of(a) == ops_of(b) and np.array_equal(a.start, b.start)
        assert a.meta["mteg"] == b.meta["mteg"]


@pytest.mark.parametrize(
    "spec, size",
    [("dgx1", GB), ("mi250:chassis=1", 1e6), ("ndv2:chassis=2", 64 * MiB), ("fat_tree:k=4", 4e6)],
)
def test_asap_estimate_is_the_simulator(spec, size):
    """Plans are compared by asap_seconds: it must be what the simulator reports."""
    from collsynth.synth.mteg import asap_seconds, lower

    t = load_topology(spec)
    coll = Collective.make("allgather", t.num_ranks)
    for trees in ("sequential", "concurrent"):
        for nearest in ("arrival", "cost"):
            p = plan(t, coll, size, trees=trees, nearest=nearest, negotiate=0)
            s = lower(p)
            assert asap_seconds(p.graph, p.planner) == pytest.approx(
                planned_sim(s, size).time_s, rel=1e-9
            )
    auto = synthesize("mteg", t, coll, size=size)
    assert auto.meta["mteg"]["asap_s"] == pytest.approx(planned_sim(auto, size).time_s, rel=1e-9)


def test_auto_never_worse_than_the_seed_variants():
    # every variant at the seed's slot without negotiation is a candidate of the default
    t = load_topology("mi250:chassis=1")
    coll = Collective.make("allgather", t.num_ranks)
    auto = planned_sim(synthesize("mteg", t, coll, size=1e6), 1e6).time_s
    for trees in ("sequential", "concurrent"):
        for nearest in ("arrival", "cost"):
            seed = synthesize(
                "mteg",
                t,
                coll,
                size=1e6,
                trees=trees,
                nearest=nearest,
                negotiate=0,
                slot=plan(t, coll, 1e6, negotiate=0).tau,
            )
            assert auto <= planned_sim(seed, 1e6).time_s * (1 + 1e-9)


def test_negotiation_leaves_unicasts_alone():
    # penalties steer full broadcasts only: AllToAll (one unicast per chunk) is not re-planned
    t = load_topology("dgx1")
    p = plan(t, Collective.make("alltoall", 8), MiB)
    assert p.negotiation is None


def test_negotiation_and_refinement_budget():
    from collsynth.synth.mteg.negotiation import negotiation_rounds
    from collsynth.synth.mteg.search import REFINE, slot_waste

    t = load_topology("dgx1")
    coll = Collective.make("allgather", 8)
    p = plan(t, coll, GB, negotiate=0)
    assert negotiation_rounds(p.graph, p.tasks) == 32
    # the default's 14 candidates (4 variants + 3 priced, two slots) share the search budget
    assert negotiation_rounds(p.graph, p.tasks, 14) == 32
    mi = load_topology("mi250")
    mp = plan(mi, Collective.make("allgather", 16), 1e6, negotiate=0)
    assert negotiation_rounds(mp.graph, mp.tasks, 14) == 18
    # 1 GB: alpha (0.7 us) costs a whole 2.5 ms slot per hop -> auto also plans finer slots
    assert slot_waste(p.graph) > 0.5
    auto = synthesize("mteg", t, coll, size=GB)
    assert auto.meta["mteg"]["slot_s"] == pytest.approx(p.tau / REFINE)
    # an explicit slot is kept as given
    fixed = synthesize("mteg", t, coll, size=GB, slot="2.5ms")
    assert fixed.meta["mteg"]["slot_s"] == pytest.approx(2.5e-3)
    # 1 KB: latency-bound, the seed's slot wastes nothing
    assert slot_waste(plan(t, coll, 1e3, negotiate=0).graph) < 0.1
    # 10-chassis NDv2 (80 tasks x 410 edges) is beyond the budget: the seed's plan, fast
    big = load_topology("ndv2:chassis=10")
    bp = plan(big, Collective.make("allgather", 80), MiB, negotiate=0)
    assert negotiation_rounds(bp.graph, bp.tasks) == 0


@pytest.mark.parametrize(
    "value, needle", [("-1", "negotiate"), ("many", "negotiate"), ("1.5", "negotiate")]
)
def test_bad_negotiate_one_line(value, needle):
    t = load_topology("ring:n=4")
    with pytest.raises(CollsynthError) as ei:
        synthesize("mteg", t, Collective.make("allgather", 4), negotiate=value)
    msg = str(ei.value)
    assert needle in msg and "\n" not in msg


# ------------------------------------------------------------------ link-time price, chains
def test_price_option_and_auto_never_worse():
    t = load_topology("mi250")
    coll = Collective.make("allgather", 16)
    for trees in ("sequential", "concurrent"):
        off = plan(t, coll, 1e6, trees=trees, nearest="arrival", negotiate=0, price="off")
        zero = plan(t, coll, 1e6, trees=trees, nearest="arrival", negotiate=0, price=0)
        assert off.price == 0.0 and off.planner.op_edge == zero.planner.op_edge
        one = plan(t, coll, 1e6, trees=trees, nearest="arrival", negotiate=0, price="1")
        assert one.price == 1.0
        # a price changes which edges a tree takes, never the conflict-freedom of the plan
        s = lower(one)
        assert s.meta["mteg"]["price"] == 1.0
        check_timed(s, 1e6)
    # price=auto keeps the earliest candidate, price 0 (the seed's variants) among them
    auto = synthesize("mteg", t, coll, size=1e6)
    none = synthesize("mteg", t, coll, size=1e6, price="off")
    assert simulate(auto, 1e6).time_s <= simulate(none, 1e6).time_s * (1 + 1e-12)


@pytest.mark.parametrize("value", ["-1", "cheap", "inf", "nan"])
def test_bad_price_one_line(value):
    t = load_topology("ring:n=4")
    with pytest.raises(CollsynthError) as ei:
        synthesize("mteg", t, Collective.make("allgather", 4), price=value)
    msg = str(ei.value)
    assert "price" in msg and "\n" not in msg


def test_dgx2_link_price_within_teccl_milp():
    """A link-time price keeps MTEG within the MILP on 2-chassis DGX-2 (8 IB links each way).

    At 1 GB a chunk is 31.25 MB: 0.25 ms on a 125 GB/s switch port, 2.5 ms on a 12.5 GB/s
    IB link. Each chassis must receive the other's 16 chunks over its 8 IB links (2 chunk
    times = 5 ms per link at least), and every GPU receives >= 29 chunks through its one
    switch downlink (>= 7.25 ms; 7.75 ms for the 16 GPUs without an incoming IB link:
    the ingress bound). The TE-CCL MILP proves 4 IB chunk times (10.0 ms) optimal for its
    2.5 ms epochs (bench/results/teccl.json, status optimal, 7-17 s of HiGHS: too slow for a
    test). Earliest-arrival trees send each chunk over IB from every odd GPU that holds it
    (the direct IB arrival is earlier than a switch hop after one crossing), so the IB links
    are gone after a few trees: 22.8 ms; the seed's cost metric relays chunks in 16-hop
    chains: 11.8 ms. A link-time price makes a tree cross IB only when it pays off.
    """
    t = load_topology("dgx2:chassis=2")
    coll = Collective.make("allgather", 32)
    ib = {lk.id for lk in t.links if lk.cls == "ib"}

    def ib_transfers(p):
        return sum(1 for e in p.planner.op_edge if set(p.graph.edges[e].route) & ib)

    free = plan(t, coll, GB, trees="sequential", nearest="arrival", negotiate=0, price=0)
    priced = plan(t, coll, GB, trees="sequential", nearest="arrival", negotiate=0, price=2)
    assert ib_transfers(free) > 4 * ib_transfers(priced)
    assert ib_transfers(priced) >= 32  # each chunk crosses at least once
    assert priced.asap <= 0.55 * free.asap
    s = synthesize("mteg", t, coll, size=GB, trees="concurrent", nearest="arrival")
    sim = planned_sim(s, GB).time_s
    assert 7.75e-3 < sim <= 10.0033e-3  # ingress bound < mteg <= MILP
    check_timed(s, GB)


def test_mi250_1mb_within_five_percent_of_teccl_milp():
    """Within five percent of the MILP on MI250 (16 GCDs, xGMI of 200, 100, 50 GB/s, 0.7 us).

    At 1 MB a chunk is 62.5 KB: 0.31, 0.63 or 1.25 us plus 0.7 us alpha per hop. The TE-CCL
    MILP's optimum (status optimal, 7.725 us simulated; bench/results/teccl.json, 9-23 s of
    HiGHS, too slow for a test) spreads the chunks so that no 50 GB/s link carries more than
    5 of them. The greedy trees end with a chunk waiting 2.7 us for a 50 GB/s link two hops
    before its last receiver; negotiation that only looked at the last hop found nothing to
    penalise (8.9 us, 1.15x). Penalising contention along the whole path to the last
    arrivals (and link-time prices) gets 7.875 us (1.02x).
    """
    t = load_topology("mi250")
    coll = Collective.make("allgather", 16)
    s = synthesize("mteg", t, coll, size=1e6)
    check_timed(s, 1e6)
    assert planned_sim(s, 1e6).time_s <= 1.05 * 7.725e-6
    assert s.meta["mteg"]["negotiation"]["best_round"] >= 1
    # last-hop penalties alone (the first rule) stay at 8.9 us
    import collsynth.synth.mteg.negotiation as negotiation

    old = negotiation.NEGOTIATE_PHASES
    try:
        negotiation.NEGOTIATE_PHASES = (False,)
        last_hop = plan(
            t,
            coll,
            1e6,
            trees="concurrent",
            nearest="arrival",
            price=0,
            slot=s.meta["mteg"]["slot_s"],
            negotiate=18,
        )
    finally:
        negotiation.NEGOTIATE_PHASES = old
    assert last_hop.asap > 1.1 * 7.725e-6


# ---------------------------------------------------------------- switch multicast
def test_switch_copy_makes_multicast_groups_on_a_copying_nvswitch():
    """DGX-2 x2 with NVSwitches that copy (TE-CCL's model), AllGather 1 GB: a stream to the
    switch continues to every GPU whose downlink is free at the same departure, so each
    shard crosses a GPU's uplink once; the plan meets the ingress bound (7.75 ms, TE-CCL's
    published 7.75 ms) where copies one by one take 9.5 ms."""
    from collsynth.bound import bound
    from collsynth.export import to_msccl_xml
    from collsynth.verify import verify

    t = load_topology("dgx2:chassis=2,switch_copy=1")
    coll = Collective.make("allgather", 32)
    plain = synthesize("mteg", t, coll, size=1e9)
    s = synthesize("mteg", t, coll, size=1e9, switch_copy=True)
    assert verify(s).ok and s.has_groups and not plain.has_groups
    m = s.meta["mteg"]
    assert m["switch_copy"] is True and m["multicast_groups"] > 0
    sim, b = planned_sim(s, 1e9).time_s, bound(t, coll, 1e9).time_s
    assert sim <= b * (1 + 1e-6) and sim < 0.85 * planned_sim(plain, 1e9).time_s
    # members start together from one sender; the same input gives the same schedule
    g = s.group
    for gid in np.unique(g[g >= 0]).tolist():
        members = np.flatnonzero(g == gid)
        assert len(set(s.start[members].tolist())) == 1
        assert len(set(s.src[members].tolist())) == 1
    again = synthesize("mteg", t, coll, size=1e9, switch_copy=True)
    assert np.array_equal(again.group, s.group) and np.array_equal(again.start, s.start)
    with pytest.raises(CollsynthError, match="cannot express a switch that copies"):
        to_msccl_xml(s)


def test_switch_copy_needs_a_switch_that_can():
    # DGX-2's default NVSwitches do not copy: the option changes nothing
    t = load_topology("dgx2:chassis=2")
    coll = Collective.make("allgather", 32)
    s = synthesize("mteg", t, coll, size=1e6, switch_copy=True)
    assert not s.has_groups and s.meta["mteg"]["switch_copy"] is False
    assert (
        planned_sim(s, 1e6).time_s == planned_sim(synthesize("mteg", t, coll, size=1e6), 1e6).time_s
    )


@pytest.mark.parametrize(
    "trees,nearest",
    [("sequential", "arrival"), ("sequential", "cost"), ("concurrent", "arrival"),
     ("concurrent", "cost")],
)  # fmt: skip
def test_switch_copy_in_every_tree_variant(trees, nearest):
    # every variant offers branches; the as-soon-as-possible estimate follows the lead's stream
    from collsynth.verify import verify

    t = load_topology("dgx_h100:nodes=2")
    coll = Collective.make("allgather", 16)
    s = synthesize("mteg", t, coll, size=16e6, switch_copy=True, trees=trees,
                   nearest=nearest, negotiate=0, price=0)  # fmt: skip
    assert verify(s).ok and s.has_groups
    assert planned_sim(s, 16e6).time_s <= s.meta["mteg"]["asap_s"] * (1 + 1e-9) + 1e-12
