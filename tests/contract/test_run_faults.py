"""``collsynth run --launch 3`` under faults: every failure ends within ``--timeout``
plus a few seconds with status 3 and one line naming the rank and the step, mpiexec's own
reports go to a log file named in that line, and no process of the run is left behind.

The faults are injected with ``--inject`` (``collsynth run --help``): a rank killed (SIGKILL)
or stopped (SIGSTOP) at start-up and in the middle of the run, a rank that never gets past
start-up (it exits before the communicator set-up) and a message that is never sent. Each
case checks the run's own processes through ``COLLSYNTH_RUN_PIDFILE`` (mpiexec's pid first,
then every rank's) and the ranks' records in the run's folder.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

from collsynth.collective import Collective
from collsynth.runtime.launcher import mpi_available
from collsynth.schedule.io import save_schedule
from collsynth.synth import synthesize
from collsynth.topology import load_topology

#: the runs' --timeout, and what a failure may take beyond it after the fault struck: the
#: launcher's grace for mpiexec to end the job itself, SIGTERM then SIGKILL, a loaded machine
TIMEOUT = 3.0
AFTER_FAULT_S = TIMEOUT + 5.0
#: the whole run, start-up included (the launcher and 3 ranks start Python on 2 shared cores)
WALL_S = TIMEOUT + 25.0


needs_mpi = pytest.mark.skipif(not mpi_available(), reason="mpiexec / mpi4py not installed")
needs_proc = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc (Linux)")


@pytest.fixture(scope="module")
def ring(tmp_path_factory):
    topo = load_topology("ring:n=3")
    sched = synthesize("ring", topo, Collective.make("allreduce", 3, 1))
    path = str(tmp_path_factory.mktemp("faults") / "ar.json")
    save_schedule(sched, path)
    return path, sched


def _alive(pid: int) -> bool:
    """A live process (a zombie waiting for its reaper is not one)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        if os.path.isdir("/proc/self"):
            return False
        try:  # pragma: no cover - not Linux
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return data[data.rindex(b")") + 2 :][:1] not in (b"Z", b"X")


def _session_members(sid: int) -> list[int]:
    out = []
    for name in os.listdir("/proc") if os.path.isdir("/proc/self") else []:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                data = f.read()
        except OSError:
            continue
        fields = data[data.rindex(b")") + 2 :].split()
        if int(fields[3]) == sid and fields[0] not in (b"Z", b"X"):
            out.append(int(name))
    return out


def _launch(path, tmp_path, *extra, timeout=TIMEOUT):
    pidfile = tmp_path / "pids"
    env = dict(os.environ, COLLSYNTH_RUN_PIDFILE=str(pidfile))
    t0 = time.time()
    p = subprocess.run(
        [sys.executable, "-m", "collsynth", "run", path, "--size", "3KiB", "--launch", "3"]
        + ["--iters", "2", "--warmup", "1", "--timeout", f"{timeout:g}", "--json", *extra],
        capture_output=True,
        text=True,
        timeout=WALL_S + 30,  # a hang fails here, not in CI's own limit
        stdin=subprocess.DEVNULL,
        env=env,
    )
    t1 = time.time()
    pids = [int(x) for x in pidfile.read_text().split()] if pidfile.exists() else []
    return p, t0, t1, pids


def _no_leftovers(pids, records=()):
    assert pids, "the launcher wrote no pids"
    # every rank that got as far as a record is among the pids the launcher knew
    assert {r["pid"] for r in records} <= set(pids)
    deadline = time.monotonic() + 2.0  # SIGKILLed processes vanish at once; be fair to /proc
    while True:
        left = [p for p in pids if _alive(p)] + _session_members(pids[0])
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert not left, f"processes of the run left behind: {left}"


def _records(run_dir):
    out = []
    for f in sorted(glob.glob(os.path.join(run_dir, "rank-*.json"))):
        with open(f, encoding="utf-8") as fh:
            out.append(json.load(fh))
    return out


FAULTS = [
    ("kill:2@startup", 2, r"rank 2 was killed by signal 9 \(SIGKILL\) during start-up"),
    ("kill:1@iter:1", 1, r"rank 1 was killed by signal 9 \(SIGKILL\) during iteration 1 of "),
    (
        "stop:2@startup",
        2,
        r"rank 2 was stopped \(SIGSTOP\) during start-up \(communicator set-up\)",
    ),
    ("stop:1@iter:1", 1, r"rank 1 was stopped \(SIGSTOP\) during iteration 1 of "),
    # a rank that never gets past start-up: it exits before the communicator set-up
    ("exit:1@startup", 1, r"rank 1 exited with status 1 during start-up \(communicator set-up\)"),
]


@pytest.mark.slow
@needs_mpi
@pytest.mark.parametrize("fault, rank, expect", FAULTS, ids=[f[0] for f in FAULTS])
def test_rank_fault_ends_the_run(ring, tmp_path, fault, rank, expect):
    path, _ = ring
    p, t0, t1, pids = _launch(path, tmp_path, "--inject", fault)
    _check_failure(p, t0, t1, pids, expect, rank)


@pytest.mark.slow
@needs_mpi
def test_lost_message_names_the_waiting_rank(ring, tmp_path):
    path, sched = ring
    op = 5
    dst, src = int(sched.dst[op]), int(sched.src[op])
    p, t0, t1, pids = _launch(path, tmp_path, "--inject", f"drop:{op}")
    expect = rf"rank {dst}: stuck at op {op} \(.*\): the message from rank {src} never arrived"
    _check_failure(p, t0, t1, pids, expect, dst, faulty=None)


def _check_failure(p, t0, t1, pids, expect, rank, faulty="same"):
    assert p.returncode == 3, (p.returncode, p.stderr)
    assert p.stdout == ""  # the run printed no result
    assert "Traceback" not in p.stderr
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and lines[0].strip(), p.stderr
    line = lines[0]
    assert line.startswith("collsynth: error: ") and re.search(expect, line), line
    assert f"rank {rank}" in line
    m = re.search(r"\(mpiexec log: (\S+/collsynth-run-[^/\s]+/mpiexec\.log)\)$", line)
    assert m, line
    log = m.group(1)
    run_dir = os.path.dirname(log)
    try:
        # mpiexec's reports and the ranks' own lines are in the log, none on the terminal
        with open(log, encoding="utf-8", errors="replace") as f:
            assert "Traceback" not in f.read()
        records = _records(run_dir)
        # the fault struck just after the faulty rank's last record; a lost message shows
        # when the first rank reported it
        struck = [r["t"] for r in records if faulty is None or r["rank"] == rank]
        assert struck, records
        after = t1 - min(struck)
        assert after < AFTER_FAULT_S, f"ended {after:.1f} s after the fault"
        assert t1 - t0 < WALL_S, f"took {t1 - t0:.1f} s"
        _no_leftovers(pids, records)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


@pytest.mark.slow
@needs_mpi
def test_healthy_run_leaves_nothing(ring, tmp_path):
    path, _ = ring
    p, t0, t1, pids = _launch(path, tmp_path, "--check", timeout=10.0)  # no deadline tested
    assert p.returncode == 0, p.stderr
    assert p.stderr == ""
    doc = json.loads(p.stdout)  # exactly one JSON document
    assert doc["ok"] and doc["runs"][0]["check"] == "passed"
    assert len(pids) >= 4  # mpiexec and the 3 ranks
    _no_leftovers(pids)


# ----------------------------------------------------------------- the launcher, without MPI
# ``supervise`` runs any command line; these stand-ins for mpiexec write the ranks' records
# themselves, so the deadlines, the kill and the log are checked in a second.
def _fake_rank(body: str) -> list[str]:
    """A one-rank stand-in for ``mpiexec ... collsynth run`` running ``body`` (Python)."""
    return [
        sys.executable,
        "-c",
        "import os, sys, time, subprocess\n"
        "from collsynth.runtime.progress import Progress, SETUP_STEP\n"
        "prog = Progress.from_env(0)\n" + body,
    ]


@needs_proc
def test_a_hung_setup_is_ended_with_its_processes(tmp_path, monkeypatch, capfd):
    from collsynth.runtime.supervise import supervise

    monkeypatch.setenv("COLLSYNTH_RUN_PIDFILE", str(tmp_path / "pids"))
    # the "rank" starts a child of its own (in mpiexec's session), says it is in the
    # communicator set-up, and hangs there
    cmd = _fake_rank(
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "prog.step(SETUP_STEP, 1.0)\n"
        "print('a banner', file=sys.stderr, flush=True)\n"
        "time.sleep(60)\n"
    )
    t0 = time.monotonic()
    res = supervise(cmd, 1, 1.0)
    took = time.monotonic() - t0
    try:
        assert res.status == 3 and took < 1.0 + 4.0, took
        assert res.error == "rank 0 did not finish start-up (communicator set-up) within 1 s"
        assert res.error_line.endswith(f"(mpiexec log: {res.log})")
        assert "a banner" in res.stderr and "a banner" in open(res.log).read()
        assert capfd.readouterr().err == ""  # not on the terminal without verbose
        pids = [int(x) for x in (tmp_path / "pids").read_text().split()]
        assert len(pids) == 2  # "mpiexec" (here the rank itself) and its child
        _no_leftovers(pids)
    finally:
        shutil.rmtree(res.run_dir, ignore_errors=True)


@needs_proc
def test_verbose_shows_mpiexec_and_a_clean_run_leaves_no_folder(capfd):
    from collsynth.runtime.supervise import supervise

    cmd = _fake_rank(
        "prog.step(SETUP_STEP, 5.0)\n"
        "print('mpiexec says hello', file=sys.stderr, flush=True)\n"
        "print('the result', flush=True)\n"
        "prog.finish(0)\n"
    )
    res = supervise(cmd, 1, 5.0, verbose=True)
    out, err = capfd.readouterr()
    assert res.status == 0 and res.error is None and res.error_line is None
    assert out == "the result\n" and err == "mpiexec says hello\n"
    assert not os.path.exists(res.run_dir)


@needs_proc
def test_mpiexec_failing_by_itself_is_one_line():
    from collsynth.runtime.supervise import supervise

    cmd = [sys.executable, "-c", "import sys; print('not enough slots', file=sys.stderr); exit(7)"]
    res = supervise(cmd, 2, 5.0)
    try:
        assert res.status == 3 and res.mpiexec_status == 7
        assert res.error == "mpiexec exited with status 7: not enough slots"
    finally:
        shutil.rmtree(res.run_dir, ignore_errors=True)


@pytest.mark.slow
@needs_mpi
def test_verbose_shows_mpiexec_then_the_line(ring, tmp_path):
    path, _ = ring
    p, t0, t1, pids = _launch(path, tmp_path, "--inject", "exit:2@startup", "--verbose")
    assert p.returncode == 3 and "Traceback" not in p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) > 1 and "Exit code" in p.stderr  # mpiexec's own report, shown
    assert lines[-1].startswith("collsynth: error: rank 2 exited with status 1 during start-up")
    _no_leftovers(pids)
    shutil.rmtree(os.path.dirname(re.search(r"mpiexec log: (\S+)\)$", lines[-1]).group(1)))
