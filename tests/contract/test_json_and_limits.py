"""``--json`` output is exactly one JSON document (solver banners included: they are written
by native code, so stdout is captured at the file-descriptor level); ``--time-limit`` bounds
the work; ``--no-timing`` makes outputs byte-identical across runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from collsynth.cli import main
from collsynth.synth import load_all

# A topology each algorithm can run on (AllGather).
TOPO_FOR = {"syccl": "h800_rails:servers=2", "hier_ring": "dgx_a100:nodes=2", "nvls": "dgx_h100"}


def run_fd(capfd, *argv):
    rc = main(list(argv))
    out, err = capfd.readouterr()
    return rc, out, err


def one_json(out: str):
    doc = json.loads(out)  # the whole of stdout: one document, nothing before or after
    assert isinstance(doc, dict)
    return doc


def _algos() -> list[tuple[str, str]]:
    """Every algorithm, with a collective it supports (AllGather where it can)."""
    from collsynth.collective import CollKind

    out = []
    for name, a in sorted(load_all().items()):
        kind = CollKind.ALLGATHER if CollKind.ALLGATHER in a.collectives else min(a.collectives)
        out.append((name, kind.value))
    return out


@pytest.mark.parametrize("algo,collective", _algos())
def test_synth_json_is_one_document_for_every_algorithm(capfd, tmp_path, algo, collective):
    out_path = tmp_path / "s.json"
    rc, out, err = run_fd(
        capfd,
        "synth",
        "-t",
        TOPO_FOR.get(algo, "dgx1"),
        "-c",
        collective,
        "--algo",
        algo,
        "-o",
        str(out_path),
        "--json",
    )
    assert rc == 0, err
    d = one_json(out)
    assert d["algorithm"] == algo and d["verified"] is True
    assert "timing" in d and d["timing"]["synth_wall_s"] >= 0
    assert "HiGHS" not in err  # the banner goes nowhere without a solver log


def test_compare_and_tune_json_with_a_solver(capfd, tmp_path):
    rc, out, err = run_fd(
        capfd, "compare", "-t", "ring:n=4", "-c", "allgather", "--sizes", "1MB",
        "--algos", "teccl,ring", "--json",
    )  # fmt: skip
    assert rc == 0, err
    d = one_json(out)
    assert {r["algo"] for r in d["rows"]} == {"teccl", "ring"}
    assert all(r["algbw_Bps"] > 1e6 for r in d["rows"])  # bytes/s, not GB/s
    rc, out, err = run_fd(
        capfd, "tune", "-t", "ring:n=4", "-c", "allgather", "--sizes", "1KB,1MB",
        "--algos", "teccl,ring", "-o", str(tmp_path / "tune"), "--json",
    )  # fmt: skip
    assert rc == 0, err
    assert one_json(out)["windows"]


@pytest.mark.parametrize(
    "argv",
    [
        ("verify", "{S}", "--json"),
        ("simulate", "{S}", "-s", "1MB", "--json"),
        ("export", "msccl", "{S}", "-o", "{tmp}/s.xml", "--json"),
        ("topo", "export", "-t", "dgx1", "-o", "{tmp}/t.yaml", "--json"),
        (
            "wan",
            "replan",
            "-t",
            "wan:dcs=2,gpus=2",
            "--stats",
            "{ST}",
            "-o",
            "{tmp}/w.json",
            "--json",
        ),
        ("topo", "show", "-t", "dgx1", "--json"),
        ("list", "--json"),
        ("bound", "-t", "dgx1", "-c", "allreduce", "-s", "1MB", "--json"),
        ("wan", "stats", "-t", "wan:dcs=2,gpus=2", "-o", "{tmp}/stats.json", "--json"),
    ],
)
def test_other_result_commands_print_one_json_document(capfd, tmp_path, argv):
    s, st = tmp_path / "in.json", tmp_path / "stats.json"
    assert main(["synth", "-t", "dgx1", "-c", "allgather", "--algo", "teccl", "-o", str(s)]) == 0
    assert main(["wan", "stats", "-t", "wan:dcs=2,gpus=2", "-o", str(st)]) == 0
    capfd.readouterr()
    argv = [a.replace("{tmp}", str(tmp_path)).replace("{S}", str(s)) for a in argv]
    argv = [a.replace("{ST}", str(st)) for a in argv]
    rc, out, err = run_fd(capfd, *argv)
    assert rc == 0, err
    one_json(out)


def test_solver_log_goes_to_stderr_only(capfd, tmp_path):
    rc, out, err = run_fd(
        capfd, "synth", "-t", "ring:n=4", "-c", "allgather", "--algo", "teccl",
        "--opt", "highs=output_flag:true", "-o", str(tmp_path / "s.json"), "--json",
    )  # fmt: skip
    assert rc == 0, err
    one_json(out)
    assert "HiGHS" in err


# ---------------------------------------------------------------------------- time limits
def test_time_limit_stops_the_solver_and_returns_the_best_schedule(capfd, tmp_path):
    out_path = tmp_path / "s.json"
    t0 = time.monotonic()
    rc, out, err = run_fd(
        capfd, "synth", "-t", "torus2d:w=5,h=5", "-c", "allgather", "--algo", "teccl",
        "--opt", "time_limit=600", "--time-limit", "2", "-o", str(out_path), "--json",
    )  # fmt: skip
    wall = time.monotonic() - t0
    assert rc == 0, err
    d = one_json(out)
    assert d["verified"] and d["status"] in ("time_limit", "optimal")
    assert wall < 2 * 1.1 + 3
    saved = json.loads(out_path.read_text())
    assert saved["meta"]["status"] == d["status"]


def test_time_limit_without_a_result_is_exit_4_and_no_file(tmp_path):
    out_path = tmp_path / "s.json"
    t0 = time.monotonic()
    p = subprocess.run(
        [sys.executable, "-m", "collsynth", "synth", "-t", "ndv2:chassis=128", "-c",
         "allgather", "--algo", "forestcoll", "--time-limit", "0.5", "-o", str(out_path)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    wall = time.monotonic() - t0
    assert p.returncode == 4, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "time limit" in lines[0] and "Traceback" not in p.stderr
    assert p.stdout == "" and not out_path.exists() and os.listdir(tmp_path) == []
    assert wall < 0.5 * 1.1 + 3 + 10  # plus the interpreter's start-up and imports


def test_compare_time_limit_skips_what_did_not_fit(capfd):
    rc, out, err = run_fd(
        capfd, "compare", "-t", "ndv2:chassis=2", "-c", "allgather", "--sizes", "1MB",
        "--algos", "spt,ring,teccl", "--time-limit", "1e-9", "--json",
    )  # fmt: skip
    # nothing fits in a nanosecond: every algorithm skipped, which compare reports as an error
    assert rc in (2, 4) and len(err.strip().splitlines()) == 1 and "time" in err


@pytest.mark.parametrize("bad", ["0", "-1", "nan", "soon"])
def test_bad_time_limit_is_one_line(capfd, tmp_path, bad):
    rc, out, err = run_fd(
        capfd, "synth", "-t", "ring:n=4", "-c", "allgather", "--time-limit", bad,
        "-o", str(tmp_path / "s.json"),
    )  # fmt: skip
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "--time-limit" in err
    assert out == "" and not (tmp_path / "s.json").exists()


# ---------------------------------------------------------------------------- determinism
@pytest.mark.parametrize(
    "algo,topo",
    [("teccl", "ring:n=4"), ("forestcoll", "dgx1"), ("scale", "dgx1"), ("ring", "dgx1")],
)
def test_no_timing_gives_identical_bytes(capfd, tmp_path, algo, topo):
    files, docs = [], []
    for i in range(2):
        path = tmp_path / f"s{i}.json"
        rc, out, err = run_fd(
            capfd, "synth", "-t", topo, "-c", "allgather", "--algo", algo, "-o", str(path),
            "--no-timing", "--json",
        )  # fmt: skip
        assert rc == 0, err
        files.append(path.read_bytes())
        docs.append({k: v for k, v in json.loads(out).items() if k != "output"})
    assert files[0] == files[1]
    assert docs[0] == docs[1] and "timing" not in docs[0]
    assert "wall_s" not in files[0].decode()


def test_timing_lives_in_one_block(capfd, tmp_path):
    path = tmp_path / "s.json"
    rc, _, err = run_fd(
        capfd, "synth", "-t", "ring:n=4", "-c", "allgather", "--algo", "teccl", "-o", str(path)
    )
    assert rc == 0, err
    meta = json.loads(path.read_text())["meta"]
    assert "teccl.solver_wall_s" in meta["timing"]
    rest = json.dumps({k: v for k, v in meta.items() if k != "timing"})
    assert "wall_s" not in rest


def test_compare_no_timing_is_byte_identical(capfd):
    outs = []
    for _ in range(2):
        rc, out, err = run_fd(
            capfd, "compare", "-t", "dgx1", "-c", "allgather", "--sizes", "1KB,1MB",
            "--algos", "ring,spt,forestcoll", "--no-timing", "--json",
        )  # fmt: skip
        assert rc == 0, err
        outs.append(out)
    assert outs[0] == outs[1] and "wall_s" not in outs[0]
