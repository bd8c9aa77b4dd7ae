"""Tests of the independent schedule verifier (collsynth.verify).

Hand-built schedules that are correct must verify; schedules broken in one specific way must
be rejected by the rule that names that way (``VerificationError.check``), with a message
naming the offending operation.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from collsynth.collective import Collective, CollKind
from collsynth.errors import CollsynthError, VerificationError
from collsynth.schedule.io import load_schedule, save_schedule, schedule_from_dict, schedule_to_dict
from collsynth.schedule.ir import OpKind, Schedule, ScheduleBuilder
from collsynth.schedule.trees import Tree, TreeForm, lower
from collsynth.synth import synthesize
from collsynth.topology import TopologyBuilder, load_topology
from collsynth.topology.model import Topology
from collsynth.verify import check_schedule, verify

GB = 1e9
US = 1e-6


@pytest.fixture(autouse=True, params=["python", "compiled"])
def reduction_executor(request, monkeypatch):
    """Every test twice: reductions executed by the Python executor, and by the compiled one
    (which must accept and refuse exactly the same schedules; on a refusal the Python one names
    the violation)."""
    import collsynth.verify as v

    monkeypatch.setattr(v, "COMPILED_REDUCE_MIN_OPS", 0 if request.param == "compiled" else 1 << 62)
    return request.param


# ------------------------------------------------------------------------------ topologies
_CACHE: dict[str, Topology] = {}


def zoo(spec: str) -> Topology:
    if spec not in _CACHE:
        _CACHE[spec] = load_topology(spec)
    return _CACHE[spec]


def ring4() -> Topology:
    return zoo("ring:n=4")


def switch4(bw: float = 10 * GB, alpha: float = 1 * US) -> Topology:
    """Four GPUs g0..g3, each linked both ways to one switch sw."""
    b = TopologyBuilder("switch4")
    gs = [b.compute(f"g{i}") for i in range(4)]
    sw = b.switch("sw")
    for g in gs:
        b.bilink(g, sw, bw, alpha, "nvswitch")
    return b.build()


def two_planes() -> Topology:
    """Three GPUs, each linked both ways to two switches sw0 and sw1 (two parallel planes)."""
    b = TopologyBuilder("planes")
    gs = [b.compute(f"g{i}") for i in range(3)]
    for s in ("sw0", "sw1"):
        b.switch(s)
        for g in gs:
            b.bilink(g, s, 10 * GB, 0.5 * US)
    return b.build()


def wan() -> Topology:
    """Two sites: g0, g1 behind router r0 and g2, g3 behind router r1; r0 <-> r1."""
    b = TopologyBuilder("wan2")
    for i in range(4):
        b.compute(f"g{i}")
    b.router("r0")
    b.router("r1")
    b.bilink("g0", "r0", 20 * GB, 1 * US)
    b.bilink("g1", "r0", 20 * GB, 1 * US)
    b.bilink("g2", "r1", 20 * GB, 1 * US)
    b.bilink("g3", "r1", 20 * GB, 1 * US)
    b.bilink("r0", "r1", 5 * GB, 5e-3, "wan")
    return b.build()


def L(topo: Topology, a: str, b: str) -> int:
    """Id of the (first) link between nodes named a and b."""
    ids = topo.links_between(topo.index(a), topo.index(b))
    assert ids, f"no link {a}->{b}"
    return ids[0]


def RL(topo: Topology, i: int, j: int) -> int:
    """Id of the link from rank i to rank j."""
    ids = topo.links_between(topo.node_of_rank(i), topo.node_of_rank(j))
    assert ids, f"no link rank {i} -> rank {j}"
    return ids[0]


def builder(topo: Topology, kind: str, cpr: int = 1, root: int | None = None) -> ScheduleBuilder:
    return ScheduleBuilder(topo, Collective.make(kind, topo.num_ranks, cpr, root))


def rejects(schedule: Schedule, check: str, op: int | None = "any", match: str | None = None):
    """Assert the verifier rejects ``schedule`` by rule ``check`` (at operation ``op``)."""
    with pytest.raises(VerificationError) as exc:
        verify(schedule)
    e = exc.value
    msg = str(e)
    assert e.check == check, msg
    assert "\n" not in msg
    assert msg.startswith(f"{check}: ")
    if op != "any":
        assert e.op == op, msg
    if e.op is not None:  # the message names the offending operation
        assert re.search(rf"\bop {e.op}\b", msg), msg
    if match is not None:
        assert re.search(match, msg), msg
    # check_schedule reports the same failure without raising
    rep = check_schedule(schedule)
    assert not rep.ok and rep.error == msg and rep.error_check == check and rep.error_op == e.op
    return e


# ------------------------------------------------------------------------------ accepted
def ring_allgather(topo: Topology, with_steps: bool = True) -> Schedule:
    """Ring AllGather: at step k, rank r forwards chunk (r - k) mod n to rank r + 1."""
    n = topo.num_ranks
    b = builder(topo, "allgather")
    holder: dict[tuple[int, int], int] = {}  # (rank, chunk) -> op that delivered it
    for k in range(n - 1):
        for r in range(n):
            ch = (r - k) % n
            nxt = (r + 1) % n
            deps = [holder[(r, ch)]] if k > 0 else []
            op = b.add(
                r, nxt, ch, route=[RL(topo, r, nxt)], deps=deps, step=k if with_steps else None
            )
            holder[(nxt, ch)] = op
    return b.build()


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


def reduce_into(b: ScheduleBuilder, t: Topology, ch: int, owner: int) -> list[int]:
    """Tree reduction of ``ch`` into ``owner`` on a 4-ring: owner+2 -> owner+1 -> owner, and
    owner+3 -> owner. Returns the ops delivering into the owner."""
    o1, o2, o3 = (owner + 1) % 4, (owner + 2) % 4, (owner + 3) % 4
    a = b.add(o2, o1, ch, route=[RL(t, o2, o1)], kind="reduce")
    c = b.add(o1, owner, ch, route=[RL(t, o1, owner)], kind="reduce", deps=[a])
    d = b.add(o3, owner, ch, route=[RL(t, o3, owner)], kind=OpKind.REDUCE)
    return [c, d]


def test_tree_reducescatter():
    t = ring4()
    b = builder(t, "reducescatter")
    for ch in range(4):
        reduce_into(b, t, ch, ch)
    s = b.build()
    assert s.stats()["reduce_ops"] == 12
    rep = verify(s)
    assert rep.ok and "duplicate-contribution" in rep.checks and "race" in rep.checks


def allreduce_rs_ag(t: Topology) -> Schedule:
    b = builder(t, "allreduce")
    for ch in range(4):
        into = reduce_into(b, t, ch, ch)
        o1, o2, o3 = (ch + 1) % 4, (ch + 2) % 4, (ch + 3) % 4
        x = b.add(ch, o1, ch, route=[RL(t, ch, o1)], deps=into)
        b.add(o1, o2, ch, route=[RL(t, o1, o2)], deps=[x])
        b.add(ch, o3, ch, route=[RL(t, ch, o3)], deps=into)
    return b.build()


def test_allreduce_reduce_scatter_then_allgather():
    rep = verify(allreduce_rs_ag(ring4()))
    assert rep.ok and rep.ops == 24


def test_broadcast_with_two_chunks():
    t = ring4()
    b = builder(t, "broadcast", cpr=2, root=1)
    for ch in range(2):
        x = b.add(1, 2, ch, route=[RL(t, 1, 2)])
        b.add(2, 3, ch, route=[RL(t, 2, 3)], deps=[x])
        b.add(1, 0, ch, route=[RL(t, 1, 0)])
    assert verify(b.build()).ok


def test_reduce_to_root():
    t = ring4()
    b = builder(t, "reduce", root=2)
    reduce_into(b, t, 0, 2)
    assert verify(b.build()).ok


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


def test_reduction_by_byte_ranges():
    t = ring4()
    b = builder(t, "reduce", root=0)
    for part in ((0, 1, 2), (1, 2, 2)):
        a = b.add(2, 1, 0, route=[RL(t, 2, 1)], kind="reduce", part=part)
        b.add(1, 0, 0, route=[RL(t, 1, 0)], kind="reduce", deps=[a], part=part)
        b.add(3, 0, 0, route=[RL(t, 3, 0)], kind="reduce", part=part)
    assert verify(b.build()).ok


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


# ------------------------------------------------------------------------------ spt
SWITCH_SPEC = "star:n=4"


def small_switch() -> Topology:
    try:
        return zoo(SWITCH_SPEC)
    except CollsynthError:  # the zoo may not have a star; build the same thing by hand
        return switch4()


SPT_TOPOLOGIES = {
    "ring5": lambda: zoo("ring:n=5"),
    "dgx1": lambda: zoo("dgx1"),
    "switch": small_switch,
    "wan": wan,
}


@pytest.mark.parametrize("topo_name", sorted(SPT_TOPOLOGIES))
@pytest.mark.parametrize("kind", [k.value for k in CollKind if k is not CollKind.CUSTOM])
@pytest.mark.parametrize("cpr", [1, 2])
def test_spt_schedules_verify(topo_name, kind, cpr):
    t = SPT_TOPOLOGIES[topo_name]()
    root = t.num_ranks - 1 if kind in ("broadcast", "reduce", "gather", "scatter") else None
    coll = Collective.make(kind, t.num_ranks, cpr, root)
    s = synthesize("spt", t, coll)
    assert s.meta["algorithm"] == "spt"
    rep = verify(s)
    assert rep.ok and rep.ops == s.num_ops > 0
    assert rep.redundant_deliveries == 0


@pytest.mark.parametrize("topo_name", sorted(SPT_TOPOLOGIES))
def test_spt_custom_collectives_verify(topo_name):
    t = SPT_TOPOLOGIES[topo_name]()
    n = t.num_ranks
    m = np.zeros((n, n), dtype=int)
    m[0, n - 1] = 2
    m[n - 1, 1] = 1
    m[1, 0] = 3
    assert verify(synthesize("spt", t, Collective.from_demand_matrix(m))).ok
    multicast = Collective.custom(n, [(0, range(1, n)), (n - 1, [0, 1])])
    assert verify(synthesize("spt", t, multicast)).ok


def test_spt_schedule_broken_is_rejected():
    """Dropping the last operation of a valid spt AllGather loses a delivery."""
    t = zoo("dgx1")
    s = synthesize("spt", t, Collective.make("allgather", 8), link_order=False)
    d = schedule_to_dict(s)
    ops = d["ops"]
    ops["count"] -= 1
    for k in ("src", "dst", "chunk", "routes", "deps"):
        if k in ops:
            ops[k] = ops[k][:-1]
    rejects(schedule_from_dict(d), "missing-delivery", op=None)


# ------------------------------------------------------------------------------ tree lowering
def ring_chain(r: int, n: int, step: int) -> tuple:
    """Edges of the chain r -> r+step -> r+2*step ... around an n-ring (data-flow order)."""
    nodes = [(r + i * step) % n for i in range(n)]
    return tuple((a, b, None) for a, b in zip(nodes[:-1], nodes[1:]))


def out_forest(n: int, roots) -> list[Tree]:
    trees = []
    for r in roots:
        trees.append(Tree(r, ring_chain(r, n, +1), mult=2, direction="out"))
        trees.append(Tree(r, ring_chain(r, n, -1), mult=1, direction="out"))
    return trees


def in_forest(n: int, roots) -> list[Tree]:
    trees = []
    for r in roots:
        # an in-tree: data flows toward r; reverse the out-chain's edges
        for step, mult in ((+1, 1), (-1, 2)):
            edges = tuple((b, a, None) for a, b, _ in ring_chain(r, n, step))
            trees.append(Tree(r, edges, mult=mult, direction="in"))
    return trees


@pytest.mark.parametrize("pipeline", [1, 3])
@pytest.mark.parametrize("kind", ["allgather", "reducescatter", "allreduce", "broadcast", "reduce"])
def test_tree_lowering_verifies(kind, pipeline):
    t = zoo("ring:n=5")
    n = t.num_ranks
    trees: list[Tree] = []
    root = 2 if kind in ("broadcast", "reduce") else None
    roots = [root] if root is not None else range(n)
    if kind in ("allgather", "broadcast", "allreduce"):
        trees += out_forest(n, roots)
    if kind in ("reducescatter", "reduce", "allreduce"):
        trees += in_forest(n, roots)
    coll = Collective.make(kind, n, 1, root)
    s = lower(t, coll, TreeForm(trees), pipeline=pipeline)
    assert s.collective.chunks_per_rank == 3 * pipeline  # total multiplicity 3 per root
    assert s.trees is not None
    rep = verify(s)
    assert rep.ok
    per_chunk_ops = {
        "allgather": n - 1,
        "broadcast": n - 1,
        "reducescatter": n - 1,
        "reduce": n - 1,
        "allreduce": 2 * (n - 1),
    }[kind]
    assert s.num_ops == per_chunk_ops * s.collective.num_chunks


def test_tree_lowering_with_explicit_routes_and_branching():
    t = switch4()
    n = 4
    route = {
        (a, b): (L(t, f"g{a}", "sw"), L(t, "sw", f"g{b}"))
        for a in range(n)
        for b in range(n)
        if a != b
    }
    trees = []
    for r in range(n):
        others = [x for x in range(n) if x != r]
        # a star from r, and a depth-2 tree r -> o0 -> (o1, o2)
        trees.append(Tree(r, tuple((r, x, route[(r, x)]) for x in others), 1, "out"))
        o0, o1, o2 = others
        trees.append(Tree(r, ((r, o0, route[(r, o0)]), (o0, o1, None), (o0, o2, None)), 1, "out"))
        trees.append(Tree(r, ((o1, o0, None), (o2, o0, None), (o0, r, route[(o0, r)])), 2, "in"))
    s = lower(t, Collective.make("allreduce", n), TreeForm(trees), pipeline=2)
    assert verify(s).ok


@pytest.mark.parametrize(
    "bad_tree, match",
    [
        (Tree(0, ((0, 1, None), (1, 2, None)), 1, "out"), "does not reach rank 3"),
        (
            Tree(0, ((0, 1, None), (1, 2, None), (2, 3, None), (1, 3, None)), 1, "out"),
            "two parents",
        ),
        (
            Tree(0, ((0, 1, None), (1, 2, None), (2, 3, None), (3, 0, None)), 1, "out"),
            "root 0 has a parent",
        ),
        (
            Tree(0, ((0, 1, None), (1, 2, None), (2, 3, None), (4, 0, None)), 1, "out"),
            "not between two ranks",
        ),
        (Tree(0, ((0, 1, None), (1, 1, None)), 1, "out"), "not between two ranks"),
    ],
)
def test_tree_lowering_rejects_bad_trees(bad_tree, match):
    t = ring4()
    trees = [bad_tree] + [Tree(r, ring_chain(r, 4, 1), 1, "out") for r in (1, 2, 3)]
    with pytest.raises(CollsynthError, match=match):
        lower(t, Collective.make("allgather", 4), TreeForm(trees))


def test_tree_lowering_rejects_missing_roots_and_bad_input():
    t = ring4()
    three = [Tree(r, ring_chain(r, 4, 1), 1, "out") for r in (0, 1, 2)]
    with pytest.raises(CollsynthError, match="rank 3"):
        lower(t, Collective.make("allgather", 4), TreeForm(three))
    with pytest.raises(CollsynthError, match="pipeline"):
        lower(t, Collective.make("allgather", 4), TreeForm(three), pipeline=0)
    with pytest.raises(CollsynthError, match="cannot express alltoall"):
        lower(t, Collective.make("alltoall", 4), TreeForm(three))
    # a missed rank in an in-tree of an AllReduce
    trees = out_forest(4, range(4)) + in_forest(4, range(4))
    broken = Tree(1, ((2, 1, None), (3, 2, None)), 3, "in")
    trees = [tr for tr in trees if not (tr.direction == "in" and tr.root == 1)] + [broken]
    with pytest.raises(CollsynthError, match="does not reach rank 0"):
        lower(t, Collective.make("allreduce", 4), TreeForm(trees))


def test_tree_lowering_with_a_bad_route_is_caught_by_the_verifier():
    t = ring4()
    trees = [Tree(r, ring_chain(r, 4, 1), 1, "out") for r in range(4)]
    bad = list(trees[0].edges)
    bad[1] = (bad[1][0], bad[1][1], (RL(t, 0, 1),))  # edge 1->2 routed over link 0->1
    trees[0] = Tree(0, tuple(bad), 1, "out")
    s = lower(t, Collective.make("allgather", 4), TreeForm(trees))
    rejects(s, "route", op=1, match="not at the sender")


# ------------------------------------------------------------------------------ round trip
def full_featured_schedule() -> Schedule:
    """A valid schedule using every optional field: kinds, start, duration, step, part,
    link_order, size and meta."""
    t = switch4(bw=10 * GB, alpha=1 * US)
    size = 4e6
    coll = Collective.make("reduce", 4, 2, root=0)
    b = ScheduleBuilder(t, coll, meta={"algorithm": "hand", "note": [1, 2]})
    b.size = size
    chunk_b = coll.chunk_bytes(size)
    half = chunk_b / 2 / (10 * GB)
    t_hop = 2 * US  # two links of 1 us alpha each
    ops_up = {}
    for ch in range(2):
        for i, part in enumerate(((0, 1, 2), (1, 2, 2))):
            for r in (1, 2, 3):
                start = (ch * 2 + i) * 3 * (half + t_hop) + (r - 1) * (half + t_hop)
                op = b.add(
                    r, 0, ch, kind="reduce", part=part, start=start, duration=half, step=ch * 2 + i
                )
                ops_up[(ch, i, r)] = op
    b.set_link_order(L(t, "sw", "g0"), sorted(ops_up.values()))
    return b.build()


def test_full_featured_schedule_verifies():
    s = full_featured_schedule()
    rep = verify(s)
    assert rep.ok
    assert {"link-order", "step-order", "causality", "capacity"} <= set(rep.checks)


ARRAYS = (
    "src",
    "dst",
    "chunk",
    "kind",
    "route_ptr",
    "route_links",
    "dep_ptr",
    "dep_ids",
    "start",
    "duration",
    "step",
    "part_lo",
    "part_hi",
    "part_den",
)


def assert_same_schedule(a: Schedule, b: Schedule) -> None:
    for name in ARRAYS:
        x, y = getattr(a, name), getattr(b, name)
        if x is None or y is None:
            assert x is None and y is None, name
            continue
        assert x.dtype.kind == y.dtype.kind, name
        assert np.array_equal(x, y, equal_nan=x.dtype.kind == "f"), name
    assert (a.link_order is None) == (b.link_order is None)
    if a.link_order:
        assert sorted(a.link_order) == sorted(b.link_order)
        for k in a.link_order:
            assert np.array_equal(a.link_order[k], b.link_order[k])
    assert a.size == b.size
    assert a.collective == b.collective
    assert a.topology.fingerprint == b.topology.fingerprint
    assert a.meta == b.meta
    assert (a.trees is None) == (b.trees is None)
    if a.trees is not None:
        assert a.trees.to_dict() == b.trees.to_dict()


def round_trip_cases() -> dict:
    t5 = zoo("ring:n=5")
    return {
        "full": full_featured_schedule,
        "ring-allgather": lambda: ring_allgather(ring4()),
        "allreduce": lambda: allreduce_rs_ag(ring4()),
        "spt-dgx1-allreduce": lambda: synthesize(
            "spt", zoo("dgx1"), Collective.make("allreduce", 8)
        ),
        "spt-wan-alltoall": lambda: synthesize("spt", wan(), Collective.make("alltoall", 4, 2)),
        "trees": lambda: lower(
            t5,
            Collective.make("allreduce", 5),
            TreeForm(out_forest(5, range(5)) + in_forest(5, range(5))),
            2,
        ),
        "custom": lambda: synthesize("spt", t5, Collective.custom(5, [(0, [1, 3]), (4, [2])])),
    }


@pytest.mark.parametrize("case", sorted(round_trip_cases()))
def test_schedule_round_trip(case, tmp_path):
    s = round_trip_cases()[case]()
    assert verify(s).ok
    d = schedule_to_dict(s)
    text = json.dumps(d)
    back = schedule_from_dict(json.loads(text))
    assert_same_schedule(s, back)
    assert verify(back).ok
    assert schedule_to_dict(back) == d
    path = str(tmp_path / "s.json")
    save_schedule(s, path)
    loaded = load_schedule(path)
    assert_same_schedule(s, loaded)
    assert verify(loaded).ok
    # loading against the same topology works, against another one it does not
    assert_same_schedule(s, load_schedule(path, topology=s.topology))
    with pytest.raises(CollsynthError, match="was made for topology"):
        load_schedule(path, topology=zoo("ring:n=6"))


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
    e = rejects(_subset(s, keep), "missing-delivery", op=None)
    assert "rank gpu3 never receives chunk 0" in str(e)


def _subset(s: Schedule, keep: list[int]) -> Schedule:
    """The schedule with only the operations in ``keep`` (dependencies renumbered/dropped)."""
    new = {old: i for i, old in enumerate(keep)}
    b = ScheduleBuilder(s.topology, s.collective)
    for old in keep:
        b.add(
            int(s.src[old]),
            int(s.dst[old]),
            int(s.chunk[old]),
            route=s.route(old).tolist(),
            kind=int(s.kind[old]),
            deps=[new[d] for d in s.deps(old).tolist() if d in new],
        )
    return b.build()


def test_reject_empty_schedule():
    rejects(builder(ring4(), "broadcast").build(), "missing-delivery", op=None)
    rejects(builder(ring4(), "allreduce").build(), "incomplete-reduction", op=None)


def test_reject_duplicate_contribution():
    t = ring4()
    b = builder(t, "reduce", root=0)
    a = b.add(1, 0, 0, route=[RL(t, 1, 0)], kind="reduce")
    b.add(1, 0, 0, route=[RL(t, 1, 0)], kind="reduce", deps=[a])  # rank 1 added again
    rejects(b.build(), "duplicate-contribution", op=1, match="rank.s. 1 ")


def test_reject_duplicate_contribution_through_two_paths():
    t = ring4()
    b = builder(t, "reduce", root=0)
    a = b.add(2, 1, 0, route=[RL(t, 2, 1)], kind="reduce")
    c = b.add(1, 0, 0, route=[RL(t, 1, 0)], kind="reduce", deps=[a])
    b.add(2, 3, 0, route=[RL(t, 2, 3)], kind="reduce")
    b.add(3, 0, 0, route=[RL(t, 3, 0)], kind="reduce", deps=[2, c])  # 2 reaches 0 twice
    rejects(b.build(), "duplicate-contribution", op=3, match="rank.s. 2")


def test_reject_incomplete_reduction():
    t = ring4()
    b = builder(t, "reducescatter")
    for ch in range(4):
        reduce_into(b, t, ch, ch)
    s = b.build()
    # drop the last op: owner 3 misses the contribution of rank 2
    e = rejects(_subset(s, list(range(s.num_ops - 1))), "incomplete-reduction", op=None)
    assert "rank gpu3 ends with chunk 3" in str(e) and "rank(s) 2" in str(e)


def test_reject_copy_that_overwrites_partial_sum():
    t = ring4()
    b = builder(t, "reduce", root=0)
    c = b.add(2, 1, 0, route=[RL(t, 2, 1)], kind="reduce")
    a = b.add(1, 0, 0, route=[RL(t, 1, 0)], kind="reduce", deps=[c])
    b.add(3, 0, 0, route=[RL(t, 3, 0)], kind="copy", deps=[a])  # overwrites rank 0's sum
    e = rejects(b.build(), "incomplete-reduction", op=None)
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


def test_reject_race_read_while_written():
    t = ring4()
    b = builder(t, "reduce", root=0)
    b.add(2, 1, 0, route=[RL(t, 2, 1)], kind="reduce")
    b.add(1, 0, 0, route=[RL(t, 1, 0)], kind="reduce")  # reads rank 1 while op 0 writes it
    b.add(3, 0, 0, route=[RL(t, 3, 0)], kind="reduce")
    rejects(b.build(), "race", op=1, match="while op 0 may still be writing")


def test_reject_race_write_while_read():
    t = ring4()
    b = builder(t, "reduce", root=0)
    b.add(1, 0, 0, route=[RL(t, 1, 0)], kind="reduce")  # reads rank 1 ...
    b.add(2, 1, 0, route=[RL(t, 2, 1)], kind="reduce")  # ... while this writes into it
    rejects(b.build(), "race", op=1, match="while op 0 may still be reading")


def test_reject_race_two_unordered_copies():
    t = ring4()
    b = builder(t, "allreduce")
    for ch in range(4):
        reduce_into(b, t, ch, ch)  # ops 3*ch .. 3*ch+2; ops 3*ch+1 and 3*ch+2 finish chunk ch
    b.add(0, 1, 0, route=[RL(t, 0, 1)], deps=[1, 2])  # op 12: the full chunk 0 to rank 1
    b.add(2, 1, 0, route=[RL(t, 2, 1)], deps=[0, 1])  # op 13: overwrites it, unordered
    rejects(b.build(), "race", op=13, match="and op 12 both write")


def test_reject_race_read_hidden_behind_an_ordered_reduce():
    """Op 0 reads rank 1; op 1 reduces into rank 1 after it; op 2 reduces into rank 1 with no
    order to op 0's read, so op 0 may send rank 3's contribution that op 3 sends again."""
    t = switch4()
    b = builder(t, "reduce", root=0)
    a = b.add(1, 0, 0, kind="reduce")
    b.add(2, 1, 0, kind="reduce", deps=[a])
    b.add(3, 1, 0, kind="reduce")
    b.add(3, 0, 0, kind="reduce")
    b.add(2, 0, 0, kind="reduce")
    rejects(b.build(), "race", op=2, match="while op 0 may still be reading")


@pytest.mark.parametrize("y_first", [False, True])
def test_reject_race_reduce_unordered_with_an_earlier_copy(y_first):
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
    e = rejects(b.build(), "race", op=1 if y_first else 2, match="one of them overwrites")
    assert re.search(r"and op 0 both write", str(e))


def test_concurrent_reduces_into_one_buffer_are_allowed():
    t = switch4()
    b = builder(t, "reduce", root=0)
    for r in (1, 2, 3):
        b.add(r, 0, 0, kind="reduce")  # three unordered reduces into rank 0
    assert verify(b.build()).ok


def test_reject_race_copy_concurrent_with_reduce():
    t = switch4()
    b = builder(t, "reduce", root=0)
    b.add(1, 0, 0, kind="reduce")
    b.add(2, 0, 0, kind="copy")  # overwrites rank 0's buffer while op 0 adds into it
    b.add(3, 0, 0, kind="reduce", deps=[0, 1])
    rejects(b.build(), "race", op=1, match="both write .* one of them overwrites")


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


# ------------------------------------------------------------------------------ absurd sizes
C_BIG = 1 << 19  # chunks per rank: chunks x ranks above MANY_CHUNKS for every kind


@pytest.mark.parametrize(
    "kind, root, op, first",
    [
        ("allgather", None, (0, 1, 1, "copy"), 0),
        ("reducescatter", None, (1, 0, 0, "reduce"), 1),
        ("allreduce", None, (1, 0, 0, "reduce"), 1),
        ("alltoall", None, (0, 1, C_BIG, "copy"), C_BIG + 1),  # block 0: rank 0 to itself
        ("gather", 0, (1, 0, C_BIG, "copy"), C_BIG + 1),  # the root's own chunks stay put
        ("scatter", 0, (0, 1, C_BIG, "copy"), C_BIG + 1),
        ("broadcast", 0, (0, 1, 0, "copy"), 1),
        ("reduce", 0, (1, 0, 0, "reduce"), 1),
    ],
)
def test_huge_declared_chunk_count_is_rejected_quickly(kind, root, op, first, monkeypatch):
    monkeypatch.setenv("COLLSYNTH_MAX_CHUNKS", str(10**18))  # past the up-front limit
    t = ring4()
    coll = Collective.make(kind, 4, C_BIG, root)
    b = ScheduleBuilder(t, coll)
    src, dst, chunk, k = op
    b.add(src, dst, chunk, route=[RL(t, src, dst)], kind=k)
    check = "incomplete-reduction" if coll.reduces else "missing-delivery"
    e = rejects(b.build(), check, op=None, match=rf"no operation moves chunk {first} ")
    assert f"has {coll.num_chunks} chunks; the schedule moves 1" in str(e)


def test_chunk_count_from_file_is_not_allocated(tmp_path):
    d = schedule_to_dict(ring_allgather(ring4()))
    d["collective"]["chunks_per_rank"] = 10**17
    with pytest.raises(CollsynthError, match="COLLSYNTH_MAX_CHUNKS"):  # refused up front
        schedule_from_dict(d)


def test_chunk_count_from_file_past_the_limit_is_not_allocated(monkeypatch):
    monkeypatch.setenv("COLLSYNTH_MAX_CHUNKS", str(10**18))
    d = schedule_to_dict(ring_allgather(ring4()))
    d["collective"]["chunks_per_rank"] = 10**17
    rejects(schedule_from_dict(d), "missing-delivery", op=None, match="moves chunk 4 ")


@pytest.mark.parametrize(
    "kind",
    [
        "allgather",
        "reducescatter",
        "allreduce",
        "alltoall",
        "gather",
        "scatter",
        "broadcast",
        "reduce",
    ],
)
def test_unmoved_chunk_check_accepts_valid_schedules(monkeypatch, kind):
    """With the threshold lowered, the early check runs on small schedules: valid ones pass,
    and a schedule missing every op of one chunk fails it."""
    import collsynth.verify as V

    monkeypatch.setattr(V, "MANY_CHUNKS", 0)
    t = zoo("ring:n=5")
    root = 3 if kind in ("gather", "scatter", "broadcast", "reduce") else None
    coll = Collective.make(kind, 5, 2, root)
    s = synthesize("spt", t, coll)
    assert verify(s).ok
    drop = int(s.chunk[-1])
    keep = [i for i in range(s.num_ops) if s.chunk[i] != drop]
    check = "incomplete-reduction" if coll.reduces else "missing-delivery"
    rejects(_subset(s, keep), check, op=None, match=rf"no operation moves chunk {drop} ")


def test_byte_range_denominators_too_large():
    t = ring4()
    big = 2**61 - 1  # a prime
    b = ScheduleBuilder(t, Collective.custom(4, [(0, [1])]))
    b.add(0, 1, 0, route=[RL(t, 0, 1)], part=(0, 1, big))
    b.add(0, 1, 0, route=[RL(t, 0, 1)], part=(1, big, big))
    assert verify(b.build()).ok
    b.add(0, 1, 0, route=[RL(t, 0, 1)], part=(0, 1, 3))  # common multiple 3 * big > 2**62
    rejects(b.build(), "structure", op=2, match="without a common multiple below 2..62")


# ------------------------------------------------------------------------------ numbering
def renumber(s: Schedule, perm: list[int]) -> Schedule:
    """The same schedule with operation ``i`` renamed ``perm[i]`` (deps and link orders too)."""
    d = schedule_to_dict(s)
    d.pop("trees", None)
    ops = d["ops"]
    n = ops["count"]
    inv = [0] * n
    for old, new in enumerate(perm):
        inv[new] = old
    for key, col in list(ops.items()):
        if isinstance(col, list):
            ops[key] = [col[inv[i]] for i in range(n)]
    if "deps" in ops:
        ops["deps"] = [[perm[x] for x in deps] for deps in ops["deps"]]
    if "link_order" in d:
        d["link_order"] = {k: [perm[x] for x in v] for k, v in d["link_order"].items()}
    return schedule_from_dict(d)


def _racy_read():
    t = switch4()
    b = builder(t, "reduce", root=0)
    a = b.add(1, 0, 0, kind="reduce")
    b.add(2, 1, 0, kind="reduce", deps=[a])
    b.add(3, 1, 0, kind="reduce")
    b.add(3, 0, 0, kind="reduce")
    b.add(2, 0, 0, kind="reduce")
    return b.build()


def _racy_copy():
    t = switch4()
    b = builder(t, "allreduce")
    w = b.add(0, 1, 0, kind="copy")
    b.add(2, 1, 0, kind="reduce", deps=[w])
    b.add(3, 1, 0, kind="reduce")
    return b.build()


def _relay_without_dep():
    t = ring4()
    b = ScheduleBuilder(t, Collective.custom(4, [(0, [2]), (1, [3])]))
    b.add(1, 2, 1, route=[RL(t, 1, 2)])
    b.add(0, 1, 0, route=[RL(t, 0, 1)])
    b.add(2, 3, 1, route=[RL(t, 2, 3)], deps=[0])
    b.add(1, 2, 0, route=[RL(t, 1, 2)], deps=[0])  # should depend on op 1
    return b.build()


NUMBERING_CASES = {
    "spt-dgx1-allreduce": (
        lambda: synthesize("spt", zoo("dgx1"), Collective.make("allreduce", 8)),
        None,
    ),
    "rs+ag": (lambda: allreduce_rs_ag(ring4()), None),
    "timed": (full_featured_schedule, None),
    "trees": (
        lambda: lower(
            zoo("ring:n=5"),
            Collective.make("allreduce", 5),
            TreeForm(out_forest(5, range(5)) + in_forest(5, range(5))),
        ),
        None,
    ),
    "racy-read": (_racy_read, "race"),
    "racy-copy": (_racy_copy, "race"),
    "relay": (_relay_without_dep, "data-not-held"),
}


@pytest.mark.parametrize("case", sorted(NUMBERING_CASES))
def test_verdict_does_not_depend_on_op_numbering(case):
    from hypothesis import given, settings
    from hypothesis import strategies as st

    make, expected = NUMBERING_CASES[case]
    s = make()
    rep = check_schedule(s)
    assert rep.error_check == expected, rep.error

    @settings(max_examples=30, deadline=None, derandomize=True)
    @given(perm=st.permutations(range(s.num_ops)))
    def prop(perm):
        again = check_schedule(renumber(s, list(perm)))
        assert again.error_check == expected, again.error
        if expected is None:
            assert again.planned_finish_s == rep.planned_finish_s
        else:
            assert re.search(rf"\bop {again.error_op}\b", again.error)

    prop()


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


@pytest.mark.parametrize(
    "setting, name",
    [("REDUCE_WINDOW_BUFFERS", n) for n in WINDOWED]
    + [("ROUTE_BLOCK_OPS", n) for n in ROUTE_TESTS + ["bad routes on ring"]],
)
def test_verdicts_hold_a_piece_at_a_time(setting, name, monkeypatch):
    """Large schedules are checked a piece at a time: reductions a window of segments at a
    time (``REDUCE_WINDOW_BUFFERS``), routes a block of operations at a time
    (``ROUTE_BLOCK_OPS``). With the smallest pieces (one segment per window, one operation per
    block: the ring's defect sits in the second) every such test gives the same verdict."""
    import collsynth.verify as v

    monkeypatch.setattr(v, setting, 1)
    if name != "bad routes on ring":
        globals()[name]()
        return
    for make_route, match in [
        (lambda t: [999], "link 999 does not exist"),
        (lambda t: [RL(t, 1, 2)], "not at the sender"),
        (lambda t: [RL(t, 0, 3)], "not at the receiver"),
    ]:
        test_reject_bad_routes_on_ring(make_route, match)


def test_windows_count_the_same_redundant_deliveries(monkeypatch):
    import collsynth.verify as v

    s = synthesize("ring", load_topology("dgx1"), Collective.make("allreduce", 8, 2))
    s2 = round_trip_cases()["trees"]()
    whole = [verify(x) for x in (s, s2)]
    monkeypatch.setattr(v, "REDUCE_WINDOW_BUFFERS", 8)  # one segment per window
    windowed = [verify(x) for x in (s, s2)]
    for a, b in zip(whole, windowed):
        assert a.ok and b.ok and a.redundant_deliveries == b.redundant_deliveries
        assert a.checks == b.checks


@pytest.mark.parametrize("direction", ["out", "in"])
@pytest.mark.parametrize("seed", range(4))
def test_tree_templates_at_once_match_one_at_a_time(direction, seed):
    """The array construction of the lowering's tree templates (all trees at once) gives
    exactly the per-tree construction's templates, on random routed spanning trees."""
    from collsynth.schedule import trees as tr

    rng = np.random.default_rng(seed)
    n = 9
    t = load_topology(f"full:n={n}")
    b = ScheduleBuilder(t, Collective.make("allgather", n))
    forms = []
    for r in range(n):
        for _ in range(2):
            nodes = [r] + [int(x) for x in rng.permutation([v for v in range(n) if v != r])]
            edges = []
            for i in range(1, n):
                p, c = nodes[int(rng.integers(0, i))], nodes[i]
                a, z = (p, c) if direction == "out" else (c, p)
                edges.append((a, z, tuple(b.routes.route(a, z))))
            order = rng.permutation(len(edges))
            forms.append(Tree(r, tuple(edges[i] for i in order), 1, direction))
    cols = TreeForm(forms).columns
    ids = np.arange(len(forms), dtype=np.int64)
    chunks = [np.array([i]) for i in ids]
    fast = tr._tasks_at_once(cols, ids, direction, n, chunks)
    assert fast is not None
    ptr = cols["tree_ptr"]
    for i, tree in enumerate(forms):
        lo, hi = int(ptr[i]), int(ptr[i + 1])
        src, dst = cols["edge_from"][lo:hi].tolist(), cols["edge_to"][lo:hi].tolist()
        children = tr._check_edges(tree.root, src, dst, direction, n, "t")
        slow = tr._Task.make(b, tree.root, direction, src, dst, cols, lo, children, chunks[i])
        for f in ("src", "dst", "depth", "route_len", "route_flat", "dep_len", "from_root"):
            assert np.array_equal(getattr(fast[i], f), getattr(slow, f)), (i, f)
        key = lambda x: sorted(zip(x.dep_owner.tolist(), x.dep_within.tolist(),  # noqa: E731
                                   x.dep_edge.tolist()))  # fmt: skip
        assert key(fast[i]) == key(slow), i
    # a tree that is not a spanning tree: left to the one-at-a-time check
    bad = list(forms[0].edges)
    bad[0] = (bad[0][0], bad[0][0], bad[0][2])
    cols_bad = TreeForm([Tree(0, tuple(bad), 1, direction)]).columns
    assert tr._tasks_at_once(cols_bad, np.array([0]), direction, n, chunks[:1]) is None


def test_lowering_refuses_more_dependencies_than_the_limit(monkeypatch):
    """An AllReduce's broadcasts from a root each wait for every reduction into it; beyond
    ``COLLSYNTH_MAX_DEPS`` entries the lowering stops with one line instead of exhausting
    memory."""
    monkeypatch.setenv("COLLSYNTH_MAX_DEPS", "10")
    with pytest.raises(CollsynthError, match=r"dependencies in their (in|out)-tree operations"):
        round_trip_cases()["trees"]()
    monkeypatch.setenv("COLLSYNTH_MAX_DEPS", "ten")
    with pytest.raises(
        CollsynthError, match="COLLSYNTH_MAX_DEPS='ten' is not an integer from 1 to "
    ):
        round_trip_cases()["trees"]()
