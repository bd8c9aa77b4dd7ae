"""Inputs with a limit are refused before the work starts, naming the limit and its variable."""

from __future__ import annotations

import time

import pytest

from collsynth.cli import main


def run(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize(
    "argv, expect",
    [
        (
            ["synth", "-t", "ring:n=4", "-c", "allgather", "--chunks", "1000000000"],
            "more than 4194304 (set COLLSYNTH_MAX_CHUNKS",
        ),
        (["bound", "-t", "ring:n=4", "-c", "alltoall", "-s", "1MB", "--chunks", "300000"], None),
    ],
)
def test_huge_chunk_counts(capsys, tmp_path, argv, expect):
    t0 = time.monotonic()
    rc, out, err = run(
        capsys, *argv, *(["-o", str(tmp_path / "x.json")] if argv[0] == "synth" else [])
    )
    assert time.monotonic() - t0 < 20
    if expect is None:  # bound has no --chunks: a usage error, still one line
        assert rc == 2 and err.count("\n") == 1
        return
    assert rc == 2 and expect in err and err.count("\n") == 1
    assert not (tmp_path / "x.json").exists()


def test_chunk_limit_can_be_raised(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("COLLSYNTH_MAX_CHUNKS", "8")
    rc, _, err = run(
        capsys,
        "synth",
        "-t",
        "ring:n=4",
        "-c",
        "allgather",
        "--chunks",
        "4",
        "-o",
        str(tmp_path / "x.json"),
    )
    assert rc == 2 and "more than 8" in err
    monkeypatch.setenv("COLLSYNTH_MAX_CHUNKS", "16")
    rc, _, err = run(
        capsys,
        "synth",
        "-t",
        "ring:n=4",
        "-c",
        "allgather",
        "--chunks",
        "4",
        "-o",
        str(tmp_path / "x.json"),
    )
    assert rc == 0, err


def test_min_bytes_above_max_bytes_is_refused(capsys, tmp_path):
    s = tmp_path / "s.json"
    assert (
        run(capsys, "synth", "-t", "ring:n=4", "-c", "allgather", "--algo", "ring", "-o", str(s))[0]
        == 0
    )
    rc, _, err = run(
        capsys,
        "export",
        "msccl",
        str(s),
        "--dialect",
        "executor",
        "--min-bytes",
        "2MB",
        "--max-bytes",
        "1MB",
        "-o",
        str(tmp_path / "s.xml"),
    )
    assert rc == 2 and "min_bytes 2000000 is larger than max_bytes 1000000" in err
    assert not (tmp_path / "s.xml").exists()


def test_check_xml_refuses_min_bytes_above_max_bytes(capsys, tmp_path):
    s, x = tmp_path / "s.json", tmp_path / "s.xml"
    assert run(capsys, "synth", "-t", "ring:n=4", "-c", "allgather", "-o", str(s))[0] == 0
    argv = ("export", "msccl", str(s), "--dialect", "executor", "--min-bytes", "1MB")
    assert run(capsys, *argv, "--max-bytes", "2MB", "-o", str(x))[0] == 0
    assert run(capsys, "check-xml", str(x))[0] == 0
    text = x.read_text()
    assert 'minBytes="1000000"' in text and 'maxBytes="2000000"' in text
    x.write_text(text.replace('minBytes="1000000"', 'minBytes="3000000"'))
    rc, out, err = run(capsys, "check-xml", str(x))
    assert rc == 2 and "minBytes=3000000 is above maxBytes=2000000" in err and out == ""
