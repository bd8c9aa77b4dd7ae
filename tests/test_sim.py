"""The simulator against hand-derived formulas (docs/simulator.md)."""

import dataclasses

import numpy as np
import pytest

from collsynth.collective import Collective
from collsynth.errors import CollsynthError
from collsynth.schedule.ir import ScheduleBuilder
from collsynth.sim import simulate
from collsynth.synth import synthesize
from collsynth.topology import TopologyBuilder, load_topology
from collsynth.verify import verify

A = 1e-6  # alpha
B = 10e9  # bandwidth


def _line(n, bw=B, alpha=A):
    return load_topology(f"line:n={n},bw={bw},alpha={alpha}")


def test_one_link():
    topo = _line(2)
    b = ScheduleBuilder(topo, Collective.make("broadcast", 2, 1))
    b.add(0, 1, 0)
    s = b.build()
    verify(s)
    m = 4e6
    r = simulate(s, m)
    assert r.time_s == pytest.approx(A + m / B, rel=1e-12)
    assert r.algbw == pytest.approx(m / (A + m / B))
    assert r.busbw == pytest.approx(r.algbw)  # broadcast factor 1
    assert r.link_busy_s[s.route(0)[0]] == pytest.approx(m / B)


@pytest.mark.parametrize("hops,chunks", [(1, 1), (3, 1), (3, 4), (5, 8), (7, 16)])
def test_store_and_forward_chain_with_pipelining(hops, chunks):
    # seed 000 §3: T = beta + beta (h-1)/c + h alpha, beta = M / b
    topo = _line(hops + 1)
    coll = Collective.make("broadcast", hops + 1, chunks)
    s = synthesize("spt", topo, coll)
    verify(s)
    m = 8e6
    beta = m / B
    r = simulate(s, m)
    expected = beta + beta * (hops - 1) / chunks + hops * A
    assert r.time_s == pytest.approx(expected, rel=1e-9)
    # the last rank finishes last; rank 1 finishes when its last chunk arrived
    assert r.per_rank_time_s[-1] == pytest.approx(expected, rel=1e-9)


def _ring_allgather(n):
    """One-directional ring AllGather: at step j rank r forwards chunk (r - j) mod n."""
    topo = load_topology(f"ring:n={n},bw={B},alpha={A}")
    coll = Collective.make("allgather", n, 1)
    b = ScheduleBuilder(topo, coll)
    last = {}
    for step in range(n - 1):
        new = {}
        for r in range(n):
            chunk = (r - step) % n
            deps = [last[(r, chunk)]] if step else []
            new[((r + 1) % n, chunk)] = b.add(r, (r + 1) % n, chunk, deps=deps, step=step)
        last.update(new)
    return b.build()


@pytest.mark.parametrize("n", [3, 4, 8, 16])
def test_ring_allgather_on_ring(n):
    s = _ring_allgather(n)
    verify(s)
    m = 16e6
    r = simulate(s, m)
    assert r.time_s == pytest.approx((n - 1) * (A + m / (n * B)), rel=1e-9)
    assert r.busbw == pytest.approx(r.algbw * (n - 1) / n)


def _star2(bw_up, bw_down, a_up, a_down):
    b = TopologyBuilder("star2")
    g0, g1 = b.compute("gpu0"), b.compute("gpu1")
    sw = b.switch("sw")
    b.link(g0, sw, bw_up, a_up)
    b.link(sw, g1, bw_down, a_down)
    b.link(g1, sw, bw_up, a_up)
    b.link(sw, g0, bw_down, a_down)
    return b.build()


def test_cut_through_switch_vs_store_and_forward_gpu():
    m = 5e6
    # through a switch: alphas add, transmission limited by the bottleneck link
    topo = _star2(B, B / 2, A, 3 * A)
    b = ScheduleBuilder(topo, Collective.make("broadcast", 2, 1))
    b.add(0, 1, 0)
    s = b.build()
    verify(s)
    r = simulate(s, m)
    assert r.time_s == pytest.approx(A + 3 * A + m / (B / 2), rel=1e-12)
    # each link is still occupied for s / b
    assert sorted(r.link_busy_s[r.link_busy_s > 0]) == pytest.approx(sorted([m / B, m / (B / 2)]))
    # through a GPU (store and forward): two full transmissions
    line = _line(3)
    b = ScheduleBuilder(line, Collective.make("broadcast", 3, 1))
    first = b.add(0, 1, 0)
    b.add(1, 2, 0, deps=[first])
    s2 = b.build()
    verify(s2)
    r2 = simulate(s2, m)
    assert r2.time_s == pytest.approx(2 * A + 2 * m / B, rel=1e-12)
    # cut-through beats store-and-forward on equal links
    topo_eq = _star2(B, B, A, A)
    b = ScheduleBuilder(topo_eq, Collective.make("broadcast", 2, 1))
    b.add(0, 1, 0)
    t_ct = simulate(b.build(), m).time_s
    assert t_ct == pytest.approx(2 * A + m / B)
    assert t_ct < r2.time_s


def _two_on_one_link():
    """Two independent operations (both chunks of a broadcast) on one link."""
    b = ScheduleBuilder(_line(2), Collective.make("broadcast", 2, 2))
    b.add(0, 1, 0)
    b.add(0, 1, 1)
    return b.build()


def test_contention_two_flows_one_link():
    s = _two_on_one_link()
    m = 2e6
    r = simulate(s, m)
    chunk = m / 2
    assert r.op_finish_s[0] == pytest.approx(A + chunk / B)
    assert r.op_finish_s[1] == pytest.approx(A + 2 * chunk / B)  # waits for the link
    assert r.link_busy_s[s.route(0)[0]] == pytest.approx(m / B)
    assert r.link_utilisation.max() == pytest.approx((m / B) / r.time_s)


def test_contention_at_switch_egress():
    # two GPUs send to a third through one switch: the switch->gpu2 link is shared
    topo = load_topology(f"star:n=3,bw={B},alpha={A}")
    coll = Collective.make("gather", 3, 1, root=2)
    b = ScheduleBuilder(topo, coll)
    b.add(0, 2, 0)
    b.add(1, 2, 1)
    s = b.build()
    verify(s)
    m = 3e6
    c = m / 3
    r = simulate(s, m, order="plan")
    assert sorted(r.op_finish_s) == pytest.approx([2 * A + c / B, 2 * A + 2 * c / B])


def test_planned_order_is_respected():
    topo = _line(2)
    b = ScheduleBuilder(topo, Collective.make("broadcast", 2, 2))
    first = b.add(0, 1, 0)
    second = b.add(0, 1, 1)
    link = int(b.build().route(0)[0])
    b.set_link_order(link, [second, first])
    s = b.build()
    verify(s)
    r = simulate(s, 2e6)
    assert r.op_finish_s[second] < r.op_finish_s[first]
    assert "link order" in r.order_policy
    # fcfs ignores the plan
    r2 = simulate(s, 2e6, order="fcfs")
    assert r2.op_finish_s[first] < r2.op_finish_s[second]


def test_a_link_order_naming_an_op_off_its_link_is_one_error():
    """An unverified schedule whose link order lists an operation that does not cross the link
    (or one that does not exist) is refused with the link and op named, in both models."""
    from dataclasses import replace

    topo = _line(3)
    b = ScheduleBuilder(topo, Collective.make("broadcast", 3, 1))
    near = b.add(0, 1, 0)
    far = b.add(1, 2, 0, deps=[near])
    s = b.build()
    first_link = int(s.route(near)[0])
    for bad in ([near, far], [near, 99]):
        wrong = replace(s, link_order={first_link: np.array(bad)})
        for order in ("plan", "fair"):
            with pytest.raises(CollsynthError, match=f"link {first_link} lists op {bad[1]}"):
                simulate(wrong, 1e6, order=order)


def test_planned_start_times_order_and_release():
    topo = _line(2)
    b = ScheduleBuilder(topo, Collective.make("broadcast", 2, 2))
    b.size = 2e6
    late = b.add(0, 1, 0, start=1e-3)
    early = b.add(0, 1, 1, start=0.0)
    s = b.build()
    verify(s)
    r = simulate(s, 2e6, order="plan")
    assert r.op_finish_s[early] < r.op_finish_s[late]
    assert r.op_start_s[late] == pytest.approx(1e6 / B)  # as soon as the link frees
    r2 = simulate(s, 2e6, release=True, order="plan")
    assert r2.op_start_s[late] == pytest.approx(1e-3)  # held until its planned start


def test_reduction_cost():
    topo = _line(2)
    b = ScheduleBuilder(topo, Collective.make("reduce", 2, 1, root=1))
    b.add(0, 1, 0, kind="reduce")
    s = b.build()
    verify(s)
    m = 1e6
    assert simulate(s, m).time_s == pytest.approx(A + m / B)
    assert simulate(s, m, reduce_bw=1e9).time_s == pytest.approx(A + m / B + m / 1e9)


@pytest.mark.parametrize(
    "spec,kind",
    [
        ("random_regular:n=12,d=3,seed=4", "allgather"),
        ("dgx_a100:nodes=2", "allreduce"),
        ("torus2d:w=3,h=3", "alltoall"),
        ("wan:dcs=2,gpus=4", "allgather"),
    ],
)
def test_compiled_kernel_matches_python(spec, kind):
    topo = load_topology(spec)
    s = synthesize("spt", topo, Collective.make(kind, topo.num_ranks, 2))
    a = simulate(s, 1e7, compiled=True)
    b = simulate(s, 1e7, compiled=False)
    assert np.array_equal(a.op_finish_s, b.op_finish_s)
    assert np.array_equal(a.hop_start_s, b.hop_start_s)
    assert a.time_s == b.time_s > 0


def test_plain_loop_runs_on_lists_and_writes_them_back():
    """The uncompiled loop gets lists (records: dicts), one list per array object, and the
    arrays get the values it left."""
    from collsynth.sim.plain import call_plain

    rec = np.zeros(3, dtype=[("a", np.int32), ("b", np.float64)])
    arr = np.arange(3.0)
    seen = {}

    def loop(r, pair, n):
        seen["types"] = (type(r), type(r[0]), type(pair[0]), pair[0] is pair[1])
        r[1]["a"] = 7
        r[2]["b"] = 0.5
        pair[1][2] = -1.0
        return n + 1

    assert call_plain(loop, rec, (arr, arr), 4) == 5
    assert seen["types"] == (list, dict, list, True)
    assert rec["a"].tolist() == [0, 7, 0] and rec["b"].tolist() == [0.0, 0.0, 0.5]
    assert arr.tolist() == [0.0, 1.0, -1.0]


def test_bad_inputs():
    s = _ring_allgather(4)
    with pytest.raises(CollsynthError):
        simulate(s, 0)
    with pytest.raises(CollsynthError):
        simulate(s, float("nan"))
    with pytest.raises(CollsynthError):
        simulate(s, 1e6, order="random")


@pytest.mark.parametrize(
    "spec,kind",
    [
        ("random_regular:n=12,d=3,seed=4", "allgather"),
        ("dgx_a100:nodes=2", "allreduce"),
        ("star:n=6", "alltoall"),
    ],
)
def test_fcfs_booking_equals_queues(spec, kind):
    # with equal priorities, booking a link at request time is first-ready-first-served
    topo = load_topology(spec)
    s = synthesize("spt", topo, Collective.make(kind, topo.num_ranks, 3))
    a = simulate(s, 1e7, order="fcfs")
    b = simulate(s, 1e7, order="fcfs", _force_queues=True)
    assert np.array_equal(a.hop_start_s, b.hop_start_s)
    assert np.array_equal(a.op_finish_s, b.op_finish_s)


# ---------------------------------------------------------------- per-operation cost
C = 3e-6  # what issuing one operation costs its sender


def test_op_cost_one_link():
    # one operation: issued (C), then alpha + M/b
    topo = _line(2)
    b = ScheduleBuilder(topo, Collective.make("broadcast", 2, 1))
    b.add(0, 1, 0)
    s = b.build()
    m = 4e6
    r = simulate(s, m, op_cost_s=C)
    assert r.time_s == pytest.approx(C + A + m / B, rel=1e-12)
    assert r.op_start_s[0] == pytest.approx(C)  # the bytes start once issued
    assert r.hops == 1 and len(r.link_busy_s) == len(topo.links)  # no virtual link shows
    assert r.link_busy_s[s.route(0)[0]] == pytest.approx(m / B)
    assert r.op_cost_s == C and r.to_dict()["op_cost_s"] == C


def test_op_cost_serializes_a_ranks_sends_on_different_links():
    # rank 0 sends to k neighbours over k links: the i-th send is issued at i*C, so the last
    # arrives at k*C + alpha + M/b, where the pure alpha-beta model has them all in parallel
    k = 4
    topo = load_topology(f"full:n={k + 1},bw={B},alpha={A}")
    b = ScheduleBuilder(topo, Collective.make("broadcast", k + 1, 1))
    hub = 0
    for dst in range(1, k + 1):
        b.add(hub, dst, 0)
    s = b.build()
    m = 1e6
    r0 = simulate(s, m)
    r = simulate(s, m, op_cost_s=C)
    one = sum(topo.link_alpha[s.route(0)]) + m / min(topo.link_bw[s.route(0)])
    assert r0.time_s == pytest.approx(one, rel=1e-9)
    assert sorted(r.op_finish_s) == pytest.approx([i * C + one for i in range(1, k + 1)])
    assert r.time_s == pytest.approx(k * C + one, rel=1e-9)


def test_op_cost_hides_behind_transmission_on_one_link():
    # two operations on one link: the second is issued while the first transmits, so the cost
    # delays only the first (C + alpha + 2 M/b), not both
    s = _two_on_one_link()
    m = 2e6
    r = simulate(s, m, op_cost_s=C)
    assert r.time_s == pytest.approx(C + A + m / B, rel=1e-9)


@pytest.mark.parametrize("spec,kind", [("dgx1", "allgather"), ("ring:n=6", "allreduce")])
def test_op_cost_zero_is_the_default_and_kernels_agree(spec, kind):
    topo = load_topology(spec)
    s = synthesize("ring", topo, Collective.make(kind, topo.num_ranks, 1))
    base = simulate(s, 1e7)
    zero = simulate(s, 1e7, op_cost_s=0.0)
    assert np.array_equal(base.op_finish_s, zero.op_finish_s)
    a = simulate(s, 1e7, op_cost_s=C, compiled=True)
    b = simulate(s, 1e7, op_cost_s=C, compiled=False)
    assert np.array_equal(a.op_finish_s, b.op_finish_s)
    assert np.array_equal(a.hop_link, base.hop_link)  # the timeline keeps real links only
    assert a.time_s > base.time_s
    assert "per operation at its sender" in a.order_policy


def test_op_cost_bad():
    s = _ring_allgather(4)
    for bad in (-1e-6, float("nan"), float("inf")):
        with pytest.raises(CollsynthError, match="per-operation cost"):
            simulate(s, 1e6, op_cost_s=bad)


# ---------------------------------------------------------------- fair sharing (order="fair")
def test_fair_one_pair_goes_one_at_a_time():
    # two transfers between the same two ranks on one link: one connection, in order (as fcfs)
    s = _two_on_one_link()
    m = 2e6
    fair = simulate(s, m, order="fair")
    fcfs = simulate(s, m, order="fcfs")
    assert np.array_equal(fair.op_finish_s, fcfs.op_finish_s)
    assert sorted(fair.op_finish_s) == pytest.approx([A + m / 2 / B, A + m / B])
    assert "shared fairly" in fair.order_policy


def _gather_through_switch(delay):
    """Ranks 0 and 1 send to rank 2 through one switch; rank 1's uplink has ``delay`` more
    latency, so its transfer reaches the shared switch->gpu2 link that much later."""
    b = TopologyBuilder("gather3")
    g = [b.compute(f"gpu{i}") for i in range(3)]
    sw = b.switch("sw")
    for i, gi in enumerate(g):
        b.link(gi, sw, B, A + (delay if i == 1 else 0.0))
        b.link(sw, gi, B, A)
    topo = b.build()
    coll = Collective.make("gather", 3, 1, root=2)
    sb = ScheduleBuilder(topo, coll)
    sb.add(0, 2, 0)
    sb.add(1, 2, 1)
    return sb.build()


@pytest.mark.parametrize("delay_frac", [0.0, 0.25, 0.5])
def test_fair_two_pairs_share_a_link(delay_frac):
    # processor sharing on sw->gpu2 with work w = c/B each: rank 0's transfer is alone for D,
    # then both go at half rate: it ends at A + 2w - D, rank 1's at A + 2w (fcfs: A + w and
    # A + 2w); each arrives one alpha after its end on the last link
    m = 3e6
    c = m / 3
    w = c / B
    d = delay_frac * w
    s = _gather_through_switch(d)
    verify(s)
    fair = simulate(s, m, order="fair")
    assert fair.op_finish_s[0] == pytest.approx(2 * A + 2 * w - d, rel=1e-12)
    assert fair.op_finish_s[1] == pytest.approx(2 * A + 2 * w, rel=1e-12)
    fcfs = simulate(s, m, order="fcfs")
    assert fcfs.op_finish_s[0] == pytest.approx(2 * A + w, rel=1e-12)
    assert fair.time_s == pytest.approx(fcfs.time_s, rel=1e-12)  # one link, work conserved
    assert np.allclose(fair.link_busy_s, fcfs.link_busy_s)


@pytest.mark.parametrize(
    "spec,kind",
    [
        ("dgx_a100:nodes=2", "allreduce"),
        ("wan:dcs=3,gpus=3", "allgather"),
        ("star:n=6", "alltoall"),
    ],
)
def test_fair_kernels_agree_and_conserve_work(spec, kind):
    topo = load_topology(spec)
    s = synthesize("spt", topo, Collective.make(kind, topo.num_ranks, 3))
    a = simulate(s, 1e7, order="fair", compiled=True)
    b = simulate(s, 1e7, order="fair", compiled=False)
    assert np.array_equal(a.op_finish_s, b.op_finish_s)
    assert np.array_equal(a.hop_end_s, b.hop_end_s)
    fcfs = simulate(s, 1e7, order="fcfs")
    assert np.allclose(a.link_busy_s, fcfs.link_busy_s)
    # a shared link never carries more than its rate: every hop takes at least bytes / bw
    tx = s.op_bytes(1e7)[a.hop_op] / topo.link_bw[a.hop_link]
    assert np.all(a.hop_end_s - a.hop_start_s >= tx * (1 - 1e-9))
    # with op cost the issue links stay first-served and the virtual hops are stripped
    c = simulate(s, 1e7, order="fair", op_cost_s=C)
    assert c.time_s > a.time_s and np.array_equal(c.hop_link, a.hop_link)


def test_fair_completes_when_a_completion_ties_in_floating_point():
    # a completion computed to fall at the very time of the event just served must still be
    # scheduled (this schedule once stalled with 6 operations never started)
    topo = load_topology("wan:dcs=3,gpus=3,km=10")
    s = synthesize("spt", topo, Collective.make("allreduce", 9, 1))
    for size in (8e6, 1e6):
        r = simulate(s, size, order="fair")
        assert np.all(np.isfinite(r.op_finish_s)) and r.time_s > 0


def test_indexed_heap_keeps_one_entry_per_item_in_key_order():
    from collsynth.sim.heap import index_set

    rng = np.random.default_rng(5)
    n = 40
    key = np.full(n, np.inf)
    order = np.zeros(n, dtype=np.int64)
    pos = np.full(n, -1, dtype=np.int64)
    size = 0
    for _ in range(2000):  # set, move and remove keys at random, ties included
        item = int(rng.integers(n))
        value = np.inf if rng.random() < 0.3 else float(rng.integers(20))
        size = index_set(key, order, pos, size, item, value)
        live = [i for i in range(n) if key[i] != np.inf]
        assert size == len(live) and sorted(order[:size].tolist()) == live
        assert all(pos[order[i]] == i for i in range(size))
        assert all(pos[i] == -1 for i in range(n) if key[i] == np.inf)
        if size:
            assert order[0] == min(live, key=lambda i: (key[i], i))  # (key, item) first


def test_fair_connection_waits_in_request_then_hop_order_and_in_planned_order():
    # one rank pair over one link: its transfers go one at a time; unordered ones by request
    # time then op id, ordered ones by their place in the link order whatever their requests
    b = TopologyBuilder("pair")
    g0, g1 = b.compute("gpu0"), b.compute("gpu1")
    b.link(g0, g1, B, 0.0)  # no latency: requests tie at one instant
    b.link(g1, g0, B, 0.0)
    topo = b.build()
    coll = Collective.make("gather", 2, 3, root=1)
    sb = ScheduleBuilder(topo, coll)
    for k in range(3):
        sb.add(0, 1, k)
    s = sb.build()
    m = 6e6
    w = m / 6 / B
    r = simulate(s, m, order="fair")
    assert r.op_finish_s.tolist() == pytest.approx([w, 2 * w, 3 * w], rel=1e-12)
    link = int(s.route(0)[0])
    ordered = dataclasses.replace(s, link_order={link: np.array([2, 0, 1])})
    r = simulate(ordered, m, order="fair")
    assert r.op_finish_s.tolist() == pytest.approx([2 * w, 3 * w, w], rel=1e-12)
    assert np.array_equal(
        r.op_finish_s, simulate(ordered, m, order="fair", compiled=False).op_finish_s
    )
