"""The bench suite registry: every suite is listed and dispatched; the module suites' ``--only``
filters by case label and merges the rows it re-runs into the existing results file."""

from __future__ import annotations

import json

import pytest

from collsynth import bench
from collsynth.bench import common, teccl
from collsynth.cli import main
from collsynth.errors import CollsynthError


def test_every_suite_is_listed():
    assert set(bench.SUITES) == {
        "quick",
        "paper",
        "fabrics",
        "scalability",
        "quality",
        "sim",
        "teccl",
        "mteg",
        "syccl",
        "scale_ccl",
        "testbed",
        "testbed_sim",
        "sweep",
        "compact",
    }


def test_scale_ccl_only_takes_replan_or_quick(tmp_path):
    with pytest.raises(CollsynthError, match="takes replan or quick"):
        bench.run_suite("scale_ccl", str(tmp_path), only="nope")
    with pytest.raises(CollsynthError, match="needs an earlier full run"):
        bench.run_suite("scale_ccl", str(tmp_path), only="replan")


def test_unknown_suite_and_unmatched_only(tmp_path):
    with pytest.raises(CollsynthError, match="unknown bench suite"):
        bench.run_suite("nosuch", str(tmp_path))
    for suite in ("teccl", "mteg", "syccl"):
        with pytest.raises(CollsynthError, match="matches --only"):
            bench.run_suite(suite, str(tmp_path), only="no such case")
    assert list(tmp_path.iterdir()) == []


def test_cli_reports_an_unmatched_only(tmp_path, capsys):
    assert main(["bench", "teccl", "-o", str(tmp_path), "--only", "nope"]) == 2
    assert "matches --only" in capsys.readouterr().err


def test_merge_rows_keeps_other_cases_in_case_order():
    old = [{"k": "a", "v": 0}, {"k": "b", "v": 0}, {"k": "b", "v": 1}, {"k": "c", "v": 0}]
    new = [{"k": "b", "v": 9}]
    got = common.merge_rows(old, new, {"b"}, lambda r: r["k"], ["a", "b", "c"])
    assert got == [{"k": "a", "v": 0}, {"k": "b", "v": 9}, {"k": "c", "v": 0}]


def _fake_row(label, topo, kind, size, epoch, time_limit, extra=None, *_, compare=False, **__):
    """Stands in for ``teccl.run_one``: a row with the case's facts, nothing solved."""
    more = {"best_other": "ring", "best_other_s": 2e-6, "ratio_to_best": 0.5} if compare else {}
    return {
        **more,
        "system": label,
        "topology": topo.name,
        "collective": kind,
        "size_bytes": size,
        "size": f"{size:g}",
        "epoch": epoch,
        "mode": "milp",
        "status": "optimal",
        "gap": 0.0,
        "epochs_required": 1,
        "lower_bound_epochs": 1,
        "tau_s": 1e-6,
        "estimate_s": 1e-6,
        "sim_s": 1e-6,
        "sim_agrees": True,
        "algbw_Bps": 1e9,
        "ratio_to_bound": 1.0,
        "spt_ratio_to_bound": 1.0,
        "solver_time_s": time_limit,
        "columns": 1,
        "synth_wall_s": 1.0,
        **(extra or {}),
    }


def test_teccl_only_reruns_matching_cases_and_keeps_the_rest(tmp_path, monkeypatch):
    monkeypatch.setattr(teccl, "run_one", _fake_row)
    res = bench.run_suite("teccl", str(tmp_path), only="random alpha")
    assert [r["note"] for r in res["rows"]] == [f"(random alpha, seed {s})" for s in (1, 2, 3)]
    first = json.loads((tmp_path / "teccl.json").read_text())
    assert set(first) == {"time_limit_s", "wall_s", "rows"}
    assert (tmp_path / "teccl.md").read_text().startswith("# TE-CCL epoch MILP / LP")
    res = teccl.run_suite(str(tmp_path), only="MI250", time_limit=3.0)
    rows = json.loads((tmp_path / "teccl.json").read_text())["rows"]
    # the MI250 rows come in the suite's order (before the random-alpha rows); others kept
    assert [r["system"] for r in rows] == ["MI250 1ch"] * 3 + ["DGX-1"] * 3
    assert rows[3:] == first["rows"]
    assert res["summary"]["only"] == {"pattern": "MI250", "cases_run": 1}
    assert res["summary"]["rows"] == 6


def test_teccl_target_rows_get_their_own_table(tmp_path, monkeypatch):
    seen = []

    def fake(*a, **k):
        seen.append((a[0], a[5], k["compare"]))
        return _fake_row(*a, **k)

    monkeypatch.setattr(teccl, "run_one", fake)
    res = teccl.run_suite(str(tmp_path), only="target")
    assert len(res["rows"]) == len(teccl.TARGETS)
    assert {x[1:] for x in seen} == {(teccl.TARGET_TIME_LIMIT, True)}
    md = (tmp_path / "teccl.md").read_text()
    head, _, table = md.partition("## Large cases")
    assert table.count("| ring 2us | 0.5 |") == len(res["rows"])
    assert "mesh 8x5" not in head


def test_module_suites_refuse_a_cluster(tmp_path):
    from collsynth.parallel import Pool

    with pytest.raises(CollsynthError, match="runs in this process only"):
        bench.run_suite("teccl", str(tmp_path), pool=Pool(2))


def test_harness_rows_on_a_local_cluster_match_serial(tmp_path):
    from collsynth.bench import sweep
    from collsynth.bench.harness import Case, run_rows
    from collsynth.parallel import Pool

    todo = [Case("ring:n=4", "allgather", a, (1e3, 1e9)) for a in ("ring", "spt", "direct")]
    seen: list[str] = []
    on = run_rows(todo, 1, seen.append, Pool(2))
    assert sweep.results_only(on) == sweep.results_only(run_rows(todo, 1))
    assert sorted(seen)[-1].startswith("3/3 done")


@pytest.mark.slow
def test_scale_suite_runs_one_case_in_a_child_process(tmp_path):
    """``bench scalability --only 32:forestcoll``: the case runs in a fresh process, its row and the
    target table are written, and the sweep row says where its figures come from."""
    out = bench.run_suite("scalability", str(tmp_path), only="32:forestcoll")
    assert out["summary"]["only"]["cases_run"] == 1
    data = json.loads((tmp_path / "scalability.json").read_text())
    (row,) = data["rows"]
    assert row["case"] == "32:forestcoll" and "error" not in row, row
    assert row["ops"] > 0 and 0.9 < row["x_bound"] <= 1.0 and row["synth_s"] > 0
    assert row["order_s"] > 0 and "shared" in row["model"]  # the realized model, ordered
    md = (tmp_path / "scalability.md").read_text()
    assert "| 32:forestcoll | 32:forestcoll | 36.5 s, 0.987 of the bound |" in md
    assert "no sweep.json" in md
    assert "s choosing link orders)" in md and "of the bound realized" in md


def test_scalability_table_rows():
    """Every kind of ``bench scalability`` row becomes one table line with its verdict."""
    from collsynth.bench import scalability

    sim = {"hops_per_s": 6e6, "wall_s": 0.4}
    rows = [
        {"case": "4096:dgx_a100:nodes=512:allgather", "wall_s": 90.0, "peak_bytes": 3 * 2**30,
         "synth_s": 70.0, "verify_s": 6.0, "write_s": 1.0, "sim_s": 4.0, "ops": 754790400,
         "reps": 1474200, "group": 512, "k": 1, "pipeline": 45, "file_bytes": 14 * 2**20,
         "x_bound": 0.99, "holds": True},
        {"case": "4096:h800_rails:servers=512:allgather", "wall_s": 300.0,
         "peak_bytes": 6 * 2**30, "synth_s": 200.0, "verify_s": 60.0, "write_s": 10.0,
         "ops": 16773120, "x_bound": 0.998, "holds": False},  # (a row from before the form)
        {"case": "group:fat_tree:k=26:allgather", "wall_s": 170.0, "peak_bytes": 3 * 2**30,
         "synth_s": 144.0, "verify_s": 5.6, "write_s": 1.0, "sim_s": 10.3, "ops": 19301042,
         "reps": 742361, "group": 26, "k": 1, "pipeline": 1, "file_bytes": 9 * 2**20,
         "x_bound": 0.594, "holds": True},
        {"case": "1024:e2e", "wall_s": 9.5, "peak_bytes": 2**29, "synth_s": 7.0,
         "verify_s": 1.5, "holds": True},
        {"case": "1024:sim", "plan": sim, "fcfs": sim, "holds": True},
        {"case": "jit", "commands": {"simulate": {"cold_s": 9.0, "warm_s": 2.0, "paid_s": 7.0}},
         "worst_paid_s": 7.0, "holds": True},
        {"case": "wan", "median_s": 0.03, "holds": True},
        {"case": "32:forestcoll", "error": "exit 1: boom"},
    ]  # fmt: skip
    md = scalability.to_markdown(
        {
            "machine": {"cpus": 2, "python": "3.11"},
            "rows": rows,
            "sweep": {
                "cases": 100,
                "serial_wall_s": 100.0,
                "dask_1_wall_s": 110.0,
                "dask_wall_s": 70.0,
                "speedup_1": 0.91,
                "speedup": 1.43,
                "same_results": True,
            },
        }  # fmt: skip
    )
    lines = [ln for ln in md.splitlines() if ln.startswith("| ") and "---" not in ln]
    assert len(lines) == 1 + len(rows) + 1 + 1 + 1  # header, rows, sweep, jit header + row
    assert "| 4096 | dgx_a100:nodes=512:allgather | explicit IR: 93-270 s" in md
    assert "0.990 of the bound, realized | <= 2 min" in md and "6.00 M hops/s" in md
    assert "1,474,200 representatives x 512 = 754,790,400 ops, k=1, P=45, 14 MiB" in md
    assert "16,773,120 ops); 0.998 of the bound |" in md
    assert "| group | fat_tree:k=26:allgather | - | 170 s, 3.00 GiB" in md
    assert "0.594 of the bound, realized | <= 10 min and <= 8 GiB" in md
    assert "failed: exit 1: boom" in md and md.count("| yes |") == 7
    assert "2 workers 70.0 s (1.43x)" in md


@pytest.mark.slow
def test_bench_sim_runs_the_simulate_command_per_model(tmp_path, monkeypatch):
    """``bench sim`` on a small schedule (the real cases are 1,024 and 4,096 GPUs): each case
    runs ``collsynth simulate`` in a fresh process, takes medians of the command's wall time
    and of its own ``sim_wall_s``, and writes the tables; ``--only`` keeps the other rows."""
    from collsynth.bench import sim

    small = sim.Schedule("1024", "dgx1", "allgather", "1MB")
    big = sim.Schedule("4096", "ring:n=4", "allreduce", "1MB", library=True)
    # the compact rows: a symmetric schedule (ring:n=8's eight rotations), written compact
    compact = sim.Schedule("1024c", "ring:n=8", "allreduce", "1MB", compact="synth")
    big_compact = sim.Schedule("4096c", "ring:n=8", "allreduce", "1MB", compact="synth")
    monkeypatch.setattr(sim, "SCHEDULES", {"1024": small, "4096": big, "1024c": compact,
                                           "4096c": big_compact})  # fmt: skip
    monkeypatch.setattr(sim, "MIN_RUNS", 2)
    out = tmp_path / "results"
    got = sim.run_suite(str(out), repeat=1)
    assert got["summary"]["rows"] == len(sim.CASES)
    data = json.loads((out / "sim.json").read_text())
    rows = {r["case"]: r for r in data["rows"]}
    assert set(rows) == set(sim.CASES)
    for label, (_, model, fixed) in sim.CASES.items():
        r = rows[label]
        assert "error" not in r, r
        assert r["model"] == model and r["runs"] == (fixed or 2)
        assert r["hops"] > 0 and 0 < r["sim_wall_s"] < r["command_wall_s"]
        if "compact" in label:  # simulated on its quotient by the ring's rotations
            assert r["quotient"] == 8
        else:
            assert r["quotient"] == 1  # DGX-1's schedule is simulated hop by hop
        assert r["sim_hops_per_s"] == pytest.approx(r["hops"] / r["sim_wall_s"])
        assert r["peak_bytes"] > 10 * 2**20
    md = (out / "sim.md").read_text()
    assert "| 1024:fair | realized |" in md and "| 4096:allreduce | realized |" in md
    before = rows["1024:plan"]
    sim.run_suite(str(out), repeat=1, only="fcfs")
    again = {r["case"]: r for r in json.loads((out / "sim.json").read_text())["rows"]}
    assert list(again) == list(sim.CASES) and again["1024:plan"] == before


def test_compact_table_says_what_holds():
    """``bench compact``: a row holds when both verifiers accept, every planted defect is
    caught by both with the same rule and the simulations agree; rows without a compact form
    say why."""
    from collsynth.bench import compact

    good = {"fabric": "ring", "collective": "allgather", "algorithm": "ring", "group": 8,
            "representatives": 14, "ops": 112, "verified": True, "agree": True,
            "planted": [{"defect": "chunk moved", "compact": "data-not-held",
                         "explicit": "data-not-held", "caught": True, "agree": True}],
            "sim_rel_diff": 2e-16}  # fmt: skip
    missed = dict(good, algorithm="spt", planted=[dict(good["planted"][0], agree=False)])
    off = dict(good, algorithm="rd", sim_rel_diff=1e-6)
    redundant = dict(good["planted"][0], compact=None, explicit=None, caught=False)
    assert compact.holds(dict(good, planted=[redundant]))  # both accept it: agreement
    none = {"fabric": "ring", "collective": "allgather", "algorithm": "direct",
            "no_compact_form": "dependencies are not symmetric"}  # fmt: skip
    assert compact.holds(good) and not compact.holds(missed) and not compact.holds(off)
    md = compact.to_markdown({"machine": {"cpus": 2}, "size_bytes": 1e6,
                              "rows": [good, missed, off, none]})  # fmt: skip
    assert "**3 schedules have a compact form, on 1 fabrics; 1 of 3 hold**" in md
    assert (
        "| ring | allgather | ring | 8 | 14 / 112 | both accept | 1 / 0 / 1 (data-not-held) |" in md
    )
    assert "| ring | allgather | direct | dependencies are not symmetric |" in md
