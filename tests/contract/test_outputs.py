"""Outputs are written whole or not at all, never over an input, and plot paths are checked
before any computation."""

from __future__ import annotations

import os
import time

import pytest

from collsynth.atomic import write_text_atomic
from collsynth.cli import main
from collsynth.errors import CollsynthError


def run(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture()
def sched(tmp_path, capsys):
    path = tmp_path / "s.json"
    assert (
        run(
            capsys, "synth", "-t", "ring:n=4", "-c", "allgather", "--algo", "ring", "-o", str(path)
        )[0]
        == 0
    )
    return path


def test_output_equal_to_input_is_refused(capsys, tmp_path, sched):
    before = sched.read_bytes()
    rc, _, err = run(capsys, "export", "msccl", str(sched), "-o", str(sched))
    assert rc == 2 and "would overwrite the schedule" in err
    assert sched.read_bytes() == before
    topo = tmp_path / "t.json"
    assert run(capsys, "topo", "export", "-t", "ring:n=4", "-o", str(topo))[0] == 0
    rc, _, err = run(capsys, "topo", "export", "-t", str(topo), "-o", str(topo))
    assert rc == 2 and "would overwrite -t" in err
    rc, _, err = run(capsys, "synth", "-t", str(topo), "-c", "allgather", "-o", str(topo))
    assert rc == 2 and "would overwrite -t" in err


def test_plot_path_checked_before_the_work(capsys, tmp_path):
    t0 = time.monotonic()
    rc, _, err = run(
        capsys,
        "compare",
        "-t",
        "dgx2:chassis=2",
        "-c",
        "allgather",
        "--plot",
        str(tmp_path / "missing" / "p.png"),
    )
    assert rc == 2 and "no directory" in err
    assert time.monotonic() - t0 < 5.0  # refused before synthesizing anything
    rc, _, err = run(
        capsys, "compare", "-t", "ring:n=4", "-c", "allgather", "--plot", str(tmp_path / "p.nope")
    )
    assert rc == 2 and "unknown picture format 'nope'" in err


def test_tune_creates_at_most_its_directory(capsys, tmp_path):
    out = tmp_path / "a" / "b"
    rc, _, err = run(
        capsys,
        "tune",
        "-t",
        "ring:n=4",
        "-c",
        "allgather",
        "--sizes",
        "1MB",
        "--algos",
        "ring",
        "-o",
        str(out),
        "--no-progress",
    )
    assert rc == 2 and "parent directory does not exist" in err
    assert not (tmp_path / "a").exists()
    rc, _, err = run(
        capsys,
        "tune",
        "-t",
        "ring:n=4",
        "-c",
        "allgather",
        "--sizes",
        "1MB",
        "--algos",
        "ring",
        "-o",
        str(tmp_path / "a"),
        "--no-progress",
    )
    assert rc == 0, err
    assert (tmp_path / "a" / "tune.json").exists()


def test_atomic_write_leaves_nothing_on_failure(tmp_path, monkeypatch):
    target = tmp_path / "x.txt"
    target.write_text("old")

    def boom(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", boom)
    with pytest.raises(CollsynthError, match="No space left on device"):
        write_text_atomic(str(target), "new")
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.txt"]


def test_write_into_missing_directory_is_one_line(capsys, tmp_path, sched):
    rc, _, err = run(capsys, "export", "msccl", str(sched), "-o", str(tmp_path / "nope" / "x.xml"))
    assert rc == 2 and err.startswith("collsynth: error: cannot write") and err.count("\n") == 1


@pytest.mark.parametrize("where", ["-o", "--teccl-output"])
def test_an_unwritable_output_is_refused_before_the_work(capsys, tmp_path, where):
    # either output in a missing folder: refused before synthesis, and neither file is left
    good, bad = tmp_path / "s.json", tmp_path / "nope" / "x.json"
    out, te = (bad, tmp_path / "te.json") if where == "-o" else (good, bad)
    t0 = time.monotonic()
    rc, stdout, err = run(
        capsys, "synth", "-t", "ring:n=4", "-c", "allgather", "--algo", "teccl",
        "-o", str(out), "--teccl-output", str(te),
    )  # fmt: skip
    assert rc == 2 and "no directory" in err and err.count("\n") == 1 and stdout == ""
    assert os.listdir(tmp_path) == []
    assert time.monotonic() - t0 < 1.0  # no solve happened


def test_an_empty_output_name_is_one_line(capsys, tmp_path):
    rc, out, err = run(capsys, "synth", "-t", "ring:n=4", "-c", "allgather", "-o", "")
    assert rc == 2 and err == "collsynth: error: -o needs a file name\n" and out == ""
