"""The verifier on synthesized and lowered schedules (spt, tree lowering) and on schedules
that went through a file and back."""

from __future__ import annotations

import json

import numpy as np
import pytest

from collsynth.collective import Collective, CollKind
from collsynth.errors import CollsynthError
from collsynth.schedule.io import load_schedule, save_schedule, schedule_from_dict, schedule_to_dict
from collsynth.schedule.ir import ScheduleBuilder
from collsynth.schedule.trees import Tree, TreeForm, lower
from collsynth.synth import synthesize
from collsynth.topology import load_topology
from collsynth.topology.model import Topology
from collsynth.verify import verify
from conftest import (
    REDUCE_ENGINES,
    RL,
    ROUND_TRIP_REDUCING,
    L,
    assert_same_schedule,
    engines_for,
    in_forest,
    out_forest,
    rejects,
    ring4,
    ring_chain,
    round_trip_cases,
    switch4,
    wan,
    zoo,
)

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
@pytest.mark.parametrize(
    "kind, reduce_engine",
    [(k.value, e) for k in CollKind if k is not CollKind.CUSTOM for e in engines_for(k.value)],
)
@pytest.mark.parametrize("cpr", [1, 2])
def test_spt_schedules_verify(topo_name, kind, reduce_engine, cpr):
    t = SPT_TOPOLOGIES[topo_name]()
    root = t.num_ranks - 1 if kind in ("broadcast", "reduce", "gather", "scatter") else None
    coll = Collective.make(kind, t.num_ranks, cpr, root)
    s = synthesize("spt", t, coll)
    assert s.meta["algorithm"] == "spt"
    rep = verify(s, reduce_engine=reduce_engine)
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
@pytest.mark.parametrize("pipeline", [1, 3])
@pytest.mark.parametrize(
    "kind, reduce_engine",
    [
        (k, e)
        for k in ("allgather", "reducescatter", "allreduce", "broadcast", "reduce")
        for e in engines_for(k)
    ],
)
def test_tree_lowering_verifies(kind, reduce_engine, pipeline):
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
    rep = verify(s, reduce_engine=reduce_engine)
    assert rep.ok
    per_chunk_ops = {
        "allgather": n - 1,
        "broadcast": n - 1,
        "reducescatter": n - 1,
        "reduce": n - 1,
        "allreduce": 2 * (n - 1),
    }[kind]
    assert s.num_ops == per_chunk_ops * s.collective.num_chunks


def test_tree_lowering_with_explicit_routes_and_branching(reduce_engine):
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
    assert verify(s, reduce_engine=reduce_engine).ok


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


@pytest.mark.parametrize("direction", ["out", "in"])
@pytest.mark.parametrize("seed", range(4))
def test_tree_templates_at_once_match_one_at_a_time(direction, seed):
    """The array construction of the lowering's tree templates (all trees at once) gives
    exactly the per-tree construction's templates, on random routed spanning trees."""
    from collsynth.schedule import tree_tasks

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
    fast = tree_tasks.tasks_at_once(cols, ids, direction, n, chunks)
    assert fast is not None
    ptr = cols["tree_ptr"]
    for i, tree in enumerate(forms):
        lo, hi = int(ptr[i]), int(ptr[i + 1])
        src, dst = cols["edge_from"][lo:hi].tolist(), cols["edge_to"][lo:hi].tolist()
        children = tree_tasks.check_edges(tree.root, src, dst, direction, n, "t")
        slow = tree_tasks.TreeTask.make(
            b, tree.root, direction, src, dst, cols, lo, children, chunks[i]
        )
        for f in ("src", "dst", "depth", "route_len", "route_flat", "dep_len", "from_root"):
            assert np.array_equal(getattr(fast[i], f), getattr(slow, f)), (i, f)
        key = lambda x: sorted(zip(x.dep_owner.tolist(), x.dep_within.tolist(),  # noqa: E731
                                   x.dep_edge.tolist()))  # fmt: skip
        assert key(fast[i]) == key(slow), i
    # a tree that is not a spanning tree: left to the one-at-a-time check
    bad = list(forms[0].edges)
    bad[0] = (bad[0][0], bad[0][0], bad[0][2])
    cols_bad = TreeForm([Tree(0, tuple(bad), 1, direction)]).columns
    assert tree_tasks.tasks_at_once(cols_bad, np.array([0]), direction, n, chunks[:1]) is None


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


# ------------------------------------------------------------------------------ round trip
@pytest.mark.parametrize(
    "case, reduce_engine",
    [
        (c, e)
        for c in sorted(round_trip_cases())
        for e in (REDUCE_ENGINES if c in ROUND_TRIP_REDUCING else ("auto",))
    ],
)
def test_schedule_round_trip(case, reduce_engine, tmp_path):
    s = round_trip_cases()[case]()
    assert s.collective.reduces == (case in ROUND_TRIP_REDUCING)
    assert verify(s, reduce_engine=reduce_engine).ok
    d = schedule_to_dict(s)
    text = json.dumps(d)
    back = schedule_from_dict(json.loads(text))
    assert_same_schedule(s, back)
    assert verify(back, reduce_engine=reduce_engine).ok
    assert schedule_to_dict(back) == d
    path = str(tmp_path / "s.json")
    save_schedule(s, path)
    loaded = load_schedule(path)
    assert_same_schedule(s, loaded)
    assert verify(loaded, reduce_engine=reduce_engine).ok
    # loading against the same topology works, against another one it does not
    assert_same_schedule(s, load_schedule(path, topology=s.topology))
    with pytest.raises(CollsynthError, match="was made for topology"):
        load_schedule(path, topology=zoo("ring:n=6"))
