"""TE-CCL epoch MILP/LP (``--algo teccl``): hand-derived optima, growing K, verification,
simulator agreement, the AllToAll LP, TE-CCL files and the CLI.

Hand derivations use alpha = 0 (or alpha a whole number of epochs) so that the epoch model is
exact; ``M`` is the collective size, every link 50 GB/s unless said otherwise, and the fast
epoch is one chunk on a 50 GB/s link.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from collsynth.cli import main
from collsynth.collective import Collective
from collsynth.errors import CollsynthError
from collsynth.export.teccl import read_teccl_input, teccl_output
from collsynth.sim import simulate
from collsynth.synth import synthesize
from collsynth.synth.order import without_chosen_order
from collsynth.synth.teccl import make_grid, sample_alphas
from collsynth.topology import TopologyBuilder, load_topology
from collsynth.verify import ensure_verified

GB = 1e9
BW = 50 * GB
FAST = {"gap": 0, "time_limit": 20}


def planned_sim(s, size, **kw):
    """The schedule in its plan: the planned order, without the link orders synthesis chose for
    execution (what these tests check the algorithm's own estimates against)."""
    return simulate(without_chosen_order(s), size, order="plan", **kw)


def run_teccl(spec_or_topo, kind, size, chunks=1, **opts):
    topo = load_topology(spec_or_topo) if isinstance(spec_or_topo, str) else spec_or_topo
    coll = Collective.make(kind, topo.num_ranks, chunks)
    sched = synthesize("teccl", topo, coll, size=size, **{**FAST, **opts})
    ensure_verified(sched)
    return sched, sched.meta["teccl"], planned_sim(sched, size).time_s


def assert_agrees(m, sim):
    """Simulator vs MILP estimate: within one epoch plus the epoch model's rounding."""
    est, tau = m["estimate_s"], m["tau_s"]
    assert sim <= m["plan_s"] * (1 + 1e-9) + 1e-15
    assert sim <= est + m["rounding_down_s"] + 1e-9 * est
    assert sim >= est - tau - m["rounding_up_s"] - 1e-9 * est


# ------------------------------------------------------------------------ hand-derived optima
@pytest.mark.parametrize(
    "spec,kind,n,epochs",
    [
        # line of 3: the end chunks cross two links, one per epoch -> 2 epochs
        ("line:n=3,alpha=0", "allgather", 3, 2),
        # ring of 4: 3 chunks arrive over 2 in-links (>= 2 epochs), the opposite one is 2 hops
        ("ring:n=4,alpha=0", "allgather", 4, 2),
        # star through one switch: each GPU's single downlink carries 3 chunks -> 3 epochs
        ("star:n=4,alpha=0", "allgather", 4, 3),
    ],
)
def test_small_allgather_optimum(spec, kind, n, epochs):
    size = n * GB  # 1 GB chunks: tau = 20 ms
    sched, m, sim = run_teccl(spec, kind, size)
    tau = GB / BW
    assert m["tau_s"] == pytest.approx(tau)
    assert m["status"] == "optimal" and m["proven_optimal"]
    assert sched.meta["status"] == "optimal" and sched.meta["gap"] <= 1e-9
    assert m["epochs_required"] == epochs
    assert m["estimate_s"] == pytest.approx(epochs * tau)
    assert sim == pytest.approx(epochs * tau)  # alpha 0: the epoch model is exact
    assert_agrees(m, sim)


def test_star_with_alpha_of_one_epoch():
    # alpha = tau on every link: the first chunk reaches a GPU after 1 (send) + 1 + 1 (alphas)
    # epochs, and its downlink still has to carry 2 more -> 5 epochs.
    size = 4e6  # 1 MB chunks, tau = 20 us
    sched, m, sim = run_teccl("star:n=4,alpha=20us", "allgather", size)
    assert m["alpha_epochs" if "alpha_epochs" in m else "max_alpha_epochs"] == 1
    assert m["epochs_required"] == 5 and m["proven_optimal"]
    assert sim == pytest.approx(5 * 20e-6)


def test_dgx1_broadcast_three_epochs():
    # DGX-1 (alpha 0), broadcast of one chunk from GPU 0: GPU 6's neighbours are 2, 7 (50 GB/s)
    # and 4, 5 (25 GB/s); none of them holds the chunk early enough for epoch 2 (0-2 is a
    # 25 GB/s link: 2 epochs; 7 is two hops away), so 3 epochs = 3 M / 50 GB/s is optimal.
    size = 1 * GB
    sched, m, sim = run_teccl("dgx1:alpha=0", "broadcast", size)
    assert m["proven_optimal"] and m["epochs_required"] == 3
    assert sim == pytest.approx(3 * size / BW)
    assert_agrees(m, sim)


def test_slow_link_spans_several_epochs():
    # gpu0 -50- gpu1 -25- gpu2: the 25 GB/s link needs 2 fast epochs per chunk and must carry
    # chunks 0 and 1 to gpu2 -> 4 epochs = 2 chunks / 25 GB/s.
    b = TopologyBuilder("line-slow")
    g = [b.compute(f"gpu{i}") for i in range(3)]
    b.bilink(g[0], g[1], BW, 0.0)
    b.bilink(g[1], g[2], BW / 2, 0.0)
    topo = b.build()
    size = 3 * GB
    grid = make_grid(topo, GB, "fast")
    assert grid.beta_ep.tolist() == [0, 0, 1, 1] and grid.per_window.tolist() == [1, 1, 1, 1]
    sched, m, sim = run_teccl(topo, "allgather", size)
    assert m["epochs_required"] == 4 and m["proven_optimal"]
    assert sim == pytest.approx(2 * GB / (BW / 2))


def test_epoch_grid_alpha_and_modes():
    topo = load_topology("dgx1")  # 50 / 25 GB/s, alpha 0.7 us
    g = make_grid(topo, 1e6, "fast")  # alpha / tau = 0.7us / 20us <= 0.1: 0 epochs
    assert g.tau == pytest.approx(1e6 / BW) and g.alpha_ep.max() == 0
    g = make_grid(topo, 1e5, "fast")  # 0.7us / 2us: ceil(0.35) = 1 epoch
    assert g.alpha_ep.min() == 1 and g.delay.tolist() == [
        2 if b == BW else 3 for b in topo.link_bw.tolist()
    ]
    assert make_grid(topo, 1e6, "slow").tau == pytest.approx(1e6 / (25 * GB))
    assert make_grid(topo, 1e6, "1us", multiplier=2).tau == pytest.approx(2e-6)
    # alpha check: min alpha / tau > 200 raises tau to min alpha / 200
    small = make_grid(topo, 10.0, "fast")
    assert small.tau == pytest.approx(0.7e-6 / 200) and small.note
    with pytest.raises(CollsynthError):
        make_grid(topo, 1e6, "sideways")


# ------------------------------------------------------------------------ K and heterogeneity
def test_infeasible_horizon_grows():
    # K = 1 is below the fewest epochs the line needs; K = 2 is found by growing.
    sched, m, sim = run_teccl("line:n=3,alpha=0", "allgather", 3 * GB, epochs=1)
    assert m["horizons"][0]["K"] == 1 and "infeasible" in m["horizons"][0]["status"]
    assert m["epochs_required"] == 2
    # star: K = 2 reaches every GPU in time but lacks downlink capacity: the epoch cut bound
    # (3 chunks into each GPU over one link) rejects it without a solve; K grows to 3
    sched, m, sim = run_teccl("star:n=4,alpha=0", "allgather", 4 * GB, epochs=2)
    assert [h["status"] for h in m["horizons"]] == [
        "infeasible (below the lower bound)",
        "optimal",
    ]
    assert m["epochs_required"] == 3
    # a broadcast through a switch that does not copy: the root's uplink carries one copy per
    # GPU, which the cut bound does not see; the solver proves K = 1 and K = 2 infeasible
    sched, m, sim = run_teccl("star:n=5,alpha=0", "broadcast", 1e6, epochs=1)
    assert [h["status"] for h in m["horizons"]] == ["infeasible", "infeasible", "optimal"]
    assert m["epochs_required"] == 3


def test_heterogeneous_alpha_agreement_and_determinism():
    topo = sample_alphas(load_topology("dgx1"), seed=3, low=1e-6, high=30e-6)
    assert np.array_equal(
        topo.link_alpha, sample_alphas(load_topology("dgx1"), 3, 1e-6, 30e-6).link_alpha
    )
    assert len(set(topo.link_alpha.tolist())) > 8
    size = 8e6
    s1, m, sim = run_teccl(topo, "allgather", size)
    assert m["status"] == "optimal" and m["max_alpha_epochs"] >= 2
    assert m["heuristic"]["epochs"] >= m["epochs_required"]
    assert {"spt_epochs", "flood_epochs"} <= set(m["heuristic"])
    assert_agrees(m, sim)
    s2, _, _ = run_teccl(topo, "allgather", size)
    for col in ("src", "dst", "chunk", "start", "step", "route_links"):
        assert np.array_equal(getattr(s1, col), getattr(s2, col))


def test_time_limit_returns_best_found():
    # a tiny time limit still returns a verified schedule (at worst the warm start)
    sched, m, sim = run_teccl(
        "ndv2:chassis=2", "allgather", 16e6, time_limit=0.05, gap=1e-4, max_nonzeros=0
    )
    assert sched.meta["status"] in ("optimal", "time_limit")
    assert m["epochs_required"] <= m["heuristic"]["epochs"]
    assert "gap" in sched.meta
    # a model too large for the time limit is not even handed to HiGHS (on DGX-2 the
    # heuristic's 54 epochs are above the lower bound's 43, so it is not proven optimal)
    sched, m, sim = run_teccl("dgx2", "allgather", 1e6, max_nonzeros=1)
    assert (
        sched.meta["status"] == "time_limit"
        and m["status"] == "skipped_heuristic"
        and "skipped" in m["horizons"][-1]["status"]
    )
    assert m["epochs_required"] == m["heuristic"]["epochs"]


def test_solver_overrunning_its_limit_is_killed(monkeypatch):
    # HiGHS may check its limit too rarely on a large model; the helper process is then killed
    # at the hard limit (here: no grace at all, so even starting the helper overruns it)
    from collsynth.synth.teccl import highs

    monkeypatch.setattr(highs, "HARD_GRACE_FACTOR", 0.0)
    monkeypatch.setattr(highs, "HARD_GRACE_S", 0.0)
    highs._stop_worker()
    sched, m, sim = run_teccl("dgx2", "allgather", 1e6, time_limit=0.5, max_nonzeros=0)
    h = m["horizons"][-1]
    assert h["killed"] is True and h["status"] == "time_limit"
    assert m["status"] == "time_limit_heuristic" and sched.meta["status"] == "time_limit"
    assert m["epochs_required"] == m["heuristic"]["epochs"]
    assert highs._WORKER is None  # killed, not left running
    monkeypatch.undo()
    _, m2, _ = run_teccl("ring:n=4,alpha=0", "allgather", 4 * GB)  # a fresh helper serves
    assert m2["status"] == "optimal" and "killed" not in m2["horizons"][-1]


@pytest.mark.parametrize(
    "spec,size,order",
    [("ring:n=6,alpha=0", 6 * GB, 6), ("torus2d:w=3,h=3", 9e6, 9), ("dgx1", 1e6, 2)],
)
def test_symmetric_model_matches_full_model(spec, size, order):
    # one commodity per orbit: the same optimum as the full model, far fewer columns
    # (epochs=1: solve even where the heuristic already meets the lower bound)
    s_sym, m_sym, sim_sym = run_teccl(spec, "allgather", size, epochs=1)
    s_full, m_full, sim_full = run_teccl(spec, "allgather", size, symmetry=False, epochs=1)
    sm = m_sym["symmetric_model"]
    assert sm["group_order"] == order and sm["commodities"] * order == sm["of"]
    assert "symmetric_model" not in m_full and m_full["symmetry"] is False
    assert m_sym["epochs_required"] == m_full["epochs_required"]
    assert m_sym["status"] == "optimal" and m_sym["proven_optimal"]
    cols = m_sym["horizons"][-1]["columns"], m_full["horizons"][-1]["columns"]
    assert cols[0] <= cols[1] / order * 1.1 + 20  # (flows and buffers / |G|; the u columns stay)
    assert_agrees(m_sym, sim_sym)
    assert sim_sym <= sim_full * 1.5


def test_symmetric_model_on_dgx2_and_switch_capacity():
    # 32 GPUs, |G| = 16: two commodities; the switch links of an orbit share capacity, so the
    # mapped schedule passes the verifier's timed capacity check (run_teccl verifies it)
    sched, m, sim = run_teccl("dgx2:chassis=2", "allgather", 32e6, epoch="slow", epochs=1)
    assert m["symmetric_model"]["commodities"] == 2
    assert m["epochs_required"] >= m["lower_bound_epochs"]
    assert sched.num_ops == 32 * 31
    assert_agrees(m, sim)
    # switch copies become multicast groups, renumbered per image
    sched, m, sim = run_teccl(
        "dgx2:chassis=2,switch_copy=1",
        "allgather",
        1 * GB,
        epoch="slow",
        switch_copy=True,
        epochs=1,
    )
    assert m["symmetric_model"]["group_order"] == 16 and m["epochs_required"] == 4
    assert sim == pytest.approx(7.753e-3, rel=1e-3)
    assert len(np.unique(sched.group[sched.group >= 0])) >= 16


@pytest.mark.parametrize("spec", ["ndv2:chassis=4", "dgx2:chassis=2"])
def test_symmetric_warm_start_is_feasible_in_the_symmetric_model(spec):
    # the spt schedule placed with all its images: a point of the symmetric model (every row
    # and bound holds), and mapped to every chunk a schedule the verifier accepts
    from scipy.sparse import csr_matrix

    from collsynth.synth.teccl import common, milp
    from collsynth.synth.teccl import symmetry as sy
    from collsynth.synth.teccl.heuristic import spt_schedule
    from collsynth.synth.teccl.lower import to_schedule

    t = load_topology(spec)
    coll = Collective.make("allgather", t.num_ranks, 1)
    grid = make_grid(t, coll.chunk_bytes(1e9), "slow", 1.0, 0.1, 200.0)
    com = common.Commodities.of(coll)
    sym = sy.find(t, com, grid)
    assert sym is not None
    ops, k = sy.greedy_epochs(t, grid, spt_schedule(t, coll), sym, com)
    dist = common.epoch_distances(t, grid.delay)
    to_gpu = common.to_gpu_distance(t, grid.delay)
    rep = sym.representatives(com)
    lay = milp.build(t, grid, rep, k, dist, to_gpu, False, "makespan", sym.link_class,
                     sym.weight)  # fmt: skip
    q_of = {int(c): q for q, c in enumerate(rep.chunk.tolist())}
    x = milp.warm_vector(lay, t, rep, grid, ops, q_of)
    assert x is not None
    m = lay.model
    act = csr_matrix((m.vals, (m.rows, m.cols)), shape=(m.num_rows, m.num_cols)) @ x
    assert np.all(act >= m.row_lower - 1e-9) and np.all(act <= m.row_upper + 1e-9)
    assert np.all(x >= m.lower - 1e-9) and np.all(x <= m.upper + 1e-9)
    full = sy.expand(sym, com, ops)
    sched, _ = to_schedule(t, coll, full, grid.tau, 1e9, {}, grid.alpha_ep)
    ensure_verified(sched)


def test_full_model_proves_what_the_symmetric_one_cannot():
    # DGX-1, fine epochs: the symmetric optimum (18 epochs) is above the epoch cut bound
    # (16); the full model, warm-started from it in the time left, proves it optimal
    _, m, sim = run_teccl("dgx1", "allgather", 1e6, epoch_multiplier=0.25, alpha_ratio_max=4)
    assert [(h.get("model"), h["status"]) for h in m["horizons"]] == [
        (None, "optimal"),
        ("full", "optimal"),
    ]
    assert m["status"] == "optimal" and m["proven_optimal"] and m["epochs_required"] == 18
    assert m["schedule_from"] == "solver"
    assert_agrees(m, sim)


def test_no_symmetry_when_chunks_are_not_permuted():
    # a broadcast's root is fixed by no free automorphism: the full model is solved
    _, m, _ = run_teccl("ring:n=4,alpha=0", "broadcast", 4e6)
    assert "symmetric_model" not in m and m["status"] == "optimal"


def _epoch_model(t, size, epoch="fast"):
    """AllGather of ``size`` on ``t`` (one chunk per rank) in the epoch model: ``(grid,
    commodities, distances, distances to a GPU)``, for the bound and MILP tests."""
    from collsynth.synth.teccl import common, make_grid

    coll = Collective.make("allgather", t.num_ranks, 1)
    grid = make_grid(t, coll.chunk_bytes(size), epoch, 1.0, 0.1, 200.0)
    com = common.Commodities.of(coll)
    dist = common.epoch_distances(t, grid.delay)
    return grid, com, dist, common.to_gpu_distance(t, grid.delay)


def test_epoch_cut_bound():
    # star of 4 through one switch, one chunk per epoch per link: each GPU receives 3
    # chunks over its one downlink -> at least 3 epochs (the path bound alone says 1)
    from collsynth.synth.teccl.cut_bound import epoch_cut_bound

    t = load_topology("star:n=4,alpha=0")
    grid, com, dist, to_gpu = _epoch_model(t, 4 * GB)
    k = epoch_cut_bound(t, grid, com, dist, to_gpu, 0, 100)
    assert k == 3
    _, m, _ = run_teccl(t, "allgather", 4 * GB)
    assert m["lower_bound_epochs"] == 3 and m["fewest_epochs"] < 3
    assert m["epochs_required"] == 3 and m["proven_optimal"] and m["gap"] == 0
    # the warm start already meets the bound: a short solve only for earlier deliveries
    assert m["heuristic_meets_bound"] and m["heuristic"]["epochs"] == 3
    assert [h["status"] for h in m["horizons"]] == ["optimal"] and m["status"] == "optimal"
    # ... skipped where the model is too large for it: still optimal, from the heuristic
    _, m, _ = run_teccl(t, "allgather", 4 * GB, max_nonzeros=1)
    assert "skipped" in m["horizons"][0]["status"] and m["status"] == "optimal"
    assert m["schedule_from"] == "heuristic" and m["proven_optimal"]


def test_epoch_cut_bound_counts_the_way_on_after_entering():
    # NDv2 x2 with slow epochs: a chassis is entered only through its NIC GPU, one chunk per
    # epoch; the 8 chunks from the other chassis start crossing at epochs 1 .. 8 at best, and
    # the last one still needs 2 NVLink hops to the GPUs farthest from the NIC GPU: 10 epochs
    # (without that tail the cut says 8). The full MILP confirms 9 is infeasible.
    from collsynth.synth.teccl import milp
    from collsynth.synth.teccl.cut_bound import epoch_cut_bound
    from collsynth.synth.teccl.highs import solve

    t = load_topology("ndv2:chassis=2")
    grid, com, dist, to_gpu = _epoch_model(t, 1 * GB, "slow")
    assert epoch_cut_bound(t, grid, com, dist, to_gpu, 0, 100) == 10
    layout = milp.build(t, grid, com, 9, dist, to_gpu)
    assert solve(layout.model, time_limit=60, gap=1e-4).status == "infeasible"
    _, m, _ = run_teccl(t, "allgather", 1 * GB, epoch="slow")
    assert m["lower_bound_epochs"] == 10 and m["epochs_required"] == 10 and m["proven_optimal"]


def _two_small_chassis():
    # a DGX-2 in miniature: 2 chassis of 4 GPUs on a switch; odd GPUs send over a slow link
    # to the even GPUs of the other chassis
    from collsynth.topology.model import TopologyBuilder

    b = TopologyBuilder("mini-dgx2")
    g = []
    for c in range(2):
        gg = [b.compute(f"c{c}.g{j}", chassis=c, local=j) for j in range(4)]
        sw = b.switch(f"c{c}.sw", role="nvswitch", chassis=c)
        for x in gg:
            b.bilink(x, sw, 100 * GB, 0.35e-6, "nvswitch")
        g.append(gg)
    for c in range(2):
        for odd in (1, 3):
            b.link(g[c][odd], g[1 - c][odd - 1], 12.5 * GB, 2.6e-6, "ib")
    return b.build()


def test_epoch_cut_bound_releases_from_the_enclosing_region(monkeypatch):
    # a GPU of one chassis gets the other chassis' chunks over its switch downlink only after
    # they crossed the 2 slow links into the chassis, which carry one chunk per 8 epochs each:
    # the bound counts those crossings as later releases at the switch (23 epochs; 22 without)
    from collsynth.synth.teccl import cut_bound, milp
    from collsynth.synth.teccl.highs import solve

    t = _two_small_chassis()
    grid, com, dist, to_gpu = _epoch_model(t, 1e6)
    assert cut_bound.epoch_cut_bound(t, grid, com, dist, to_gpu, 0, 100) == 23
    # valid: the full MILP has no schedule in 22 epochs
    layout = milp.build(t, grid, com, 22, dist, to_gpu)
    assert solve(layout.model, time_limit=120, gap=1e-4).status == "infeasible"
    plain = cut_bound._region_cut
    monkeypatch.setattr(
        cut_bound,
        "_region_cut",
        lambda t, g, c, d, inside, outer=None, cache=None: (
            plain(t, g, c, d, inside) if outer is None else None
        ),
    )
    assert cut_bound.epoch_cut_bound(t, grid, com, dist, to_gpu, 0, 100) == 22


def test_switch_copy_option_runs():
    sched, m, sim = run_teccl("star:n=4,alpha=0", "allgather", 4 * GB, switch_copy="true")
    assert m["switch_copy"] is True and m["epochs_required"] <= 3


def test_paper_objective():
    sched, m, sim = run_teccl("ring:n=4,alpha=0", "allgather", 4 * GB, objective="paper")
    assert m["objective"] == "paper" and m["epochs_required"] == 2


# ------------------------------------------------------------------------ LP and demands
def test_alltoall_lp_ring():
    # ring of 4, 1 GB per (source, destination) chunk: each node sends 4 chunk-hops (two
    # neighbours, one two-hop) over 2 out-links, and the 8 links carry 16 chunk-hops -> 2.
    sched, m, sim = run_teccl("ring:n=4,alpha=0", "alltoall", 4 * GB)
    assert m["mode"] == "lp" and m["status"] == "optimal"
    assert m["epochs_required"] == 2
    assert sim == pytest.approx(2 * GB / BW)
    assert_agrees(m, sim)


def test_alltoall_lp_switch_and_parts():
    sched, m, sim = run_teccl("star:n=4,alpha=0", "alltoall", 4e6, chunks=2, parts=4)
    assert m["mode"] == "lp" and m["epochs_required"] == 6  # 6 chunks per downlink
    assert m["decomposition"]["dropped_volume"] < 1e-6
    assert_agrees(m, sim)


def test_demand_matrix_milp_and_lp():
    topo = load_topology("ring:n=4,alpha=0")
    coll = Collective.from_demand_matrix([[0, 2, 0, 1], [0, 0, 0, 0], [1, 0, 0, 0], [0, 0, 1, 0]])
    for mode in ("milp", "lp"):
        s = synthesize("teccl", topo, coll, size=4 * GB, mode=mode, **FAST)
        ensure_verified(s)
        assert s.meta["teccl"]["mode"] == mode
        assert_agrees(s.meta["teccl"], planned_sim(s, 4 * GB).time_s)


def test_bad_options():
    topo = load_topology("ring:n=4")
    coll = Collective.make("allgather", 4)
    for bad in (
        {"gap": "x"},
        {"time_limit": 0},
        {"objective": "fastest"},
        {"mode": "qp"},
        {"epochs": "1.5"},
        {"switch_copy": "maybe"},
        {"highs": "nocolon"},
    ):
        with pytest.raises(CollsynthError):
            synthesize("teccl", topo, coll, size=1e6, **bad)
    with pytest.raises(CollsynthError):
        synthesize(
            "teccl",
            topo,
            Collective.make("alltoall", 4).__class__.make("allgather", 4),
            size=1e6,
            mode="lp",
        )


# ------------------------------------------------------------------------ files and CLI
TECCL_INPUT = {
    "TopologyParams": {"name": "DGX1", "chassis": 1, "chunk_size": 0.001, "alpha": [0, 0]},
    "GurobiParams": {"time_limit": 0.005, "mip_gap": 0.0, "mip_focus": 1, "heuristics": 0.3},
    "InstanceParams": {
        "collective": 1,
        "num_chunks": 1,
        "epoch_type": 1,
        "num_epochs": -1,
        "objective_type": 1,
        "alpha_threshold": 0.1,
    },
}


def test_read_teccl_input(tmp_path):
    p = tmp_path / "in.json"
    p.write_text(json.dumps(TECCL_INPUT))
    inp = read_teccl_input(str(p))
    assert inp.topology.num_ranks == 8 and inp.collective.kind.value == "allgather"
    assert inp.size == pytest.approx(8 * 1e6)
    assert inp.options["time_limit"] == pytest.approx(18.0) and inp.options["gap"] == 0.0
    assert inp.options["highs"] == {"mip_heuristic_effort": 0.3}
    assert inp.options["objective"] == "makespan" and inp.options["epoch"] == "fast"
    assert any("mip_focus" in n for n in inp.notes)
    bad = dict(TECCL_INPUT, InstanceParams={"collective": 1, "epoch_type": 7})
    p.write_text(json.dumps(bad))
    with pytest.raises(CollsynthError):
        read_teccl_input(str(p))


def test_cli_teccl_input_output(capsys, tmp_path):
    inp = tmp_path / "in.json"
    inp.write_text(json.dumps(TECCL_INPUT))
    out, te = tmp_path / "s.json", tmp_path / "te.json"
    rc = main(["synth", "--teccl-input", str(inp), "-o", str(out), "--teccl-output", str(te)])
    assert rc == 0, capsys.readouterr().err
    data = json.loads(te.read_text())
    for key in (
        "1-Epoch_Duration",
        "2-Expected_Epoch_Duration",
        "3-Epochs_Required",
        "4-Collective_Finish_Time",
        "5-Algo_Bandwidth",
        "6-Demand_Met",
        "7-Flows",
        "8-Chunk paths",
        "Solver_Time",
    ):
        assert key in data
    assert data["3-Epochs_Required"] == 3  # DGX-1 AllGather: 7 chunks in at 150 GB/s
    assert data["1-Epoch_Duration"] == pytest.approx(1e6 / BW)
    assert len(data["7-Flows"]) == 56 and len(data["8-Chunk paths"]) == 56
    assert all(
        re.fullmatch(r"Chunk 0 from \d+ traveled over \d+->\d+ in epoch \d+", f)
        for f in data["7-Flows"]
    )
    assert all(k.startswith("Demand at ") for k in data["8-Chunk paths"])
    assert main(["verify", str(out)]) == 0
    capsys.readouterr()


def test_cli_opts_and_lp_output(capsys, tmp_path):
    out, te = tmp_path / "s.json", tmp_path / "te.json"
    rc = main(
        [
            "synth",
            "-t",
            "star:n=4,alpha=0",
            "-c",
            "alltoall",
            "--algo",
            "teccl",
            "--opt",
            "epoch=slow",
            "--opt",
            "gap=0.3",
            "--opt",
            "time_limit=10",
            "--size",
            "4MB",
            "-o",
            str(out),
            "--teccl-output",
            str(te),
        ]
    )
    assert rc == 0, capsys.readouterr().err
    data = json.loads(te.read_text())
    assert "6-Demand_Met" not in data and "with volume" in data["7-Flows"][0]
    assert "via switches" in data["7-Flows"][0]
    rc = main(
        [
            "synth",
            "-t",
            "ring:n=4",
            "-c",
            "allgather",
            "--algo",
            "teccl",
            "--opt",
            "epoch=2us",
            "-o",
            str(out),
        ]
    )
    assert rc == 0
    capsys.readouterr()


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["--opt", "epoch=sideways"], "epoch"),
        (["--opt", "gap=-1"], "gap"),
        (["--opt", "nosuch=1"], "nosuch"),
        (["--teccl-output", "X"], None),
    ],
)
def test_cli_bad_option_exit_2(capsys, tmp_path, argv, needle):
    base = [
        "synth",
        "-t",
        "ring:n=4",
        "-c",
        "allgather",
        "--algo",
        "teccl",
        "-o",
        str(tmp_path / "s.json"),
    ]
    if argv[0] == "--teccl-output":
        base = [
            "synth",
            "-t",
            "ring:n=4",
            "-c",
            "allgather",
            "--algo",
            "ring",
            "-o",
            str(tmp_path / "s.json"),
            "--teccl-output",
            str(tmp_path / "x.json"),
        ]
        argv = []
    rc = main(base + argv)
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    if needle:
        assert needle in err


def test_teccl_output_needs_teccl_schedule():
    s = synthesize("spt", load_topology("ring:n=4"), Collective.make("allgather", 4))
    with pytest.raises(CollsynthError):
        teccl_output(s)
