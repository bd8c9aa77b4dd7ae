"""The binary schedule file (.npz): round trips, same bytes, and every malformed file refused
in one line."""

from __future__ import annotations

import io
import json
import zipfile

import numpy as np
import pytest

from collsynth.cli import main
from collsynth.errors import CollsynthError
from collsynth.schedule.binary import FORMAT, HEADER
from collsynth.schedule.io import load_schedule, save_schedule, schedule_to_dict
from collsynth.verify import verify
from conftest import assert_same_schedule, round_trip_cases


@pytest.mark.parametrize("case", sorted(round_trip_cases()))
def test_binary_round_trip_and_same_bytes(case, tmp_path):
    s = round_trip_cases()[case]()
    path = str(tmp_path / "s.npz")
    save_schedule(s, path)
    first = open(path, "rb").read()
    loaded = load_schedule(path)
    assert_same_schedule(s, loaded)
    assert verify(loaded).ok
    assert schedule_to_dict(loaded) == schedule_to_dict(s)  # the JSON form is the same too
    save_schedule(loaded, path)
    assert open(path, "rb").read() == first
    # it is a plain zip of .npy arrays and a JSON header
    with np.load(path, allow_pickle=False) as z:
        assert np.array_equal(z["src"], s.src)
    head = json.loads(zipfile.ZipFile(path).read(HEADER))
    assert head["format"] == FORMAT and head["count"] == s.num_ops


def _valid(tmp_path) -> str:
    s = round_trip_cases()["full"]()
    path = str(tmp_path / "good.npz")
    save_schedule(s, path)
    return path


def _rewrite(src: str, dst: str, drop=(), put=None) -> str:
    """A copy of archive ``src`` without the entries in ``drop`` and with ``put``'s (name ->
    bytes, or an array written as .npy)."""
    put = dict(put or {})
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            if info.filename in drop or info.filename in put:
                continue
            zout.writestr(info.filename, zin.read(info.filename))
        for name, value in put.items():
            if isinstance(value, np.ndarray):
                buf = io.BytesIO()
                np.lib.format.write_array(buf, value, allow_pickle=value.dtype == object)
                value = buf.getvalue()
            zout.writestr(name, value)
    return dst


def _header(path: str) -> dict:
    return json.loads(zipfile.ZipFile(path).read(HEADER))


def _cases(good: str):
    s = load_schedule(good)
    n = s.num_ops
    head = _header(good)
    ptr = s.route_ptr.copy()
    ptr[1], ptr[2] = ptr[2], ptr[1]
    return {
        "no header": ({"drop": [HEADER]}, "needs header.json"),
        "unknown entry": ({"put": {"extra.npy": np.zeros(1)}}, "unknown entry 'extra.npy'"),
        "no src": ({"drop": ["src.npy"]}, "needs the column 'src'"),
        "short dst": ({"put": {"dst.npy": s.dst[:-1]}}, f"{n - 1} values for {n} operations"),
        "bad offsets": ({"put": {"route_ptr.npy": s.route_ptr[:-1]}}, "offsets from 0"),
        "decreasing": ({"put": {"route_ptr.npy": ptr}}, "must not decrease"),
        "kind 3": ({"put": {"kind.npy": np.full(n, 3, dtype=np.int8)}}, "1 (reduce) or 2 (join)"),
        "float src": ({"put": {"src.npy": s.src.astype(float)}}, "64-bit integers"),
        "2-D": ({"put": {"chunk.npy": s.chunk.reshape(1, -1)}}, "one-dimensional"),
        "pickled": ({"put": {"chunk.npy": np.array([None] * n, dtype=object)}}, "cannot be"),
        "step -2": ({"put": {"step.npy": np.full(n, -2)}}, "step numbers or -1"),
        "infinite start": ({"put": {"start.npy": np.full(n, np.inf)}}, "infinite value"),
        "part alone": ({"drop": ["part_hi.npy", "part_den.npy"]}, "needs 'part_hi' too"),
        "format": ({"put": {HEADER: json.dumps({**head, "format": "x"})}}, "not a binary"),
        "version": ({"put": {HEADER: json.dumps({**head, "version": 2})}}, "version 2"),
        "header key": ({"put": {HEADER: json.dumps({**head, "ops": {}})}}, "unknown key 'ops'"),
        "not json": ({"put": {HEADER: b"{"}}, "header.json"),
        "not utf-8": ({"put": {HEADER: b"\xff\xfe"}}, "not UTF-8"),
    }


CASE_NAMES = [
    "no header", "unknown entry", "no src", "short dst", "bad offsets", "decreasing", "kind 3",
    "float src", "2-D", "pickled", "step -2", "infinite start", "part alone", "format",
    "version", "header key", "not json", "not utf-8",
]  # fmt: skip


@pytest.mark.parametrize("name", CASE_NAMES)
def test_malformed_binary_refused_in_one_line(name, tmp_path, capsys):
    good = _valid(tmp_path)
    change, expect = _cases(good)[name]
    bad = _rewrite(good, str(tmp_path / "bad.npz"), **change)
    with pytest.raises(CollsynthError, match=expect.replace("(", r"\(").replace(")", r"\)")):
        load_schedule(bad)
    rc = main(["verify", bad])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.splitlines()) == 1 and "bad.npz" in err, err


def test_trees_are_columns(tmp_path):
    """A tree form is stored as columns, not in the header; damaged tree columns are refused
    in one line."""
    s = round_trip_cases()["trees"]()
    good = str(tmp_path / "trees.npz")
    save_schedule(s, good)
    assert "trees" not in _header(good)
    with np.load(good, allow_pickle=False) as z:
        assert len(z["tree_root"]) == len(s.trees.trees)
        cols = {name: z[name] for name in z.files}
    assert load_schedule(good).trees.to_dict() == s.trees.to_dict()
    assert not cols["edge_routed"].any()  # default routes: an edge with links must say so
    links_ptr = np.ones_like(cols["edge_route_ptr"])
    links_ptr[0] = 0
    bad_cases = {
        "mult 0": ({"tree_mult.npy": np.zeros_like(cols["tree_mult"])}, "multiplicities >= 1"),
        "huge rank": (
            {"edge_from.npy": np.full(len(cols["edge_from"]), 2**40, dtype=np.int64)},
            "holds a value beyond",
        ),
        "direction 2": ({"tree_in.npy": np.full_like(cols["tree_in"], 2)}, "0 or 1"),
        "short ptr": ({"tree_ptr.npy": cols["tree_ptr"][:-1]}, "'tree_ptr' must hold"),
        "short to": ({"edge_to.npy": cols["edge_to"][:-1]}, "values for"),
        "links without route": (
            {"edge_route_ptr.npy": links_ptr, "edge_route_links.npy": np.zeros(1, np.int64)},
            "without a route",
        ),
        "both": (
            {HEADER: json.dumps({**_header(good), "trees": s.trees.to_dict()})},
            "both in header.json and as columns",
        ),
    }
    for name, (put, expect) in bad_cases.items():
        bad = _rewrite(good, str(tmp_path / "bad.npz"), put=put)
        with pytest.raises(CollsynthError, match=expect):
            load_schedule(bad)
    alone = _rewrite(good, str(tmp_path / "bad.npz"), drop=["edge_to.npy"])
    with pytest.raises(CollsynthError, match="needs 'edge_to' too"):
        load_schedule(alone)


def test_lying_and_damaged_entries(tmp_path):
    good = _valid(tmp_path)
    n = load_schedule(good).num_ops
    # an .npy header that declares far more values than the entry holds: refused before any
    # array is made (no memory error)
    buf = io.BytesIO()
    head = np.lib.format.header_data_from_array_1_0(np.zeros(n, dtype=np.int64))
    head["shape"] = (2**40,)
    np.lib.format.write_array_header_1_0(buf, head)
    buf.write(np.zeros(n, dtype=np.int64).tobytes())
    bad = _rewrite(good, str(tmp_path / "huge.npz"), put={"src.npy": buf.getvalue()})
    with pytest.raises(CollsynthError, match="declares 1099511627776 values"):
        load_schedule(bad)
    # damaged compressed data
    data = bytearray(open(good, "rb").read())
    start = data.find(b"src.npy") + len(b"src.npy")
    for i in range(start + 8, start + 40):
        data[i] ^= 0xFF
    (tmp_path / "damaged.npz").write_bytes(bytes(data))
    with pytest.raises(CollsynthError):
        load_schedule(str(tmp_path / "damaged.npz"))


def test_schedules_are_read_once_from_a_pipe(tmp_path):
    import os
    import threading

    s = round_trip_cases()["full"]()
    for ext in ("json", "npz"):
        src = str(tmp_path / f"s.{ext}")
        save_schedule(s, src)
        fifo = str(tmp_path / f"pipe-{ext}")
        os.mkfifo(fifo)
        writer = threading.Thread(target=lambda: open(fifo, "wb").write(open(src, "rb").read()))
        writer.start()
        got = load_schedule(fifo)
        writer.join()
        assert_same_schedule(s, got)


def test_truncated_and_expanding_archives(tmp_path, monkeypatch):
    good = _valid(tmp_path)
    data = open(good, "rb").read()
    cut = tmp_path / "cut.npz"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(CollsynthError, match="not a readable binary schedule"):
        load_schedule(str(cut))
    monkeypatch.setenv("COLLSYNTH_MAX_FILE_BYTES", str(len(data) + 1))
    with pytest.raises(CollsynthError, match="expands to more than"):
        load_schedule(good)  # the file fits the limit, its contents do not


def test_cli_writes_and_reads_binary(tmp_path, capsys):
    npz, js = str(tmp_path / "ag.npz"), str(tmp_path / "ag.json")
    for out in (npz, js):
        rc = main(["synth", "-t", "dgx1", "-c", "allgather", "--algo", "ring", "-o", out,
                   "--no-timing", "-q"])  # fmt: skip
        assert rc == 0, capsys.readouterr().err
    assert open(npz, "rb").read(4) == b"PK\x03\x04"
    capsys.readouterr()
    outs = []
    for path in (npz, js):
        assert main(["simulate", path, "-s", "1GB", "--json"]) == 0
        outs.append(json.loads(capsys.readouterr().out))
    for o in outs:
        o.pop("timing", None)
        assert o.pop("schedule").endswith(("ag.npz", "ag.json"))
    assert outs[0] == outs[1]
