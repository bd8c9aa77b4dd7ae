"""Settings for the whole test run, and the helpers the verifier's tests share with the tests
of joins, groups and schedule files (``from conftest import rejects, ...``): small topologies,
hand-built schedules, the round-trip cases, and ``rejects``.

The two reduction engines of the verifier are opt-in: a test that executes reductions takes
the ``reduce_engine`` fixture (it runs once per engine) or parametrizes ``reduce_engine`` with
:func:`engines_for`, and passes it to ``verify``/``check_schedule``/``rejects``.
"""

from __future__ import annotations

import os
import re

import numpy as np
import pytest

from collsynth.collective import REDUCING, Collective, parse_kind
from collsynth.errors import VerificationError
from collsynth.schedule.ir import OpKind, Schedule, ScheduleBuilder
from collsynth.schedule.trees import Tree, TreeForm, lower
from collsynth.synth import synthesize
from collsynth.topology import TopologyBuilder, load_topology
from collsynth.topology.model import Topology
from collsynth.verify import check_schedule, verify

# Tests compile numba loops in the process that needs them, as before the first-run policy
# (collsynth.jit): no detached background builds competing with the tests for the cores.
os.environ.setdefault("COLLSYNTH_JIT", "foreground")


@pytest.fixture(autouse=True)
def _forestcoll_first_choice(request, monkeypatch):
    """ForestColl's near ties (``Alternatives``) cost one more ordering each, so outside the
    tests of that choice (marker ``alternatives``) ForestColl gives its first choice alone: the
    schedule the choice starts from, which the kept one never realizes slower than. This keeps
    the suite within CI's time; the choice itself is tested where marked."""
    if request.node.get_closest_marker("alternatives") is None:
        from collsynth.synth.forestcoll import algo

        monkeypatch.setattr(algo, "TIE_MAX", 1)


GB = 1e9
US = 1e-6


# ------------------------------------------------------------------------------ reduction engines
#: the verifier's reduction executors: each must accept and refuse exactly the same schedules
#: (on a refusal the Python one names the violation)
REDUCE_ENGINES = ("python", "compiled")


@pytest.fixture(params=REDUCE_ENGINES)
def reduce_engine(request) -> str:
    """The test once per reduction engine (for tests whose schedules execute reductions)."""
    return request.param


def engines_for(kind: str) -> tuple[str, ...]:
    """The engines worth running for a collective of ``kind``: both where it reduces, the
    default alone where it does not (no reduction is executed)."""
    return REDUCE_ENGINES if parse_kind(kind) in REDUCING else ("auto",)


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


def islands_on_rails(cross: bool = False, spine: bool = False) -> Topology:
    """3 islands of 4 GPUs (an NVSwitch each), GPU j of each island on leaf j through its own
    NIC, no node attributes (the structure alone tells the islands alike). ``cross``: island
    2's GPUs 0 and 1 swap leaves (the same bandwidths everywhere, but island 2 wired unlike
    the others); ``spine``: the leaves joined by one spine."""
    b = TopologyBuilder("islands")
    gpus = [[b.compute(f"x{s}_{j}") for j in range(4)] for s in range(3)]
    leaves = [b.switch(f"leaf{j}") for j in range(4)]
    if spine:
        top = b.switch("spine")
        for leaf in leaves:
            b.bilink(leaf, top, 80e9, 1e-6)
    for s in range(3):
        nv = b.switch(f"nv{s}")
        for j, g in enumerate(gpus[s]):
            b.bilink(g, nv, 100e9, 1e-6)
            nic = b.switch(f"nic{s}_{j}")
            b.bilink(g, nic, 20e9, 1e-6)
            b.bilink(nic, leaves[{0: 1, 1: 0}.get(j, j) if cross and s == 2 else j], 20e9, 1e-6)
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


# ------------------------------------------------------------------------------ verdicts
def rejects(
    schedule: Schedule,
    check: str,
    op: int | None | str = "any",
    match: str | None = None,
    reduce_engine: str = "auto",
):
    """Assert the verifier rejects ``schedule`` by rule ``check`` (at operation ``op``)."""
    with pytest.raises(VerificationError) as exc:
        verify(schedule, reduce_engine=reduce_engine)
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
    rep = check_schedule(schedule, reduce_engine=reduce_engine)
    assert not rep.ok and rep.error == msg and rep.error_check == check and rep.error_op == e.op
    return e


def subset(s: Schedule, keep: list[int]) -> Schedule:
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


# ------------------------------------------------------------------------------ schedules
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


def reduce_into(b: ScheduleBuilder, t: Topology, ch: int, owner: int) -> list[int]:
    """Tree reduction of ``ch`` into ``owner`` on a 4-ring: owner+2 -> owner+1 -> owner, and
    owner+3 -> owner. Returns the ops delivering into the owner."""
    o1, o2, o3 = (owner + 1) % 4, (owner + 2) % 4, (owner + 3) % 4
    a = b.add(o2, o1, ch, route=[RL(t, o2, o1)], kind="reduce")
    c = b.add(o1, owner, ch, route=[RL(t, o1, owner)], kind="reduce", deps=[a])
    d = b.add(o3, owner, ch, route=[RL(t, o3, owner)], kind=OpKind.REDUCE)
    return [c, d]


def allreduce_rs_ag(t: Topology) -> Schedule:
    b = builder(t, "allreduce")
    for ch in range(4):
        into = reduce_into(b, t, ch, ch)
        o1, o2, o3 = (ch + 1) % 4, (ch + 2) % 4, (ch + 3) % 4
        x = b.add(ch, o1, ch, route=[RL(t, ch, o1)], deps=into)
        b.add(o1, o2, ch, route=[RL(t, o1, o2)], deps=[x])
        b.add(ch, o3, ch, route=[RL(t, ch, o3)], deps=into)
    return b.build()


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


def racy_read() -> Schedule:
    """A Reduce on ``switch4`` with a race: op 0 reads rank 1; op 1 reduces into rank 1 after
    it; op 2 reduces into rank 1 with no order to op 0's read."""
    t = switch4()
    b = builder(t, "reduce", root=0)
    a = b.add(1, 0, 0, kind="reduce")
    b.add(2, 1, 0, kind="reduce", deps=[a])
    b.add(3, 1, 0, kind="reduce")
    b.add(3, 0, 0, kind="reduce")
    b.add(2, 0, 0, kind="reduce")
    return b.build()


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


# ------------------------------------------------------------------------------ round trip
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


#: the round-trip cases whose collective reduces (the others execute no reduction)
ROUND_TRIP_REDUCING = ("allreduce", "full", "spt-dgx1-allreduce", "trees")
