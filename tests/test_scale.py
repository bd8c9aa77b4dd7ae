"""SCALE-CCL: synthesizer, link statistics, re-planning, CLI, compiled and uncompiled loop."""

from __future__ import annotations

import json

import numpy as np
import pytest

from collsynth.cli import main
from collsynth.collective import Collective
from collsynth.errors import CollsynthError
from collsynth.sim import simulate
from collsynth.synth import synthesize
from collsynth.synth.order import without_chosen_order
from collsynth.synth.scale import EVENT_NAMES, LinkStats, load_kernel, lower, plan, replan
from collsynth.topology import load_topology
from collsynth.verify import ensure_verified, verify

MB = 1e6


def planned_sim(s, size, **kw):
    """The schedule in its plan: the planned order, without the link orders synthesis chose for
    execution (what these tests check the algorithm's own estimates against)."""
    return simulate(without_chosen_order(s), size, order="plan", **kw)


def _run(spec: str, kind: str = "allgather", c: int = 2, size: float = 8 * MB, **kw):
    t = load_topology(spec)
    coll = Collective.make(kind, t.num_ranks, **kw)
    s = synthesize("scale", t, coll, size=size, subchunks=c)
    return t, s


@pytest.mark.parametrize(
    "spec,kind,c",
    [
        ("wan", "allgather", 1),
        ("wan", "allgather", 4),
        ("wan:dcs=2,gpus=4,connectivity=0.5,seed=3", "allgather", 2),
        ("wan:dcs=3,gpus=4,gateways=1,km=10", "allgather", 2),
        ("wan", "broadcast", 4),
        ("wan:dcs=4,gpus=2", "broadcast", 1),
        ("ring:n=6", "allgather", 3),
        ("line:n=5", "allgather", 2),
        ("line:n=5", "broadcast", 4),
        ("star:n=5", "allgather", 2),
    ],
)
def test_verified_no_duplicates_and_sim_matches_plan(spec, kind, c):
    _t, s = _run(spec, kind, c)
    rep = ensure_verified(s)
    assert rep.redundant_deliveries == 0
    # each (receiver, chunk, byte range) arrives exactly once: the neighbour memory table
    keys = set(
        zip(
            s.dst.tolist(),
            s.chunk.tolist(),
            (s.part_lo if s.part_lo is not None else np.zeros(s.num_ops)).tolist(),
        )
    )
    assert len(keys) == s.num_ops
    planned = s.meta["scale"]["plan_time_s"]
    assert rep.planned_finish_s == pytest.approx(planned, rel=1e-9)
    # the simulator, under the statistics planned with, replays the plan exactly when held to
    # the planned starts, and never does worse when free to start early (work-conserving)
    assert planned_sim(s, s.size, release=True).time_s == pytest.approx(planned, rel=1e-6)
    assert planned_sim(s, s.size).time_s <= planned * (1 + 1e-6)
    ev = s.meta["scale"]["events"]
    assert set(ev) == set(EVENT_NAMES.values()) and all(v > 0 for v in ev.values())


def test_two_datacenters_one_gpu_each_formula():
    # gpu0 -> router0 -> router1 -> gpu1 (cut-through): alpha sum + chunk / bw, for any c
    t = load_topology("wan:dcs=2,gpus=1,km=100")
    coll = Collective.make("allgather", 2)
    size = 2 * MB
    expect = 2 * 0.7e-6 + 100 * 5e-6 + (size / 2) / 12.5e9
    for c in (1, 2, 8):
        s = synthesize("scale", t, coll, size=size, subchunks=c)
        ensure_verified(s)
        assert s.num_ops == 2 * c
        assert all(len(s.route(i)) == 3 for i in range(s.num_ops))
        assert s.meta["scale"]["plan_time_s"] == pytest.approx(expect, rel=1e-9)


def test_line_broadcast_subchunk_pipelining_formula():
    # store-and-forward through one GPU (SCALE-CCL §3): 2 alpha + beta + beta / c
    t = load_topology("line:n=3")
    coll = Collective.make("broadcast", 3, root=0)
    size = 4 * MB
    beta = size / 50e9
    for c in (1, 2, 4):
        s = synthesize("scale", t, coll, size=size, subchunks=c)
        ensure_verified(s)
        assert s.meta["scale"]["plan_time_s"] == pytest.approx(
            2 * 0.7e-6 + beta + beta / c, rel=1e-9
        )


def test_deterministic():
    _t, a = _run("wan:dcs=3,gpus=4", c=4)
    _t, b = _run("wan:dcs=3,gpus=4", c=4)
    for name in ("src", "dst", "chunk", "route_links", "dep_ids", "start", "part_lo"):
        assert np.array_equal(getattr(a, name), getattr(b, name))


def test_wan_allgather_uses_each_wan_link_minimally():
    # every subchunk enters every other datacenter over the WAN exactly once
    t, s = _run("wan", c=2)
    wan_links = {l.id for l in t.links if l.cls == "wan"}
    crossings = sum(1 for i in range(s.num_ops) for l in s.route(i).tolist() if l in wan_links)
    assert crossings == 3 * 8 * 2 * 2  # DCs x GPUs x subchunks x other DCs


def test_registry_option_and_errors():
    t = load_topology("ring:n=4")
    with pytest.raises(CollsynthError):
        synthesize("scale", t, Collective.make("allgather", 4), subchunks="zero")
    with pytest.raises(CollsynthError):
        synthesize("scale", t, Collective.make("allreduce", 4))
    s = synthesize("scale", t, Collective.make("allgather", 4), subchunks="3")
    assert s.meta["options"] == {"subchunks": 3} and s.part_den.max() == 3


def test_stats_round_trip_and_replan(tmp_path):
    t = load_topology("wan:dcs=2,gpus=2")
    st = LinkStats.from_topology(t).perturbed(7, 0.3, 0.3)
    path = tmp_path / "stats.json"
    st.save(str(path), t)
    back = LinkStats.load(str(path), t)
    assert np.allclose(back.bandwidth, st.bandwidth) and np.allclose(back.alpha, st.alpha)
    s = replan(t, str(path), subchunks=2, size=4 * MB)
    assert s.meta["replanned"] and s.topology.link_bw.tolist() == st.bandwidth.tolist()
    # a queue on every WAN link delays the plan by exactly its drain time (2 DCs, 1 WAN hop)
    wan = [l.id for l in t.links if l.cls == "wan"]
    data = {"links": [{"link": l, "queue": "1MB"} for l in wan]}
    base = replan(t, {"links": []}, subchunks=2, size=4 * MB)
    queued = replan(t, data, subchunks=2, size=4 * MB)
    drain = 1e6 / 12.5e9
    assert queued.meta["scale"]["plan_time_s"] == pytest.approx(
        base.meta["scale"]["plan_time_s"] + drain, rel=1e-6
    )
    # named by src/dst with units
    named = LinkStats.from_dict(
        {
            "links": [
                {"src": "dc0.router", "dst": "dc1.router", "bandwidth": "1GB/s", "alpha": "2ms"}
            ]
        },
        t,
    )
    lid = t.links_between(t.index("dc0.router"), t.index("dc1.router"))[0]
    assert named.bandwidth[lid] == 1e9 and named.alpha[lid] == 2e-3
    with pytest.raises(CollsynthError, match="for topology"):
        LinkStats.from_dict({"topology": "wan_d3g8", "links": []}, t)


@pytest.mark.parametrize(
    "entry",
    [
        {"link": 10**6},
        {"link": 0, "bandwidth": 0},
        {"link": 0, "alpha": -1},
        {"link": 0, "queue": "lots"},
        {"src": "nope", "dst": "dc0.router"},
        {"speed": 1},
        {"link": 0, "src": "dc1.gpu0"},
    ],
)
def test_bad_stats_entries(entry):
    t = load_topology("wan:dcs=2,gpus=2")
    with pytest.raises(CollsynthError) as e:
        LinkStats.from_dict({"links": [entry]}, t)
    assert "\n" not in str(e.value)


def test_cli_replan_smoke_and_bad_stats(tmp_path, capsys):
    stats = tmp_path / "stats.json"
    out = tmp_path / "sched.json"
    assert main(["wan", "stats", "-t", "wan:dcs=2,gpus=2", "--perturb", "1", "-o", str(stats)]) == 0
    assert (
        main(
            [
                "wan",
                "replan",
                "-t",
                "wan:dcs=2,gpus=2",
                "--stats",
                str(stats),
                "--subchunks",
                "4",
                "--size",
                "4MB",
                "-o",
                str(out),
                "--json",
            ]
        )
        == 0
    )
    info = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert info["verified"] and info["ops"] > 0
    from collsynth.schedule.io import load_schedule

    assert verify(load_schedule(str(out))).ok
    # both engines from the CLI: the same plan
    plans = {}
    for engine in ("numba", "python"):
        o = tmp_path / f"{engine}.json"
        assert (
            main(
                [
                    "wan",
                    "replan",
                    "-t",
                    "wan:dcs=2,gpus=2",
                    "--stats",
                    str(stats),
                    "--subchunks",
                    "4",
                    "--size",
                    "4MB",
                    "-o",
                    str(o),
                    "--json",
                    "--engine",
                    engine,
                ]
            )
            == 0
        )
        info = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert info["engine"] == engine and info["verified"]
        sch = load_schedule(str(o))
        plans[engine] = (sch.src.tolist(), sch.dst.tolist(), sch.start.tolist())
    assert plans["numba"] == plans["python"]
    bad = tmp_path / "bad.json"
    bad.write_text('{"links": [{"link": 0, "bandwidth": -5}]}')
    assert (
        main(["wan", "replan", "-t", "wan:dcs=2,gpus=2", "--stats", str(bad), "-o", str(out)]) == 2
    )
    err = capsys.readouterr().err.strip()
    assert err.startswith("collsynth: error:") and "\n" not in err
    bad.write_text("{not json")
    assert (
        main(["wan", "replan", "-t", "wan:dcs=2,gpus=2", "--stats", str(bad), "-o", str(out)]) == 2
    )


def test_plan_counts_decisions():
    t = load_topology("wan:dcs=2,gpus=4")
    p = plan(t, Collective.make("allgather", t.num_ranks), 2, 4 * MB)
    assert p.decisions["lwnf"] > 0 and p.decisions["ss_calls"] >= len(p.op_src)


# ---------------------------------------------------------------- fast re-planning identity
def _digest(s) -> str:
    """Hash of what a schedule does: ops (src, dst, chunk, part), start times, routes, deps."""
    import hashlib

    h = hashlib.sha256()
    for a in (
        s.src,
        s.dst,
        s.chunk,
        s.part_lo,
        s.part_hi,
        s.part_den,
        s.start,
        s.route_ptr,
        s.route_links,
        s.dep_ptr,
        s.dep_ids,
    ):
        h.update(b"none" if a is None else np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:16]


def _replan_case(case: str, engine: str = "auto"):
    topo = load_topology("wan")
    n = topo.num_ranks
    ag = Collective.make("allgather", n)
    base = LinkStats.from_topology(topo)
    if case == "64MB seed0":
        return replan(
            topo, base.perturbed(0), ag, subchunks=8, size=64 * MB * n, verify=False, engine=engine
        )
    if case == "1MB seed3":
        return replan(
            topo, base.perturbed(3), ag, subchunks=8, size=1 * MB * n, verify=False, engine=engine
        )
    st = base.perturbed(3)
    q = np.zeros(len(topo.links))
    q[::7] = 5 * MB
    return replan(
        topo,
        LinkStats(st.bandwidth, st.alpha, q),
        ag,
        subchunks=8,
        size=64 * MB * n,
        verify=False,
        engine=engine,
    )


# Digests and decision counts of the planner before its hot loop was optimised for the
# <= 100 ms re-plan target: no optimisation, and neither the uncompiled nor the compiled run
# of the loop, may change a single operation or time. Update them only with a deliberate
# change of the algorithm.
@pytest.mark.parametrize("engine", ["python", "numba"])
@pytest.mark.parametrize(
    "case,digest,ss_calls,rounds",
    [
        ("64MB seed0", "2796f867baf84b19", 9523, 12535),
        ("1MB seed3", "d172bf339e7c1c55", 8254, 12743),
        ("queued", "366ca1d79c88dba8", 8375, 12644),
    ],
)
def test_replan_output_pinned(case, digest, ss_calls, rounds, engine):
    s = _replan_case(case, engine)
    assert s.meta["scale"]["engine"] == engine
    d = s.meta["scale"]["decisions"]
    assert (_digest(s), d["ss_calls"], d["rounds"], d["lwnf"]) == (digest, ss_calls, rounds, 384)


def _same_plan(a, b) -> None:
    """Two plans (the loop run uncompiled, then compiled) are the same operation for
    operation, with the same counters."""
    assert a.engine == "python" and b.engine == "numba"
    for name in ("op_src", "op_dst", "op_sub", "op_dep"):
        assert list(getattr(a, name)) == np.asarray(getattr(b, name)).tolist(), name
    for name in ("op_start", "op_finish"):  # bit for bit, not approximately
        assert np.array_equal(
            np.asarray(getattr(a, name), dtype=np.float64), np.asarray(getattr(b, name))
        ), name
    assert a.routes() == b.routes()
    assert (a.events, a.decisions, a.plan_s) == (b.events, b.decisions, b.plan_s)


@pytest.mark.parametrize(
    "spec,kind,c,kw",
    [
        ("wan", "allgather", 1, {}),
        ("wan", "allgather", 4, {}),
        ("wan:dcs=2,gpus=4,connectivity=0.5,seed=3", "allgather", 2, {}),
        ("wan:dcs=3,gpus=4,gateways=1,km=10", "allgather", 3, {}),
        ("wan:dcs=4,gpus=3,connectivity=0.9,seed=5", "allgather", 70, {}),  # 3 words per set
        ("wan", "broadcast", 4, {"root": 5}),
        ("wan:dcs=4,gpus=2", "broadcast", 1, {}),
        ("ring:n=6", "allgather", 3, {}),
        ("line:n=5", "broadcast", 4, {}),
        ("star:n=5", "allgather", 2, {}),
        ("fat_tree:k=4", "allgather", 2, {}),
    ],
)
def test_compiled_loop_equals_uncompiled(spec, kind, c, kw):
    t = load_topology(spec)
    coll = Collective.make(kind, t.num_ranks, **kw)
    _same_plan(plan(t, coll, c, 8 * MB, engine="python"), plan(t, coll, c, 8 * MB, engine="numba"))


def test_compiled_loop_equals_uncompiled_multicast_and_stats():
    t = load_topology("wan:dcs=3,gpus=4,km=50")
    coll = Collective.custom(
        t.num_ranks, [(0, [5, 9]), (4, [1, 2, 3, 11]), (7, [0]), (10, [6, 7, 8])]
    )
    st = LinkStats.from_topology(t).perturbed(11)
    q = np.zeros(len(t.links))
    q[::5] = 2 * MB
    st = LinkStats(st.bandwidth, st.alpha, q)
    for cc in (coll, Collective.make("allgather", t.num_ranks)):
        _same_plan(
            plan(t, cc, 5, 4 * MB, st, engine="python"), plan(t, cc, 5, 4 * MB, st, engine="numba")
        )


def test_loop_grows_its_arrays(monkeypatch):
    from collsynth.synth.scale import algo

    t = load_topology("wan:dcs=3,gpus=3")
    coll = Collective.make("allgather", t.num_ranks)
    st = LinkStats.from_topology(t).perturbed(2)
    ref = plan(t, coll, 4, 4 * MB, st, engine="python")
    monkeypatch.setattr(algo, "INITIAL_OPS", 1)  # start tiny: grow every few rounds
    tiny = plan(t, coll, 4, 4 * MB, st, engine="numba")
    _same_plan(ref, tiny)
    _same_plan(plan(t, coll, 4, 4 * MB, st, engine="python"), tiny)


def test_engine_choice(monkeypatch):
    from collsynth.synth.scale import algo

    t = load_topology("wan:dcs=2,gpus=2")
    coll = Collective.make("allgather", t.num_ranks)
    with pytest.raises(CollsynthError, match="engine") as e:
        plan(t, coll, 2, MB, engine="fast")
    assert "\n" not in str(e.value)
    # auto before the compiled loop is loaded: uncompiled for small instances, compiled (loading
    # it) from AUTO_SIZE = rank-subchunk pairs x (datacenters + 1) on
    monkeypatch.setattr(algo, "_LOADED", {})
    monkeypatch.setenv("COLLSYNTH_JIT", "foreground")  # compiling now is allowed
    assert plan(t, coll, 2, MB).engine == "python"
    big = -(-algo.AUTO_SIZE // (t.num_ranks * coll.num_chunks * 3))  # 2 datacenters
    assert plan(t, coll, big, MB).engine == "numba"
    info = load_kernel()
    assert info["load_s"] > 0 and info["compiled"] and load_kernel() == info  # idempotent
    assert plan(t, coll, 2, MB).engine == "numba"  # auto, once loaded
    assert plan(t, coll, 2, MB, engine="python").engine == "python"
    s = replan(t, LinkStats.from_topology(t), coll, subchunks=2, size=MB, engine="python")
    assert s.meta["scale"]["engine"] == "python"


def test_first_run_compiles_in_the_background(monkeypatch, tmp_path):
    """Without the compiled loop in the cache, ``auto`` runs uncompiled and starts one
    background build (default policy); ``off`` starts none; once the loop is marked ready,
    ``auto`` loads it."""
    from collsynth import jit
    from collsynth.synth.scale import algo

    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(algo, "_LOADED", {})
    started = []
    monkeypatch.setattr(jit, "build_in_background", lambda *a: started.append(a) or True)
    t = load_topology("wan:dcs=2,gpus=2")
    coll = Collective.make("allgather", t.num_ranks)
    big = -(-algo.AUTO_SIZE // (t.num_ranks * coll.num_chunks * 3))
    monkeypatch.setenv("COLLSYNTH_JIT", "off")
    assert plan(t, coll, big, MB).engine == "python" and not started
    monkeypatch.delenv("COLLSYNTH_JIT")
    p = plan(t, coll, big, MB)
    assert p.engine == "python" and len(started) == 1 and started[0][0] == "scale"
    jit.mark_ready("scale", algo._SOURCES)
    assert plan(t, coll, big, MB).engine == "numba"
    monkeypatch.setenv("COLLSYNTH_JIT", "sometimes")
    with pytest.raises(CollsynthError, match="COLLSYNTH_JIT='sometimes' is not one of"):
        jit.policy()


def test_background_build_starts_once(monkeypatch, tmp_path):
    """One detached build per loop: a fresh lock file stops a second one, a stale one does
    not; the build removes its lock when done and marks nothing by itself."""
    import os
    import subprocess
    import time

    from collsynth import jit

    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    src = tmp_path / "loop.py"
    src.write_text("x = 1\n")
    calls = []
    real_popen = subprocess.Popen

    class FakePopen:
        def __init__(self, argv, **kw):
            calls.append((argv, kw))

    monkeypatch.setattr(subprocess, "Popen", FakePopen)
    monkeypatch.setattr(jit, "_STARTED", set())
    assert jit.build_in_background("demo", [str(src)], "pass")
    argv, kw = calls[0]
    assert kw["start_new_session"] and kw["stdout"] == subprocess.DEVNULL
    assert kw["env"]["COLLSYNTH_JIT"] == "foreground"
    assert not jit.build_in_background("demo", [str(src)], "pass")  # this process started it
    monkeypatch.setattr(jit, "_STARTED", set())
    assert not jit.build_in_background("demo", [str(src)], "pass")  # the lock is fresh
    lock = next(p for p in os.listdir(tmp_path / "collsynth-ready") if p.endswith(".building"))
    old = time.time() - jit.STALE_BUILD_S - 1
    os.utime(tmp_path / "collsynth-ready" / lock, (old, old))
    assert jit.build_in_background("demo", [str(src)], "pass")  # a stale lock is ignored
    # the real script runs the code and removes the lock
    script = calls[-1][0][-1]
    assert not jit.ready("demo", [str(src)])
    assert real_popen([calls[-1][0][0], "-c", script]).wait() == 0
    assert not (tmp_path / "collsynth-ready" / lock).exists()
    jit.mark_ready("demo", [str(src)])
    assert jit.ready("demo", [str(src)])
    src.write_text("x = 2\n")  # a changed source needs a new build
    assert not jit.ready("demo", [str(src)])


def test_runs_without_numba(monkeypatch):
    """Where numba cannot be imported the loop runs uncompiled, whatever the engine."""
    import sys

    from collsynth.synth.scale import algo

    t = load_topology("wan:dcs=2,gpus=3")
    coll = Collective.make("allgather", t.num_ranks)
    ref = plan(t, coll, 3, MB, engine="python")
    monkeypatch.setitem(sys.modules, "numba", None)  # import numba raises ImportError
    monkeypatch.setattr(algo, "_LOADED", {})
    assert not load_kernel()["compiled"]
    p = plan(t, coll, 3, MB, engine="numba")
    assert p.engine == "python" and p.routes() == ref.routes()
    assert np.array_equal(p.op_start, ref.op_start) and p.decisions == ref.decisions


def test_more_than_63_datacenters():
    """Datacenter sets span several words: ``dragonfly``'s 72 GPUs have no direct links, so
    each is its own datacenter. Pinned to the plan of the planner before the single loop."""
    t = load_topology("dragonfly")
    coll = Collective.make("broadcast", t.num_ranks, root=5)
    a = plan(t, coll, 2, 8 * MB, engine="python")
    b = plan(t, coll, 2, 8 * MB, engine="numba")
    _same_plan(a, b)
    assert _digest(lower(b)) == "51aab95aac114c21"


def test_broadcast_output_pinned():
    t = load_topology("wan:km=150")
    s = synthesize("scale", t, Collective.make("broadcast", t.num_ranks), size=64 * MB, subchunks=4)
    assert _digest(s) == "60187a705b078d57"


@pytest.mark.parametrize("engine", ["python", "numba"])
def test_replan_never_overlaps_a_busy_link(engine):
    """1 MB chunks, seed 9: a link freeing 0.9 ps after the round's time (within ``eps``, so
    the same round) used to be reused at once, a 0.9 ps overlap the capacity check rejects;
    the stream now starts when the link frees. The only plan of the 40 bench re-plans this
    changes (6 start times, same completion)."""
    topo = load_topology("wan")
    n = topo.num_ranks
    st = LinkStats.from_topology(topo).perturbed(9)
    s = replan(
        topo, st, Collective.make("allgather", n), subchunks=8, size=MB * n, engine=engine
    )  # verifies
    assert s.meta["scale"]["engine"] == engine


def test_replan_deterministic_and_independent():
    """Planners share no state: the same statistics give the same schedule whatever was
    planned in between."""
    a = _replan_case("1MB seed3", "numba")
    _replan_case("queued", "numba")
    b = _replan_case("1MB seed3", "numba")
    assert _digest(a) == _digest(b)
    assert a.meta["scale"]["events"] == b.meta["scale"]["events"]


def test_random_alphas_keep_causality():
    # per-link random alphas put distinct events 0.5 ps apart; co-timing them (the old 1 ps
    # round) started a stream before its input arrived and the verifier refused the schedule
    from collsynth.synth.teccl import sample_alphas
    from collsynth.topology import load_topology
    from collsynth.verify import ensure_verified

    t = sample_alphas(load_topology("mesh2d:w=8,h=5"), seed=1, low=0.3e-6, high=3e-6)
    s = synthesize("scale", t, Collective.make("allgather", 40, 1), size=1e6)
    ensure_verified(s)


def test_loop_compiles_as_one_group():
    """The loop's modules share one namespace for numba: each function of theirs is in it under
    its own name, and names mean one object across the modules."""
    import types

    from collsynth.synth.scale import kernel

    space = kernel.namespace()
    names = kernel.kernel_names()
    assert len(names) == len(set(names)) and "run_loop" in names
    for module in kernel.MODULES:
        for name, value in vars(module).items():
            if isinstance(value, types.FunctionType) and value.__module__ == module.__name__:
                assert name in names and space[name] is value
    assert set(kernel.ALLOCATING) <= set(names)
