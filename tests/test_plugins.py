"""Third-party plugins: a tiny package from tests/plugin_example adds an algorithm, a bound and
an exporter through entry points, without editing collsynth."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PLUGIN = Path(__file__).resolve().parent / "plugin_example"


@pytest.fixture(scope="module")
def plugin_env(tmp_path_factory):
    """An environment whose PYTHONPATH holds the example plugin, installed with pip."""
    target = tmp_path_factory.mktemp("plugin_site")
    build = tmp_path_factory.mktemp("plugin_build") / "src"
    shutil.copytree(PLUGIN, build)  # pip builds in place: keep the source tree clean
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(target),
            str(build),
        ],
        check=True,
        cwd=build,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(target), os.environ.get("PYTHONPATH", "")]),
    }
    return env


def _cli(env, *argv, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "collsynth", *argv],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )


def test_plugin_shows_in_list(plugin_env):
    res = _cli(plugin_env, "list", "--json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    relay = data["algorithms"]["relay"]
    assert relay["collectives"] == ["allgather"]
    assert relay["options"]["direction"]["default"] == "forward"
    assert "lines" in data["exporters"]
    assert "spt" in data["algorithms"] and "msccl" in data["exporters"]  # built-ins still there


def test_plugin_in_compare_bound_and_export(plugin_env, tmp_path):
    res = _cli(
        plugin_env,
        "compare",
        "-t",
        "ring:n=4",
        "-c",
        "allgather",
        "--sizes",
        "1MB",
        "--algos",
        "relay,ring",
        "--opt",
        "relay.direction=backward",
        "--json",
    )
    assert res.returncode == 0, res.stderr
    rows = {r["algo"]: r for r in json.loads(res.stdout)["rows"]}
    assert set(rows) == {"relay", "ring"} and rows["relay"]["ratio_to_bound"] >= 1.0
    res = _cli(plugin_env, "bound", "-t", "ring:n=4", "-c", "allgather", "-s", "1MB", "--json")
    assert res.returncode == 0, res.stderr
    assert "example" in {b["kind"] for b in json.loads(res.stdout)["bounds"]}
    out = tmp_path / "relay.json"
    res = _cli(
        plugin_env, "synth", "-t", "ring:n=4", "-c", "allgather", "--algo", "relay", "-o", str(out)
    )
    assert res.returncode == 0, res.stderr
    txt = tmp_path / "relay.txt"
    res = _cli(plugin_env, "export", "lines", str(out), "-o", str(txt))
    assert res.returncode == 0, res.stderr
    lines = txt.read_text().splitlines()
    assert lines[0].startswith("#") and len(lines) == 1 + 4 * 3


def test_plugin_option_validated_by_its_declaration(plugin_env, tmp_path):
    res = _cli(
        plugin_env,
        "synth",
        "-t",
        "ring:n=4",
        "-c",
        "allgather",
        "--algo",
        "relay",
        "--opt",
        "direction=sideways",
        "-o",
        str(tmp_path / "x.json"),
    )
    assert res.returncode == 2
    assert res.stderr.strip() == (
        "collsynth: error: relay option direction='sideways' is not one of forward, backward"
    )
    assert not (tmp_path / "x.json").exists()


def test_broken_plugin_is_skipped_with_a_warning(plugin_env, tmp_path):
    # a second distribution whose entry point names a module that does not exist
    dist = tmp_path / "broken_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[collsynth.algorithms]\nbroken = no_such_module\n")
    env = {**plugin_env, "PYTHONPATH": os.pathsep.join([str(tmp_path), plugin_env["PYTHONPATH"]])}
    res = _cli(env, "list", "--json")
    assert res.returncode == 0
    assert "relay" in json.loads(res.stdout)["algorithms"]
    assert "plugin 'broken'" in res.stderr and "failed to load" in res.stderr
