"""Every path a command writes passes one output check before any work: special files
(FIFOs, devices, sockets, folders; a symbolic link judged by its target) are refused and left
as they are, an output never names an input however it is spelled (``./``, ``..``, a
symbolic or hard link), tune's folder never holds an input under a name tune writes, and the
solver options passed to HiGHS are an allow-list (no paths, no output switches)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import stat
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collsynth.atomic import check_outputs, same_file, write_bytes_atomic
from collsynth.cli import main
from collsynth.errors import CollsynthError
from collsynth.synth.teccl import HIGHS_OPTIONS

ROOT = os.geteuid() == 0 if hasattr(os, "geteuid") else False


def run(capsys, *argv):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def one_line_error(rc, out, err, *words):
    assert rc == 2, (rc, out, err)
    assert out == "" and err.startswith("collsynth: error: ") and err.count("\n") == 1, err
    for w in words:
        assert w in err, err


def snapshot(folder: Path) -> dict[str, tuple[int, bytes | None]]:
    """Every entry below ``folder``: its file type and, for a regular file, its bytes."""
    out: dict[str, tuple[int, bytes | None]] = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            st_ = os.lstat(p)
            kind = stat.S_IFMT(st_.st_mode)
            data = Path(p).read_bytes() if stat.S_ISREG(st_.st_mode) else None
            out[os.path.relpath(p, folder)] = (kind, data)
    return out


def make_special(folder: Path, kind: str) -> Path:
    """A non-regular file of ``kind`` in ``folder`` (skips what this user cannot make)."""
    p = folder / f"special-{kind}"
    if kind == "fifo":
        os.mkfifo(p)
    elif kind == "chardev":
        if not ROOT:
            pytest.skip("making a device node needs root")
        os.mknod(p, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # a null device, in tmp
    elif kind == "socket":
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(p))
        s.close()
    elif kind == "dir":
        p.mkdir()
    elif kind == "link-to-fifo":
        os.mkfifo(folder / "fifo-target")
        p.symlink_to("fifo-target")
    else:  # pragma: no cover
        raise AssertionError(kind)
    return p


KINDS = ["fifo", "chardev", "socket", "dir", "link-to-fifo"]


@pytest.fixture()
def sched(tmp_path, capsys):
    path = tmp_path / "s.json"
    rc, _, err = run(
        capsys, "synth", "-t", "ring:n=4", "-c", "allgather", "--algo", "ring", "-o", path
    )
    assert rc == 0, err
    return path


# ------------------------------------------------------------------ special files
@pytest.mark.parametrize("kind", KINDS)
def test_synth_refuses_a_special_output_and_leaves_it(capsys, tmp_path, kind):
    target = make_special(tmp_path, kind)
    before = snapshot(tmp_path)
    t0 = time.monotonic()
    rc, out, err = run(
        capsys, "synth", "-t", "dgx2:chassis=2", "-c", "allreduce", "--algo", "spt", "-o", target
    )
    one_line_error(rc, out, err, str(target))
    assert "wrote" not in out + err
    assert time.monotonic() - t0 < 5.0  # refused before any synthesis
    assert snapshot(tmp_path) == before  # the FIFO / device is still one, nothing else made


@pytest.mark.parametrize("kind", ["fifo", "chardev", "socket"])
def test_every_file_output_refuses_special_files(capsys, tmp_path, sched, kind):
    target = make_special(tmp_path, kind)
    cases = [
        ["export", "msccl", sched, "-o", target],
        ["topo", "export", "-t", "ring:n=4", "-o", target],
        ["wan", "stats", "-t", "wan:dcs=2,gpus=2", "-o", target],
        ["simulate", sched, "-s", "1MB", "--gantt", f"{target}.png"],
        ["synth", "-t", "ring:n=4", "-c", "allgather", "--algo", "ring", "-o",
         tmp_path / "new.json", "--teccl-output", target],
    ]  # fmt: skip
    os.symlink(target, f"{target}.png")  # a link is judged by what it points to
    before = snapshot(tmp_path)
    for argv in cases:
        one_line_error(*run(capsys, *argv))
        assert snapshot(tmp_path) == before, argv


def test_atomic_write_never_replaces_a_special_file(tmp_path):
    fifo = make_special(tmp_path, "fifo")
    with pytest.raises(CollsynthError, match="not a regular file"):
        write_bytes_atomic(str(fifo), b"x")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert sorted(os.listdir(tmp_path)) == ["special-fifo"]


def test_a_dangling_link_or_regular_file_is_still_written(capsys, tmp_path):
    link = tmp_path / "dangling.json"
    link.symlink_to(tmp_path / "nowhere")
    rc, _, err = run(
        capsys, "synth", "-t", "ring:n=4", "-c", "allgather", "--algo", "ring", "-o", link
    )
    assert rc == 0, err
    assert link.is_file()  # written where the link points (the link's target now exists)
    regular = tmp_path / "old.json"
    regular.write_text("old")
    rc, _, err = run(
        capsys, "synth", "-t", "ring:n=4", "-c", "allgather", "--algo", "ring", "-o", regular
    )
    assert rc == 0, err
    assert regular.read_text() != "old" and json.loads(regular.read_text())["ops"]


# ------------------------------------------------------------------ outputs naming inputs
def spellings(path: Path) -> list[str]:
    """``path`` spelled other ways: itself, with ``./`` and ``sub/..``, a symbolic link and a
    hard link to it."""
    folder = path.parent
    (folder / "sub").mkdir(exist_ok=True)
    sym, hard = folder / f"sym-{path.name}", folder / f"hard-{path.name}"
    if not sym.exists():
        sym.symlink_to(path.name)
    if not hard.exists():
        os.link(path, hard)
    return [str(path), f"{folder}/./{path.name}", f"{folder}/sub/../{path.name}", str(sym),
            str(hard)]  # fmt: skip


def test_simulate_gantt_never_overwrites_the_schedule(capsys, tmp_path):
    png = tmp_path / "s.png"  # a schedule whose name looks like a picture
    rc, _, err = run(
        capsys, "synth", "-t", "ring:n=4", "-c", "allgather", "--algo", "ring", "-o", png
    )
    assert rc == 0, err
    for spelled in spellings(png):
        before = snapshot(tmp_path)
        rc, out, err = run(capsys, "simulate", png, "-s", "1MB", "--gantt", spelled)
        one_line_error(rc, out, err, "would overwrite")
        assert snapshot(tmp_path) == before


def test_compare_plot_never_overwrites_the_baseline(capsys, tmp_path):
    log = tmp_path / "ag.png"
    log.write_text("# nccl-tests log\n")
    for spelled in spellings(log):
        before = snapshot(tmp_path)
        rc, out, err = run(
            capsys, "compare", "-t", "ring:n=4", "-c", "allgather", "--baseline", log,
            "--plot", spelled,
        )  # fmt: skip
        one_line_error(rc, out, err, "would overwrite --baseline")
        assert snapshot(tmp_path) == before


def test_file_outputs_never_overwrite_an_input_however_spelled(capsys, tmp_path, sched):
    topo = tmp_path / "t.json"
    assert run(capsys, "topo", "export", "-t", "ring:n=4", "-o", topo)[0] == 0
    for spelled in spellings(topo):
        before = snapshot(tmp_path)
        for argv in (
            ["topo", "export", "-t", topo, "-o", spelled],
            ["synth", "-t", topo, "-c", "allgather", "--algo", "ring", "-o", spelled],
            ["wan", "stats", "-t", topo, "-o", spelled],
        ):
            one_line_error(*run(capsys, *argv), "would overwrite")
            assert snapshot(tmp_path) == before, argv
    for spelled in spellings(sched):
        before = snapshot(tmp_path)
        one_line_error(*run(capsys, "export", "msccl", sched, "-o", spelled), "would overwrite")
        assert snapshot(tmp_path) == before


def test_two_outputs_may_not_be_one_file(capsys, tmp_path):
    out = tmp_path / "s.json"
    rc, stdout, err = run(
        capsys, "synth", "-t", "ring:n=4", "-c", "allgather", "--algo", "teccl",
        "-o", out, "--teccl-output", f"{tmp_path}/./s.json",
    )  # fmt: skip
    one_line_error(rc, stdout, err, "would overwrite -o")
    assert os.listdir(tmp_path) == []


def test_check_outputs_by_inode_and_real_path(tmp_path):
    a = tmp_path / "a"
    a.write_text("x")
    os.link(a, tmp_path / "b")
    assert same_file(str(tmp_path / "b"), str(a))
    assert same_file(f"{tmp_path}/sub/../a", str(a))
    assert not same_file(str(tmp_path / "c"), str(a))
    check_outputs({"-o": str(tmp_path / "c")}, {"-t": "ring:n=4", "-x": None})
    with pytest.raises(CollsynthError, match="would overwrite -t"):
        check_outputs({"-o": str(tmp_path / "b")}, {"-t": [str(tmp_path / "z"), str(a)]})


def test_the_run_pid_file_is_checked_like_an_output(capsys, tmp_path, sched, monkeypatch):
    before = sched.read_bytes()
    for spelled in spellings(sched):
        monkeypatch.setenv("COLLSYNTH_RUN_PIDFILE", spelled)
        rc, out, err = run(capsys, "run", sched, "-s", "1MB", "--launch", "4")
        one_line_error(rc, out, err, "COLLSYNTH_RUN_PIDFILE", "would overwrite the schedule")
        assert sched.read_bytes() == before
    fifo = make_special(tmp_path, "fifo")
    monkeypatch.setenv("COLLSYNTH_RUN_PIDFILE", str(fifo))
    one_line_error(*run(capsys, "run", sched, "-s", "1MB", "--launch", "4"), "FIFO")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


# ------------------------------------------------------------------ tune's folder
TUNE = ["tune", "-c", "allgather", "--sizes", "1MB", "--algos", "ring", "-q"]


@pytest.mark.parametrize("name", ["tune.json", "allgather_ring_0.json", "allgather_ring_0.xml"])
def test_tune_never_overwrites_its_topology(capsys, tmp_path, name):
    out = tmp_path / "T"
    out.mkdir()
    topo = out / name
    assert run(capsys, "topo", "export", "-t", "ring:n=4", "-o", topo)[0] == 0
    before = snapshot(tmp_path)
    for folder in (out, f"{out}/", f"{tmp_path}/./T/../T"):
        rc, stdout, err = run(capsys, *TUNE, "-t", topo, "-o", folder)
        one_line_error(rc, stdout, err, "would overwrite -t")
        assert snapshot(tmp_path) == before
    # an input elsewhere, hard-linked into the folder under a name tune writes
    elsewhere = tmp_path / "t.json"
    os.link(topo, elsewhere)
    before = snapshot(tmp_path)
    one_line_error(*run(capsys, *TUNE, "-t", elsewhere, "-o", out), "would overwrite")
    assert snapshot(tmp_path) == before


def test_tune_keeps_other_files_and_refuses_special_ones(capsys, tmp_path):
    out = tmp_path / "T"
    out.mkdir()
    topo = out / "mine.json"
    assert run(capsys, "topo", "export", "-t", "ring:n=4", "-o", topo)[0] == 0
    keep = topo.read_bytes()
    rc, _, err = run(capsys, *TUNE, "-t", topo, "-o", out)
    assert rc == 0, err
    assert topo.read_bytes() == keep and (out / "tune.json").is_file()
    (out / "tune.json").unlink()
    os.mkfifo(out / "tune.json")
    before = snapshot(tmp_path)
    one_line_error(*run(capsys, *TUNE, "-t", topo, "-o", out), "tune.json", "FIFO")
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("kind", ["fifo", "chardev", "socket", "file"])
def test_tune_folder_that_is_not_a_folder(capsys, tmp_path, kind):
    if kind == "file":
        target = tmp_path / "f"
        target.write_text("keep")
    else:
        target = make_special(tmp_path, kind)
    before = snapshot(tmp_path)
    one_line_error(*run(capsys, *TUNE, "-t", "ring:n=4", "-o", target), "not a folder")
    assert snapshot(tmp_path) == before


def test_tune_folder_that_is_a_dangling_link(capsys, tmp_path):
    link = tmp_path / "T"
    link.symlink_to(tmp_path / "nowhere")
    one_line_error(*run(capsys, *TUNE, "-t", "ring:n=4", "-o", link), "link to nothing")
    assert os.listdir(tmp_path) == ["T"]


@pytest.mark.parametrize("kind", ["fifo", "file"])
def test_the_testbed_state_folder_is_checked(tmp_path, monkeypatch, kind):
    from collsynth.testbed import netns

    state = make_special(tmp_path, kind) if kind != "file" else tmp_path / "state"
    if kind == "file":
        state.write_text("x")
    monkeypatch.setattr(netns, "STATE_DIR", str(state))
    with pytest.raises(CollsynthError, match="COLLSYNTH_TESTBED_STATE"):
        netns.check_state_dir()
    (tmp_path / "ok").mkdir()
    os.mkfifo(tmp_path / "ok" / "cs1.json")
    monkeypatch.setattr(netns, "STATE_DIR", str(tmp_path / "ok"))
    with pytest.raises(CollsynthError, match="FIFO"):
        netns.check_state_dir()
    monkeypatch.setattr(netns, "STATE_DIR", str(tmp_path / "new" / "state"))
    netns.check_state_dir()  # made with its parents


# ------------------------------------------------------------------ picture formats
def test_pgf_is_refused_before_the_work_without_latex(capsys, tmp_path):
    if shutil.which("xelatex"):
        pytest.skip("xelatex is installed: pgf can be drawn")
    t0 = time.monotonic()
    rc, out, err = run(
        capsys, "compare", "-t", "dgx2:chassis=2", "-c", "allgather", "--plot", tmp_path / "p.pgf"
    )
    one_line_error(rc, out, err, "pgf", "xelatex")
    assert time.monotonic() - t0 < 10.0  # before the comparison
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("fmt", ["eps", "ps"])
def test_postscript_plots_print_no_warnings(capsys, tmp_path, fmt):
    p = tmp_path / f"p.{fmt}"
    rc, out, err = run(
        capsys, "compare", "-t", "ring:n=4", "-c", "allgather", "--sizes", "1MB", "--algos",
        "ring,spt", "--plot", p, "--json",
    )  # fmt: skip
    assert rc == 0 and err == "" and p.stat().st_size > 0


def test_an_empty_plot_name_is_one_line(capsys):
    one_line_error(*run(capsys, "simulate", "x.json", "--gantt", ""), "needs a file name")


# ------------------------------------------------------------------ solver options
def teccl(tmp_path, *opts):
    return ["synth", "-t", tmp_path / "t4.json", "-c", "allgather", "--algo", "teccl",
            "-o", tmp_path / "s.json", "--json", *opts]  # fmt: skip


@pytest.fixture()
def topo4(tmp_path, capsys):
    assert run(capsys, "topo", "export", "-t", "ring:n=4", "-o", tmp_path / "t4.json")[0] == 0
    return tmp_path / "t4.json"


@pytest.mark.parametrize(
    "highs",
    [
        "write_solution_to_file:true,solution_file:{t}",
        "solution_file:{t}",
        "log_file:{d}/highs.log",
        "write_model_to_file:true",
        "write_presolved_model_to_file:true",
        "log_to_console:true",
        "glpsol_cost_row_location:1",
    ],
)
def test_highs_options_that_write_are_refused(capsys, tmp_path, topo4, highs, monkeypatch):
    monkeypatch.chdir(tmp_path)
    before = snapshot(tmp_path)
    value = highs.format(t=topo4, d=tmp_path)
    rc, out, err = run(capsys, *teccl(tmp_path, "--opt", f"highs={value}"))
    one_line_error(rc, out, err, "cannot be set here", "allowed:", "mip_rel_gap")
    assert snapshot(tmp_path) == before


def test_two_highs_items_are_a_key_given_twice(capsys, tmp_path, topo4):
    before = snapshot(tmp_path)
    rc, out, err = run(
        capsys, *teccl(tmp_path, "--opt", "highs=write_solution_to_file:true,highs=time_limit:1")
    )
    one_line_error(rc, out, err, "given twice")
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("value", ["banana", "2", "", "tru"])
def test_a_bad_highs_value_is_one_clean_line(capfd, tmp_path, value):
    assert run(capfd, "topo", "export", "-t", "ring:n=4", "-o", tmp_path / "t4.json")[0] == 0
    rc, out, err = run(capfd, *teccl(tmp_path, "--opt", f"highs=output_flag:{value}"))
    one_line_error(rc, out, err, "output_flag")
    assert "HiGHS" not in err.replace("HiGHS option", "") and "ERROR" not in err


def test_allowed_highs_options_work(capfd, tmp_path):
    # capfd: the solver's log is written by native code in a helper process
    assert run(capfd, "topo", "export", "-t", "ring:n=4", "-o", tmp_path / "t4.json")[0] == 0
    opts = "highs=mip_rel_gap:0.01,threads:1,presolve:off,time_limit:2,random_seed:3"
    rc, out, err = run(capfd, *teccl(tmp_path, "--opt", opts))
    assert rc == 0 and err == "", err
    assert out.count("\n") == 1 and '"verified": true' in out
    rc, out, err = run(capfd, *teccl(tmp_path, "--opt", "highs=output_flag:true"))
    assert rc == 0 and out.count("\n") == 1 and out.startswith("{")  # the log is on stderr
    assert "HiGHS" in err
    assert sorted(os.listdir(tmp_path)) == ["s.json", "t4.json"]


@pytest.mark.parametrize(
    "opt",
    ["", " ", "seed=1,seed=2", ",seed=1", "seed=1,,gap=0.1", "teccl.seed=1,teccl.seed=2", ".x=1"],
)
def test_empty_and_repeated_options_are_refused(capsys, tmp_path, opt):
    rc, out, err = run(
        capsys, "synth", "-t", "ring:n=4", "-c", "allgather", "--algo", "teccl", "-o",
        tmp_path / "s.json", "--opt", opt,
    )  # fmt: skip
    one_line_error(rc, out, err, "option")
    assert os.listdir(tmp_path) == []


def test_a_key_given_by_flag_and_option_is_refused(capsys, tmp_path):
    rc, out, err = run(
        capsys, "synth", "-t", "ring:n=4", "-c", "allreduce", "--algo", "spt", "-o",
        tmp_path / "s.json", "--opt", "pipeline=2", "--opt", "pipeline=3",
    )  # fmt: skip
    one_line_error(rc, out, err, "given twice")


# ------------------------------------------------------------------ fuzz
SPECIAL = ["fifo", "socket", "dir", "link-to-fifo"] + (["chardev"] if ROOT else [])


@st.composite
def output_paths(draw):
    """(how to make it, path relative to the work folder): a special file, an input spelled
    another way, a new file in a missing or existing folder."""
    how = draw(
        st.sampled_from(
            ["special", "input", "missing-dir", "new", "under-file", "tune-name", "dot-dot"]
        )
    )
    return how, draw(st.sampled_from(SPECIAL)), draw(st.sampled_from(["", "./", "sub/../"]))


COMMANDS = {
    "synth": ["synth", "-t", "{T}", "-c", "allgather", "--algo", "ring", "-o", "{O}"],
    "topo": ["topo", "export", "-t", "{T}", "-o", "{O}"],
    "export": ["export", "msccl", "{S}", "-o", "{O}"],
    "gantt": ["simulate", "{S}", "-s", "1MB", "--gantt", "{O}"],
    "plot": ["compare", "-t", "{T}", "-c", "allgather", "--sizes", "1MB", "--algos", "ring",
             "--plot", "{O}", "--json"],
    "tune": ["tune", "-t", "{T}", "-c", "allgather", "--sizes", "1MB", "--algos", "ring",
             "-o", "{O}", "--json"],
}  # fmt: skip


@contextlib.contextmanager
def work_folder():
    with tempfile.TemporaryDirectory() as d, contextlib.chdir(d):
        yield Path(d)


def _prepare(work: Path, capsys) -> None:
    (work / "sub").mkdir()
    for argv in (
        ["topo", "export", "-t", "ring:n=4", "-o", "T.json"],
        ["synth", "-t", "T.json", "-c", "allgather", "--algo", "ring", "-o", "S.json"],
    ):
        rc, _, err = run(capsys, *argv)
        assert rc == 0, err
    (work / "plain.txt").write_text("keep")


def _output(work: Path, cmd: str, how: str, kind: str, prefix: str) -> str:
    ext = {"gantt": ".png", "plot": ".png", "tune": ""}.get(cmd, ".json")
    if how == "special":
        return prefix + make_special(work, kind).name
    if how == "input":
        return prefix + ("S.json" if cmd in ("export", "gantt") else "T.json")
    if how == "missing-dir":
        return f"nowhere/out{ext}"
    if how == "under-file":
        return f"plain.txt/out{ext}"
    if how == "tune-name":  # tune's folder is the one holding its input (named tune.json)
        shutil.copy(work / "T.json", work / "sub" / "tune.json")
        return prefix + "sub"
    if how == "dot-dot":
        return f"sub/../out{ext}"
    return f"{prefix}out{ext}"


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(cmd=st.sampled_from(sorted(COMMANDS)), where=output_paths())
def test_fuzz_output_paths(capsys, cmd, where):
    how, kind, prefix = where
    with work_folder() as work:
        _prepare(work, capsys)
        out = _output(work, cmd, how, kind, prefix)
        topo = "sub/tune.json" if how == "tune-name" else "T.json"
        argv = [a.replace("{O}", out).replace("{T}", topo).replace("{S}", "S.json")
                for a in COMMANDS[cmd]]  # fmt: skip
        before = snapshot(work)
        rc, stdout, err = run(capsys, *argv)
        after = snapshot(work)
        writable = how in ("new", "dot-dot") or (
            cmd == "tune" and how == "special" and kind == "dir"
        )
        assert rc == (0 if writable else 2), (argv, rc, err)
        if rc == 2:
            assert err.startswith("collsynth: error: ") and err.count("\n") == 1, err
            assert stdout == ""
            assert after == before, argv  # nothing made, nothing changed, specials kept
            return
        assert err == "", err
        mine = os.path.normpath(out)
        for name, entry in before.items():  # inputs and special files are untouched
            if name != mine and not name.startswith(mine + os.sep):
                assert after.get(name) == entry, (argv, name)


HIGHS_VALUES = st.one_of(
    st.sampled_from(["0", "1", "-1", "0.5", "true", "false", "on", "off", "choose", "simplex",
                     "1e9", "nan", "inf", "2s", "banana", "", "/tmp/x", "t4.json"]),
    st.text(alphabet="abc019.:-/_ ", max_size=8),
)  # fmt: skip
HIGHS_KEYS = st.one_of(
    st.sampled_from(sorted(HIGHS_OPTIONS)),
    st.sampled_from(["log_file", "solution_file", "write_solution_to_file", "write_model_file",
                     "write_model_to_file", "log_to_console", "ranging", "Threads", ""]),
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=12),
)  # fmt: skip


def _valid_value(opt) -> st.SearchStrategy[str]:
    """Values HiGHS accepts for an allowed option (small, so the solve stays short)."""
    if opt.kind == "bool":
        return st.sampled_from(["false", "0", "off", "no"])  # no log: stderr stays empty
    if opt.kind == "choice":
        return st.sampled_from(list(opt.choices))
    lo = opt.minimum or 0
    if opt.kind == "int":
        return st.integers(int(lo), int(min(opt.maximum or lo + 4, lo + 4))).map(str)
    hi = min(opt.maximum if opt.maximum is not None else lo + 1.0, lo + 1.0)
    return st.floats(lo, hi, allow_nan=False).map(repr)


VALID_ITEMS = st.sampled_from(sorted(HIGHS_OPTIONS)).flatmap(
    lambda k: st.tuples(st.just(k), _valid_value(HIGHS_OPTIONS[k]))
)


@pytest.mark.slow
@settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    items=st.one_of(
        st.lists(VALID_ITEMS, min_size=1, max_size=3),
        st.lists(st.one_of(VALID_ITEMS, st.tuples(HIGHS_KEYS, HIGHS_VALUES)), min_size=1,
                 max_size=3),
    )
)  # fmt: skip
def test_fuzz_solver_options(capsys, items):
    # a cheap solve: every allowed option can only shorten it
    items = items + [("time_limit", "1")] if all(k != "time_limit" for k, _ in items) else items
    value = ",".join(f"{k}:{v}" for k, v in items)
    with work_folder() as work:
        assert run(capsys, "topo", "export", "-t", "ring:n=4", "-o", "t4.json")[0] == 0
        before = snapshot(work)
        rc, out, err = run(
            capsys, "synth", "-t", "t4.json", "-c", "allgather", "--algo", "teccl",
            "-o", "s.json", "--json", "--opt", f"highs={value}",
        )  # fmt: skip
        assert rc in (0, 2), (value, rc, err)
        after = snapshot(work)
        if rc == 2:
            assert err.startswith("collsynth: error: ") and err.count("\n") == 1, (value, err)
            assert out == "" and after == before, value
            return
        assert out.count("\n") == 1 and out.startswith("{"), value
        assert set(after) == set(before) | {"s.json"}, value  # HiGHS wrote no file
        assert after["t4.json"] == before["t4.json"]
        keys = {k for k, _ in items}
        assert keys <= set(HIGHS_OPTIONS), value
        if "output_flag" not in keys:
            assert err == "", (value, err)
