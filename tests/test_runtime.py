"""The runtime (execution): interpreter logic in process, then real mpiexec runs."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest

from collsynth.cli import main
from collsynth.collective import Collective
from collsynth.errors import CollsynthError
from collsynth.runtime.check import compare, element_dtype
from collsynth.runtime.fake import run_in_process
from collsynth.runtime.launcher import mpi_available
from collsynth.runtime.plan import build_rank_plan, chunk_bytes_for, execution_order, size_quantum
from collsynth.schedule.io import save_schedule
from collsynth.schedule.ir import ScheduleBuilder
from collsynth.synth import synthesize
from collsynth.topology import load_topology
from collsynth.verify import ensure_verified


# ------------------------------------------------------------------------------ schedules
def _synth(algo, spec, kind, **opts):
    topo = load_topology(spec)
    return synthesize(algo, topo, Collective.make(kind, topo.num_ranks, 1), **opts)


def parts_allreduce(n: int = 4):
    """AllReduce on full:n=N where every op carries a byte range of its chunk.

    Each chunk is cut into [0, 1/2), [2/4, 3/4), [3/4, 1): every rank reduces its contribution
    of each piece into the chunk's owner (concurrent reduces), then the owner copies each
    finished piece back to everyone.
    """
    topo = load_topology(f"full:n={n}")
    b = ScheduleBuilder(topo, Collective.make("allreduce", n, 1), meta={"algorithm": "parts"})
    for c in range(n):
        for piece in ((0, 1, 2), (2, 3, 4), (3, 4, 4)):
            reds = [b.add(r, c, c, kind="reduce", part=piece) for r in range(n) if r != c]
            for r in range(n):
                if r != c:
                    b.add(c, r, c, kind="copy", part=piece, deps=reds)
    sched = b.build()
    ensure_verified(sched)
    return sched


def with_link_order(sched):
    """The schedule with a planned order on every link: its ops in execution order."""
    order = execution_order(sched)
    pos = np.empty(len(order), dtype=np.int64)
    pos[order] = np.arange(len(order))
    users: dict[int, list[int]] = {}
    for op in range(sched.num_ops):
        for lid in sched.route(op).tolist():
            users.setdefault(int(lid), []).append(op)
    lo = {
        lid: np.array(sorted(ops, key=lambda o: pos[o]), dtype=np.int64)
        for lid, ops in users.items()
    }
    out = replace(sched, link_order=lo).with_meta(algorithm=f"{sched.meta['algorithm']}+order")
    ensure_verified(out)
    return out


def chain_schedule():
    """Rank 0 -> 1 -> 2 -> 0 -> 3 on full:n=4 (allgather of chunk 0 plus the rest direct)."""
    topo = load_topology("full:n=4")
    b = ScheduleBuilder(topo, Collective.make("allgather", 4, 1), meta={"algorithm": "chain"})
    a = b.add(0, 1, 0)
    bb = b.add(1, 2, 0, deps=[a])
    c = b.add(2, 3, 0, deps=[bb])
    for src in (1, 2, 3):
        for dst in range(4):
            if dst != src:
                b.add(src, dst, src, deps=[c] if src == 3 else [])
    sched = b.build()
    ensure_verified(sched)
    return sched


def custom_spt():
    topo = load_topology("ring:n=4")
    coll = Collective.custom(4, [(0, [1, 2]), (3, [0]), (2, [1, 3]), (0, [3])])
    return synthesize("spt", topo, coll)


FAST_CASES = [
    ("ring", "ring:n=4", "allgather"),
    ("ring", "ring:n=4", "allreduce"),
    ("ring", "ring:n=4", "reducescatter"),
    ("rd", "ring:n=4", "allreduce"),
    ("direct", "ring:n=4", "alltoall"),
    ("bruck", "dgx1", "alltoall"),
    ("tree", "dgx1", "allreduce"),
    ("spt", "dgx1", "allreduce"),
    ("spt", "dgx1", "reduce"),
    ("spt", "dgx1", "broadcast"),
    ("sph", "dgx1", "allgather"),
    ("hier_ring", "dgx_a100:nodes=1", "allreduce"),
    ("spt", "dgx1", "scatter"),
]


# ------------------------------------------------------------------------------ in process
def _check_all(sched, res, dtype=np.float32):
    coll = sched.collective
    for r in range(coll.num_ranks):
        err = compare(
            coll,
            r,
            res["chunk_bytes"],
            element_dtype(coll, np.dtype(dtype)),
            res["outputs"][r],
            res["expected"][r],
        )
        assert err is None, err


@pytest.mark.parametrize("algo,spec,kind", FAST_CASES)
@pytest.mark.parametrize("tag_limit", [1, 2, 1 << 30])
def test_in_process_runs_match_the_reference(algo, spec, kind, tag_limit):
    sched = _synth(algo, spec, kind)
    size = size_quantum(sched, 4) * 3
    res = run_in_process(sched, size, tag_limit=tag_limit, net_seed=tag_limit)
    _check_all(sched, res)


def test_custom_collective_in_process():
    sched = custom_spt()
    res = run_in_process(sched, 4 * size_quantum(sched, 1), net_seed=4)
    _check_all(sched, res)
    # outputs hold the chunks each rank receives, in chunk order
    assert [len(o) // res["chunk_bytes"] for o in res["outputs"]] == [1, 2, 1, 2]


@pytest.mark.parametrize("window", [0, 1, 1000])
def test_forestcoll_pipelined_in_process(window):
    # window 0: receives are posted only once they can be applied; 1000: all at once
    sched = _synth("forestcoll", "dgx_a100:nodes=1", "allreduce", pipeline=2)
    res = run_in_process(
        sched, size_quantum(sched, 4), net_seed=3 + window, window=window, tag_limit=3
    )
    _check_all(sched, res)


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.float64])
@pytest.mark.parametrize("net_seed", [0, 1, 2])
def test_byte_range_reduce_ops(dtype, net_seed):
    sched = parts_allreduce()
    q = size_quantum(sched, np.dtype(dtype).itemsize)
    assert q == 4 * 4 * np.dtype(dtype).itemsize  # 4 chunks, quarters, whole elements
    res = run_in_process(sched, 5 * q, dtype=dtype, net_seed=net_seed, tag_limit=2)
    _check_all(sched, res, dtype)
    if dtype is np.int32:  # integer sums are exact whatever the order
        assert all(np.array_equal(o, e) for o, e in zip(res["outputs"], res["expected"]))


def test_link_order_is_honoured_and_runs():
    sched = with_link_order(_synth("ring", "ring:n=4", "allreduce"))
    plan = build_rank_plan(sched, 0, 8, 4, 1 << 30)
    # rank 0's sends that share a link are posted in the planned order
    sends = [j for j in range(plan.num_local) if plan.is_send[j]]
    assert any(plan.post_pre[j] for j in sends)
    for j in sends:
        for k in plan.post_pre[j]:
            assert k < j and plan.is_send[k]
    res = run_in_process(sched, size_quantum(sched, 4), net_seed=5, tag_limit=3)
    _check_all(sched, res)


def test_local_frontier_follows_dependencies_through_other_ranks():
    sched = chain_schedule()
    # op 2 (2->3) depends on op 1 (1->2), which depends on op 0 (0->1)
    p3 = build_rank_plan(sched, 3, 4, 1, 1 << 30)
    p2 = build_rank_plan(sched, 2, 4, 1, 1 << 30)
    j = list(p3.ops).index(2)
    assert p3.done_pre[j] == []  # rank 3 takes part in neither op 0 nor op 1
    j2 = list(p2.ops).index(2)
    assert [int(p2.ops[k]) for k in p2.done_pre[j2]] == [1]
    # rank 3's sends of its own chunk wait (locally) for the delivery of op 2
    for j in range(p3.num_local):
        if p3.is_send[j]:
            assert [int(p3.ops[k]) for k in p3.done_pre[j]] == [2]
    res = run_in_process(sched, 40, net_seed=1)
    _check_all(sched, res)


def test_dropped_message_is_named():
    sched = _synth("ring", "ring:n=4", "allgather")
    with pytest.raises(CollsynthError, match=r"op 3 \(copy chunk .*: the message from rank"):
        run_in_process(sched, size_quantum(sched, 1), drop=(3,))


def test_size_must_fit_the_schedule():
    sched = parts_allreduce()
    with pytest.raises(CollsynthError, match="multiple of 64 B"):
        chunk_bytes_for(sched, 100, 4)
    assert chunk_bytes_for(sched, 128, 4) == 32


# ------------------------------------------------------------------------------ mpiexec
mpi = pytest.mark.skipif(not mpi_available(), reason="mpiexec / mpi4py not installed")


def _write(tmp_path, scheds):
    paths = []
    for i, s in enumerate(scheds):
        p = tmp_path / f"s{i:02d}_{s.meta.get('algorithm')}_{s.collective.kind.value}.json"
        save_schedule(s, str(p))
        paths.append(str(p))
    return paths


def _common_size(scheds, times: int = 1) -> int:
    q = 1
    for s in scheds:
        e = 4 if s.collective.reduces else 1
        q = math.lcm(q, size_quantum(s, e))
    return q * times


FOUR = (
    [("ring", "ring:n=4", k) for k in ("allgather", "allreduce", "reducescatter")]
    + [("rd", "ring:n=4", k) for k in ("allgather", "allreduce", "reducescatter")]
    + [
        ("direct", "ring:n=4", "allgather"),
        ("direct", "ring:n=4", "alltoall"),
        ("bruck", "ring:n=4", "alltoall"),
        ("sph", "ring:n=4", "allgather"),
        ("sph", "ring:n=4", "alltoall"),
        ("tree", "ring:n=4", "allreduce"),
        ("spt", "ring:n=4", "allgather"),
        ("spt", "ring:n=4", "allreduce"),
        ("spt", "ring:n=4", "reducescatter"),
        ("spt", "ring:n=4", "alltoall"),
        ("spt", "ring:n=4", "broadcast"),
        ("spt", "ring:n=4", "reduce"),
        ("spt", "ring:n=4", "gather"),
        ("spt", "ring:n=4", "scatter"),
    ]
    + [("forestcoll", "ring:n=4", k) for k in ("allgather", "allreduce", "reducescatter")]
)

EIGHT = [
    ("hier_ring", "dgx_a100:nodes=1", "allgather"),
    ("hier_ring", "dgx_a100:nodes=1", "allreduce"),
    ("ring", "dgx1", "allreduce"),
    ("ring", "dgx1", "reducescatter"),
    ("tree", "dgx1", "allreduce"),
    ("sph", "dgx1", "allgather"),
    ("bruck", "dgx1", "alltoall"),
    ("direct", "dgx1", "alltoall"),
    ("forestcoll", "dgx1", "allgather"),
    ("forestcoll", "dgx_a100:nodes=1", "allreduce"),
]


def _build(cases):
    out = []
    for algo, spec, kind in cases:
        opts = {"pipeline": 1} if algo == "forestcoll" else {}
        out.append(_synth(algo, spec, kind, **opts))
    return out


@mpi
def test_mpiexec_four_ranks_every_algorithm(tmp_path):
    from collsynth.runtime import launch

    scheds = _build(FOUR) + [
        parts_allreduce(),
        custom_spt(),
        with_link_order(_synth("ring", "ring:n=4", "allreduce")),
    ]
    paths = _write(tmp_path, scheds)
    rep = launch(paths, _common_size(scheds, 2), 4, check=True, iters=2, warmup=1, timeout=20)
    assert rep.ok and rep.returncode == 0, rep.stderr
    assert [r["schedule"] for r in rep.runs] == paths
    # the first schedule also pays the processes' cold start: one more untimed iteration
    assert [r["warmup"] for r in rep.runs] == [2] + [1] * (len(paths) - 1)
    for r in rep.runs:
        assert r["check"] == "passed", r
        assert r["time_s"] > 0 and len(r["times_s"]) == 2
        if r["collective"]["kind"] == "custom":  # MPI has no such collective
            assert r["reference"] == "a computed reference" and r["reference_time_s"] is None
        else:
            assert r["reference"] == f"mpi's own {r['collective']['kind']}"
            assert r["reference_time_s"] > 0


@mpi
def test_mpiexec_eight_ranks(tmp_path):
    from collsynth.runtime import launch

    scheds = _build(EIGHT)
    paths = _write(tmp_path, scheds)
    rep = launch(paths, _common_size(scheds), 8, check=True, iters=1, warmup=0, timeout=30)
    assert rep.ok, rep.stderr
    assert len(rep.runs) == len(paths)
    assert all(r["check"] == "passed" for r in rep.runs)


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    d = tmp_path_factory.mktemp("rt")
    s = _synth("ring", "ring:n=4", "allreduce")
    p = str(d / "ar.json")
    save_schedule(s, p)
    return p, s


@mpi
def test_dropped_message_times_out_naming_rank_and_op(small):
    from collsynth.runtime import launch

    path, sched = small
    op = 5
    dst = int(sched.dst[op])
    rep = launch(
        path,
        "1KiB",
        4,
        check=True,
        iters=1,
        warmup=0,
        timeout=2,
        inject=[f"drop:{op}"],
        raise_on_error=False,
        wall_limit=60,
    )
    assert not rep.ok and rep.returncode == 3
    assert f"rank {dst}: stuck at op {op} (" in rep.stderr
    assert f"the message from rank {int(sched.src[op])} never arrived" in rep.stderr
    assert "Traceback" not in rep.stderr
    # the one line names the rank waiting for the dropped message; the log is kept
    assert rep.error.startswith(f"rank {dst}: stuck at op {op} (")
    _forget_log(rep.log)


@mpi
def test_corrupted_output_fails_the_check(small):
    from collsynth.runtime import launch

    path, _ = small
    rep = launch(
        path,
        "1KiB",
        4,
        check=True,
        iters=1,
        warmup=0,
        timeout=10,
        inject=["corrupt:2"],
        raise_on_error=False,
    )
    assert not rep.ok and rep.returncode == 3
    assert rep.runs[0]["check"] == "failed"
    assert rep.runs[0]["wrong"] == 2  # the two elements the fault inverted, as #wrong counts
    assert rep.error.startswith("check failed") and "rank 2: output chunk" in rep.error
    _forget_log(rep.log)


@mpi
def test_a_sweep_runs_in_one_launch_and_prints_nccl_tests_rows(small, tmp_path):
    """``--sizes`` (or -b/-e/-f) runs every size in one launch; ``--nccl-tests`` prints the
    rows as nccl-tests does, with #wrong from the check, and they read back."""
    from collsynth.report.nccl_tests import parse_log

    path, _ = small
    base = [sys.executable, "-m", "collsynth", "run", path, "--check", "--iters", "1",
            "--warmup", "0", "--launch", "4"]  # fmt: skip
    got = subprocess.run([*base, "-b", "1K", "-e", "4K", "--nccl-tests"], capture_output=True,
                         text=True, timeout=300)  # fmt: skip
    assert got.returncode == 0, got.stderr
    log = parse_log(got.stdout)
    assert [r.size_bytes for r in log.rows] == [1024, 2048, 4096]
    assert [r.count for r in log.rows] == [256, 512, 1024]  # AllReduce counts every element
    assert all(r.out_of_place.wrong == 0 and r.in_place is None for r in log.rows)
    js = subprocess.run([*base, "--sizes", "1KiB,3KiB", "--json"], capture_output=True,
                        text=True, timeout=300)  # fmt: skip
    data = json.loads(js.stdout)
    assert data["sizes"] == [1024, 3072] and [r["size"] for r in data["runs"]] == [1024, 3072]
    assert all(r["wrong"] == 0 and r["check"] == "passed" for r in data["runs"])
    import csv
    import io

    cs = subprocess.run([*base, "--sizes", "1KiB", "--csv"], capture_output=True, text=True,
                        timeout=300)  # fmt: skip
    (row,) = list(csv.DictReader(io.StringIO(cs.stdout)))
    assert row["size_bytes"] == "1024" and row["wrong"] == "0" and float(row["time_s"]) > 0


@pytest.mark.parametrize(
    "extra, needle",
    [
        (["-s", "1KiB", "--sizes", "2KiB"], "not both"),
        ([], "give the size"),
        (["-s", "1KiB", "--json", "--nccl-tests"], "one of --json, --csv and --nccl-tests"),
        (["-s", "1KiB", "--csv", "--nccl-tests"], "one of --json, --csv and --nccl-tests"),
    ],
)
def test_run_size_flags_bad_input(small, extra, needle, capsys):
    path, _ = small
    assert main(["run", path, *extra]) == 2
    assert needle in capsys.readouterr().err


@mpi
def test_exiting_rank_ends_the_run(small):
    from collsynth.runtime import launch

    path, _ = small
    with pytest.raises(CollsynthError, match="run failed: ") as exc:
        launch(
            path,
            "1KiB",
            4,
            check=True,
            iters=1,
            warmup=0,
            timeout=3,
            inject=["exit:1"],
            wall_limit=60,
        )
    # the launcher names the rank, how it ended and its step, and where mpiexec's log is
    msg = str(exc.value)
    assert "rank 1 exited with status 1 during the barrier before the run" in msg, msg
    _forget_log(re.search(r"mpiexec log: (\S+)\)", msg).group(1))


def _forget_log(path):
    """A failed launch keeps its folder (mpiexec's log and the ranks' records)."""
    assert path and os.path.basename(os.path.dirname(path)).startswith("collsynth-run-")
    shutil.rmtree(os.path.dirname(path))


def test_inject_forms():
    from collsynth.runtime.driver import Fault, Inject

    inj = Inject.parse(
        ["drop:3", "corrupt:1", "exit:2", "kill:1@startup", "stop:3@iter:2", "exit:0@iter:0"]
    )
    assert inj.drop == (3,) and inj.corrupt == (1,) and inj.exit == (2,)
    assert inj.faults == (
        Fault("exit", 2, "run"),
        Fault("kill", 1, "startup"),
        Fault("stop", 3, 2),
        Fault("exit", 0, 0),
    )
    for bad in ("kill:1@later", "stop:x", "drop:3@startup", "exit:1@iter:", "boom:1"):
        with pytest.raises(CollsynthError, match="exit|kill|stop"):
            Inject.parse([bad])


def test_mpiexec_reports_are_read():
    from collsynth.runtime.supervise import _banner_death

    killed = (
        "prterun noticed that process rank 2 with PID 22906 on node vm exited on\n"
        "signal 9 (Killed).\n"
    )
    assert _banner_death(killed) == (2, "was killed by signal 9 (SIGKILL)")
    exited = (
        "prterun detected that one or more processes exited with non-zero status,\n"
        "thus causing the job to be terminated. The first process to do so was:\n\n"
        "   Process name: [prterun-vm-22805@1,3]\n   Exit code:    1\n"
    )
    assert _banner_death(exited) == (3, "exited with status 1")
    assert _banner_death("nothing to see\n") is None


def _cli(*args, timeout=60):
    return subprocess.run(
        [sys.executable, "-m", "collsynth", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def test_bad_size_is_one_line(small):
    path, _ = small
    p = _cli("run", path, "--size", "1001B")
    assert p.returncode == 2
    assert (
        p.stderr.count("\n") == 1
        and "needs a positive multiple of 32 B" in p.stderr
        and "e.g. 992 or 1024" in p.stderr
    )


def test_unknown_backend_and_bad_inject(small):
    path, _ = small
    p = _cli("run", path, "--size", "1KiB", "--backend", "gloo")
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "invalid choice" in p.stderr
    p = _cli("run", path, "--size", "1KiB", "--inject", "boom:1")
    assert p.returncode == 2 and "drop:OP" in p.stderr


@mpi
def test_wrong_number_of_ranks(small):
    path, _ = small
    p = _cli("run", path, "--size", "1KiB")
    assert p.returncode == 2 and p.stderr.count("\n") == 1
    assert "needs 4 ranks but 1 is running" in p.stderr and "--launch 4" in p.stderr


def test_missing_mpi4py_is_one_line(small, monkeypatch, capsys):
    from collsynth.cli import main

    monkeypatch.setitem(sys.modules, "mpi4py", None)
    path, _ = small
    assert main(["run", path, "--size", "1KiB"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "needs mpi4py" in err


@mpi
def test_cli_launch_prints_report(small):
    path, _ = small
    p = _cli("run", path, "--size", "4KiB", "--check", "--iters", "2", "--launch", "4")
    assert p.returncode == 0, p.stderr
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("  ring allreduce")]
    assert len(lines) == 1 and "check passed" in lines[0] and "mpi's own allreduce" in lines[0]


def test_torch_backend(small):
    pytest.importorskip("torch")
    from collsynth.runtime import launch

    if not mpi_available():
        pytest.skip("mpiexec not installed")
    path, _ = small
    env_port = os.environ.get("MASTER_PORT")
    rep = launch(path, "4KiB", 4, backend="torch", check=True, iters=1, warmup=0, timeout=30)
    assert rep.ok and rep.runs[0]["check"] == "passed"
    assert env_port == os.environ.get("MASTER_PORT")


def test_run_help(capsys):
    from collsynth.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["run", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: collsynth run") and "--launch N" in out
    # the test-only faults are documented, and so is where mpiexec's messages go
    flat = " ".join(out.split())
    assert "--inject FAULT" in out and "--verbose" in out
    for form in ("drop:OP", "corrupt:RANK", "kill:RANK", "stop:RANK", "@startup", "@iter:N"):
        assert form in flat, form
