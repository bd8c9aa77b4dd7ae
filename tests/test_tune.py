"""collsynth tune: per-size winners exported to MSCCL XML with contiguous size windows."""

from __future__ import annotations

import json
import re

import pytest

from collsynth.cli import main
from collsynth.collective import Collective
from collsynth.export import check_msccl_xml
from collsynth.report.tune import OPEN_MAX, tune
from collsynth.topology import load_topology

KB, MB, GB = 1e3, 1e6, 1e9


def _window_attrs(path: str) -> tuple[int, int]:
    text = open(path, encoding="utf-8").read()
    lo = re.search(r'minBytes="(\d+)"', text)
    hi = re.search(r'maxBytes="(\d+)"', text)
    return int(lo.group(1)), int(hi.group(1))


@pytest.mark.parametrize("dialect", ["msccl", "executor"])
def test_windows_cover_all_sizes_and_pick_the_fastest(tmp_path, dialect):
    topo = load_topology("dgx1")
    coll = Collective.make("allgather", topo.num_ranks)
    sizes = [1 * KB, 1 * MB, 1 * GB]
    res = tune(topo, coll, sizes, ["ring", "spt", "direct"], str(tmp_path), dialect=dialect)
    # windows are contiguous from 0 to open-ended and hold every size once
    assert res.windows[0].min_bytes == 0 and res.windows[-1].max_bytes is None
    for a, b in zip(res.windows, res.windows[1:]):
        assert a.max_bytes == b.min_bytes
    assert sorted(x for w in res.windows for x in w.sizes) == sizes
    for w in res.windows:
        for x, t in zip(w.sizes, w.time_s):
            # the winner is the fastest simulated schedule at that size (all three export)
            best = min(r.time_s for r in res.comparison.rows if r.size_bytes == x)
            assert t == best
            assert w.min_bytes <= x and (w.max_bytes is None or x < w.max_bytes)
        check_msccl_xml(open(w.xml, encoding="utf-8").read(), topo)
        lo, hi = _window_attrs(w.xml)
        assert lo == w.min_bytes
        if dialect == "executor":  # inclusive max, 0 = no limit
            assert hi == (0 if w.max_bytes is None else w.max_bytes - 1)
        else:  # exclusive max
            assert hi == (OPEN_MAX if w.max_bytes is None else w.max_bytes)
    summary = json.load(open(tmp_path / "tune.json"))
    assert len(summary["windows"]) == len(res.windows)


def test_unexportable_pipeline_is_remade_shallower(tmp_path):
    # ForestColl at 1 GB on DGX-1 (k = 2 to keep it small) pipelines too deeply for MSCCL's
    # step limits; tune
    # re-synthesizes it with a shallower pipeline (and simulates that variant honestly)
    topo = load_topology("dgx1")
    coll = Collective.make("allgather", topo.num_ranks)
    res = tune(
        topo, coll, [1 * GB], ["forestcoll"], str(tmp_path), options={"forestcoll": {"k": "2"}}
    )
    (w,) = res.windows
    assert w.algo == "forestcoll" and "re-made with pipeline=" in w.note
    original = [r for r in res.comparison.rows if r.algo == "forestcoll"][0]
    assert w.time_s[0] >= original.time_s * (1 - 1e-9)
    check_msccl_xml(open(w.xml, encoding="utf-8").read(), topo)


def test_cli_tune_and_bad_input(tmp_path, capsys):
    out_dir = tmp_path / "t"
    rc = main(
        [
            "tune",
            "-t",
            "ring:n=4",
            "-c",
            "allgather",
            "--algos",
            "ring,direct",
            "--sizes",
            "1KB,1MB",
            "-o",
            str(out_dir),
            "--json",
        ]
    )
    out, err = capsys.readouterr()
    assert rc == 0, err
    data = json.loads(out)
    assert data["windows"] and (out_dir / "tune.json").exists()
    rc = main(["tune", "-t", "ring:n=4", "-c", "allgather", "--sizes", "0", "-o", str(out_dir)])
    out, err = capsys.readouterr()
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "positive" in err
    rc = main(
        ["tune", "-t", "ring:n=4", "-c", "allgather", "--algos", "nosuch", "-o", str(out_dir)]
    )
    out, err = capsys.readouterr()
    assert rc == 2 and "unknown algorithm" in err


def test_tune_mscclpp_plans_with_inclusive_windows(tmp_path, capsys):
    from collsynth.export.mscclpp_check import check_mscclpp_plan

    out = tmp_path / "t"
    rc = main(["tune", "-t", "ring:n=4", "-c", "allreduce", "--sizes", "1KB,1MB,1GB",
               "--algos", "ring,tree,rd", "--format", "mscclpp", "-o", str(out), "--json"])  # fmt: skip
    got, err = capsys.readouterr()
    assert rc == 0, err
    windows = json.loads(got)["windows"]
    assert windows[0]["min_bytes"] == 0 and windows[-1]["max_bytes"] is None
    for w in windows:
        assert w["xml"].endswith(".plan.json")
        text = open(w["xml"], encoding="utf-8").read()
        assert check_mscclpp_plan(text).ok
        doc = json.loads(text)
        assert doc["min_message_size"] == w["min_bytes"]
        want = 2**64 - 1 if w["max_bytes"] is None else w["max_bytes"] - 1
        assert doc["max_message_size"] == want
