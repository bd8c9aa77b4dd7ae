"""Cases on Dask (collsynth.parallel): a real scheduler and two workers started as separate
processes on localhost; results equal to the serial run, a killed worker, cancellation."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from collsynth.cli import main
from collsynth.collective import Collective
from collsynth.errors import CollsynthError
from collsynth.parallel import Pool, make_pool, run_cases
from collsynth.report.compare import compare
from collsynth.topology import load_topology

HERE = os.path.dirname(os.path.abspath(__file__))
ALGOS = ["ring", "direct", "spt", "forestcoll", "mteg"]


# --------------------------------------------------------------- helpers run on the workers
def square(x: int) -> int:
    return x * x


def die_once(marker: str, x: int) -> tuple[int, int]:
    """The first call anywhere kills its worker process; the re-run returns (x, its pid)."""
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return x, os.getpid()
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)
    os._exit(1)


def report_limits() -> tuple:
    from collsynth import deadline

    return deadline.each(), deadline.remaining()


def fail_first(x: float) -> float:
    from collsynth.errors import VerificationError

    if x == 0:
        raise VerificationError("case 0 is wrong", check="planted", op=3)
    time.sleep(x)
    return x


# ---------------------------------------------------------------------------- no cluster
def test_make_pool_reads_flags_and_environment(monkeypatch):
    monkeypatch.delenv("COLLSYNTH_JOBS", raising=False)
    monkeypatch.delenv("COLLSYNTH_SCHEDULER", raising=False)
    assert make_pool() == Pool(1, None) and not make_pool().distributed
    assert make_pool("auto").workers == (os.cpu_count() or 1)
    assert make_pool("3").distributed and make_pool(None, "tcp://h:1").distributed
    for bad, match in (("0", "from 1 to"), ("x", "not a number"), ("-2", "ASCII digits"),
                       ("1_000", "ASCII digits"), ("\uff12", "ASCII digits"), ("5000", "to 1024")):  # fmt: skip
        with pytest.raises(CollsynthError, match=match):
            make_pool(bad)
    with pytest.raises(CollsynthError, match="not a scheduler address"):
        make_pool(None, "localhost")
    monkeypatch.setenv("COLLSYNTH_JOBS", "2")
    monkeypatch.setenv("COLLSYNTH_SCHEDULER", "tcp://127.0.0.1:9")
    assert make_pool() == Pool(2, "tcp://127.0.0.1:9")


def test_serial_cases_in_order_with_progress():
    seen = []
    out = run_cases(square, [(i,) for i in range(5)], None,
                    on_start=lambda i: seen.append(("start", i)),
                    on_done=lambda i, d, t: seen.append(("done", i, d, t)))  # fmt: skip
    assert out == [0, 1, 4, 9, 16]
    assert seen[:2] == [("start", 0), ("done", 0, 1, 5)] and seen[-1] == ("done", 4, 5, 5)


def test_unreachable_scheduler_is_one_line(capsys):
    rc = main(["compare", "-t", "ring:n=4", "-c", "allgather", "--sizes", "1MB", "--algos",
               "ring", "--scheduler", "tcp://127.0.0.1:9", "--json"])  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 2 and len(err.splitlines()) == 1 and "Dask scheduler" in err, err


# ------------------------------------------------------------------- a real Dask cluster
@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A scheduler and two single-threaded workers, each its own process; the address."""
    tmp = tmp_path_factory.mktemp("dask")
    sfile = str(tmp / "scheduler.json")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([HERE, os.environ.get("PYTHONPATH", "")])}
    procs = [subprocess.Popen(
        [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
         "--port", "0", "--no-dashboard", "--scheduler-file", sfile],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]  # fmt: skip
    try:
        for _ in range(600):
            if os.path.exists(sfile) and os.path.getsize(sfile) > 0:
                break
            time.sleep(0.1)
        addr = json.load(open(sfile))["address"]
        for name in ("w1", "w2"):
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "distributed.cli.dask_worker", addr, "--nthreads", "1",
                 "--nworkers", "1", "--no-dashboard", "--name", name, "--local-directory",
                 str(tmp)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))  # fmt: skip
        from distributed import Client

        with Client(addr, timeout=30) as c:
            c.wait_for_workers(2, timeout=120)
        yield addr
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def _problem():
    return load_topology("dgx1"), Collective.make("allgather", 8, 1)


def test_compare_on_a_cluster_equals_serial(cluster):
    topo, coll = _problem()
    serial = compare(topo, coll, [64e3, 1e9], ALGOS)
    seen = []
    on = compare(topo, coll, [64e3, 1e9], ALGOS, pool=Pool(scheduler=cluster),
                 on_step=seen.append)  # fmt: skip
    assert on.to_dict(timing=False) == serial.to_dict(timing=False)
    assert sorted(s for s in seen if s.startswith("done")) == sorted(f"done {a}" for a in ALGOS)


def test_cli_compare_on_a_cluster_equals_serial(cluster, capsys):
    argv = ["compare", "-t", "ring:n=6", "-c", "allreduce", "--sizes", "1KB,1GB", "--algos",
            "all", "--json", "--no-timing"]  # fmt: skip
    assert main(argv) == 0
    serial = capsys.readouterr().out
    assert main([*argv, "--scheduler", cluster]) == 0
    assert capsys.readouterr().out == serial


def test_killed_worker_has_its_case_rerun(cluster, tmp_path):
    marker = str(tmp_path / "killed")
    out = run_cases(die_once, [(marker, 7)], Pool(scheduler=cluster))
    victim = int(open(marker).read())
    assert out[0][0] == 7 and out[0][1] != victim  # re-run by another worker process
    from distributed import Client

    with Client(cluster, timeout=30) as c:  # the nanny brought the killed worker back
        c.wait_for_workers(2, timeout=120)


def test_time_limits_reach_the_workers(cluster):
    from collsynth import deadline

    with deadline.time_limit(100.0), deadline.each_synthesis(7.0):
        ((each, left),) = run_cases(report_limits, [()], Pool(scheduler=cluster))
    assert each == 7.0 and 0 < left <= 100.0


def test_a_failing_case_stops_the_run_with_its_own_error(cluster):
    from collsynth.errors import VerificationError

    t0 = time.monotonic()
    with pytest.raises(VerificationError, match="case 0 is wrong") as got:
        run_cases(fail_first, [(0,), (20,), (20,)], Pool(scheduler=cluster))
    assert got.value.check == "planted" and got.value.op == 3  # the error itself came back
    assert time.monotonic() - t0 < 15  # not after the other cases


def test_local_cluster_equals_serial():
    topo, coll = _problem()
    serial = compare(topo, coll, [1e6], ["ring", "spt", "direct"])
    local = compare(topo, coll, [1e6], ["ring", "spt", "direct"], pool=Pool(workers=2))
    assert local.to_dict(timing=False) == serial.to_dict(timing=False)


def test_ctrl_c_cancels_the_cases(cluster, tmp_path):
    script = tmp_path / "sweep.py"
    script.write_text(
        textwrap.dedent(f"""
        import signal, sys, time
        sys.path.insert(0, {HERE!r})
        # a job started in the background (``cmd &``) inherits SIGINT ignored; a user's
        # command in a terminal has Python's handler, which this test is about
        signal.signal(signal.SIGINT, signal.default_int_handler)
        from collsynth.parallel import Pool, run_cases
        def nap(x):
            time.sleep(x)
            return x
        if __name__ == "__main__":
            print("go", flush=True)
            try:
                run_cases(nap, [(30,)] * 4, Pool(scheduler={cluster!r}))
            except KeyboardInterrupt:
                print("interrupted", flush=True)
                sys.exit(130)
    """)
    )
    p = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    from distributed import Client

    with Client(cluster, timeout=30) as c:
        assert p.stdout.readline().strip() == "go"

        def processing() -> int:
            return sum(len(v) for v in c.processing().values())

        end = time.monotonic() + 60
        while processing() == 0 and time.monotonic() < end:
            time.sleep(0.2)
        assert processing() > 0
        p.send_signal(signal.SIGINT)
        t0 = time.monotonic()
        assert p.wait(timeout=30) == 130 and time.monotonic() - t0 < 20
        assert "interrupted" in p.stdout.read()
        # the scheduler forgot every case: none waits, none is held for the client
        end = time.monotonic() + 20
        while c.run_on_scheduler(_task_count) and time.monotonic() < end:
            time.sleep(0.2)
        assert c.run_on_scheduler(_task_count) == 0


def _task_count(dask_scheduler=None) -> int:
    return sum(1 for k in dask_scheduler.tasks if str(k).startswith("collsynth-case-"))
