"""nccl-tests logs in (``compare --baseline``) and nccl-tests tables and CSV out."""

from __future__ import annotations

import csv
import io
import json
import os

import pytest

from collsynth.cli import main
from collsynth.errors import CollsynthError
from collsynth.report.nccl_tests import (
    TableRow,
    check_ranks,
    parse_log,
    read_log,
    table,
)

DATA = os.path.join(os.path.dirname(__file__), "data", "nccl_tests")
AG = os.path.join(DATA, "all_gather_perf.dgx1.txt")


@pytest.mark.parametrize(
    "name, rows, ranks, hosts",
    [
        ("all_gather_perf.dgx1.txt", 11, 8, ["dgx1-a"]),
        ("reduce_scatter_perf.dgx1.txt", 11, 8, ["dgx1-a"]),
        ("alltoall_perf.dgx1.txt", 11, 8, ["dgx1-a"]),
        ("all_reduce_perf.2nodes.txt", 11, 16, ["node-a", "node-b"]),
        ("all_gather_perf.old.txt", 3, 8, ["old-box"]),
    ],
)
def test_sample_logs_parse(name, rows, ranks, hosts):
    log = read_log(os.path.join(DATA, name))
    assert len(log.rows) == rows and log.infer_ranks() == ranks and log.hosts == hosts
    for r in log.rows:
        for t in (r.out_of_place, r.in_place):
            assert t is not None and t.wrong == 0
            # algbw = size / time, as nccl-tests computes it (two decimals printed)
            assert t.algbw_Bps == pytest.approx(r.size_bytes / t.time_s, rel=0.02, abs=0.01e9)
    assert log.params["nThread"] == 1 and log.avg_busbw_Bps > 0


def test_ranks_come_from_count_when_the_header_has_none():
    text = open(AG).read()
    lines = [ln for ln in text.splitlines() if "Rank" not in ln or "device" not in ln]
    log = parse_log("\n".join(lines))
    assert log.ranks == 0 and log.infer_ranks() == 8  # size = count x 4 bytes x 8 ranks


@pytest.mark.parametrize(
    "mutate, needle",
    [
        (lambda t: t.replace("   4194304        131072", "   4194304", 1), "line 22: expected 13"),
        (lambda t: t.replace("151.46", "fast", 1), "line 23: time 'fast' is not a number"),
        (lambda t: t.replace("#       size", "#       blah", 1), "no '# size count type"),
        (lambda t: "\n".join(ln for ln in t.splitlines() if ln.startswith("#")), "no result rows"),
        (lambda t: t.replace("#wrong     time", "#wrong     time  extra", 1), "unexpected nccl"),
        (lambda t: t.replace("     0     18.37", "    -3     18.37", 1), "#wrong must be a count"),
    ],
)
def test_malformed_logs_name_the_line(mutate, needle):
    with pytest.raises(CollsynthError, match=needle):
        parse_log(mutate(open(AG).read()), "ag.log")


def test_a_log_from_other_ranks_is_refused():
    log = read_log(os.path.join(DATA, "all_reduce_perf.2nodes.txt"))
    check_ranks(log, 16)
    with pytest.raises(CollsynthError, match="from 16 ranks, the topology has 8"):
        check_ranks(log, 8)


def test_written_tables_read_back():
    rows = [
        TableRow(1 << 20, (1 << 20) // 4 // 8, "float", "none", -1, 12.5e-6, 83.9e9, 73.4e9),
        TableRow(
            1 << 24,
            (1 << 24) // 4 // 8,
            "float",
            "none",
            -1,
            110e-6,
            152.5e9,
            133.4e9,
            0,
            (109e-6, 153.9e9, 134.7e9, 0),
        ),  # fmt: skip
    ]
    log = parse_log(table(rows, "test"))
    assert [r.size_bytes for r in log.rows] == [1 << 20, 1 << 24]
    assert log.rows[0].in_place is None and log.rows[0].out_of_place.wrong is None
    assert log.rows[1].in_place.time_s == pytest.approx(109e-6)
    assert log.rows[1].out_of_place.busbw_Bps == pytest.approx(133.4e9, rel=1e-3)
    assert log.infer_ranks() == 8


SMALL = ["-t", "dgx1", "-c", "allgather", "--algos", "ring,direct", "--baseline", AG]


def test_compare_baseline_uses_the_logs_sizes_and_figures(capsys):
    assert main(["compare", *SMALL, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    log = read_log(AG)
    assert sorted({r["size_bytes"] for r in data["rows"]}) == [r.size_bytes for r in log.rows]
    at = {r.size_bytes: r.best() for r in log.rows}
    for r in data["rows"]:
        m = at[r["size_bytes"]]
        assert r["baseline_busbw_Bps"] == m.busbw_Bps
        assert r["predicted_speedup"] == pytest.approx(m.time_s / r["time_s"])
    assert data["baseline"]["ranks"] == 8 and len(data["baseline"]["rows"]) == 11


def test_compare_baseline_with_sizes_leaves_others_empty(capsys, tmp_path):
    png = tmp_path / "ag.png"
    argv = ["compare", *SMALL, "--sizes", "1MiB,3MB", "--csv", "--plot", str(png), "--log-y"]
    assert main(argv) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert {r["algo"] for r in rows} == {"ring", "direct"} and len(rows) == 4
    by = {(r["algo"], float(r["size_bytes"])): r for r in rows}
    assert float(by["ring", 1048576.0]["baseline_busbw_Bps"]) == 34.83e9
    assert by["ring", 3e6]["baseline_busbw_Bps"] == "" and png.stat().st_size > 0


def test_compare_prints_nccl_tests_tables_that_read_back(capsys, tmp_path):
    argv = ["compare", "-t", "dgx1", "-c", "allreduce", "--algos", "ring", "--sizes",
            "1MiB,16MiB", "--nccl-tests"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    path = tmp_path / "ring.log"
    path.write_text(out)
    log = read_log(str(path))
    assert [r.size_bytes for r in log.rows] == [1 << 20, 1 << 24]
    assert [r.count for r in log.rows] == [(1 << 20) // 4, (1 << 24) // 4]  # AllReduce: all
    assert log.rows[0].redop == "sum" and log.rows[0].in_place is None
    main(["compare", "-t", "dgx1", "-c", "allreduce", "--algos", "ring", "--sizes", "1MiB",
          "--json"])  # fmt: skip
    (row,) = json.loads(capsys.readouterr().out)["rows"]
    assert log.rows[0].out_of_place.busbw_Bps == pytest.approx(row["busbw_Bps"], rel=1e-2)


@pytest.mark.parametrize(
    "extra, needle",
    [
        (["--baseline", "/nonexistent.log"], "nonexistent"),
        (["--baseline", os.path.join(DATA, "all_reduce_perf.2nodes.txt")], "from 16 ranks"),
        (["--json", "--csv"], "choose one of"),
    ],
)
def test_compare_baseline_bad_input_is_one_line(extra, needle, capsys):
    argv = ["compare", "-t", "dgx1", "-c", "allgather", "--algos", "ring", *extra]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and "\n" not in err


def test_compare_baseline_names_the_bad_line(tmp_path, capsys):
    bad = tmp_path / "bad.log"
    bad.write_text(open(AG).read().replace("151.46", "1.5.1", 1))
    assert main(["compare", "-t", "dgx1", "-c", "allgather", "--baseline", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert "line 23" in err and "'1.5.1'" in err and "\n" not in err


@pytest.mark.parametrize(
    "flags, sizes",
    [
        (["-b", "8", "-e", "128M", "-f", "16"], [8, 128, 2048, 32768, 524288, 8 << 20, 128 << 20]),
        (["-b", "1MB", "-e", "3MB", "-i", "1MB"], [1e6, 2e6, 3e6]),
        (["-b", "1K", "-e", "4K"], [1024, 2048, 4096]),  # -f defaults to 2, K is 1024
        (["-e", "64K"], [65536]),
    ],
)
def test_nccl_tests_sweep_flags(flags, sizes, capsys):
    argv = ["compare", "-t", "ring:n=4", "-c", "allgather", "--algos", "ring", *flags, "--csv"]
    assert main(argv) == 0
    got = [float(r["size_bytes"]) for r in csv.DictReader(io.StringIO(capsys.readouterr().out))]
    assert got == [float(s) for s in sizes]


@pytest.mark.parametrize(
    "flags, needle",
    [
        (["-b", "1K", "--sizes", "1MB"], "either --sizes or -b/-e/-f/-i"),
        (["-b", "1K", "-e", "1M", "-f", "2", "-i", "1K"], "-f (a factor) or -i"),
        (["-f", "2"], "need -b and/or -e"),
    ],
)
def test_nccl_tests_sweep_flags_bad_input(flags, needle, capsys):
    argv = ["compare", "-t", "ring:n=4", "-c", "allgather", "--algos", "ring", *flags]
    assert main(argv) == 2
    assert needle in capsys.readouterr().err


def test_simulate_sweeps_and_prints_nccl_tests_rows(tmp_path, capsys):
    path = str(tmp_path / "ar.json")
    assert main(["synth", "-t", "ring:n=4", "-c", "allreduce", "-a", "ring", "-o", path,
                 "-q"]) == 0  # fmt: skip
    capsys.readouterr()
    assert main(["simulate", path, "-b", "1M", "-e", "16M", "-f", "4", "--nccl-tests"]) == 0
    log = parse_log(capsys.readouterr().out)
    assert [r.size_bytes for r in log.rows] == [1 << 20, 1 << 22, 1 << 24]
    assert main(["simulate", path, "--sizes", "1MiB,16MiB", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    for got, want in zip((log.rows[0], log.rows[2]), rows):
        assert got.out_of_place.time_s == pytest.approx(want["time_s"], rel=1e-3)
    assert main(["simulate", path, "-s", "1MB", "--sizes", "2MB"]) == 2
    assert "not both" in capsys.readouterr().err
