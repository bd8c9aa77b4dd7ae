"""Tests of the command line: outputs, round trips, the one-line error contract and a fuzz of
malformed topology and schedule files (never a traceback, never exit status 1)."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collsynth.cli import main
from collsynth.collective import Collective
from collsynth.schedule.io import save_schedule, schedule_to_dict
from collsynth.schedule.ir import ScheduleBuilder
from collsynth.schedule.trees import Tree, TreeForm, lower
from collsynth.synth import synthesize
from collsynth.topology import TopologyBuilder, load_topology
from collsynth.topology.io import topology_to_dict

GB = 1e9
US = 1e-6


# ------------------------------------------------------------------------------ helpers
def run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def assert_one_line_error(rc: int, err: str, expect: str | None = None) -> str:
    assert rc == 2, err
    lines = err.splitlines()
    assert len(lines) == 1, err
    line = lines[0]
    assert line.startswith("collsynth: error: ") and line.strip() != "collsynth: error:"
    assert "Traceback" not in err and "internal error" not in err
    if expect is not None:
        assert expect in line, line
    return line


def assert_clean_outcome(rc: int, out: str, err: str) -> None:
    """The fuzz contract: success (exit 0, silent stderr) or one clean error line (exit 2)."""
    assert "Traceback" not in err and "internal error" not in err, err
    if rc == 0:
        assert err == "" and out.strip()
    else:
        assert_one_line_error(rc, err)


def one_json(out: str) -> dict:
    assert out.endswith("\n") and out.count("\n") == 1, out[:200]
    obj = json.loads(out)
    assert isinstance(obj, dict)
    return obj


def small_fabric():
    """Four GPUs on two switches joined by two routers (every node kind appears)."""
    b = TopologyBuilder("fabric", meta={"source": "test", "notes": "two sites"})
    for i in range(4):
        b.compute(f"g{i}", site=i // 2)
    b.switch("sw0")
    b.switch("sw1")
    b.router("r0")
    b.router("r1")
    for i in range(4):
        b.bilink(f"g{i}", f"sw{i // 2}", 25 * GB, 0.5 * US, "nvswitch")
    b.bilink("sw0", "r0", 12.5 * GB, 1 * US, "eth", lanes=2)
    b.bilink("sw1", "r1", 12.5 * GB, 1 * US, "eth", lanes=2)
    b.bilink("r0", "r1", 5 * GB, 2e-3, "wan")
    b.bilink("g1", "g2", 50 * GB, 0.7 * US, "nvlink")
    return b.build()


# ------------------------------------------------------------------------------ topo show
@pytest.mark.parametrize(
    "spec, ranks, switches", [("ring:n=4", 4, 0), ("dgx1", 8, 0), ("ring:n=6,bw=10GB/s", 6, 0)]
)
def test_topo_show_json(capsys, spec, ranks, switches):
    rc, out, err = run(capsys, "topo", "show", spec, "--json")
    assert rc == 0 and err == ""
    info = one_json(out)
    for key in (
        "name",
        "fingerprint",
        "compute_nodes",
        "switches",
        "routers",
        "links",
        "per_node",
        "hop_diameter",
        "links_by_class",
        "total_link_bw",
    ):
        assert key in info
    assert info["compute_nodes"] == ranks and info["switches"] == switches
    assert info["routers"] == 0
    assert len(info["per_node"]) == ranks
    for r, row in enumerate(info["per_node"]):
        assert row["rank"] == r and row["in_bw"] > 0 and row["out_bw"] > 0
    # no switches: every link leaves and enters a compute node
    assert sum(r["out_bw"] for r in info["per_node"]) == pytest.approx(info["total_link_bw"])
    assert sum(r["in_bw"] for r in info["per_node"]) == pytest.approx(info["total_link_bw"])


def test_topo_show_json_ring_bandwidths(capsys):
    info = one_json(run(capsys, "topo", "show", "ring:n=5,bw=200Gb/s", "--json")[1])
    assert info["links"] == 10 and info["hop_diameter"] == 2
    for row in info["per_node"]:
        assert row["out_bw"] == pytest.approx(2 * 25e9) and row["in_bw"] == pytest.approx(50e9)


def test_topo_show_file_with_switches_and_routers(capsys, tmp_path):
    topo = small_fabric()
    path = tmp_path / "fabric.json"
    path.write_text(json.dumps(topology_to_dict(topo)))
    info = one_json(run(capsys, "topo", "show", str(path), "--json")[1])
    assert (info["compute_nodes"], info["switches"], info["routers"]) == (4, 2, 2)
    assert info["fingerprint"] == topo.fingerprint
    g1 = info["per_node"][1]
    assert g1["out_bw"] == pytest.approx(75e9) and g1["out_links"] == 2
    rc, out, err = run(capsys, "topo", "show", str(path))
    assert rc == 0 and err == "" and "fabric" in out and "g3" in out


def test_topo_show_text_truncates_rows(capsys):
    rc, out, err = run(capsys, "topo", "show", "ring:n=12", "--max-rows", "3")
    assert rc == 0 and "9 more" in out


@pytest.mark.parametrize(
    "ext, fmt",
    [(".json", None), (".yaml", None), (".yml", None), (".txt", "yaml"), (".data", "json")],
)
@pytest.mark.parametrize("spec", ["dgx1", "ring:n=3,alpha=1.5us", "FILE"])
def test_topo_export_round_trip(capsys, tmp_path, ext, fmt, spec):
    if spec == "FILE":
        src = tmp_path / "src.yaml"
        src.write_text(yaml.safe_dump(topology_to_dict(small_fabric())))
        spec = str(src)
    before = one_json(run(capsys, "topo", "show", spec, "--json")[1])
    out_path = str(tmp_path / f"exported{ext}")
    argv = ["topo", "export", spec, "-o", out_path, "--json"]
    if fmt:
        argv += ["--format", fmt]
    rc, out, err = run(capsys, *argv)
    assert rc == 0 and err == ""
    info = one_json(out)
    assert info["fingerprint"] == before["fingerprint"] and info["output"] == out_path
    text = open(out_path, encoding="utf-8").read()
    if (fmt or ext.lstrip(".")) in ("yaml", "yml"):
        data = yaml.safe_load(text)
    else:
        data = json.loads(text)
    assert data["format"] == "collsynth-topology"
    if ext in (".json", ".yaml", ".yml"):
        after = one_json(run(capsys, "topo", "show", out_path, "--json")[1])
        assert after["fingerprint"] == before["fingerprint"]
        assert after["per_node"] == before["per_node"]
        assert after["name"] == before["name"]


def test_topo_export_text_message(capsys, tmp_path):
    rc, out, err = run(capsys, "topo", "export", "ring:n=4", "-o", str(tmp_path / "r.json"))
    assert rc == 0 and out.startswith("wrote ") and "4 compute nodes" in out


# ------------------------------------------------------------------------------ synth + verify
@pytest.mark.parametrize(
    "collective, extra",
    [
        ("allgather", []),
        ("reducescatter", ["--chunks", "2"]),
        ("allreduce", []),
        ("broadcast", ["--root", "2"]),
        ("reduce", ["--root", "1"]),
        ("alltoall", []),
        ("gather", []),
        ("scatter", ["--chunks", "3"]),
        ("ar", []),
    ],
)
def test_synth_then_verify(capsys, tmp_path, collective, extra):
    path = str(tmp_path / "s.json")
    rc, out, err = run(
        capsys, "synth", "-t", "ring:n=5", "-c", collective, "-o", path, "--json", *extra
    )
    assert rc == 0 and err == ""
    info = one_json(out)
    assert info["verified"] is True and info["ops"] > 0 and info["output"] == path
    rc, out, err = run(capsys, "verify", path)
    assert rc == 0 and err == "" and out.startswith("OK: ") and out.count("\n") == 1
    rc, out, err = run(capsys, "verify", path, "--json")
    assert rc == 0 and err == ""
    rep = one_json(out)
    assert rep["ok"] is True and rep["ops"] == info["ops"] and rep["error"] is None
    # the matching topology is accepted
    rc, out, err = run(capsys, "verify", path, "--topology", "ring:n=5")
    assert rc == 0 and err == ""


def test_synth_records_size(capsys, tmp_path):
    path = str(tmp_path / "s.json")
    rc, out, err = run(
        capsys, "synth", "-t", "dgx1", "-c", "allgather", "--size", "4MiB", "-o", path
    )
    assert rc == 0 and err == "" and "verified" in out
    assert json.load(open(path))["size"] == 4 * 2**20


@pytest.mark.parametrize(
    "algo, flag, value, key",
    [
        ("mteg", "--slot", "1us", "slot"),
        ("scale", "--subchunks", "4", "subchunks"),
        ("syccl", "--workers", "1", "workers"),
        ("forestcoll", "--k", "1", "k"),
    ],
)
def test_synth_option_shorthands(capsys, tmp_path, algo, flag, value, key):
    """``--slot``, ``--subchunks``, ``--workers``, ``--k`` are ``--opt KEY=VALUE``: the same
    schedule, and refused with one line by an algorithm without that option."""
    topo = {
        "mteg": "dgx1",
        "scale": "wan:dcs=2,gpus=2",
        "syccl": "h800_rails:servers=2",
        "forestcoll": "dgx1",
    }[algo]
    a, b = str(tmp_path / "a.json"), str(tmp_path / "b.json")
    assert (
        run(capsys, "synth", "-t", topo, "-c", "allgather", "--algo", algo, flag, value, "-o", a)[0]
        == 0
    )
    assert (
        run(
            capsys,
            "synth",
            "-t",
            topo,
            "-c",
            "allgather",
            "--algo",
            algo,
            "--opt",
            f"{key}={value}",
            "-o",
            b,
        )[0]
        == 0
    )
    da, db = json.load(open(a)), json.load(open(b))
    da.get("meta", {}).pop("timing", None)
    db.get("meta", {}).pop("timing", None)
    assert da["ops"] == db["ops"]
    rc, _, err = run(
        capsys, "synth", "-t", "dgx1", "-c", "allgather", "--algo", "ring", flag, value, "-o", a
    )
    assert rc == 2 and err.count("\n") == 1 and f"no option '{key}'" in err


@pytest.mark.parametrize(
    "demand",
    [
        [[0, 1, 0, 0], [0, 0, 2, 0], [0, 0, 0, 0], [1, 0, 0, 0]],
        {"chunks": [[0, [1, 2, 3]], [3, [1]]]},
    ],
)
def test_synth_custom_demand(capsys, tmp_path, demand):
    dpath = tmp_path / "demand.json"
    dpath.write_text(json.dumps(demand))
    path = str(tmp_path / "s.json")
    rc, out, err = run(
        capsys, "synth", "-t", "ring:n=4", "-c", "custom", "--demand", str(dpath), "-o", path
    )
    assert rc == 0 and err == ""
    assert run(capsys, "verify", path)[0] == 0


def test_verify_json_of_a_broken_schedule(capsys, tmp_path):
    s = synthesize("spt", load_topology("ring:n=4"), Collective.make("allgather", 4))
    d = schedule_to_dict(s)
    d["ops"]["deps"] = [[] for _ in range(d["ops"]["count"])]  # relays lose their inputs
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(d))
    rc, out, err = run(capsys, "verify", str(path), "--json")
    rep = one_json(out)
    assert rep["ok"] is False and rep["error_check"] == "data-not-held"
    assert isinstance(rep["error_op"], int) and f"op {rep['error_op']}" in rep["error"]
    assert_one_line_error(rc, err, "data-not-held")
    rc, out, err = run(capsys, "verify", str(path))
    assert out == ""
    line = assert_one_line_error(rc, err, "data-not-held: op ")
    assert str(path) in line


def test_list_json(capsys):
    rc, out, err = run(capsys, "list", "--json")
    assert rc == 0 and err == ""
    data = one_json(out)
    assert {"ring", "dgx1"} <= set(data["topologies"])
    assert "n" in data["topologies"]["ring"]["params"]
    assert data["topologies"]["ring"]["params"]["n"]["kind"] == "int"
    assert "spt" in data["algorithms"]
    assert "allreduce" in data["algorithms"]["spt"]["collectives"]
    assert set(data["collectives"]) >= {
        "allgather",
        "reducescatter",
        "allreduce",
        "broadcast",
        "reduce",
        "alltoall",
        "custom",
    }


def test_list_text(capsys):
    rc, out, err = run(capsys, "list")
    assert rc == 0 and err == "" and "ring" in out and "spt" in out


def test_demo_json(capsys, tmp_path):
    rc, out, err = run(capsys, "demo", "--json", "-o", str(tmp_path / "demo"))
    assert rc == 0 and err == ""
    data = one_json(out)
    rows = data["rows"]
    assert len(rows) >= 2
    assert all(r["verified"] is True and r["ops"] > 0 for r in rows)
    assert {r["collective"] for r in rows} == {"allgather", "allreduce"}
    # the demo ends by exporting the per-size winners and running the 1 MB one under MPI
    windows = data["tune"]["windows"]
    assert windows and windows[0]["min_bytes"] == 0 and windows[-1]["max_bytes"] is None
    assert all(os.path.exists(w["xml"]) and os.path.exists(w["schedule"]) for w in windows)
    run_info = data["run"]
    assert run_info["check"] == "passed" and run_info["ranks"] == 16
    assert run_info["algorithm"] in {w["algo"] for w in windows}


@pytest.mark.parametrize(
    "argv",
    [[], ["topo"], ["topo", "show"], ["topo", "export"], ["list"], ["synth"], ["verify"], ["demo"]],
)
def test_help_exits_zero(capsys, argv):
    with pytest.raises(SystemExit) as exc:
        main(argv + ["--help"])
    assert exc.value.code == 0
    out, err = capsys.readouterr()
    assert out.startswith("usage: collsynth") and err == ""


def test_version(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.startswith("collsynth ")


# ------------------------------------------------------------------------------ bad inputs
@pytest.fixture(scope="module")
def ring5_schedule(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("sched") / "ring5.json")
    save_schedule(
        synthesize("spt", load_topology("ring:n=5"), Collective.make("allgather", 5)), path
    )
    return path


def _bad_cases(tmp: str, sched: str) -> list[tuple[list[str], str]]:
    bad_json = os.path.join(tmp, "bad.json")
    with open(bad_json, "w") as f:
        f.write('{"nodes": [')
    bad_yaml = os.path.join(tmp, "bad.yaml")
    with open(bad_yaml, "w") as f:
        f.write("nodes: [a, b\nlinks: {")
    not_obj = os.path.join(tmp, "list.json")
    with open(not_obj, "w") as f:
        f.write("[1, 2, 3]")
    missing = os.path.join(tmp, "missing.json")
    out = os.path.join(tmp, "out.json")
    return [
        (["topo", "show", "nosuchtopo"], "unknown topology 'nosuchtopo'"),
        (["topo", "show", "ring:n=abc"], "is not an integer"),
        (["topo", "show", "ring:n=1"], "must be at least 2"),
        (["topo", "show", "ring:q=3"], "unknown parameter 'q'"),
        (["topo", "show", "ring:n"], "expected key=value"),
        (["topo", "show", "ring:bw=fast"], "is not a bandwidth"),
        (["topo", "show", "ring:alpha=-1us"], "negative"),
        (["topo", "show", ""], "empty topology spec"),
        (["topo", "show", missing], "file not found"),
        (["topo", "show", tmp], "not a file"),
        (["topo", "show", bad_json], "not valid JSON"),
        (["topo", "show", bad_yaml], "not valid YAML"),
        (["topo", "show", not_obj], "top level must be an object"),
        (
            ["topo", "export", "ring:n=4", "-o", os.path.join(tmp, "no", "dir", "x.json")],
            "cannot write",
        ),
        (["topo", "export", "ring:n=4", "-o", out, "--format", "xml"], "invalid choice"),
        (["topo", "frobnicate"], "invalid choice"),
        (["frobnicate"], "invalid choice"),
        (["verify", missing], "file not found"),
        (["verify", bad_json], "not valid JSON"),
        (["verify", not_obj], "must hold a JSON object"),
        (["verify", sched, "--topology", "ring:n=6"], "was made for topology 'ring5'"),
        (["verify", sched, "--topology", "ring:n=5,bw=1GB/s"], "differs"),
        (["verify", sched, "--topology", "nosuchtopo"], "unknown topology"),
        (["synth", "-t", "ring:n=4", "-c", "allgatherz", "-o", out], "unknown collective"),
        (
            ["synth", "-t", "ring:n=4", "-c", "allgather", "--chunks", "-1", "-o", out],
            "--chunks must be at least 1",
        ),
        (
            ["synth", "-t", "ring:n=4", "-c", "allgather", "--chunks", "0", "-o", out],
            "--chunks must be at least 1",
        ),
        (
            ["synth", "-t", "ring:n=4", "-c", "allgather", "--chunks", "two", "-o", out],
            "invalid int value",
        ),
        (
            ["synth", "-t", "ring:n=4", "-c", "allgather", "--size", "1XB", "-o", out],
            "--size '1XB' is not a size",
        ),
        (["synth", "-t", "ring:n=4", "-c", "allgather", "--size=-1GB", "-o", out], "negative"),
        (
            ["synth", "-t", "ring:n=4", "-c", "broadcast", "--root", "4", "-o", out],
            "--root 4 is not a rank",
        ),
        (
            ["synth", "-t", "ring:n=4", "-c", "allgather", "--root", "0", "-o", out],
            "--root does not apply",
        ),
        (
            ["synth", "-t", "ring:n=4", "-c", "allgather", "-a", "nosuch", "-o", out],
            "unknown algorithm",
        ),
        (["synth", "-t", "ring:n=4", "-c", "custom", "-o", out], "needs --demand"),
        (
            ["synth", "-t", "ring:n=4", "-c", "custom", "--demand", bad_json, "-o", out],
            "not valid JSON",
        ),
        (["synth", "-t", "ring:n=4", "-c", "custom", "--demand", not_obj, "-o", out], "square"),
        (["synth", "-t", "ring:n=4", "-c", "allgather"], "required: -o/--output"),
        (["synth", "-c", "allgather", "-o", out], "required: -t/--topology"),
        (
            ["synth", "-t", "ring:n=4", "-c", "allgather", "-o", os.path.join(tmp, "no", "x")],
            "cannot write",
        ),
        ([], "required: COMMAND"),
    ]


def test_bad_inputs_exit_2_with_one_line(capsys, tmp_path, ring5_schedule):
    for argv, expect in _bad_cases(str(tmp_path), ring5_schedule):
        rc, out, err = run(capsys, *argv)
        assert_one_line_error(rc, err, expect)
        assert out == "", argv


@pytest.mark.parametrize("demand", [[[0, 1e300], [0, 0]], [[0, 10**12], [0, 0]]])
def test_absurd_demand_is_one_clean_line(tmp_path, demand):
    d = tmp_path / "d.json"
    d.write_text(json.dumps(demand))
    p = _python_m(
        "synth",
        "-t",
        "ring:n=2",
        "-c",
        "custom",
        "--demand",
        str(d),
        "-o",
        "s.json",
        cwd=str(tmp_path),
    )
    assert p.returncode == 2 and p.stdout == ""
    assert len(p.stderr.splitlines()) == 1 and "more than" in p.stderr


def test_demand_for_wrong_rank_count(capsys, tmp_path):
    d = tmp_path / "d.json"
    d.write_text(json.dumps([[0, 1, 0], [0, 0, 1], [1, 0, 0]]))
    rc, out, err = run(
        capsys,
        "synth",
        "-t",
        "ring:n=4",
        "-c",
        "custom",
        "--demand",
        str(d),
        "-o",
        str(tmp_path / "s.json"),
    )
    assert_one_line_error(rc, err, "3 ranks but the topology has 4")


def _python_m(*argv: str, cwd: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("COLLSYNTH_DEBUG", None)
    return subprocess.run(
        [sys.executable, "-m", "collsynth", *argv],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=120,
    )


def test_subprocess_exit_codes(tmp_path):
    p = _python_m("topo", "show", "nosuchtopo", cwd=str(tmp_path))
    assert p.returncode == 2 and p.stdout == ""
    assert len(p.stderr.splitlines()) == 1 and "Traceback" not in p.stderr
    assert "unknown topology" in p.stderr
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "collsynth-schedule", "version": 1, "ops": 3')
    p = _python_m("verify", str(bad), cwd=str(tmp_path))
    assert p.returncode == 2 and len(p.stderr.splitlines()) == 1 and "Traceback" not in p.stderr
    p = _python_m(
        "synth", "-t", "ring:n=4", "-c", "allreduce", "-o", "s.json", "--json", cwd=str(tmp_path)
    )
    assert p.returncode == 0 and p.stderr == ""
    assert json.loads(p.stdout)["verified"] is True
    p = _python_m("verify", "s.json", "--json", cwd=str(tmp_path))
    assert p.returncode == 0 and json.loads(p.stdout)["ok"] is True


# ------------------------------------------------------------------------------ regressions
def test_markup_like_names_are_printed_literally(capsys, tmp_path):
    data = {
        "name": "x[/bold]",
        "meta": {"notes": "[/foo] and [bold]", "source": "[red]"},
        "nodes": ["a[/]", "b[x]"],
        "links": [{"src": "a[/]", "dst": "b[x]", "bw": "1GB/s", "bidirectional": True}],
    }
    path = tmp_path / "m.json"
    path.write_text(json.dumps(data))
    rc, out, err = run(capsys, "topo", "show", str(path))
    assert rc == 0 and err == ""
    assert "x[/bold]" in out and "a[/]" in out and "[/foo] and [bold]" in out


@pytest.mark.parametrize("field, value", [("bw", 10**400), ("alpha", 10**400), ("bw", -(10**400))])
def test_huge_integers_in_topology(capsys, tmp_path, field, value):
    link = {"src": "a", "dst": "b", "bw": 1e9, "bidirectional": True}
    link[field] = value
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"nodes": ["a", "b"], "links": [link]}))
    rc, out, err = run(capsys, "topo", "show", str(path))
    assert_one_line_error(rc, err, "finite")


def test_yaml_with_mixed_key_types(capsys, tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text("nodes: [a, b]\nlinks: []\n1: 2\nfoo: 3\n")
    rc, out, err = run(capsys, "topo", "show", str(path))
    assert_one_line_error(rc, err, "unknown key")
    path.write_text("nodes: [{name: a, 7: x, z: y}, b]\nlinks: []\n")
    rc, out, err = run(capsys, "topo", "show", str(path))
    assert_one_line_error(rc, err, "node 0 has unknown key")


def test_deeply_nested_files(capsys, tmp_path):
    for ext in ("json", "yaml"):
        path = tmp_path / f"deep.{ext}"
        path.write_text("[" * 3000 + "]" * 3000)
        for cmd in (["topo", "show"], ["verify"]):
            rc, out, err = run(capsys, *cmd, str(path))
            assert_one_line_error(rc, err)


# ------------------------------------------------------------------------------ fuzz
FUZZ = settings(
    max_examples=80,
    deadline=None,
    derandomize=True,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)

_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-3, 10)
    | st.integers()
    | st.sampled_from([10**400, -(10**400), 2**63, -(2**63) - 1, 2**64])
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from([float("nan"), float("inf"), -1.0, 0.0, -0.0, 1e-320])
    | st.text(max_size=6)
    | st.sampled_from(
        [
            "",
            "compute",
            "switch",
            "router",
            "copy",
            "reduce",
            "25GB/s",
            "-1GB/s",
            "0us",
            "nan",
            "[/x]",
            "allgather",
            "1e999",
        ]
    )
)
json_values = st.recursive(
    _scalars,
    lambda ch: st.lists(ch, max_size=4) | st.dictionaries(st.text(max_size=6), ch, max_size=4),
    max_leaves=10,
)


def _paths(obj, prefix=()):
    """Every path (tuple of keys/indices) into a JSON value, the root included."""
    out = [prefix]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.extend(_paths(v, prefix + (k,)))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out.extend(_paths(v, prefix + (i,)))
    return out


def _get(obj, path):
    for k in path:
        obj = obj[k]
    return obj


def _numeric_neighbours(x):
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return [-1, 0]
    return [x + 1, -x - 1, x * 1000 + 7, 0, -1, 2**40, 10**20]


def mutate(data: st.DataObject, base):
    """One random corruption of a JSON-like document (may leave it valid)."""
    doc = copy.deepcopy(base)
    paths = [p for p in _paths(doc) if p]
    path = data.draw(st.sampled_from(paths), label="path")
    parent = _get(doc, path[:-1])
    key = path[-1]
    old = parent[key]
    action = data.draw(
        st.sampled_from(["replace", "nearby", "delete", "shorten", "lengthen", "add_key", "type"]),
        label="action",
    )
    if action == "replace":
        parent[key] = data.draw(json_values, label="value")
    elif action == "nearby":
        parent[key] = data.draw(st.sampled_from(_numeric_neighbours(old)), label="value")
    elif action == "delete":
        del parent[key]
    elif action == "shorten" and isinstance(old, list) and old:
        parent[key] = old[:-1]
    elif action == "lengthen" and isinstance(old, list):
        parent[key] = old + ([copy.deepcopy(old[-1])] if old else [0])
    elif action == "add_key" and isinstance(old, dict):
        old[data.draw(st.text(min_size=1, max_size=5), label="new key")] = 1
    else:  # change the type, keeping a related value
        parent[key] = data.draw(
            st.sampled_from([str(old), [old], {"v": old}, None, True]), label="value"
        )
    return doc


def _write(tmp_path, name: str, doc, fmt: str) -> str:
    path = tmp_path / f"{name}.{fmt}"
    if fmt == "yaml":
        path.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    else:
        path.write_text(json.dumps(doc), encoding="utf-8")  # writes NaN/Infinity literally
    return str(path)


def _fuzz_topologies():
    fab = topology_to_dict(small_fabric())
    ring = topology_to_dict(load_topology("ring:n=3"))
    human = {
        "name": "human",
        "nodes": ["a", {"name": "s", "kind": "switch"}, "b"],
        "links": [
            {
                "src": "a",
                "dst": "s",
                "bw": "200Gb/s",
                "alpha": "0.7us",
                "bidirectional": True,
                "class": "eth",
                "lanes": 2,
            },
            {"src": "s", "dst": "b", "bw": "25GB/s", "bidirectional": True},
        ],
    }
    return [fab, ring, human]


TOPO_BASES = _fuzz_topologies()


def _special_topology(kind: str, doc: dict) -> dict:
    doc = copy.deepcopy(doc)
    names = [n if isinstance(n, str) else n["name"] for n in doc["nodes"]]
    if kind == "self-loop":
        doc["links"].append({"src": names[0], "dst": names[0], "bw": 1e9})
    elif kind == "unknown-node":
        doc["links"].append({"src": names[0], "dst": "nowhere", "bw": 1e9})
    elif kind == "index-node":
        doc["links"].append({"src": 0, "dst": 99, "bw": 1e9})
    elif kind == "disconnected":
        doc["nodes"].append({"name": "lonely", "kind": "compute"})
    elif kind == "one-way":
        doc["nodes"].append("oneway")
        doc["links"].append({"src": "oneway", "dst": names[0], "bw": 1e9})
    elif kind == "single":
        doc["nodes"] = [{"name": "only", "kind": "compute"}, {"name": "sw", "kind": "switch"}]
        doc["links"] = [{"src": "only", "dst": "sw", "bw": 1e9, "bidirectional": True}]
    elif kind == "duplicate-node":
        doc["nodes"].append(copy.deepcopy(doc["nodes"][0]))
    elif kind == "bad-kind":
        doc["nodes"][0] = {"name": names[0], "kind": "gpu"}
    elif kind == "zero-bw":
        doc["links"][0]["bw"] = 0
    elif kind == "nan-bw":
        doc["links"][0]["bw"] = float("nan")
    elif kind == "negative-alpha":
        doc["links"][0]["alpha"] = -1e-6
    elif kind == "no-links":
        doc["links"] = []
    elif kind == "format":
        doc["format"] = "collsynth-schedule"
    elif kind == "version":
        doc["version"] = 2
    return doc


SPECIAL_TOPO = [
    "self-loop",
    "unknown-node",
    "index-node",
    "disconnected",
    "one-way",
    "single",
    "duplicate-node",
    "bad-kind",
    "zero-bw",
    "nan-bw",
    "negative-alpha",
    "no-links",
    "format",
    "version",
]


@pytest.mark.parametrize("kind", SPECIAL_TOPO)
def test_malformed_topology_classes(capsys, tmp_path, kind):
    for i, base in enumerate(TOPO_BASES):
        for fmt in ("json", "yaml"):
            path = _write(tmp_path, f"t{i}", _special_topology(kind, base), fmt)
            rc, out, err = run(capsys, "topo", "show", path)
            assert_one_line_error(rc, err)


@FUZZ
@given(data=st.data())
def test_fuzz_topology_files(capsys, tmp_path, data):
    base = data.draw(st.sampled_from(TOPO_BASES), label="base")
    how = data.draw(
        st.sampled_from(
            ["mutate", "mutate", "mutate", "mutate2", "special", "random", "text", "truncated"]
        ),
        label="how",
    )
    fmt = data.draw(st.sampled_from(["json", "yaml"]), label="fmt")
    path = str(tmp_path / f"t.{fmt}")
    if how == "mutate":
        path = _write(tmp_path, "t", mutate(data, base), fmt)
    elif how == "mutate2":
        path = _write(tmp_path, "t", mutate(data, mutate(data, base)), fmt)
    elif how == "special":
        kind = data.draw(st.sampled_from(SPECIAL_TOPO), label="special")
        path = _write(tmp_path, "t", mutate(data, _special_topology(kind, base)), fmt)
    elif how == "random":
        path = _write(tmp_path, "t", data.draw(json_values, label="doc"), fmt)
    elif how == "text":
        with open(path, "w", encoding="utf-8") as f:
            f.write(data.draw(st.text(max_size=40), label="text"))
    else:
        text = json.dumps(base) if fmt == "json" else yaml.safe_dump(base)
        cut = data.draw(st.integers(0, len(text) - 1), label="cut")
        with open(path, "w", encoding="utf-8") as f:
            f.write(text[:cut])
    argv = ["topo", "show", path]
    if data.draw(st.booleans(), label="json"):
        argv.append("--json")
    rc, out, err = run(capsys, *argv)
    assert_clean_outcome(rc, out, err)
    if rc == 0 and "--json" in argv:
        info = one_json(out)
        assert info["compute_nodes"] >= 2


def _fuzz_schedules() -> list[dict]:
    ring = load_topology("ring:n=3")
    fab = small_fabric()
    out = [
        schedule_to_dict(synthesize("spt", ring, Collective.make("allreduce", 3))),
        schedule_to_dict(synthesize("spt", fab, Collective.make("alltoall", 4))),
        schedule_to_dict(synthesize("spt", fab, Collective.custom(4, [(0, [1, 3])]))),
    ]
    # a timed schedule with byte ranges, steps, durations and a link order
    b = ScheduleBuilder(ring, Collective.make("broadcast", 3, 1, root=0))
    b.size = 1e6
    nat = 0.5e6 / 50e9
    a = b.add(0, 1, 0, part=(0, 1, 2), start=0.0, step=0)
    c = b.add(0, 1, 0, part=(1, 2, 2), start=nat, duration=nat, step=1)
    b.add(1, 2, 0, part=(0, 2, 2), deps=[a, c], start=3 * nat + 1e-6, step=2)
    b.set_link_order(ring.links_between(0, 1)[0], [a, c])
    out.append(schedule_to_dict(b.build()))
    trees = [
        Tree(r, ((r, (r + 1) % 3, None), ((r + 1) % 3, (r + 2) % 3, None)), 1, "out")
        for r in range(3)
    ]  # chains r -> r+1 -> r+2
    trees += [
        Tree(r, (((r + 1) % 3, r, None), ((r + 2) % 3, r, None)), 1, "in") for r in range(3)
    ]  # stars into r
    out.append(schedule_to_dict(lower(ring, Collective.make("allreduce", 3), TreeForm(trees))))
    return out


SCHED_BASES = _fuzz_schedules()


def test_fuzz_bases_are_valid(capsys, tmp_path):
    for i, doc in enumerate(SCHED_BASES):
        path = _write(tmp_path, f"s{i}", doc, "json")
        rc, out, err = run(capsys, "verify", path)
        assert rc == 0 and err == "", err


def _special_schedule(kind: str, doc: dict) -> dict | list | str:
    doc = copy.deepcopy(doc)
    ops = doc["ops"]
    n = ops["count"]
    if kind == "toplevel-list":
        return [doc]
    if kind == "toplevel-string":
        return "collsynth-schedule"
    if kind == "rank-out-of-range":
        ops["src"][0] = 99
    elif kind == "link-out-of-range":
        ops["routes"][0] = [10**6]
    elif kind == "chunk-out-of-range":
        ops["chunk"][-1] = 10**9
    elif kind == "dep-out-of-range":
        ops["deps"] = [[n + 5]] + [[] for _ in range(n - 1)]
    elif kind == "dep-huge":
        ops["deps"] = [[2**70]] + [[] for _ in range(n - 1)]
    elif kind == "wrong-length":
        ops["dst"] = ops["dst"][:-1]
    elif kind == "bad-part":
        ops["part"] = [[1, 0, 2]] * n
    elif kind == "part-den-huge":
        ops["part"] = [[0, 1, 2**62 - 1 - 2 * i] for i in range(n)]
    elif kind == "bad-kind":
        ops["kind"] = ["move"] * n
    elif kind == "negative-count":
        ops["count"] = -1
    elif kind == "huge-size":
        doc["size"] = 10**400
    elif kind == "huge-start":
        ops["start"] = [10**400] * n
    elif kind == "huge-chunks":
        coll = doc["collective"]
        if coll["kind"] == "custom":  # custom ignores chunks_per_rank: make it an allgather
            doc["collective"] = coll = {"kind": "allgather", "ranks": coll["ranks"]}
        coll["chunks_per_rank"] = 10**18
    elif kind == "huge-link-order":
        doc["link_order"] = {str(2**80): [0]}
    elif kind == "link-order-values":
        doc["link_order"] = {"0": [2**70]}
    elif kind == "other-collective":
        doc["collective"] = {"kind": "allgather", "ranks": 99}
    elif kind == "bad-trees":
        doc["trees"] = {"trees": [{"root": "x"}]}
    elif kind == "embedded-topology":
        doc["topology"]["links"] = []
    return doc


SPECIAL_SCHED = [
    "toplevel-list",
    "toplevel-string",
    "rank-out-of-range",
    "link-out-of-range",
    "chunk-out-of-range",
    "dep-out-of-range",
    "dep-huge",
    "wrong-length",
    "bad-part",
    "part-den-huge",
    "bad-kind",
    "negative-count",
    "huge-size",
    "huge-start",
    "huge-chunks",
    "huge-link-order",
    "link-order-values",
    "other-collective",
    "bad-trees",
    "embedded-topology",
]


@pytest.mark.parametrize("kind", SPECIAL_SCHED)
def test_malformed_schedule_classes(capsys, tmp_path, kind):
    for i, base in enumerate(SCHED_BASES):
        path = _write(tmp_path, f"s{i}", _special_schedule(kind, base), "json")
        rc, out, err = run(capsys, "verify", path)
        assert_one_line_error(rc, err)


@FUZZ
@given(data=st.data())
def test_fuzz_schedule_files(capsys, tmp_path, data):
    base = data.draw(st.sampled_from(SCHED_BASES), label="base")
    how = data.draw(
        st.sampled_from(
            [
                "mutate",
                "mutate",
                "mutate_ops",
                "mutate_ops",
                "numbers",
                "numbers",
                "numbers",
                "mutate2",
                "special",
                "random",
                "truncated",
            ]
        ),
        label="how",
    )
    fmt = "json" if how != "mutate" else data.draw(st.sampled_from(["json", "json", "yaml"]))
    path = str(tmp_path / f"s.{fmt}")
    if how == "mutate":
        path = _write(tmp_path, "s", mutate(data, base), fmt)
    elif how == "mutate_ops":  # aim at the operation columns and the collective
        part = data.draw(st.sampled_from(["ops", "collective", "link_order", "size"]))
        doc = copy.deepcopy(base)
        if doc.get(part):
            wrapped = mutate(data, {"x": doc[part]})
            if "x" in wrapped:
                doc[part] = wrapped["x"]
            else:
                del doc[part]
        else:
            doc[part] = data.draw(json_values)
        path = _write(tmp_path, "s", doc, fmt)
    elif how == "numbers":  # well-formed files with wrong numbers: the verifier's rules
        doc = copy.deepcopy(base)
        for _ in range(data.draw(st.integers(1, 3), label="how many")):
            numbers = [
                p
                for p in _paths(doc)
                if p
                and p[0] in ("ops", "link_order", "size")
                and isinstance(_get(doc, p), (int, float))
                and not isinstance(_get(doc, p), bool)
            ]
            p = data.draw(st.sampled_from(numbers), label="number")
            old = _get(doc, p)
            _get(doc, p[:-1])[p[-1]] = data.draw(
                st.sampled_from(
                    [old + 1, old - 1, -old, old * 2, 0, 1, -1]
                    + ([old / 3, old + 1e-6] if isinstance(old, float) else [])
                ),
                label="new",
            )
        path = _write(tmp_path, "s", doc, fmt)
    elif how == "mutate2":
        path = _write(tmp_path, "s", mutate(data, mutate(data, base)), fmt)
    elif how == "special":
        kind = data.draw(st.sampled_from(SPECIAL_SCHED), label="special")
        doc = _special_schedule(kind, base)
        if isinstance(doc, dict):
            doc = mutate(data, doc) if data.draw(st.booleans()) else doc
        path = _write(tmp_path, "s", doc, fmt)
    elif how == "random":
        path = _write(tmp_path, "s", data.draw(json_values, label="doc"), fmt)
    else:
        text = json.dumps(base)
        cut = data.draw(st.integers(0, len(text) - 1), label="cut")
        with open(path, "w", encoding="utf-8") as f:
            f.write(text[:cut])
    rc, out, err = run(capsys, "verify", path)
    assert_clean_outcome(rc, out, err)
    if rc == 0:
        assert out.startswith("OK: ")


def test_fuzz_helpers_mutate_something():
    """The mutator changes documents (so the fuzz tests are not vacuous)."""
    changed = 0

    @settings(max_examples=50, deadline=None, derandomize=True)
    @given(data=st.data())
    def probe(data):
        nonlocal changed
        base = SCHED_BASES[0]
        if mutate(data, base) != base:
            changed += 1

    probe()
    assert changed >= 25
