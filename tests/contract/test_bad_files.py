"""The command-line contract under bad input files: exit status 2, one line on stderr naming
the problem, no traceback, no file written, and a quick end.

Each hostile file (random bytes, JSON nested 100 000 deep, a YAML alias bomb, an empty file,
a directory, a file over the size limit) is given to every command that reads that kind of file.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

#: Every case must end within this many seconds (a hang is a failure, not a slow pass).
DEADLINE_S = 20.0

BOMB = (
    "\n".join(
        ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
        + [
            f"{chr(98 + i)}: &{chr(98 + i)} [" + ", ".join([f"*{chr(97 + i)}"] * 10) + "]"
            for i in range(9)
        ]
    )
    + "\n"
)


def _hostile(tmp_path) -> dict[str, str]:
    """name -> path of each hostile input."""
    files = {
        "random.json": os.urandom(4096),
        "deep.json": ("[" * 100_000 + "]" * 100_000).encode(),
        "deep_ok_parser.json": ("[" * 500 + "]" * 500).encode(),
        "bomb.yaml": BOMB.encode(),
        "empty.json": b"",
        "nul.yaml": b"\x00\x01\x02",
    }
    out = {}
    for name, data in files.items():
        p = tmp_path / name
        p.write_bytes(data)
        out[name] = str(p)
    (tmp_path / "adir.json").mkdir()
    out["adir.json"] = str(tmp_path / "adir.json")
    return out


def _commands(path: str, out: str) -> list[list[str]]:
    """Every command that reads a topology, schedule, demand or statistics file."""
    return [
        ["topo", "show", "-t", path],
        ["verify", path],
        ["simulate", path, "-s", "1MB"],
        ["export", "msccl", path, "-o", out + ".xml"],
        ["synth", "-t", "ring:n=4", "-c", "custom", "--demand", path, "-o", out + ".json"],
        ["synth", "-t", path, "-c", "allgather", "-o", out + ".json"],
        ["check-xml", path],
        ["synth", "--teccl-input", path, "--algo", "teccl", "-o", out + ".json"],
        ["wan", "replan", "-t", "wan:dcs=2,gpus=2", "--stats", path, "-o", out + ".json"],
    ]


def _run(argv, env=None, cwd=None):
    t0 = time.monotonic()
    res = subprocess.run(
        [sys.executable, "-m", "collsynth", *argv],
        capture_output=True,
        text=True,
        timeout=DEADLINE_S * 3,
        stdin=subprocess.DEVNULL,
        env=env,
        cwd=cwd,
    )
    return res, time.monotonic() - t0


def _assert_contract(res, elapsed, argv, before, tmp_path):
    err = res.stderr
    assert res.returncode == 2, (argv, res.returncode, err[-500:])
    assert err.count("\n") == 1 and err.startswith("collsynth: error: "), (argv, err[-500:])
    assert "Traceback" not in err and err.strip() != "collsynth: error:"
    assert res.stdout == ""
    assert elapsed < DEADLINE_S, (argv, elapsed)
    assert sorted(os.listdir(tmp_path)) == before, argv  # nothing written


@pytest.mark.parametrize(
    "name",
    [
        "random.json",
        "deep.json",
        "deep_ok_parser.json",
        "bomb.yaml",
        "empty.json",
        "nul.yaml",
        "adir.json",
    ],
)
def test_hostile_files_get_one_line(tmp_path, name):
    paths = _hostile(tmp_path)
    before = sorted(os.listdir(tmp_path))
    for argv in _commands(paths[name], str(tmp_path / "out")):
        res, elapsed = _run(argv)
        _assert_contract(res, elapsed, argv, before, tmp_path)


def test_file_size_limit_names_the_variable(tmp_path):
    p = tmp_path / "big.json"
    p.write_text('{"nodes": [], "links": []}' + " " * 2000)
    env = {**os.environ, "COLLSYNTH_MAX_FILE_BYTES": "1000"}
    res, elapsed = _run(["topo", "show", "-t", str(p)], env=env)
    _assert_contract(res, elapsed, "size", ["big.json"], tmp_path)
    assert "larger than 1000 bytes" in res.stderr and "COLLSYNTH_MAX_FILE_BYTES" in res.stderr


def test_yaml_bomb_message_names_the_limit(tmp_path):
    p = tmp_path / "bomb.yaml"
    p.write_text(BOMB)
    env = {**os.environ, "COLLSYNTH_MAX_NODES": "100000"}
    res, _ = _run(["topo", "show", "-t", str(p)], env=env)
    assert res.returncode == 2 and "COLLSYNTH_MAX_NODES" in res.stderr


def test_deep_json_message_names_the_limit(tmp_path):
    p = tmp_path / "deep.json"
    p.write_text("[" * 100 + "]" * 100)
    res, _ = _run(["verify", str(p)])
    assert res.returncode == 2 and "nested deeper than 64 levels" in res.stderr
    assert "COLLSYNTH_MAX_DEPTH" in res.stderr
