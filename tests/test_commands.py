"""The simulate, bound, compare and bench commands (their command-line contract)."""

import json
import os

import pytest

from collsynth.cli import main


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_json(out):
    lines = [l for l in out.splitlines() if l.strip()]
    assert len(lines) == 1
    return json.loads(lines[0])


@pytest.fixture
def ring_schedule(tmp_path, capsys):
    path = str(tmp_path / "ring.json")
    code, _, err = run(
        capsys,
        "synth",
        "-t",
        "ring:n=4,bw=10GB/s,alpha=1us",
        "-c",
        "allgather",
        "--algo",
        "ring",
        "--size",
        "4MB",
        "-o",
        path,
    )
    assert code == 0, err
    return path


def test_simulate_json_keys_and_value(ring_schedule, capsys):
    code, out, _ = run(capsys, "simulate", ring_schedule, "--size", "4MB", "--json")
    assert code == 0
    d = one_json(out)
    for key in ("time_s", "algbw_Bps", "busbw_Bps", "per_rank_time_s"):
        assert key in d
    assert len(d["per_rank_time_s"]) == 4
    assert d["algbw_Bps"] == pytest.approx(4e6 / d["time_s"])
    assert d["busbw_Bps"] == pytest.approx(d["algbw_Bps"] * 3 / 4)
    # the size recorded by synth --size is the default
    code, out2, _ = run(capsys, "simulate", ring_schedule, "--json")
    assert one_json(out2)["time_s"] == pytest.approx(d["time_s"])


def test_simulate_op_cost(ring_schedule, capsys):
    code, out, _ = run(capsys, "simulate", ring_schedule, "--size", "64KB", "--json")
    plain = one_json(out)
    code, out, _ = run(
        capsys, "simulate", ring_schedule, "--size", "64KB", "--op-cost", "2us", "--json"
    )
    assert code == 0
    costly = one_json(out)
    assert plain["op_cost_s"] == 0 and costly["op_cost_s"] == pytest.approx(2e-6)
    assert costly["time_s"] > plain["time_s"] + 2e-6  # at least one issue on the path
    code, out, _ = run(capsys, "simulate", ring_schedule, "-b", "1K", "-e", "4K", "--op-cost",
                       "1us", "--csv")  # fmt: skip
    assert code == 0 and len(out.strip().splitlines()) == 4


def test_simulate_gantt(ring_schedule, tmp_path, capsys):
    png = str(tmp_path / "g.png")
    code, out, _ = run(capsys, "simulate", ring_schedule, "--size", "1MB", "--gantt", png)
    assert code == 0 and "time" in out
    assert os.path.getsize(png) > 5000


def test_simulate_bad_inputs(ring_schedule, tmp_path, capsys):
    code, _, err = run(capsys, "simulate", ring_schedule, "--size", "-4MB")
    assert code == 2 and len(err.strip().splitlines()) == 1
    code, _, err = run(capsys, "simulate", ring_schedule, "--size", "4MB", "--reduce-bw", "fast")
    assert code == 2 and len(err.strip().splitlines()) == 1
    code, _, err = run(capsys, "simulate", ring_schedule, "--size", "4MB", "--op-cost=-1us")
    assert code == 2 and "--op-cost" in err and len(err.strip().splitlines()) == 1


def test_bound_json(capsys):
    code, out, _ = run(
        capsys,
        "bound",
        "--topology",
        "dgx_a100:nodes=2",
        "--collective",
        "allgather",
        "--size",
        "1GB",
        "--json",
    )
    assert code == 0
    d = one_json(out)
    assert {"time_s", "algbw_Bps", "kind"} <= set(d)
    assert d["kind"] == "cut"  # the windowed cut, a hair above one GPU's ingress (test_bound)
    assert {b["kind"] for b in d["bounds"]} >= {"ingress", "cut"}
    assert d["algbw_Bps"] == pytest.approx(1e9 / d["time_s"])
    code, out, _ = run(
        capsys, "bound", "-t", "ring:n=4", "-c", "broadcast", "--root", "2", "-s", "1MB"
    )
    assert code == 0 and "no schedule beats" in out


def test_compare_json_rows_and_plot(tmp_path, capsys):
    png = str(tmp_path / "cmp.png")
    code, out, err = run(
        capsys,
        "compare",
        "--topology",
        "ndv2:chassis=2",
        "--collective",
        "allgather",
        "--sizes",
        "1KB,1MB,1GB",
        "--algos",
        "all",
        "--plot",
        png,
        "--json",
    )
    assert code == 0, err
    d = one_json(out)
    rows = d["rows"]
    algos = {r["algo"] for r in rows}
    assert {"ring", "spt"} <= algos
    for r in rows:
        for key in (
            "algo",
            "size_bytes",
            "time_s",
            "algbw_Bps",
            "busbw_Bps",
            "bound_time_s",
            "timing",
        ):
            assert key in r
        assert r["time_s"] >= r["bound_time_s"] * (1 - 1e-9)
    assert len(rows) == 3 * len(algos)
    assert os.path.getsize(png) > 10000


def test_compare_best_picks_fastest(capsys):
    code, out, _ = run(
        capsys,
        "compare",
        "-t",
        "dgx1",
        "-c",
        "allreduce",
        "--sizes",
        "1KB,1GB",
        "--algos",
        "all",
        "--json",
    )
    rows = one_json(out)["rows"]
    code, out, _ = run(
        capsys,
        "compare",
        "-t",
        "dgx1",
        "-c",
        "allreduce",
        "--sizes",
        "1KB,1GB",
        "--algos",
        "best",
        "--json",
    )
    best = one_json(out)["rows"]
    assert len(best) == 2
    for b in best:
        same = [r for r in rows if r["size_bytes"] == b["size_bytes"]]
        assert b["time_s"] == pytest.approx(min(r["time_s"] for r in same))


def test_compare_errors(capsys):
    code, _, err = run(capsys, "compare", "-t", "dgx1", "-c", "allgather", "--algos", "nope")
    assert code == 2 and "unknown algorithm" in err
    code, _, err = run(capsys, "compare", "-t", "dgx1", "-c", "allgather", "--sizes", "big")
    assert code == 2 and len(err.strip().splitlines()) == 1


def test_bench_quick_writes_results(tmp_path, capsys, monkeypatch):
    from collsynth.bench import harness as benchmark

    monkeypatch.setitem(
        benchmark.SUITES,
        "tiny",
        lambda: [
            benchmark.Case("ring:n=4", "allgather", "ring", (1e6,)),
            benchmark.Case("ring:n=4", "allgather", "spt", (1e6, 1e9)),
        ],
    )
    code, out, _ = run(capsys, "bench", "tiny", "--repeat", "1", "-o", str(tmp_path), "--json")
    assert code == 0
    d = one_json(out)
    assert d["summary"]["rows"] == 3
    saved = json.loads((tmp_path / "tiny.json").read_text())
    assert saved["rows"][0]["sim_hops_per_s"] > 0
    assert (tmp_path / "tiny.md").read_text().startswith("# bench suite")
    code, _, err = run(capsys, "bench", "nosuch", "-o", str(tmp_path))
    assert code == 2
    # --only re-runs the matching cases and keeps the other rows, in suite order
    first = saved["rows"][0]
    code, out, _ = run(
        capsys, "bench", "tiny", "--repeat", "1", "-o", str(tmp_path), "--json", "--only", "spt"
    )
    assert code == 0
    again = json.loads((tmp_path / "tiny.json").read_text())
    assert [r["algo"] for r in again["rows"]] == ["ring", "spt", "spt"]
    assert again["rows"][0] == first  # the ring row was kept as it was
    assert again["summary"]["only"] == {"pattern": "spt", "cases_run": 1}
    code, _, err = run(capsys, "bench", "tiny", "-o", str(tmp_path), "--only", "nope")
    assert code == 2 and "matches --only" in err


def test_export_msccl_and_check_xml(tmp_path, capsys):
    sched = str(tmp_path / "ar.json")
    xml = str(tmp_path / "ar.xml")
    assert (
        run(capsys, "synth", "-t", "dgx1", "-c", "allreduce", "--algo", "spt", "-o", sched)[0] == 0
    )
    code, out, err = run(
        capsys,
        "export",
        "msccl",
        sched,
        "--dialect",
        "executor",
        "--min-bytes",
        "1KB",
        "--max-bytes",
        "1GB",
        "-o",
        xml,
        "--json",
    )
    assert code == 0, err
    info = one_json(out)
    assert info["checked"] and info["ngpus"] == 8
    text = open(xml).read()
    assert not text.startswith("<?xml") and "\t" not in text and 'outofplace="1"' in text
    assert 'minBytes="1000"' in text and 'maxBytes="1000000000"' in text
    code, out, _ = run(capsys, "check-xml", xml, "--topology", "dgx1", "--json")
    assert code == 0 and one_json(out)["ok"]
    # a planted defect: a dependency target that never publishes its completion
    broken = str(tmp_path / "broken.xml")
    with open(broken, "w") as f:
        f.write(text.replace('hasdep="1"', 'hasdep="0"', 1))
    code, _, err = run(capsys, "check-xml", broken)
    assert code == 2 and "hasdep" in err and len(err.strip().splitlines()) == 1
    code, _, err = run(capsys, "check-xml", str(tmp_path / "missing.xml"))
    assert code == 2 and "not found" in err
