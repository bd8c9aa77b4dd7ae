"""Signals and streams: SIGINT, SIGTERM and SIGHUP end every command alike (one line, status
128 + signal, nothing left behind, stdout empty or a complete result); a successful run leaves
a redirected stderr empty; no warning reaches stderr; every ``--json`` output is strict JSON;
wall-clock figures sit in one ``timing`` block that ``--no-timing`` removes; every command
takes ``-q``; ``--time-limit`` ending before any result exits 4, with ``-j`` as without."""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import signal
import subprocess
import sys
import time
import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collsynth import deadline, interrupt
from collsynth.cli import build_parser, main
from collsynth.cli.common import emit_json, finite_json

SIGNALS = {"SIGINT": 130, "SIGTERM": 143, "SIGHUP": 129}


def strict_json(text: str):
    """Parse ``text`` as one JSON document, refusing NaN and Infinity (not JSON)."""

    def refuse(name: str):
        raise ValueError(f"not JSON: {name}")

    return json.loads(text, parse_constant=refuse)


def run(capfd, *argv):
    rc = main(list(argv))
    out, err = capfd.readouterr()
    return rc, out, err


def leftovers(folder) -> list[str]:
    return sorted(n for n in os.listdir(folder) if n.startswith(".collsynth-"))


@pytest.fixture()
def sched(tmp_path, capfd):
    path = tmp_path / "s.json"
    rc, _, err = run(capfd, "synth", "-t", "ring:n=4", "-c", "allgather", "--algo", "ring",
                     "-o", str(path), "-q")  # fmt: skip
    assert rc == 0, err
    return path


# ------------------------------------------------------------------------------- signals
@pytest.mark.parametrize("name", sorted(SIGNALS))
def test_a_signal_while_a_file_is_written_leaves_nothing(capfd, tmp_path, monkeypatch, name):
    """The signal comes while the output's temporary file is being written: it is removed,
    the output is not created, one line, status 128 + signal."""
    real_fsync = os.fsync

    def fsync_then_signal(fd):
        real_fsync(fd)
        os.kill(os.getpid(), getattr(signal, name))

    monkeypatch.setattr(os, "fsync", fsync_then_signal)
    out_path = tmp_path / "big.json"
    rc, out, err = run(capfd, "synth", "-t", "ring:n=8", "-c", "allgather", "--algo", "ring",
                       "-o", str(out_path), "--json")  # fmt: skip
    assert rc == SIGNALS[name]
    assert err == f"collsynth: interrupted ({name})\n"
    assert out == ""
    assert leftovers(tmp_path) == [] and not out_path.exists()
    # the handler is gone with the command: Python's own SIGINT handling is back
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


@pytest.mark.parametrize("existing", [False, True])
def test_an_interrupted_tune_removes_what_it_made(capfd, tmp_path, monkeypatch, existing):
    """SIGTERM after tune wrote its first file: a folder it created is removed; in a folder
    that was there, only the files it added go."""
    import collsynth.report.tune as tune_mod

    out_dir = tmp_path / "tuned"
    if existing:
        out_dir.mkdir()
        (out_dir / "keep.txt").write_text("mine")
    real = tune_mod.write_text_atomic

    def write_then_signal(path, text, *a, **k):
        real(path, text, *a, **k)
        os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(tune_mod, "write_text_atomic", write_then_signal)
    rc, out, err = run(capfd, "tune", "-t", "ring:n=4", "-c", "allgather", "--sizes", "1KB,1MB",
                       "--algos", "ring", "-o", str(out_dir))  # fmt: skip
    assert (rc, out, err) == (143, "", "collsynth: interrupted (SIGTERM)\n")
    if existing:
        assert sorted(os.listdir(out_dir)) == ["keep.txt"]
    else:
        assert not out_dir.exists()


def test_sessions_share_the_command_lines_handler():
    """Under the command line's handler the sessions (runtime.supervise, testbed.session) need
    no handler of their own; outside it they turn SIGTERM/SIGHUP into KeyboardInterrupt."""
    with interrupt.handled():
        assert interrupt.catch_termination() == {}
        with pytest.raises(KeyboardInterrupt) as got:
            os.kill(os.getpid(), signal.SIGHUP)
            time.sleep(1)
        assert interrupt.status_of(got.value) == 129
    old = interrupt.catch_termination()
    try:
        assert set(old) == {signal.SIGTERM, signal.SIGHUP}
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)
    finally:
        interrupt.restore_termination(old)
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


def test_a_signal_inside_deferred_waits_for_the_block():
    done = []
    with interrupt.handled():
        with pytest.raises(interrupt.Interrupted) as got:
            with interrupt.deferred():
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.05)
                done.append("whole")
    assert done == ["whole"] and got.value.status == 143


def _cli(*argv: str, **kw) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "collsynth", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a terminal's foreground job
        **kw,
    )


def _wait_for_handler(p: subprocess.Popen) -> None:
    """Wait until ``p`` catches SIGTERM (Linux: ``SigCgt`` in /proc): before that, the
    interpreter is still starting and no program can handle a signal."""
    status = f"/proc/{p.pid}/status"
    if not os.path.exists(status):  # pragma: no cover - not Linux
        time.sleep(2.0)
        return
    t0 = time.monotonic()
    while time.monotonic() - t0 < 60 and p.poll() is None:
        with open(status) as f:
            caught = next(int(ln.split()[1], 16) for ln in f if ln.startswith("SigCgt:"))
        if caught >> (signal.SIGTERM - 1) & 1:
            return
        time.sleep(0.01)


def _check_stopped(p, name: str, out: str, err: str, complete) -> None:
    if p.returncode == 0:  # it finished before the signal
        assert err == ""
        complete(out)
        return
    assert p.returncode == SIGNALS[name], err
    assert err == f"collsynth: interrupted ({name})\n"
    if out:
        complete(out)  # printed whole before the signal came


@pytest.mark.slow
@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(name=st.sampled_from(sorted(SIGNALS)), delay=st.floats(0.0, 3.0))
def test_signals_at_random_moments_during_a_large_write(tmp_path_factory, name, delay):
    folder = tmp_path_factory.mktemp("sig")
    out_path = folder / "big.json"
    p = _cli("synth", "-t", "ring:n=64", "-c", "allgather", "--chunks", "8", "--algo", "ring",
             "-o", str(out_path), "--json", cwd=folder)  # fmt: skip
    _wait_for_handler(p)
    time.sleep(delay)
    p.send_signal(getattr(signal, name))
    out, err = p.communicate(timeout=120)
    _check_stopped(p, name, out, err, strict_json)
    assert leftovers(folder) == []
    if p.returncode != 0 and out_path.exists():  # renamed into place just before the signal
        strict_json(out_path.read_text())


@pytest.mark.slow
@settings(max_examples=2, deadline=None, suppress_health_check=list(HealthCheck))
@given(name=st.sampled_from(["SIGINT", "SIGTERM"]), delay=st.floats(0.5, 6.0))
def test_signals_to_the_group_during_compare_on_a_cluster(tmp_path_factory, name, delay):
    """A terminal sends Ctrl-C to the whole process group: the Dask workers and solver helpers
    print nothing; collsynth prints one line and closes the cluster."""
    folder = tmp_path_factory.mktemp("sigj")
    p = _cli("compare", "-t", "dgx1", "-c", "allgather", "--algos", "ring,spt,teccl",
             "-j", "2", "--json", cwd=folder)  # fmt: skip
    _wait_for_handler(p)
    time.sleep(delay)
    os.killpg(p.pid, getattr(signal, name))
    out, err = p.communicate(timeout=120)
    _check_stopped(p, name, out, err, strict_json)
    assert os.listdir(folder) in ([], ["dask-scratch-space"])


# ------------------------------------------------------------------------------- streams
def test_successful_runs_leave_stderr_empty(capfd, tmp_path, sched):
    """stderr is not a terminal here: no progress bar, not even its newline."""
    runs = [
        ("compare", "-t", "ring:n=4", "-c", "allgather", "--sizes", "1KB,1MB", "--algos", "ring"),
        ("tune", "-t", "ring:n=4", "-c", "allgather", "--sizes", "1KB", "--algos", "ring",
         "-o", str(tmp_path / "tuned")),
        ("synth", "-t", "ring:n=4", "-c", "allgather", "--algo", "ring",
         "-o", str(tmp_path / "s2.json")),
        ("simulate", str(sched), "-s", "1MB"),
        ("verify", str(sched)),
        ("bound", "-t", "ring:n=4", "-c", "allgather", "-s", "1MB"),
        ("topo", "show", "-t", "ring:n=4"),
        ("export", "msccl", str(sched), "-o", str(tmp_path / "s.xml")),
    ]  # fmt: skip
    for argv in runs:
        rc, out, err = run(capfd, *argv)
        assert rc == 0 and err == "" and out, (argv, err)


def test_every_json_output_is_strict_json(capfd, tmp_path, sched):
    runs = [
        ("compare", "-t", "ring:n=4", "-c", "allgather", "--sizes", "1KB,1GB", "--algos", "all"),
        ("tune", "-t", "ring:n=4", "-c", "allgather", "--sizes", "1KB", "--algos", "ring",
         "-o", str(tmp_path / "tuned")),
        ("simulate", str(sched), "-s", "1MB"),
        ("simulate", str(sched), "--sizes", "1B,1TB"),
        ("verify", str(sched)),
        ("bound", "-t", "ring:n=4", "-c", "allgather", "-s", "1B"),
        ("topo", "show", "-t", "ring:n=4"),
        ("export", "msccl", str(sched), "-o", str(tmp_path / "s.xml")),
    ]  # fmt: skip
    for argv in runs:
        rc, out, err = run(capfd, *argv, "--json")
        assert rc == 0 and err == "", (argv, err)
        assert isinstance(strict_json(out), dict)


numbers = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True), st.integers(), st.booleans(), st.none()
)
documents = st.recursive(
    numbers | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),  # fmt: skip
    max_leaves=20,
)


@settings(max_examples=60, deadline=None)
@given(doc=documents)
def test_emit_json_writes_strict_json_with_null_for_non_finite(doc):
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        emit_json({"x": doc})
    got = strict_json(buf.getvalue())["x"]

    def same(a, b) -> bool:
        if isinstance(a, float) and not math.isfinite(a):
            return b is None
        if isinstance(a, (list, tuple)):
            return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
        if isinstance(a, dict):
            return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
        return a == b

    assert same(doc, got)


def test_numpy_values_become_json_values():
    np = pytest.importorskip("numpy")
    d = finite_json({"a": np.float64("inf"), "b": np.array([1.0, np.nan]), "c": np.int32(3),
                     "d": np.bool_(True)})  # fmt: skip
    assert d == {"a": None, "b": [1.0, None], "c": 3, "d": True}


def test_warnings_never_reach_stderr(capfd, monkeypatch):
    import numpy as np

    import collsynth.topology as topo_mod

    real = topo_mod.load_topology

    def noisy(*a, **k):
        np.float64(1e308) * np.float64(10.0)  # RuntimeWarning: overflow
        np.float64(1e-320) / np.float64(1e300)  # underflow (ignored by default) and below
        np.array([0.0]) / np.array([0.0])  # RuntimeWarning: invalid value
        warnings.warn("a library's deprecation", DeprecationWarning, stacklevel=1)
        warnings.warn("something", UserWarning, stacklevel=1)
        return real(*a, **k)

    monkeypatch.setattr(topo_mod, "load_topology", noisy)
    rc, out, err = run(capfd, "bound", "-t", "ring:n=4", "-c", "allgather", "-s", "1MB",
                       "--json")  # fmt: skip
    assert rc == 0 and err == ""
    strict_json(out)
    assert "PYTHONWARNINGS" not in os.environ or os.environ["PYTHONWARNINGS"] != "ignore"


@pytest.mark.parametrize("value", ["0", "false", "FALSE", "no", "off", "", "2", "nope"])
def test_debug_off_values_keep_one_line(capfd, monkeypatch, value):
    import collsynth.topology as topo_mod

    def boom(*a, **k):
        raise RuntimeError("planted bug")

    monkeypatch.setattr(topo_mod, "load_topology", boom)
    monkeypatch.setenv("COLLSYNTH_DEBUG", value)
    rc, out, err = run(capfd, "bound", "-t", "ring:n=4", "-c", "allgather", "-s", "1MB")
    assert rc == 1 and out == "" and len(err.splitlines()) == 1 and "planted bug" in err


@pytest.mark.parametrize("value", ["1", "true", "Yes", "ON"])
def test_debug_on_values_show_the_traceback(capfd, monkeypatch, value):
    import collsynth.topology as topo_mod

    def boom(*a, **k):
        raise RuntimeError("planted bug")

    monkeypatch.setattr(topo_mod, "load_topology", boom)
    monkeypatch.setenv("COLLSYNTH_DEBUG", value)
    with pytest.raises(RuntimeError, match="planted bug"):
        main(["bound", "-t", "ring:n=4", "-c", "allgather", "-s", "1MB"])


# ------------------------------------------------------------------------------- timing
def test_wall_clock_figures_sit_in_one_timing_block(capfd, sched):
    rc, out, _ = run(capfd, "simulate", str(sched), "-s", "1MB", "--json")
    d = strict_json(out)
    assert rc == 0 and "sim_wall_s" not in d and d["timing"]["sim_wall_s"] >= 0
    rc, out, _ = run(capfd, "simulate", str(sched), "-s", "1MB", "--json", "--no-timing")
    assert rc == 0 and "timing" not in strict_json(out) and 'wall_s"' not in out
    rc, out, _ = run(capfd, "verify", str(sched), "--json")
    d = strict_json(out)
    assert rc == 0 and "verify_time_s" not in d and d["timing"]["verify_wall_s"] >= 0
    rc, out, _ = run(capfd, "verify", str(sched), "--json", "--no-timing")
    assert rc == 0 and "timing" not in strict_json(out)


def test_no_timing_leaves_timings_out_of_text_output(capfd, tmp_path, sched):
    rc, out, _ = run(capfd, "synth", "-t", "ring:n=4", "-c", "allgather", "--algo", "ring",
                     "-o", str(tmp_path / "x.json"), "--no-timing")  # fmt: skip
    assert rc == 0 and "synthesized in" not in out and "synthesized" in out
    argv = ("compare", "-t", "ring:n=4", "-c", "allgather", "--sizes", "1KB", "--algos", "ring")
    rc, with_timing, _ = run(capfd, *argv)
    assert rc == 0 and "synth" in with_timing.split("\n")[2]  # the header row
    rc, out, _ = run(capfd, *argv, "--no-timing")
    assert rc == 0 and "synth" not in out.split("\n")[2] and "ring" in out
    rc, out, _ = run(capfd, "simulate", str(sched), "-s", "1MB", "--no-timing")
    assert rc == 0 and "simulated in" not in out


def test_every_command_takes_quiet():
    import argparse

    def leaves(p):
        subs = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            return [p]
        return [x for s in subs for c in s.choices.values() for x in leaves(c)]

    missing = [p.prog for p in leaves(build_parser()) if "-q" not in p._option_string_actions]
    assert missing == []


def test_help_with_json_is_one_json_document(capfd):
    with pytest.raises(SystemExit) as got:
        main(["compare", "--help", "--json"])
    out, err = capfd.readouterr()
    d = strict_json(out)
    assert got.value.code == 0 and err == ""
    assert d["command"] == "collsynth compare" and "--time-limit" in d["help"]
    with pytest.raises(SystemExit):
        main(["compare", "--help"])
    assert capfd.readouterr().out.startswith("usage: collsynth compare")


# ------------------------------------------------------------------------------- time limits
def test_a_time_limit_before_any_result_exits_4(capfd, tmp_path):
    argv = ("-t", "dgx1", "-c", "allgather", "--algos", "all", "--time-limit", "0.001s")
    rc, out, err = run(capfd, "compare", *argv)
    assert rc == 4 and out == "" and len(err.splitlines()) == 1 and "time limit" in err
    rc, out, err = run(capfd, "tune", *argv, "-o", str(tmp_path / "tuned"))
    assert rc == 4 and out == "" and len(err.splitlines()) == 1
    assert not (tmp_path / "tuned").exists()


def test_paused_time_does_not_count():
    with deadline.time_limit(0.5):
        before = deadline.remaining()
        with deadline.paused():
            time.sleep(0.6)
        assert deadline.remaining() > before - 0.1
        assert signal.getitimer(signal.ITIMER_REAL)[0] > 3.0  # the hard stop is still armed
    assert signal.getitimer(signal.ITIMER_REAL)[0] == 0


@pytest.mark.slow
def test_a_local_clusters_start_up_does_not_count_against_the_limit():
    """A 1.5 s limit is shorter than starting a local cluster of two workers; the cases still
    get (nearly) all of it."""
    from collsynth.parallel import Pool, run_cases

    with deadline.time_limit(1.5):
        left = run_cases(deadline.remaining, [(), ()], Pool(workers=2))
        assert deadline.remaining() > 0
    assert all(0.5 < x <= 1.5 for x in left)
