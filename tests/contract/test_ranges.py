"""Numbers and topologies: declared ranges, strict number parsing, limit variables, sizes.

Every physical quantity has a declared range (``collsynth.units``: sizes 1 B .. 2^50 B,
bandwidths 1 B/s .. 1e15 B/s, latencies 0 .. 1000 s); a value outside it, a number that is not
plain ASCII, or a garbage limit variable is refused in one stderr line naming the quantity
(exit 2), wherever it enters: flags, topology spec parameters, topology files, NCCL XML and
nvidia-smi files. Inside the ranges every output is finite. Names with control characters or
lone surrogates are refused where they enter. Huge topologies are summarised with memory
linear in their size, and over-limit imports are refused while they are read.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
import unicodedata
import warnings
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collsynth.cli import main
from collsynth.errors import CollsynthError
from collsynth.files import LIMIT_MAXIMUMS, env_limit
from collsynth.topology import load_topology
from collsynth.topology.model import MAX_LINKS, TopologyBuilder, _diameter_bounds
from collsynth.units import BANDWIDTH, LATENCY, SIZE, parse_bandwidth, parse_size, parse_time

DATA = Path(__file__).resolve().parents[1] / "data" / "topo"
LIMIT_VARS = sorted(LIMIT_MAXIMUMS)


def _no_constant(name: str) -> None:
    raise AssertionError(f"non-strict JSON constant {name} in the output")


def run(capsys, *argv: str) -> tuple[int, str, str]:
    """Run the CLI in-process; no Python warning may be raised while it runs."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rc = main(list(argv))
    out, err = capsys.readouterr()
    assert not caught, [str(w.message) for w in caught]
    return rc, out, err


def check_contract(rc: int, out: str, err: str, quantity: str | None = None) -> None:
    """Exit 0 with strict JSON and nothing on stderr, or exit 2 with one line naming
    ``quantity``."""
    assert rc in (0, 2), (rc, err)
    if rc == 0:
        assert err == ""
        json.loads(out, parse_constant=_no_constant)
    else:
        assert out == ""
        assert err.startswith("collsynth: error: ") and err.count("\n") == 1, err
        assert "Traceback" not in err and "Warning" not in err
        if quantity is not None:
            assert quantity in err, err


def write_topology(path: Path, nodes: list, links: list) -> str:
    path.write_text(json.dumps({"nodes": nodes, "links": links}), encoding="utf-8")
    return str(path)


# ------------------------------------------------------------------------------ sizes
@pytest.mark.parametrize(
    "size, why",
    [
        ("1e-300B", "too small"),
        ("0.5B", "too small"),
        ("１MB", "ASCII"),  # full-width digit one
        ("٣KB", "ASCII"),  # Arabic-Indic three
        ("nan", "not a size"),
        ("NaN", "not a size"),
        ("inf", "not a size"),
        ("-inf", "not a size"),
        ("Infinity", "not a size"),
        ("-1MB", "negative"),
        ("-0.5", "negative"),
        ("0", "positive"),
        ("0B", "positive"),
        ("0.0KB", "positive"),
        ("-0", "positive"),
        ("1e400", "not finite"),
        ("1.1PiB", "too large"),
        ("2e15", "too large"),
        ("1_000", "not a size"),
        ("1" * 200, "not a size"),
    ],
)
def test_bad_size_flag(capsys, size, why):
    rc, out, err = run(capsys, "bound", "-t", "ring:n=4", "-c", "allgather", f"--size={size}")
    check_contract(rc, out, err, "--size")
    assert rc == 2 and why in err


@pytest.mark.parametrize("sizes", ["1KB,,1MB", "1KB,", ",1KB", "1KB, ,1MB", "1KB:1MB:x２"])
def test_bad_size_lists(capsys, sizes):
    rc, out, err = run(
        capsys, "compare", "-t", "ring:n=4", "-c", "allgather", "--algos", "spt", "--sizes", sizes
    )
    check_contract(rc, out, err, "--sizes")
    assert rc == 2


def test_range_edges_are_accepted():
    assert parse_size("1B") == SIZE.lo == 1.0
    assert parse_size("1PiB") == SIZE.hi == 2.0**50
    assert parse_bandwidth("1B/s") == BANDWIDTH.lo and parse_bandwidth("1PB/s") == BANDWIDTH.hi
    assert parse_time("0s", "alpha", LATENCY) == 0.0
    assert parse_time("1000s", "alpha", LATENCY) == LATENCY.hi
    with pytest.raises(CollsynthError, match="latency range"):
        parse_time("1000.001s", "alpha", LATENCY)


# ------------------------------------------------------------------------------ bandwidths
@pytest.mark.parametrize(
    "spec, quantity",
    [
        ("ring:n=4,bw=1e-320", "bandwidth range"),
        ("ring:n=4,bw=1e308", "bandwidth range"),
        ("ring:n=4,bw=0", "bandwidth range"),
        ("ring:n=4,bw=-25GB/s", "bandwidth range"),
        ("ring:n=4,bw=nan", "not a bandwidth"),
        ("ring:n=4,bw=2PB/s", "bandwidth range"),
        ("ring:n=4,alpha=2000s", "latency range"),
        ("ring:n=4,alpha=-1us", "latency range"),
        ("ring:n=１0", "not an integer"),
        ("ring:n=1_0", "not an integer"),
        ("wan:km=1e300", "latency range"),  # derived alpha: refused by the topology builder
        ("wan:connectivity=nan", "not a number"),
        ("dgx1:nvlink=1e-300", "bandwidth range"),
    ],
)
def test_bad_spec_parameters(capsys, spec, quantity):
    rc, out, err = run(capsys, "topo", "show", "-t", spec, "--json")
    check_contract(rc, out, err, quantity)
    assert rc == 2


@pytest.mark.parametrize(
    "bw, alpha, quantity",
    [
        (1e-300, 0.0, "bandwidth range"),
        (1e300, 0.0, "bandwidth range"),
        (0, 0.0, "bandwidth range"),
        ("1e-320B/s", 0.0, "bandwidth range"),
        (10**400, 0.0, "t.json"),  # refused by the JSON reader or the range
        (1e9, 1e9, "latency range"),
        (1e9, -1.0, "latency range"),
        (1e9, "5000s", "latency range"),
    ],
)
def test_bad_topology_file_numbers(capsys, tmp_path, bw, alpha, quantity):
    path = write_topology(
        tmp_path / "t.json",
        ["a", "b"],
        [{"src": "a", "dst": "b", "bw": bw, "alpha": alpha, "bidirectional": True}],
    )
    rc, out, err = run(capsys, "topo", "show", "-t", path, "--json")
    check_contract(rc, out, err, quantity)
    assert rc == 2 and "t.json" in err


def test_spread_out_bandwidths_are_refused_quickly(capsys, tmp_path):
    """The 1e-300 .. 1e300 spread that kept ForestColl busy for minutes is refused at once."""
    links = [
        {"src": f"g{i}", "dst": f"g{(i + 1) % 4}", "bw": bw, "bidirectional": True}
        for i, bw in enumerate([1e-300, 1e300, 1e9, 1e12])
    ]
    path = write_topology(tmp_path / "spread.json", [f"g{i}" for i in range(4)], links)
    t0 = time.monotonic()
    rc, out, err = run(
        capsys,
        "synth",
        "-t",
        path,
        "-c",
        "allgather",
        "-a",
        "forestcoll",
        "-o",
        str(tmp_path / "s"),
    )
    assert time.monotonic() - t0 < 10
    check_contract(rc, out, err, "bandwidth range")
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize(
    "spec",
    [
        "ring:n=4,bw=1B/s,alpha=1000s",
        "ring:n=4,bw=1PB/s,alpha=0",
        "dgx1:nvlink=1B/s",
        "star:n=5,bw=1PB/s,alpha=1000s",
    ],
)
@pytest.mark.parametrize("size", ["1B", "1PiB"])
def test_range_extremes_stay_finite(capsys, spec, size):
    for argv in (
        ["bound", "-t", spec, "-c", "allreduce", "-s", size, "--json"],
        ["compare", "-t", spec, "-c", "allreduce", "--algos", "spt,ring", "--sizes", size],
    ):
        rc, out, err = run(capsys, *argv, *([] if "--json" in argv else ["--json"]))
        assert rc == 0, err
        check_contract(rc, out, err)


# ------------------------------------------------------------------------------ limit variables
@pytest.mark.parametrize("var", LIMIT_VARS)
@pytest.mark.parametrize(
    "value", ["abc", "1e400", "9" * 400, "0", "-5", "1.5", "１０", "0x10", "1_000", "+3"]
)
def test_limit_variables_refuse_garbage(capsys, monkeypatch, var, value):
    monkeypatch.setenv(var, value)
    with pytest.raises(CollsynthError, match=f"^{var}=.* is not an integer from 1 to"):
        env_limit(var, 7)


@pytest.mark.parametrize("var", LIMIT_VARS)
def test_limit_variables_accept_their_range(monkeypatch, var):
    top = LIMIT_MAXIMUMS[var]
    for text, value in ((" 12 ", 12), ("1", 1), (str(top), top)):
        monkeypatch.setenv(var, text)
        assert env_limit(var, 7) == value
    monkeypatch.setenv(var, str(top + 1))
    with pytest.raises(CollsynthError, match=str(top)):
        env_limit(var, 7)
    monkeypatch.setenv(var, "")
    assert env_limit(var, 7) == 7


@pytest.mark.parametrize(
    "var, argv",
    [
        ("COLLSYNTH_MAX_CHUNKS", ["bound", "-t", "ring:n=4", "-c", "allgather", "-s", "1MB"]),
        ("COLLSYNTH_MAX_FILE_BYTES", ["topo", "show", "-t", "FILE", "--json"]),
    ],
)
@pytest.mark.parametrize("value", ["abc", "1e400", "9" * 400])
def test_limit_variables_through_the_cli(capsys, monkeypatch, tmp_path, var, argv, value):
    path = write_topology(tmp_path / "t.json", ["a", "b"], [{"src": "a", "dst": "b", "bw": 1e9}])
    monkeypatch.setenv(var, value)
    argv = [path if a == "FILE" else a for a in argv]
    rc, out, err = run(capsys, *argv)
    check_contract(rc, out, err, var)
    assert rc == 2


def test_a_huge_file_limit_reads_normally(capsys, monkeypatch, tmp_path):
    """The largest accepted COLLSYNTH_MAX_FILE_BYTES allocates nothing up front."""
    path = write_topology(
        tmp_path / "t.json",
        ["a", "b"],
        [{"src": "a", "dst": "b", "bw": 1e9, "bidirectional": True}],
    )
    monkeypatch.setenv("COLLSYNTH_MAX_FILE_BYTES", str(LIMIT_MAXIMUMS["COLLSYNTH_MAX_FILE_BYTES"]))
    rc, out, err = run(capsys, "topo", "show", "-t", path, "--json")
    assert rc == 0 and json.loads(out)["links"] == 2


# ------------------------------------------------------------------------------ names
@pytest.mark.parametrize(
    "name", ["a\x00b", "a\nb", "a\rb", "\x1b[31mred", "a\u2028b", "tab\there", "a\x7f", "\udc80"]
)
def test_bad_node_names_in_topology_files(capsys, tmp_path, name):
    path = write_topology(
        tmp_path / "t.json",
        [name, "b"],
        [{"src": name, "dst": "b", "bw": 1e9, "bidirectional": True}],
    )
    rc, out, err = run(capsys, "topo", "show", "-t", path)
    check_contract(rc, out, err, "node name")
    assert rc == 2 and "t.json" in err


def test_bad_names_in_yaml_topology(capsys, tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text('nodes: ["a\\nb", "c"]\nlinks: [{src: "a\\nb", dst: c, bw: 1e9}]\n')
    rc, out, err = run(capsys, "topo", "show", "-t", str(path))
    check_contract(rc, out, err, "node name")
    assert rc == 2


def test_surrogates_in_attributes_and_meta(capsys, tmp_path):
    for extra in ({"meta": {"x": "\udc80"}}, {"name": "t\udc80"}):
        data = {"nodes": ["a", "b"], "links": [{"src": "a", "dst": "b", "bw": 1e9}], **extra}
        (tmp_path / "t.json").write_text(json.dumps(data))
        rc, out, err = run(capsys, "topo", "show", "-t", str(tmp_path / "t.json"))
        check_contract(rc, out, err)
        assert rc == 2 and "U+DC80" in err


def test_names_never_reach_the_msccl_xml(capsys, tmp_path):
    """The reported path: a newline in a node name got into the MSCCL XML."""
    nodes = [f"g{i}" for i in range(3)] + ["evil\n<x/>"]
    links = [
        {"src": a, "dst": b, "bw": 1e9, "bidirectional": True}
        for a, b in zip(nodes, nodes[1:] + nodes[:1])
    ]
    path = write_topology(tmp_path / "t.json", nodes, links)
    rc, out, err = run(
        capsys, "synth", "-t", path, "-c", "allgather", "-o", str(tmp_path / "s.json")
    )
    check_contract(rc, out, err, "node name")
    assert rc == 2 and not (tmp_path / "s.json").exists()


def _nccl_xml(tmp_path: Path, old: str, new: str) -> str:
    text = (DATA / "dgx1.xml").read_text()
    assert old in text
    path = tmp_path / "topo.xml"
    path.write_text(text.replace(old, new, 1))
    return f"nccl-xml:{path},nodes=2"


@pytest.mark.parametrize(
    "old, new, expect",
    [
        ('link_width="16"', 'link_width="-4"', "link_width -4"),
        ('link_width="16"', 'link_width="64"', "link_width 64"),
        ('link_width="16"', 'link_width="１６"', "not an integer"),
        ('speed="100000"', 'speed="-100000"', "negative"),
        ('name="mlx5_0"', 'name="mlx&#10;0"', "U+000A"),
        ('name="mlx5_0"', 'name="mlx&#133;0"', "U+0085"),  # NEL, a C1 control
        ('name="mlx5_0"', 'name="mlx&#x2028;0"', "U+2028"),  # line separator
    ],
)
def test_bad_nccl_xml_values(capsys, tmp_path, old, new, expect):
    rc, out, err = run(capsys, "topo", "show", "-t", _nccl_xml(tmp_path, old, new), "--json")
    check_contract(rc, out, err, "topo.xml")
    assert rc == 2 and expect in err


def test_nccl_xml_link_speed_negative(capsys, tmp_path):
    text = (DATA / "dgx1.xml").read_text()
    assert 'link_speed="' in text
    head, _, rest = text.partition('link_speed="')
    value, _, tail = rest.partition('"')
    (tmp_path / "topo.xml").write_text(f'{head}link_speed="-{value}"{tail}')
    rc, out, err = run(capsys, "topo", "show", "-t", f"nccl-xml:{tmp_path / 'topo.xml'}")
    check_contract(rc, out, err, "link_speed")
    assert rc == 2


# ------------------------------------------------------------------------------ topology sizes
def _smi_matrix(path: Path, n: int, cell: str = "NV1", rows: int | None = None) -> str:
    names = [f"GPU{i}" for i in range(n)]
    lines = ["\t" + "\t".join(names) + "\tCPU Affinity\tNUMA Affinity"]
    for i in range(n if rows is None else rows):
        cells = ["X" if i == j else cell for j in range(n)]
        lines.append(names[i] + "\t" + "\t".join(cells) + "\t0-63\t0")
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_smi_matrix_over_the_link_limit_is_refused_at_the_header(capsys, tmp_path):
    path = _smi_matrix(tmp_path / "big.txt", 3000, rows=3)  # 3000 devices: 9M pairs
    t0 = time.monotonic()
    rc, out, err = run(capsys, "topo", "show", "-t", f"nvidia-smi:{path}", "--json")
    assert time.monotonic() - t0 < 10
    check_contract(rc, out, err, "line 1")
    assert rc == 2 and str(MAX_LINKS) in err


def test_smi_nvlinks_are_counted_while_reading(capsys, tmp_path):
    """300 all-NVLink GPUs times nodes=100 is 8.97M links: refused part-way through."""
    path = _smi_matrix(tmp_path / "nv.txt", 300)
    spec = f"nvidia-smi:{path},nvswitch=no,nodes=100"
    t0 = time.monotonic()
    rc, out, err = run(capsys, "topo", "show", "-t", spec, "--json")
    assert time.monotonic() - t0 < 10
    check_contract(rc, out, err, "links")
    assert rc == 2 and "line 2" in err and "nodes=100" in err


def test_cluster_over_the_limits_is_refused_before_building():
    from collsynth.topology.cluster import NodePlan, PlanNic, build_cluster

    plan = NodePlan("big")
    plan.gpu("g0")
    plan.gpu("g1")
    for _ in range(1100):  # 2200 links per node, times 4096 nodes: 9M links
        plan.link("g0", "g1", 1e9, 0.0, "nvlink")
    plan.nics.append(PlanNic("g0", 1e9, 1e9))
    t0 = time.monotonic()
    with pytest.raises(CollsynthError, match=r"nodes=4096 would make .* links, more than"):
        build_cluster(plan, 4096, "rail", 0, "big", {})
    assert time.monotonic() - t0 < 2


_MEMORY_LIMITED = """
import resource, sys
limit = int(sys.argv[1]) << 20
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
from collsynth.cli import main
sys.exit(main(sys.argv[2:]))
"""


def _run_limited(mib: int, *argv: str) -> tuple[int, str, str, float]:
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", _MEMORY_LIMITED, str(mib), *argv],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"},
    )
    return proc.returncode, proc.stdout, proc.stderr, time.monotonic() - t0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS on Linux")
def test_topo_show_of_a_big_star_in_bounded_memory():
    """A dense ranks x nodes matrix of a 20000-rank star would need 3.2 GB."""
    rc, out, err, _ = _run_limited(1536, "topo", "show", "-t", "star:n=20000", "--json")
    assert rc == 0, err
    info = json.loads(out, parse_constant=_no_constant)
    assert info["compute_nodes"] == 20000 and info["hop_diameter"] == 2


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS on Linux")
@pytest.mark.parametrize("spec", ["ring:n=65536", "star:n=65536"])
def test_topo_show_at_the_documented_maximum(spec):
    rc, out, err, seconds = _run_limited(2048, "topo", "show", "-t", spec, "--json")
    assert rc == 0, err
    assert seconds < 60
    info = json.loads(out, parse_constant=_no_constant)
    assert info["compute_nodes"] == 65536
    if spec.startswith("ring"):  # a ring's diameter is n/2; bounds when not proved in budget
        lo, hi = info.get("hop_diameter_bounds") or [info["hop_diameter"]] * 2
        assert lo <= 32768 <= hi and lo == 32768
    else:
        assert info["hop_diameter"] == 2


def test_bound_refuses_too_many_ranks_in_one_line(capsys):
    t0 = time.monotonic()
    rc, out, err = run(capsys, "bound", "-t", "ring:n=65536", "-c", "allgather", "-s", "1GB")
    assert time.monotonic() - t0 < 30
    check_contract(rc, out, err, "8192")
    assert rc == 2


# ------------------------------------------------------------------------------ hop diameter
@st.composite
def small_graphs(draw):
    """A random strongly connected directed multigraph with compute nodes and switches."""
    n = draw(st.integers(3, 9))
    kinds = draw(st.lists(st.sampled_from(["compute", "switch"]), min_size=n, max_size=n))
    kinds[0] = kinds[1] = "compute"
    order = draw(st.permutations(range(n)))
    edges = [(order[i], order[(i + 1) % n]) for i in range(n)]  # a cycle: strongly connected
    extra = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=12))
    edges += [(a, b) for a, b in extra if a != b]
    return kinds, edges


@settings(max_examples=60, deadline=None, derandomize=True)
@given(graph=small_graphs(), work=st.sampled_from([None, 1, 30, 100]))
def test_hop_diameter_bounds_hold(graph, work):
    kinds, edges = graph
    b = TopologyBuilder("g")
    for i, kind in enumerate(kinds):
        b.node(f"n{i}", kind)
    for a, c in edges:
        b.link(a, c, 1e9)
    topo = b.build()
    dist = topo.hop_distances()[:, topo.compute_nodes]
    exact = int(dist.max())
    lo, hi = _diameter_bounds(topo, work)
    assert lo <= exact <= hi
    if work is None:
        assert lo == hi == exact
    assert topo.hop_diameter == exact


# ------------------------------------------------------------------------------ hypothesis
_UNITS = st.sampled_from(["", "B", "b", "KB", "KiB", "MB", "GiB", "TB", "PiB", "PB", "k"])
_FLOATS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 1e-320, 5e-324, 1e-300, 1e308, 1.7976931348623157e308, 2.0**50]),
    st.floats(min_value=0.5, max_value=2e15),
)
_NUMBER_TEXT = st.one_of(
    _FLOATS.map(repr),
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
    st.sampled_from(["nan", "NaN", "-nan", "inf", "Infinity", "-inf", "1e400", "1e-400"]),
    st.text(alphabet="0123456789１２٣.eE+-_ ", min_size=1, max_size=12),
)
_SIZE_TEXT = st.builds(lambda n, u: f"{n}{u}", _NUMBER_TEXT, _UNITS)
_SETTINGS = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


@_SETTINGS
@given(size=_SIZE_TEXT)
def test_any_size_text(capsys, size):
    rc, out, err = run(
        capsys, "bound", "-t", "ring:n=4", "-c", "allgather", f"--size={size}", "--json"
    )
    check_contract(rc, out, err, "--size")
    if rc == 0:
        value = json.loads(out)["size_bytes"]
        assert SIZE.lo <= value <= SIZE.hi


@_SETTINGS
@given(sizes=st.lists(st.one_of(_SIZE_TEXT, st.just(""), st.just(" ")), min_size=1, max_size=4))
def test_any_size_list(capsys, sizes):
    rc, out, err = run(
        capsys,
        "compare",
        "-t",
        "ring:n=4",
        "-c",
        "allgather",
        "--algos",
        "ring",
        f"--sizes={','.join(sizes)}",
        "--json",
    )
    check_contract(rc, out, err, "--sizes")
    if any(not s.strip() for s in sizes):
        assert rc == 2


@_SETTINGS
@given(
    bw=st.builds(
        lambda n, u: f"{n}{u}", _NUMBER_TEXT, st.sampled_from(["", "B/s", "Gb/s", "PB/s"])
    ),
    alpha=st.builds(lambda n, u: f"{n}{u}", _NUMBER_TEXT, st.sampled_from(["", "s", "us", "ns"])),
)
def test_any_bandwidth_and_latency(capsys, bw, alpha):
    spec = f"ring:n=4,bw={bw},alpha={alpha}"
    rc, out, err = run(capsys, "bound", "-t", spec, "-c", "allreduce", "-s", "1PiB", "--json")
    check_contract(rc, out, err)
    if rc == 2:  # the parameter, or the spec when the text breaks its key=value syntax
        assert "ring parameter bw" in err or "ring parameter alpha" in err or "spec" in err
    if rc == 0:
        assert math.isfinite(json.loads(out)["time_s"])


@_SETTINGS
@given(bw=_FLOATS, alpha=_FLOATS)
def test_any_numbers_in_topology_files(capsys, tmp_path, bw, alpha):
    links = [{"src": "a", "dst": "b", "bw": bw, "alpha": alpha, "bidirectional": True}]
    path = write_topology(tmp_path / "h.json", ["a", "b"], links)
    rc, out, err = run(capsys, "bound", "-t", path, "-c", "allgather", "-s", "1MB", "--json")
    check_contract(rc, out, err, "h.json")
    inside = BANDWIDTH.lo <= bw <= BANDWIDTH.hi and LATENCY.lo <= alpha <= LATENCY.hi
    assert (rc == 0) == inside


@_SETTINGS
@given(
    var=st.sampled_from(LIMIT_VARS),
    value=st.one_of(
        st.text(max_size=12),
        st.integers(min_value=-(10**500), max_value=10**500).map(str),
        _FLOATS.map(repr),
    ),
)
def test_any_limit_variable(capsys, var, value):
    if "\x00" in value:
        value = value.replace("\x00", "")  # the environment cannot hold a NUL
    text = value.strip()
    ok = not text or (text.isascii() and text.isdigit() and 1 <= int(text) <= LIMIT_MAXIMUMS[var])
    old = os.environ.get(var)
    os.environ[var] = value
    try:
        try:
            got = env_limit(var, 7)
        except CollsynthError as e:
            assert not ok and var in str(e) and "\n" not in str(e)
        else:
            assert ok and got == (int(text) if text else 7)
        if var == "COLLSYNTH_MAX_CHUNKS":  # the CLI: one line, or a result
            rc, out, err = run(capsys, "bound", "-t", "ring:n=4", "-c", "allgather", "-s", "1MB")
            assert rc == (0 if ok and (not text or int(text) >= 4) else 2), err
            if rc == 2:
                assert err.count("\n") == 1 and var in err
    finally:
        if old is None:
            del os.environ[var]
        else:
            os.environ[var] = old


@_SETTINGS
@given(
    name=st.text(
        alphabet=st.characters(exclude_categories=()),  # surrogates and controls too
        min_size=1,
        max_size=8,
    )
)
def test_any_node_name(capsys, tmp_path, name):
    if name == "b":
        return
    links = [{"src": name, "dst": "b", "bw": 1e9, "bidirectional": True}]
    path = write_topology(tmp_path / "n.json", [name, "b"], links)
    rc, out, err = run(capsys, "topo", "show", "-t", path, "--json")
    check_contract(rc, out, err, "node name")
    bad = any(unicodedata.category(ch) in ("Cc", "Cs", "Zl", "Zp") for ch in name)
    assert (rc == 2) == bad
    if rc == 0:
        assert json.loads(out)["per_node"][0]["name"] == name


def test_topology_is_unchanged_inside_the_ranges():
    """The zoo's defaults sit inside the ranges (nothing that worked before is refused)."""
    for spec in ("dgx1", "mi250:chassis=2", "wan", "fat_tree", "dragonfly", "h800_rails"):
        topo = load_topology(spec)
        assert all(BANDWIDTH.lo <= l.bw <= BANDWIDTH.hi for l in topo.links)
        assert all(LATENCY.lo <= l.alpha <= LATENCY.hi for l in topo.links)


@pytest.mark.parametrize("cls", [["eth"], {"a": 1}, 3, None, ""])
def test_a_link_class_that_is_not_a_name_is_one_line(capsys, tmp_path, cls):
    """Found by the topology-file fuzz: a list as a link's class reached a set lookup."""
    nodes = [{"name": "g0", "kind": "compute"}, {"name": "g1", "kind": "compute"}]
    links = [
        {"src": "g0", "dst": "g1", "bw": 1e9, "alpha": 1e-6, "class": cls},
        {"src": "g1", "dst": "g0", "bw": 1e9, "alpha": 1e-6},
    ]
    path = write_topology(tmp_path / "t.json", nodes, links)
    rc, out, err = run(capsys, "topo", "show", path)
    check_contract(rc, out, err, "class")
    assert rc == 2


SMI_CELL = st.sampled_from(
    ["X", "NV1", "NV2", "NV12", "NV0", "NV-1", "NV99999999999999999999", "SYS", "PHB", "PXB",
     "PIX", "NODE", "SOC", "", "N/A", "NV", "\x00", "GPU0", "１"]
)  # fmt: skip


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    n=st.integers(0, 6),
    header=st.one_of(st.none(), st.integers(0, 9)),
    cells=st.lists(SMI_CELL, max_size=64),
    extra=st.sampled_from(
        ["", "\tCPU Affinity\tNUMA Affinity", "\tjunk", "\n\nLegend:\n X = Self"]
    ),
    opts=st.sampled_from(["", ",nvswitch=no", ",nodes=2", ",gen=nvlink3", ",nodes=0"]),
)
def test_any_nvidia_smi_matrix(capsys, tmp_path, n, header, cells, extra, opts):
    """``nvidia-smi topo -m`` matrices with odd headers, cells and options: a topology or one
    line, exit 2; never a traceback or a warning."""
    names = [f"GPU{i}" for i in range(n if header is None else header)]
    lines = ["\t" + "\t".join(names) + extra.split("\n")[0]]
    it = iter(cells)
    for i in range(n):
        row = [next(it, "X" if i == j else "NV1") for j in range(n)]
        lines.append(f"GPU{i}\t" + "\t".join(row) + "\t0-63\t0")
    lines += extra.split("\n")[1:]
    path = tmp_path / "m.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    rc, out, err = run(capsys, "topo", "show", "-t", f"nvidia-smi:{path}{opts}", "--json")
    check_contract(rc, out, err)
    if rc == 0:
        assert json.loads(out)["compute_nodes"] >= 1
