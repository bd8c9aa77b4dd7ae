"""Every file reader applies the input limits before work, and an odd file gets one line.

The "readers" class of the command-line contract: YAML alias cycles, deep or huge-number JSON and XML into the
independent checkers (which read through the same limited loader as every other input), bad
MSCCL++ plan settings, nccl-tests logs with huge numbers or too many rows, demand files naming
chunks or ranks out of range, ``--scheduler`` addresses of another protocol or that never speak
Dask, and ``run`` sizes whose buffers cannot be allocated. Each is checked on the command line:
exit 0 or 2, on an error exactly one ``collsynth: error:`` line on stderr and nothing on
stdout, no traceback, within a few seconds, nothing written. Then hypothesis generates such
inputs (deep nesting, huge numbers, bad fields, garbage lines, alias graphs with cycles, demand
matrices with indices out of range) and checks the same contract for each.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collsynth.cli import main
from collsynth.collective import Collective, CollKind
from collsynth.errors import CollsynthError
from collsynth.files import parse_structured
from collsynth.report.nccl_tests import parse_log
from collsynth.runtime.plan import input_chunks, io_chunk_counts, output_chunks

DATA = Path(__file__).resolve().parents[1] / "data" / "nccl_tests"
#: every case ends within this (a generous bound on 2 shared cores; the failures were 7-60 s)
CASE_S = 5.0
FUZZ = settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, Path]:
    """A schedule (JSON and YAML), its MSCCL++ plan and MSCCL XML, a topology YAML and an
    nccl-tests log, made once."""
    d = tmp_path_factory.mktemp("readers")
    s, plan, xml, topo = d / "s.json", d / "plan.json", d / "s.xml", d / "t.yaml"
    assert main(["synth", "-t", "ring:n=4", "-c", "allgather", "-o", str(s)]) == 0
    assert main(["export", "mscclpp", str(s), "-o", str(plan)]) == 0
    assert main(["export", "msccl", str(s), "-o", str(xml)]) == 0
    assert main(["topo", "export", "-t", "ring:n=4", "-o", str(topo)]) == 0
    log = d / "ag.log"
    log.write_text((DATA / "all_gather_perf.dgx1.txt").read_text())
    return {"s": s, "plan": plan, "xml": xml, "topo": topo, "log": log}


def _files(folder: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*") if p.is_file()
    }


def run(capsys, argv: list[str], folder: Path | None = None, limit: float = CASE_S):
    """Run ``argv`` in process and check the contract; (status, stdout, stderr)."""
    before = _files(folder) if folder is not None else None
    capsys.readouterr()
    t0 = time.monotonic()
    rc = main([str(a) for a in argv])
    wall = time.monotonic() - t0
    out, err = capsys.readouterr()
    assert wall < limit, (argv, wall)
    assert "Traceback" not in err and "internal error" not in err, (argv, err)
    assert rc in (0, 2), (argv, rc, err)
    if rc == 2:
        lines = err.splitlines()
        assert len(lines) == 1 and lines[0].startswith("collsynth: error: "), (argv, err)
        assert out == "", (argv, out)
    if folder is not None:
        assert _files(folder) == before, argv  # nothing written, nothing changed
    return rc, out, err


def refused(capsys, argv, folder=None, match: str = "", limit: float = CASE_S) -> str:
    rc, _, err = run(capsys, argv, folder, limit)
    assert rc == 2, (argv, err)
    assert re.search(match, err), err
    return err


# ------------------------------------------------------------------ 1. YAML alias cycles
CYCLES = ["&m {x: *m}", "&m [*m]", "{a: &m [1, {b: *m}]}", "&m {x: [1, 2, {y: *m}]}"]


@pytest.mark.parametrize("cycle", CYCLES)
def test_alias_cycle_in_a_topology_is_one_line(capsys, tmp_path, inputs, cycle):
    data = yaml.safe_load(inputs["topo"].read_text())
    data.pop("meta", None)
    f = tmp_path / "cyc.yaml"
    f.write_text(f"meta: {cycle}\n" + yaml.safe_dump(data))
    for argv in (["topo", "show", "-t", f, "--json"], ["bound", "-t", f, "-c", "ag", "-s", "1MB"]):
        refused(capsys, argv, tmp_path, "contains itself")


def test_alias_cycle_in_a_schedule_is_one_line(capsys, tmp_path, inputs):
    data = json.loads(inputs["s"].read_text())
    meta: dict = {}
    meta["self"] = meta  # safe_dump writes it as an anchor and an alias inside it
    data["meta"] = meta
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump(data))
    assert "*id" in f.read_text()
    refused(capsys, ["verify", f, "--json"], tmp_path, "contains itself")
    refused(capsys, ["simulate", f, "-s", "1MB"], tmp_path, "contains itself")


def test_shared_aliases_without_a_cycle_are_accepted():
    doc = "a: &x [1, 2]\nb: [*x, *x]\nc: {p: *x, q: *x}\n"
    data = parse_structured(doc, "f.yaml")
    assert data["b"] == [[1, 2], [1, 2]]
    with pytest.raises(CollsynthError, match="contains itself"):
        parse_structured("a: &x [1, *x]\n", "f.yaml")


@pytest.mark.parametrize(
    "text, ext",
    [
        ('{"a": ' + "9" * 5000 + "}", ".json"),  # past Python's own conversion limit
        ('{"a": [1, -' + "9" * 400 + "]}", ".json"),
        ("a: " + "9" * 5000 + "\n", ".yaml"),
        ("a: [" + "9" * 400 + "]\n", ".yaml"),
        ("{" + "9" * 400 + ": 1}\n", ".yaml"),  # a key
    ],
)
def test_huge_integers_are_refused_by_the_loader(text, ext):
    with pytest.raises(CollsynthError, match="more than 308 digits"):
        parse_structured(text, "f" + ext)


def test_an_impossible_yaml_date_is_one_line():
    with pytest.raises(CollsynthError, match="not valid YAML"):
        parse_structured("a: 2020-13-45\n", "f.yaml")


# ------------------------------------------------------------------ 2. the checkers
def test_check_mscclpp_deep_or_huge_json_is_one_line(capsys, tmp_path):
    deep, big = tmp_path / "deep.json", tmp_path / "big.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    big.write_text('{"collective": ' + "9" * 5000 + "}")
    refused(capsys, ["check-mscclpp", deep], tmp_path, "nested deeper than 64")
    refused(capsys, ["check-mscclpp", big], tmp_path, "more than 308 digits")


def test_checkers_obey_the_limit_variables(capsys, monkeypatch, tmp_path, inputs):
    plan, xml = inputs["plan"], inputs["xml"]
    assert run(capsys, ["check-mscclpp", plan])[0] == 0
    assert run(capsys, ["check-xml", xml])[0] == 0
    for name, value, match in (
        ("COLLSYNTH_MAX_DEPTH", "3", "nested deeper than 3"),
        ("COLLSYNTH_MAX_NODES", "20", "more than 20"),
        ("COLLSYNTH_MAX_FILE_BYTES", "100", "larger than 100 bytes"),
    ):
        monkeypatch.setenv(name, value)
        refused(capsys, ["check-mscclpp", plan], tmp_path, match)
        refused(capsys, ["check-xml", xml], tmp_path, match)
        monkeypatch.delenv(name)


def test_check_xml_counts_depth_and_elements_as_it_parses(capsys, monkeypatch, tmp_path):
    n = 200_000
    f = tmp_path / "deep.xml"
    f.write_text('<algo name="x">\n' + "<a>" * n + "</a>" * n + "\n</algo>\n")
    refused(capsys, ["check-xml", f], tmp_path, r"line 2: <a> is nested deeper than 64")
    wide = tmp_path / "wide.xml"
    wide.write_text('<algo name="x">\n' + "<a/>\n" * 1000 + "</algo>\n")
    monkeypatch.setenv("COLLSYNTH_MAX_NODES", "500")
    refused(capsys, ["check-xml", wide], tmp_path, "line 501: more than 500 elements")


@pytest.mark.parametrize(
    "key, value, match",
    [
        ("num_threads_per_block", "NaN", "num_threads_per_block is nan"),
        ("num_threads_per_block", "0", "num_threads_per_block is 0"),
        ("num_threads_per_block", "-32", "num_threads_per_block is -32"),
        ("num_threads_per_block", "4096", "num_threads_per_block is 4096"),
        ("num_threads_per_block", "512.5", "num_threads_per_block is 512.5"),
        ("buffer_alignment", "0", "buffer_alignment is 0"),
        ("buffer_alignment", "24", "buffer_alignment is 24: it must be a power of two"),
        ("buffer_alignment", "Infinity", "buffer_alignment is inf"),
        ("min_message_size", "-1", "min_message_size is -1"),
        ("max_message_size", "1e30", "max_message_size is 1e[+]30"),
        ("max_message_size", str(1 << 70), "max_message_size is 1180591620717411303424"),
        ("max_message_size", '"big"', "max_message_size is str"),
        ("reuse_resources", "1", "reuse_resources is 1, not bool"),
    ],
)
def test_bad_plan_settings_are_named(capsys, tmp_path, inputs, key, value, match):
    text = inputs["plan"].read_text()
    doc = json.loads(text)
    doc[key] = "@@"
    f = tmp_path / "p.json"
    f.write_text(json.dumps(doc).replace('"@@"', value))
    refused(capsys, ["check-mscclpp", f], tmp_path, match)


def test_plan_min_above_max_and_huge_chunk_counts(capsys, tmp_path, inputs):
    doc = json.loads(inputs["plan"].read_text())
    doc["min_message_size"], doc["max_message_size"] = 10, 5
    f = tmp_path / "p.json"
    f.write_text(json.dumps(doc))
    refused(capsys, ["check-mscclpp", f], tmp_path, "min_message_size is larger")
    doc = json.loads(inputs["plan"].read_text())
    for g in doc["gpus"]:
        g["input_chunks"], g["output_chunks"] = 10**12, 4 * 10**12
    f.write_text(json.dumps(doc))
    refused(capsys, ["check-mscclpp", f], tmp_path, "COLLSYNTH_MAX_CHUNKS")


# ------------------------------------------------------------------ 3. nccl-tests logs
def _log_head() -> str:
    return "".join(
        line
        for line in (DATA / "all_gather_perf.dgx1.txt").read_text().splitlines(keepends=True)
        if line.startswith("#") and "Avg" not in line and "Out of bounds" not in line
    )


ROW = "{size:>12} {count:>12}  float  none  -1  18.01  0.06  0.05  0  18.37  0.06  0.05  0\n"
COMPARE = ["compare", "-t", "dgx1", "-c", "allgather", "--algos", "ring", "--sizes", "1MB"]


def test_log_with_a_400_digit_size_is_one_line(capsys, tmp_path):
    f = tmp_path / "big.log"
    f.write_text(_log_head() + ROW.format(size="9" * 400, count=32))
    refused(capsys, [*COMPARE, "--baseline", f], tmp_path, r"size 9{20}\.\.\. is larger than a 64")
    f.write_text("# nThread 1 nGpus " + "9" * 5000 + "\n" + _log_head())
    refused(capsys, [*COMPARE, "--baseline", f], tmp_path, "parameter nGpus")


def test_log_of_200000_rows_is_refused_at_the_cap(capsys, tmp_path):
    f = tmp_path / "many.log"
    head = _log_head()
    rows = "".join(ROW.format(size=1024 + 4 * i, count=32) for i in range(200_000))
    f.write_text(head + rows)
    first = head.count("\n") + 1
    err = refused(capsys, ["compare", "-t", "dgx1", "-c", "allgather", "--baseline", f], tmp_path,
                  "more than 4096 result rows")  # fmt: skip
    assert f"line {first + 4096}:" in err, err


def test_log_row_cap_and_file_size_limit(monkeypatch, tmp_path, capsys):
    ok = _log_head() + "".join(ROW.format(size=1024 * (i + 1), count=32) for i in range(4096))
    assert len(parse_log(ok).rows) == 4096
    with pytest.raises(CollsynthError, match="more than 4096"):
        parse_log(ok + ROW.format(size=1, count=1))
    f = tmp_path / "ok.log"
    f.write_text(ok)
    monkeypatch.setenv("COLLSYNTH_MAX_FILE_BYTES", "1000")
    refused(capsys, [*COMPARE, "--baseline", f], tmp_path, "larger than 1000 bytes")


# ------------------------------------------------------------------ 4. demand files
def test_demand_naming_chunk_33554431_is_refused_at_once(capsys, tmp_path):
    f = tmp_path / "d.json"
    f.write_text("[[0, 33554431], [0, 0]]")
    refused(capsys, ["synth", "-t", "ring:n=2", "-c", "custom", "--demand", f,
                     "-o", tmp_path / "o.json"], tmp_path, "more than 4194304 chunks",
            limit=2.0)  # fmt: skip
    f.write_text('{"demand": [[0, 33554431], [0, 0]]}')
    refused(capsys, ["bound", "-t", "ring:n=2", "-c", "custom", "--demand", f, "-s", "1MB"],
            tmp_path, "more than 4194304 chunks", limit=2.0)  # fmt: skip


@pytest.mark.parametrize(
    "doc, match",
    [
        ({"chunks": [[0, [33554431]]]}, "destination 33554431 is not a rank"),
        ({"chunks": [[99, [1]]]}, "source 99 is not a rank"),
        ({"ranks": 100_000_000_000, "chunks": [[0, [1]]]}, "demand is for 100000000000 ranks"),
        ([[0, 1, 1], [1, 0, 1], [1, 1, 0]], "demand is for 3 ranks but the topology has 2"),
        ({"demand": [[0, 1, 1], [1, 0, 1], [1, 1, 0]]}, "not 2x2"),
    ],
)
def test_demand_ranks_are_checked_against_the_topology(capsys, tmp_path, doc, match):
    f = tmp_path / "d.json"
    f.write_text(json.dumps(doc))
    refused(capsys, ["bound", "-t", "ring:n=2", "-c", "custom", "--demand", f, "-s", "1MB"],
            tmp_path, match, limit=2.0)  # fmt: skip


def test_a_chunk_list_longer_than_the_limit_stops_at_the_limit(monkeypatch):
    monkeypatch.setenv("COLLSYNTH_MAX_CHUNKS", "10")

    def endless():
        while True:
            yield (0, [1])

    with pytest.raises(CollsynthError, match="more than 10 chunks"):
        Collective.custom(2, endless())


# ------------------------------------------------------------------ 5. --scheduler
@pytest.mark.parametrize("address", ["ucx://127.0.0.1:9999", "tls://127.0.0.1:9999",
                                     "inproc://x", "tcp://127.0.0.1:0", "tcp://:8786"])  # fmt: skip
def test_scheduler_of_another_protocol_is_one_line(capsys, tmp_path, address):
    err = refused(capsys, [*COMPARE[:7], "--sizes", "1MB", "--scheduler", address], tmp_path,
                  "--scheduler")  # fmt: skip
    if "://" in address and not address.startswith("tcp"):
        assert "supported: tcp://HOST:PORT" in err, err


@pytest.fixture
def silent_port():
    """A local TCP port that accepts connections and never says anything."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    srv.settimeout(0.2)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                held.append(srv.accept()[0])
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    yield srv.getsockname()[1]
    stop.set()
    t.join()
    for c in held:
        c.close()
    srv.close()


def test_a_silent_scheduler_is_given_up_on(capsys, monkeypatch, tmp_path, silent_port):
    monkeypatch.setenv("COLLSYNTH_SCHEDULER_TIMEOUT", "1")
    argv = ["compare", "-t", "ring:n=4", "-c", "allgather", "--sizes", "1MB", "--algos", "ring",
            "--scheduler", f"tcp://127.0.0.1:{silent_port}"]  # fmt: skip
    refused(capsys, argv, tmp_path, r"did not answer within 2 s .*COLLSYNTH_SCHEDULER_TIMEOUT")
    monkeypatch.setenv("COLLSYNTH_SCHEDULER_TIMEOUT", "nan")
    refused(capsys, argv, tmp_path, "COLLSYNTH_SCHEDULER_TIMEOUT='nan' is not a number")


# ------------------------------------------------------------------ 6. run -s
@pytest.fixture(scope="module")
def ar4(tmp_path_factory) -> Path:
    s = tmp_path_factory.mktemp("run") / "ar.json"
    assert main(["synth", "-t", "ring:n=4", "-c", "allreduce", "-o", str(s)]) == 0
    return s


def test_run_size_beyond_memory_is_refused_before_launch(capsys, tmp_path, ar4):
    err = refused(capsys, ["run", ar4, "-s", "1PB", "--launch", "4"], tmp_path,
                  r"--size 1PB: .*the buffers of the 4 ranks on this machine need at least")  # fmt: skip
    assert "memory" in err
    refused(capsys, ["run", ar4, "-b", "1MB", "-e", "1PB", "-f", "1000", "--launch", "4"],
            tmp_path, r"size 1e\+\d\d B: .*need at least")  # fmt: skip


def test_run_without_launch_checks_one_rank(tmp_path, ar4):
    env = dict(os.environ, COLLSYNTH_MAX_RUN_BYTES="1000")
    env.pop("OMPI_COMM_WORLD_LOCAL_SIZE", None)
    p = subprocess.run([sys.executable, "-m", "collsynth", "run", str(ar4), "-s", "1KiB"],
                       capture_output=True, text=True, env=env, timeout=60)  # fmt: skip
    assert p.returncode == 2 and p.stdout == "", p
    assert p.stderr.splitlines() == [
        "collsynth: error: --size 1KiB: " + str(ar4) + ": the buffers of one rank on this "
        "machine need at least 3.072KB, more than the limit COLLSYNTH_MAX_RUN_BYTES=1000"
    ], p.stderr
    env["OMPI_COMM_WORLD_LOCAL_SIZE"] = "4"  # four ranks on this machine, as mpiexec says
    env["COLLSYNTH_MAX_RUN_BYTES"] = "5000"
    p = subprocess.run([sys.executable, "-m", "collsynth", "run", str(ar4), "-s", "1KiB"],
                       capture_output=True, text=True, env=env, timeout=60)  # fmt: skip
    assert p.returncode == 2 and "the 4 ranks" in p.stderr and "12.29KB" in p.stderr, p.stderr


def test_run_memory_limit_variable_is_checked(capsys, monkeypatch, tmp_path, ar4):
    monkeypatch.setenv("COLLSYNTH_MAX_RUN_BYTES", "-5")
    refused(capsys, ["run", ar4, "-s", "1KiB", "--launch", "4"], tmp_path,
            "COLLSYNTH_MAX_RUN_BYTES='-5' is not an integer from 1 to")  # fmt: skip


@pytest.mark.parametrize("kind", [k for k in CollKind if k is not CollKind.CUSTOM])
def test_io_chunk_counts_match_the_buffer_layout(kind):
    root = 2 if kind in (CollKind.BROADCAST, CollKind.REDUCE, CollKind.GATHER,
                         CollKind.SCATTER) else None  # fmt: skip
    coll = Collective(kind, 5, 3, root)
    ins, outs = io_chunk_counts(coll)
    assert ins.tolist() == [len(input_chunks(coll, r)) for r in range(5)]
    assert outs.tolist() == [len(output_chunks(coll, r)) for r in range(5)]


def test_io_chunk_counts_of_a_custom_collective():
    coll = Collective.custom(4, [(0, [1, 2]), (3, [0]), (0, [3])])
    ins, outs = io_chunk_counts(coll)
    assert ins.tolist() == [len(input_chunks(coll, r)) for r in range(4)] == [2, 0, 0, 1]
    assert outs.tolist() == [len(output_chunks(coll, r)) for r in range(4)] == [1, 1, 1, 1]


# ------------------------------------------------------------------ hypothesis
HUGE = st.integers(min_value=300, max_value=6000).map(lambda k: "9" * k)
ODD_NUMBER = st.one_of(
    HUGE,
    HUGE.map(lambda s: "-" + s),
    st.sampled_from(["NaN", "Infinity", "-Infinity", "1e400", "-1", "0", "0.5", "-0.0"]),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
)
DEEP = st.integers(min_value=30, max_value=20_000).map(lambda d: "[" * d + "]" * d)
ODD_JSON = st.one_of(
    ODD_NUMBER,
    DEEP,
    DEEP.map(lambda s: '{"a": ' + s + "}"),
    st.sampled_from(['"x"', "null", "true", "[]", "{}", '""', '[{"name": "get"}]']),
)


def _paths(obj, at=()):
    yield at
    items = (
        obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    )
    for k, v in items:
        yield from _paths(v, (*at, k))


def _replaced(doc, path, marker):
    if not path:
        return marker
    node = doc
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = marker
    return doc


@FUZZ
@given(which=st.integers(min_value=0), value=ODD_JSON)
def test_fuzz_check_mscclpp(capsys, tmp_path, inputs, which, value):
    doc = json.loads(inputs["plan"].read_text())
    paths = list(_paths(doc))
    doc = _replaced(doc, paths[which % len(paths)], "@@marker@@")
    f = tmp_path / "fuzz.json"
    f.write_text(json.dumps(doc).replace('"@@marker@@"', value))
    run(capsys, ["check-mscclpp", f], tmp_path)


ATTR = re.compile(r'="([^"]*)"')
ODD_ATTR = st.one_of(
    HUGE,
    st.sampled_from(["-1", "NaN", "1e400", "", " ", "0", "99999999999999999999", "x"]),
    st.text(alphabet="0123456789-+ .abc", max_size=8),
)


@FUZZ
@given(
    which=st.integers(min_value=0),
    value=ODD_ATTR,
    depth=st.one_of(st.just(0), st.integers(min_value=1, max_value=5000)),
)
def test_fuzz_check_xml(capsys, tmp_path, inputs, which, value, depth):
    text = inputs["xml"].read_text()
    spots = list(ATTR.finditer(text))
    m = spots[which % len(spots)]
    text = text[: m.start(1)] + value + text[m.end(1) :]
    if depth:  # nesting inside the first GPU
        at = text.index("<gpu")
        text = text[:at] + "<x>" * depth + "</x>" * depth + "\n  " + text[at:]
    f = tmp_path / "fuzz.xml"
    f.write_text(text)
    run(capsys, ["check-xml", f, "-t", "ring:n=4"], tmp_path)


LOG_NUMBER = st.one_of(
    st.integers(min_value=0, max_value=2**40).map(str), ODD_NUMBER, st.sampled_from(["N/A", "x"])
)
GARBAGE = st.one_of(
    st.sampled_from(
        [
            "NCCL INFO x",
            "[1] warn",
            "# size count",
            "#",
            "   ",
            "\x00\x01",
            "# nThread 1 nGpus 99999999999999999999999",
        ]
    ),  # fmt: skip
    st.text(max_size=40).filter(lambda s: "\n" not in s and "\r" not in s),
)


@FUZZ
@given(
    rows=st.lists(
        st.one_of(
            st.tuples(LOG_NUMBER, LOG_NUMBER, LOG_NUMBER).map(
                lambda t: ROW.replace("{size:>12} {count:>12}", f"{t[0]} {t[1]}").replace(
                    "18.01", t[2]
                )
            ),
            GARBAGE.map(lambda s: s + "\n"),
        ),
        max_size=30,
    ),
    extra=st.sampled_from([0, 0, 0, 4097]),
    clean=st.lists(st.integers(min_value=1, max_value=2**40), max_size=5),
)
def test_fuzz_nccl_tests_logs(capsys, tmp_path, rows, extra, clean):
    f = tmp_path / "fuzz.log"
    many = "".join(ROW.format(size=1024 + i, count=1) for i in range(extra))
    good = "".join(ROW.format(size=z, count=z // 32) for z in clean)
    f.write_text(_log_head() + good + "".join(rows) + many)
    rc, out, err = run(capsys, [*COMPARE, "--baseline", f, "--json"], tmp_path)
    if clean and not rows and not extra:
        assert rc == 0 and len(json.loads(out)["baseline"]["rows"]) == len(clean), err
    if extra:
        assert rc == 2, err


@st.composite
def alias_graphs(draw) -> str:
    """A ``meta:`` mapping of anchored lists whose items alias anchors before, at (a cycle)
    or after (undefined) their own, or hold odd scalars."""
    n = draw(st.integers(min_value=1, max_value=12))
    lines = ["meta:"]
    for i in range(n):
        items = draw(
            st.lists(
                st.one_of(
                    st.integers(min_value=0, max_value=n).map(lambda j: f"*a{j}"),
                    st.sampled_from(["1", "x", ".nan", "2020-13-45", "9" * 400, "{k: v}"]),
                ),
                min_size=1,
                max_size=4,
            )
        )
        lines.append(f"  k{i}: &a{i} [{', '.join(items)}]")
    return "\n".join(lines) + "\n"


@FUZZ
@given(meta=alias_graphs())
def test_fuzz_yaml_aliases(capsys, monkeypatch, tmp_path, inputs, meta):
    monkeypatch.setenv("COLLSYNTH_MAX_NODES", "20000")  # expansions stay quick to print
    data = yaml.safe_load(inputs["topo"].read_text())
    data.pop("meta", None)
    f = tmp_path / "fuzz.yaml"
    f.write_text(meta + yaml.safe_dump(data))
    rc, out, err = run(capsys, ["topo", "show", "-t", f, "--json"], tmp_path)
    cyclic = any(
        re.search(rf"\*a{i}\b", line.split("[", 1)[1])
        for i, line in enumerate(meta.splitlines()[1:])
    )
    if cyclic:
        assert rc == 2, err


DEMAND_ENTRY = st.one_of(
    st.integers(min_value=0, max_value=5),
    st.sampled_from([33_554_431, 4_194_305, 10**12, -1, 1.5, "x", None, float("nan")]),
)


@FUZZ
@given(
    form=st.sampled_from(["matrix", "dict", "chunks"]),
    n=st.integers(min_value=1, max_value=5),
    entries=st.lists(DEMAND_ENTRY, min_size=25, max_size=25),
    ranks=st.sampled_from([None, 4, 5, 0, 10**11]),
    chunk=st.tuples(
        st.one_of(st.integers(min_value=-2, max_value=6), st.just(33_554_431)),
        st.lists(st.one_of(st.integers(min_value=-2, max_value=6), st.just(2**40)), max_size=4),
    ),
)
def test_fuzz_demand_files(capsys, tmp_path, form, n, entries, ranks, chunk):
    matrix = [[entries[5 * i + j] if i != j else 0 for j in range(n)] for i in range(n)]
    if form == "matrix":
        doc: object = matrix
    elif form == "dict":
        doc = {"demand": matrix}
    else:
        doc = {"chunks": [[chunk[0], chunk[1]], [0, [1]]]}
    if ranks is not None and isinstance(doc, dict):
        doc["ranks"] = ranks
    f = tmp_path / "fuzz.json"
    f.write_text(json.dumps(doc))
    run(capsys, ["bound", "-t", "ring:n=4", "-c", "custom", "--demand", f, "-s", "1MB", "--json"],
        tmp_path)  # fmt: skip


SCHEME = st.sampled_from(
    ["", "tcp://", "tls://", "ucx://", "inproc://", "ws://", "TCP://", "tcp:/"]
)
HOST = st.sampled_from(["127.0.0.1", "localhost", "", "[::1]", "999.1.1.1", "h\x00st", "ü", "a b"])
PORT = st.one_of(
    st.integers(-5, 70000).map(str), st.sampled_from(["", "x", "80a", "1e3", "０", "8786:1"])
)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(scheme=SCHEME, host=HOST, port=PORT, colon=st.booleans())
def test_fuzz_scheduler_addresses(capsys, monkeypatch, scheme, host, port, colon):
    """Any ``--scheduler`` text ends within the connect bound with one line, exit 2 (nothing
    listens on these addresses), never a traceback or a hang."""
    monkeypatch.setenv("COLLSYNTH_SCHEDULER_TIMEOUT", "1")
    addr = scheme + host + (":" if colon else "") + port
    t0 = time.monotonic()
    rc = main(["compare", "-t", "ring:n=3", "-c", "allgather", "--algos", "ring",
               "--scheduler", addr, "--json"])  # fmt: skip
    out, err = capsys.readouterr()
    assert time.monotonic() - t0 < 8
    assert rc == 2 and out == "", (addr, out)
    assert err.startswith("collsynth: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
