"""Timelines in the Trace Event Format: simulated, measured in process, and from the CLI."""

from __future__ import annotations

import json
import math

import pytest

from collsynth.cli import main
from collsynth.collective import Collective
from collsynth.report.trace import (
    LINK_PID,
    _lanes,
    measured_trace,
    merge_traces,
    simulated_trace,
)
from collsynth.runtime.fake import run_in_process
from collsynth.runtime.launcher import mpi_available
from collsynth.schedule.io import save_schedule
from collsynth.sim import simulate
from collsynth.synth import synthesize
from collsynth.topology import load_topology


def _sched(algo="ring", spec="ring:n=4", kind="allgather"):
    topo = load_topology(spec)
    return synthesize(algo, topo, Collective.make(kind, topo.num_ranks, 1))


def _check_format(trace: dict) -> list[dict]:
    """The format's required fields, nesting within every thread and paired flows; the
    complete events."""
    assert set(trace) >= {"traceEvents", "displayTimeUnit", "otherData"}
    json.dumps(trace, allow_nan=False)  # strict JSON
    xs = []
    names = {(e["pid"]) for e in trace["traceEvents"] if e["ph"] == "M"
             and e["name"] == "process_name"}  # fmt: skip
    starts, ends = {}, {}
    for e in trace["traceEvents"]:
        assert {"ph", "name", "pid", "tid"} <= set(e)
        if e["ph"] == "X":
            assert e["dur"] >= 0 and e["ts"] >= 0 and e["pid"] in names
            xs.append(e)
        elif e["ph"] == "s":
            starts[e["id"]] = e
        elif e["ph"] == "f":
            assert e["bp"] == "e"
            ends[e["id"]] = e
    assert set(starts) == set(ends)
    for fid, s in starts.items():
        assert ends[fid]["ts"] >= s["ts"]
    by_thread: dict = {}
    for e in xs:
        by_thread.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    for spans in by_thread.values():  # slices of one thread never partly overlap
        spans.sort()
        for (a0, a1), (b0, _) in zip(spans, spans[1:]):
            assert b0 >= a1 - 1e-9
    return xs


def test_lanes_never_overlap_and_reuse_freed_lanes():
    spans = [(0.0, 2.0, 0), (1.0, 3.0, 1), (2.0, 4.0, 2), (3.5, 5.0, 3)]
    assert _lanes(spans) == [0, 1, 0, 1]


@pytest.mark.parametrize("order", ["fair", "auto"])
def test_simulated_trace_adds_up_to_the_simulated_time(order):
    sched = _sched("ring", "ring:n=4", "allreduce")
    res = simulate(sched, 1e6, order=order)
    trace = simulated_trace(res)
    xs = _check_format(trace)
    assert max(e["ts"] + e["dur"] for e in xs) == pytest.approx(res.time_s * 1e6, rel=1e-12)
    sends = [e for e in xs if e["cat"] == "send"]
    recvs = [e for e in xs if e["cat"] == "recv"]
    assert len(sends) == len(recvs) == sched.num_ops
    links = [e for e in xs if e["cat"] == "link"]
    assert len(links) == res.hops and all(e["pid"] >= LINK_PID for e in links)
    # every link slice is one hop: its duration is the hop's, and the busy time adds up
    busy = {}
    for e in links:
        busy[e["pid"] - LINK_PID] = busy.get(e["pid"] - LINK_PID, 0.0) + e["dur"]
    for link, us in busy.items():
        assert us == pytest.approx(res.link_busy_s[link] * 1e6, rel=1e-9)
    assert trace["otherData"]["source"] == "simulated"
    assert trace["otherData"]["model"] == res.order_policy


def test_measured_trace_in_process_has_every_operation_in_order():
    sched = _sched("ring", "ring:n=4", "allreduce")
    got = run_in_process(sched, 4096, trace=True)
    times = got["trace"]
    n = sched.num_ops
    for key in ("send_post_s", "send_end_s", "recv_post_s", "arrival_s"):
        assert len(times[key]) == n and all(math.isfinite(x) and x >= 0 for x in times[key])
    for op in range(n):
        assert times["send_post_s"][op] <= times["arrival_s"][op]
        for d in sched.deps(op).tolist():  # a send waits for what it forwards
            assert times["arrival_s"][d] <= times["send_post_s"][op]
    trace = measured_trace(sched, times, scale=0.5)
    xs = _check_format(trace)
    assert max(e["ts"] + e["dur"] for e in xs) == pytest.approx(times["time_s"] * 0.5e6)
    assert trace["otherData"]["source"] == "measured"


def test_merge_keeps_each_part_apart():
    sched = _sched()
    a = simulated_trace(simulate(sched, 1e6))
    b = simulated_trace(simulate(sched, 2e6))
    m = merge_traces([("1MB", a), ("2MB", b)])
    _check_format(m)
    names = [e["args"]["name"] for e in m["traceEvents"] if e["name"] == "process_name"]
    assert any(x.startswith("1MB: rank 0") for x in names)
    assert any(x.startswith("2MB: rank 0") for x in names)
    assert len(m["otherData"]["parts"]) == 2
    assert merge_traces([("only", a)]) is a


def test_simulate_cli_writes_a_trace_and_refuses_overwriting_the_schedule(tmp_path, capsys):
    path = str(tmp_path / "ag.json")
    save_schedule(_sched(), path)
    out = str(tmp_path / "ag.trace.json")
    assert main(["simulate", path, "-s", "1MB", "--trace", out, "--json"]) == 0
    sim = json.loads(capsys.readouterr().out)
    xs = _check_format(json.load(open(out)))
    assert max(e["ts"] + e["dur"] for e in xs) == pytest.approx(sim["time_s"] * 1e6)
    with open(path) as f:
        before = f.read()
    assert main(["simulate", path, "-s", "1MB", "--trace", path]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--trace" in err
    with open(path) as f:
        assert f.read() == before
    assert main(["simulate", path, "--sizes", "1MB,2MB", "--trace", out]) == 2
    assert "one size" in capsys.readouterr().err


@pytest.mark.skipif(not mpi_available(), reason="mpiexec / mpi4py not installed")
def test_run_cli_writes_a_measured_trace(tmp_path, capsys):
    path = str(tmp_path / "ag.json")
    sched = _sched()
    save_schedule(sched, path)
    out = str(tmp_path / "run.trace.json")
    argv = ["run", path, "--size", "64KB", "--iters", "1", "--warmup", "0", "--launch", "4",
            "--trace", out, "--no-reference"]  # fmt: skip
    assert main(argv) == 0
    capsys.readouterr()
    xs = _check_format(json.load(open(out)))
    assert len([e for e in xs if e["cat"] == "send"]) == sched.num_ops
