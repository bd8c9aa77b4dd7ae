"""Hypothesis-generated bad input for every command.

Each example takes a command line that works, replaces one value with a generated one (odd
text, NaN, inf, negative or huge numbers, unknown names, empty strings, a directory, a
missing or unreadable path, random bytes, deep JSON), and runs it in process. Whatever the
input, the command keeps the contract: exit status 0 or 2 (4 for a time limit), never 1; on
an error exactly one line on stderr starting ``collsynth: error:`` and nothing on stdout;
no traceback; no file created or changed except the command's own output on success; and an
end within 20 s.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from collsynth.cli import main

pytestmark = pytest.mark.slow

# Command lines that work; {S} is a schedule file, {X} its MSCCL XML, {T} a topology file,
# {O} an output path. Every token may be replaced by a generated value.
TEMPLATES = [
    ["topo", "show", "-t", "ring:n=4", "--json"],
    ["topo", "export", "-t", "ring:n=4", "-o", "{O}.yaml"],
    ["list", "--json"],
    ["synth", "-t", "ring:n=4", "-c", "allgather", "--algo", "ring", "--chunks", "2",
     "-s", "1MB", "-o", "{O}.json"],
    ["synth", "-t", "{T}", "-c", "allreduce", "--algo", "spt", "--opt", "pipeline=2",
     "-o", "{O}.json"],
    ["verify", "{S}", "--json"],
    ["simulate", "{S}", "-s", "1MB", "--json"],
    ["bound", "-t", "ring:n=4", "-c", "allreduce", "-s", "1MB", "--json"],
    ["compare", "-t", "ring:n=4", "-c", "allgather", "--sizes", "1KB,1MB", "--algos",
     "ring,spt", "--json"],
    ["export", "msccl", "{S}", "--dialect", "executor", "--min-bytes", "0", "-o", "{O}.xml"],
    ["check-xml", "{X}", "-t", "ring:n=4", "--json"],
    ["wan", "stats", "-t", "wan:dcs=2,gpus=2", "--perturb", "1", "--spread", "0.2",
     "-o", "{O}.json"],
    ["tune", "-t", "ring:n=4", "-c", "allgather", "--sizes", "1KB,1MB", "--algos", "ring,spt",
     "--dialect", "executor", "-o", "{O}", "--json"],
    ["synth", "-t", "ring:n=4", "-c", "allgather", "--algo", "teccl", "--time-limit", "5",
     "--opt", "time_limit=1,gap=0.1", "-o", "{O}.json", "--json"],
]  # fmt: skip

ODD_TEXT = st.one_of(
    st.sampled_from(
        [
            "",
            " ",
            "-",
            "--",
            "nan",
            "NaN",
            "inf",
            "-inf",
            "-1",
            "0",
            "1e400",
            "10**9",
            "999999999999999999999",
            "1e-400",
            "unknown",
            "ring:n=",
            "ring:n=-3",
            "ring:n=1e9",
            "ring:n=4,n=5",
            "full:n=100000",
            "x" * 300,
            "\x00",
            "é",
            "1KB:1GB:x1",
            "1MB:1KB:x2",
            "KB",
            "1ZB",
            "pipeline=",
            "=",
            "a=b=c",
            "{dir}",
            "{missing}",
            "{bytes}",
            "{deep}",
            "{noread}",
        ]
    ),  # fmt: skip
    st.text(max_size=12),
    st.integers(min_value=-(10**12), max_value=10**12).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("fuzz")
    s, x, t = d / "s.json", d / "s.xml", d / "t.json"
    assert main(["synth", "-t", "ring:n=4", "-c", "allgather", "-o", str(s)]) == 0
    assert main(["export", "msccl", str(s), "-o", str(x)]) == 0
    assert main(["topo", "export", "-t", "ring:n=4", "-o", str(t)]) == 0
    (d / "bytes.json").write_bytes(bytes(range(256)) * 4)
    (d / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (d / "dir").mkdir()
    noread = d / "noread.json"
    noread.write_text("{}")
    noread.chmod(0)
    return {
        "{S}": str(s),
        "{X}": str(x),
        "{T}": str(t),
        "{dir}": str(d / "dir"),
        "{missing}": str(d / "missing.json"),
        "{bytes}": str(d / "bytes.json"),
        "{deep}": str(d / "deep.json"),
        "{noread}": str(noread),
    }


def _snapshot(folder: Path, skip: str) -> dict[str, tuple[int, int]]:
    """Size and mtime of every input file (``skip``: the path that stands for a missing input,
    which a command may legitimately create, as a file or a folder of outputs, when the fuzzed
    value lands on its output)."""
    return {
        str(p): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in folder.rglob("*")
        if p.is_file() and str(p) != skip and not str(p).startswith(skip + os.sep)
    }


@settings(
    max_examples=250,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    which=st.integers(min_value=0, max_value=len(TEMPLATES) - 1),
    slot=st.integers(min_value=0, max_value=20),
    value=ODD_TEXT,
)
# tune's output folder on the path that stands for a missing input: tune creates it (a
# folder of outputs), and the examples after it must still start without it
@example(which=12, slot=11, value="{missing}")
# tune's output folder on an existing folder, twice: the second run writes its files again
@example(which=12, slot=11, value="{dir}")
@example(which=12, slot=11, value="{dir}")
def test_one_bad_value_keeps_the_contract(capsys, tmp_path, monkeypatch, files, which, slot, value):
    out_dir = tmp_path / "out"  # also the working folder: a relative output lands here
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir()
    monkeypatch.chdir(out_dir)
    argv = list(TEMPLATES[which])
    i = 1 + slot % (len(argv) - 1)  # never the command name itself
    argv[i] = value
    argv = [a.replace("{O}", str(out_dir / "o")) for a in argv]
    for key, path in files.items():
        argv = [a.replace(key, path) for a in argv]
    inputs = Path(files["{S}"]).parent
    missing = files["{missing}"]
    # stays missing for every example (an earlier one may have made it a file or, as the
    # output folder of ``tune``, a folder)
    shutil.rmtree(missing, ignore_errors=True)
    Path(missing).unlink(missing_ok=True)
    # an output path that names a fixture file which is not an input of this command may be
    # written (the command was asked to); one that is also its input must stay untouched
    outs = {argv[k + 1] for k, a in enumerate(argv[:-1]) if a in ("-o", "--output")}
    mine = {a for k, a in enumerate(argv) if not (k and argv[k - 1] in ("-o", "--output"))}
    written = {o for o in outs if o not in mine}

    def untouchable(path: str) -> bool:  # (a folder of outputs, as tune's, may be written in)
        return path not in written and not any(path.startswith(w + os.sep) for w in written)

    before = {k: v for k, v in _snapshot(inputs, missing).items() if untouchable(k)}
    t0 = time.monotonic()
    rc = main(argv)
    wall = time.monotonic() - t0
    out, err = capsys.readouterr()
    assert wall < 20, (argv, wall)
    assert "Traceback" not in err and "internal error" not in err, (argv, err)
    assert rc in (0, 2, 4), (argv, rc, err)
    after = {k: v for k, v in _snapshot(inputs, missing).items() if untouchable(k)}
    assert after == before, argv  # inputs untouched
    if rc != 0:
        lines = err.splitlines()
        assert len(lines) == 1 and lines[0].startswith("collsynth: error:"), (argv, err)
        assert out == "", argv
        assert os.listdir(out_dir) == [], (argv, os.listdir(out_dir))
