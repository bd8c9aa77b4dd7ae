"""Simulation on the quotient by a schedule's symmetry (collsynth.sim.quotient): found and
verified where it is exact, equal to the explicit simulation, refused on planted defects."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from collsynth.collective import Collective
from collsynth.sim import ORBIT_TIES, simulate
from collsynth.sim.quotient import find_quotient, quotient_or_reason
from collsynth.synth import synthesize
from collsynth.topology.spec import load_topology

FIELDS = ("op_start_s", "op_finish_s", "hop_start_s", "hop_end_s", "link_busy_s",
          "per_rank_time_s")  # fmt: skip


def _schedule(fabric: str, kind: str, algo: str = "forestcoll", size: float = 1e6):
    t = load_topology(fabric)
    return synthesize(algo, t, Collective.make(kind, t.num_ranks), size=size)


@pytest.fixture(scope="module")
def symmetric_cases():
    return {
        ("dgx2:chassis=2", "reducescatter"): _schedule("dgx2:chassis=2", "reducescatter"),
        ("dgx_a100:nodes=8", "allgather"): _schedule("dgx_a100:nodes=8", "allgather"),
        # pipelined trees: chunks that look alike, paired in turn (arrays.match_in_turn)
        ("dgx2:chassis=2", "allreduce"): _schedule("dgx2:chassis=2", "allreduce"),
    }


@pytest.mark.parametrize("order", ["plan", "fair"])
def test_quotient_equals_explicit(symmetric_cases, order):
    for (fabric, _), s in symmetric_cases.items():
        q = find_quotient(s, order)
        assert q is not None, quotient_or_reason(s, order)
        assert q.order == {"dgx2:chassis=2": 16, "dgx_a100:nodes=8": 32}[fabric]
        assert q.num_hops * q.order == len(s.route_links)
        fast = simulate(s, 1e6, order=order)
        full = simulate(s, 1e6, order=order, symmetric=False)
        assert fast.quotient == q.order and full.quotient == 1
        assert "quotient" in fast.order_policy and "quotient" not in full.order_policy
        assert np.array_equal(fast.hop_link, full.hop_link)
        assert np.array_equal(fast.hop_op, full.hop_op)
        for name in FIELDS:
            a, b = getattr(fast, name), getattr(full, name)
            assert np.max(np.abs(a - b)) <= 1e-12 * full.time_s, (fabric, order, name)
        # every operation of an orbit finishes with its representative
        assert np.array_equal(fast.op_finish_s, fast.op_finish_s[q.reps][q.op_orbit])


def test_look_alikes_are_paired_in_turn():
    from collsynth.arrays import match_in_turn

    keys = np.array([7, 3, 7, 5, 7, 3], dtype=np.uint64)
    wanted = np.array([3, 7, 7, 9, 3, 7, 5], dtype=np.uint64)
    # the i-th wanted entry of a value gets the i-th key of that value; 9 is missing
    assert match_in_turn(keys, wanted)[0].tolist() == [1, 0, 2, -1, 5, 4, 3]
    assert match_in_turn(keys, wanted)[1].tolist() == [2, 3, 3, 0, 2, 3, 1]  # keys per value
    # a value met more often among the wanted entries than among the keys gets none
    assert match_in_turn(keys, np.array([5, 5], dtype=np.uint64))[0].tolist() == [-1, -1]


def test_orbits_partition_operations(symmetric_cases):
    s = symmetric_cases[("dgx_a100:nodes=8", "allgather")]
    q = find_quotient(s, "fair")
    assert q is not None
    assert np.array_equal(np.bincount(q.op_orbit), np.full(len(q.reps), q.order))
    assert np.array_equal(q.op_orbit[q.reps], np.arange(len(q.reps)))
    # each representative link's order holds its positions 0 .. n-1 once
    for link in np.unique(q.hop_link)[:20]:
        hops = q.order_hops[q.order_ptr[link] : q.order_ptr[link + 1]]
        assert np.array_equal(q.hop_pos[hops], np.arange(len(hops)))


def test_first_served_and_costs_stay_explicit(symmetric_cases):
    s = symmetric_cases[("dgx2:chassis=2", "reducescatter")]
    assert find_quotient(s, "fcfs") is None
    assert "first-served" in quotient_or_reason(s, "fcfs")
    assert simulate(s, 1e6, order="fcfs").quotient == 1
    assert simulate(s, 1e6, order="fair", op_cost_s=1e-6).quotient == 1


def _swap_in_order(s, link_index: int = 0):
    """``s`` with two operations of one link's order swapped: no longer symmetric."""
    orders = {k: v.copy() for k, v in s.link_order.items()}
    key = sorted(orders, key=int)[link_index]
    orders[key][[0, 1]] = orders[key][[1, 0]]
    return replace(s, link_order=orders)


def test_planted_defects_are_refused(symmetric_cases):
    s = symmetric_cases[("dgx_a100:nodes=8", "allgather")]
    bad_order = _swap_in_order(s)
    assert find_quotient(bad_order, "plan") is None
    assert "not symmetric" in quotient_or_reason(bad_order, "plan")
    # a representative's route sent over another link of the same kind
    links = s.route_links.copy()
    first = int(s.route_ptr[1]) - 1
    other = int(np.flatnonzero(s.topology.link_bw == s.topology.link_bw[links[first]])[-1])
    links[first] = other if other != links[first] else 0
    assert find_quotient(replace(s, route_links=links), "plan") is None
    # a dependency dropped (on one operation only)
    ids = s.dep_ids.copy()
    dep_ptr = s.dep_ptr.copy()
    op = int(np.flatnonzero(np.diff(dep_ptr) > 0)[0])
    ids = np.delete(ids, dep_ptr[op])
    dep_ptr[op + 1 :] -= 1
    dropped = replace(s, dep_ids=ids, dep_ptr=dep_ptr)
    assert "dependencies are not symmetric" in quotient_or_reason(dropped, "fair")
    # the explicit simulation of every refused schedule still runs
    assert simulate(bad_order, 1e6, order="plan").quotient == 1


def test_orbit_ties_without_orders(symmetric_cases):
    s = symmetric_cases[("dgx2:chassis=2", "reducescatter")]
    bare = replace(s, link_order=None)
    assert find_quotient(bare, "plan") is None  # no orders: ties by hop id, not exact
    q = find_quotient(bare, "fcfs", orbit_ties=True)
    assert q is not None and q.order == 16
    for order in ("plan", "fcfs", "fair"):
        r = simulate(bare, 1e6, order=order, symmetric=ORBIT_TIES)
        assert r.quotient == 16 and "ties broken by orbit" in r.order_policy
        assert r.op_orbit is not None
        # a symmetric execution: every member of an orbit finishes with its representative
        assert np.array_equal(r.op_finish_s, r.op_finish_s[q.reps][q.op_orbit])


def test_synthesis_emits_symmetric_link_orders(symmetric_cases):
    """Link orders are taken from a symmetric simulation and sorted with symmetric tie
    keys, so a symmetric schedule keeps its symmetry with its orders."""
    for s in symmetric_cases.values():
        assert s.link_order
        assert find_quotient(s, "plan") is not None


def test_simulate_command_says_and_can_refuse_the_quotient(symmetric_cases, tmp_path, capsys):
    import json

    from collsynth.cli import main
    from collsynth.schedule.io import save_schedule

    path = tmp_path / "rs.npz"
    save_schedule(symmetric_cases[("dgx2:chassis=2", "reducescatter")], str(path))
    docs = []
    for extra in ([], ["--explicit"]):
        assert main(["simulate", str(path), "-s", "1MB", "--json", *extra]) == 0
        docs.append(json.loads(capsys.readouterr().out))
    assert docs[0]["quotient"] == 16 and docs[1]["quotient"] == 1
    assert abs(docs[0]["time_s"] - docs[1]["time_s"]) <= 1e-12 * docs[1]["time_s"]


def test_dependencies_listed_in_another_order_still_match(symmetric_cases):
    """The images of an operation's dependencies may be listed in any order."""
    s = symmetric_cases[("dgx2:chassis=2", "reducescatter")]
    ids = s.dep_ids.copy()
    ptr = s.dep_ptr
    several = np.flatnonzero(np.diff(ptr) > 1)
    assert len(several) > 100
    for op in several[::3]:
        ids[ptr[op] : ptr[op + 1]] = ids[ptr[op] : ptr[op + 1]][::-1]
    shuffled = replace(s, dep_ids=ids)
    assert not np.array_equal(shuffled.dep_ids, s.dep_ids)
    assert find_quotient(shuffled, "plan") is not None
    # and a dependency swapped for another one of the same list is still caught
    wrong = ids.copy()
    op = several[1]
    wrong[ptr[op]] = wrong[ptr[op + 1] - 1] = ids[ptr[op]]
    assert "dependencies" in quotient_or_reason(replace(s, dep_ids=wrong), "plan")


def test_malformed_orders_are_refused_not_crashed(symmetric_cases):
    s = symmetric_cases[("dgx2:chassis=2", "reducescatter")]
    orders = {k: v.copy() for k, v in s.link_order.items()}
    key = next(iter(orders))
    orders[key][0] = s.num_ops + 5
    assert "does not exist" in quotient_or_reason(replace(s, link_order=orders), "plan")


def _with_rank_joins(s):
    """``s`` (without link orders) plus one join per rank that waits for every operation the
    rank receives: a symmetric schedule with joins."""
    from collsynth.schedule.ir import OpKind

    ranks = np.arange(s.topology.num_ranks)
    dst = s.dst.astype(np.int64)
    counts = np.bincount(dst, minlength=len(ranks))
    step = np.zeros(len(ranks), dtype=s.step.dtype)
    np.maximum.at(step, dst, s.step + 1)

    def cat(a, v):
        if a is None:
            return None
        return np.concatenate((a, np.broadcast_to(v, len(ranks)).astype(a.dtype)))

    return replace(
        s, src=cat(s.src, ranks), dst=cat(s.dst, ranks), chunk=cat(s.chunk, 0),
        kind=cat(s.kind, int(OpKind.JOIN)),
        route_ptr=np.concatenate((s.route_ptr, np.full(len(ranks), s.route_ptr[-1]))),
        dep_ptr=np.concatenate((s.dep_ptr, s.dep_ptr[-1] + np.cumsum(counts))),
        dep_ids=np.concatenate((s.dep_ids, np.argsort(dst, kind="stable"))).astype(s.dep_ids.dtype),
        start=cat(s.start, np.nan), duration=cat(s.duration, np.nan), step=cat(s.step, step),
        part_lo=cat(s.part_lo, 0), part_hi=cat(s.part_hi, 1), part_den=cat(s.part_den, 1),
        link_order=None,
    )  # fmt: skip


def test_joins_on_the_quotient(symmetric_cases):
    from collsynth.synth.order import with_link_orders
    from collsynth.verify import check_schedule

    s = symmetric_cases[("dgx2:chassis=2", "reducescatter")]
    joined = _with_rank_joins(replace(s, link_order=None))
    ordered = with_link_orders(joined, 1e6)
    assert check_schedule(ordered).ok
    for order in ("plan", "fair"):
        q = find_quotient(ordered, order)
        assert q is not None, quotient_or_reason(ordered, order)
        fast = simulate(ordered, 1e6, order=order)
        full = simulate(ordered, 1e6, order=order, symmetric=False)
        assert fast.quotient == 16
        for name in FIELDS:
            a, b = getattr(fast, name), getattr(full, name)
            assert np.max(np.abs(a - b)) <= 1e-12 * full.time_s, (order, name)


def test_a_found_quotient_is_reused_and_a_foreign_one_ignored(symmetric_cases):
    s = symmetric_cases[("dgx2:chassis=2", "reducescatter")]
    bare = replace(s, link_order=None)
    q = find_quotient(bare, "plan", orbit_ties=True)
    assert q is not None and q.fits(bare)
    for order in ("plan", "fair"):
        again = simulate(bare, 1e6, order=order, symmetric=q)
        fresh = simulate(bare, 1e6, order=order, symmetric=ORBIT_TIES)
        assert again.quotient == q.order
        assert np.array_equal(again.op_finish_s, fresh.op_finish_s)
    other = symmetric_cases[("dgx_a100:nodes=8", "allgather")]
    assert not q.fits(other)
    assert simulate(other, 1e6, symmetric=q).time_s == simulate(other, 1e6).time_s


def test_matching_by_sorted_top_bits_equals_the_exact_search():
    from collsynth.schedule.symmetry import _match_exactly
    from collsynth.schedule.symmetry import match_keys as _match

    rng = np.random.default_rng(7)
    for trial in range(60):
        pool = rng.integers(0, 2**63, size=40, dtype=np.int64).astype(np.uint64)
        if trial % 2:  # values that share their top bits and differ below
            pool = (pool >> np.uint64(24) << np.uint64(24)) | rng.integers(0, 3, 40).astype(
                np.uint64
            )
        keys = pool[rng.integers(0, 40, size=100)]
        wanted = np.concatenate([pool, [np.uint64(12345)]])[rng.integers(0, 41, size=120)]
        found, one = _match(keys, wanted)
        want_found, want_one = _match_exactly(keys, wanted)
        assert np.array_equal(one, want_one)
        assert np.array_equal(found[one], want_found[want_one])
        assert (found[~one] == -1).all()
        assert (keys[found[one]] == wanted[one]).all()
