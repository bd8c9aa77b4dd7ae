"""The binary schedule file (``.npz``): the JSON format's header, operations as columns.

A JSON schedule spells out every operation; at a million operations that is tens of megabytes
of text that takes many seconds to write and read. The binary form keeps the same content in a
zip archive (readable with ``numpy.load``):

* ``header.json``: the JSON file's top-level object without ``ops``, ``link_order`` and ``trees``
  (``format`` is ``collsynth-schedule-npz``, version 1; ``count`` gives the number of
  operations);
* one ``.npy`` array per operation column, the IR's own layout: ``src``, ``dst``, ``chunk``
  (integers), ``kind`` (0 copy, 1 reduce, 2 join), routes as ``route_ptr`` (count + 1 offsets) and
  ``route_links``, dependencies as ``dep_ptr`` and ``dep_ids``; optional ``start`` and
  ``duration`` (float seconds, NaN unplanned), ``step`` (-1 none), ``group`` (multicast or
  in-switch reduction, -1 none), ``part_lo``, ``part_hi``,
  ``part_den``; planned link orders as ``order_links``, ``order_ptr`` and ``order_ops``; the
  tree form, if any, as ``tree_*`` and ``edge_*`` columns (:meth:`TreeForm.to_columns
  <collsynth.schedule.trees.TreeForm.to_columns>`; JSON files keep it in ``trees``).

Integers are stored in the narrowest of int8/int16/int32/int64 that holds them and read back
as int64. Entries carry a fixed timestamp, so the same schedule gives the same bytes. Reading
checks every array (type, length, offsets, values) and the archive's expanded size against
``COLLSYNTH_MAX_FILE_BYTES`` before any further work. See ``docs/formats.md``.
"""

from __future__ import annotations

import io
import json
import zipfile
import zlib

import numpy as np

from ..arrays import unique
from ..errors import CollsynthError
from ..files import file_size_limit, parse_structured, read_bytes
from .ir import Schedule

FORMAT = "collsynth-schedule-npz"
VERSION = 1
HEADER = "header.json"
#: zip's earliest date: every entry carries it, so the bytes depend on the content only
_EPOCH = (1980, 1, 1, 0, 0, 0)
#: the tree form's columns (TreeForm.to_columns), all or none
_TREE_COLUMNS = ("tree_root", "tree_mult", "tree_in", "tree_ptr", "edge_from", "edge_to",
                 "edge_routed", "edge_route_ptr", "edge_route_links")  # fmt: skip
#: columns -> required; integer unless named in _FLOAT
_COLUMNS = {
    "src": True,
    "dst": True,
    "chunk": True,
    "kind": True,
    "route_ptr": True,
    "route_links": True,
    "dep_ptr": True,
    "dep_ids": True,
    "start": False,
    "duration": False,
    "step": False,
    "group": False,
    "part_lo": False,
    "part_hi": False,
    "part_den": False,
    "order_links": False,
    "order_ptr": False,
    "order_ops": False,
    **{name: False for name in _TREE_COLUMNS},
}
_FLOAT = {"start", "duration"}
_TOGETHER = (
    ("part_lo", "part_hi", "part_den"),
    ("order_links", "order_ptr", "order_ops"),
    _TREE_COLUMNS,
)


def is_binary(data: bytes) -> bool:
    """Whether ``data`` starts like a zip archive (a binary schedule)."""
    return data[:4] == b"PK\x03\x04"


def _narrow(a: np.ndarray) -> np.ndarray:
    """An integer array in the narrowest signed type that holds its values."""
    if a.size == 0:
        return a.astype(np.int8)
    lo, hi = int(a.min()), int(a.max())
    for t in (np.int8, np.int16, np.int32):
        info = np.iinfo(t)
        if info.min <= lo and hi <= info.max:
            return a.astype(t)
    return a.astype(np.int64)


def schedule_to_npz(s: Schedule, header: dict) -> bytes:
    """The binary file of ``s``; ``header``: the JSON form's top level without its columns
    (``schedule_to_dict``'s, built by :mod:`collsynth.schedule.io`)."""
    cols: dict[str, np.ndarray] = {
        "src": s.src,
        "dst": s.dst,
        "chunk": s.chunk,
        "kind": s.kind,
        "route_ptr": s.route_ptr,
        "route_links": s.route_links,
        "dep_ptr": s.dep_ptr,
        "dep_ids": s.dep_ids,
    }
    for name in ("start", "duration", "step", "group", "part_lo", "part_hi", "part_den"):
        value = getattr(s, name)
        if value is not None:
            cols[name] = value
    if s.link_order:
        links = sorted(s.link_order)
        ptr = np.zeros(len(links) + 1, dtype=np.int64)
        ptr[1:] = np.cumsum([len(s.link_order[l]) for l in links])
        cols["order_links"] = np.array(links, dtype=np.int64)
        cols["order_ptr"] = ptr
        cols["order_ops"] = (
            np.concatenate([np.asarray(s.link_order[l], dtype=np.int64) for l in links])
            if links
            else np.zeros(0, dtype=np.int64)
        )
    if s.trees is not None:
        cols.update(s.trees.to_columns())
    head = {"format": FORMAT, "version": VERSION, "count": s.num_ops}
    skip = ("format", "version", "trees")  # the trees are columns here
    head.update({k: v for k, v in header.items() if k not in skip})
    return write_zip(head, cols)


def write_zip(head: dict, cols: dict[str, np.ndarray]) -> bytes:
    """A binary file: ``head`` as ``header.json`` and each column as ``NAME.npy`` (integers
    narrowed, floats as float64), with fixed timestamps."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        _put(z, HEADER, (json.dumps(head, separators=(",", ":"), allow_nan=False)).encode())
        for name, a in cols.items():
            arr = np.ascontiguousarray(
                a.astype(np.float64) if name in _FLOAT else _narrow(np.asarray(a))
            )
            out = io.BytesIO()
            np.lib.format.write_array(out, arr, allow_pickle=False)
            _put(z, f"{name}.npy", out.getvalue())
    return buf.getvalue()


def _put(z: zipfile.ZipFile, name: str, data: bytes) -> None:
    info = zipfile.ZipInfo(name, date_time=_EPOCH)
    info.create_system = 3  # the same on every system (zip's "Unix")
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = 0o644 << 16
    z.writestr(info, data, compresslevel=1)


#: what reading a damaged archive may raise (bad compressed data, an encrypted or unknown
#: compression method, a truncated entry)
_ZIP_ERRORS = (zipfile.BadZipFile, zlib.error, OSError, ValueError, EOFError, RuntimeError,
               NotImplementedError, KeyError)  # fmt: skip


def read_npz(path: str) -> tuple[dict, dict[str, np.ndarray]]:
    """The header and checked columns of a binary schedule file (one line naming what is
    wrong otherwise); ``schedule_from_npz`` makes the schedule."""
    return parse_npz(read_bytes(path), path)


def parse_npz(data: bytes, where: str) -> tuple[dict, dict[str, np.ndarray]]:
    """``read_npz`` on the file's bytes."""
    from .io import check_format

    z, names, head = open_zip(data, where, set(_COLUMNS), "binary schedule")
    check_format(head, where, FORMAT, VERSION, "binary collsynth schedule", "binary schedule")
    count = head_count(head, where)
    cols = read_columns(z, names, where, _COLUMNS, _TOGETHER, "binary schedule")
    _check_columns(cols, count, where)
    return head, cols


def open_zip(data: bytes, where: str, columns: set[str], kind: str):
    """A binary file's archive, its entry names (each a known column's ``.npy`` or the
    header) and its header object; one line naming what is wrong otherwise."""
    limit = file_size_limit()
    try:
        z = zipfile.ZipFile(io.BytesIO(data))
        infos = z.infolist()
    except _ZIP_ERRORS as e:
        raise CollsynthError(f"{where}: not a readable {kind} ({e})") from None
    if sum(i.file_size for i in infos) > limit:
        raise CollsynthError(
            f"{where}: expands to more than {limit} bytes (COLLSYNTH_MAX_FILE_BYTES raises it)"
        )
    names = {i.filename for i in infos}
    if HEADER not in names:
        raise CollsynthError(f"{where}: a {kind} needs {HEADER}")
    extra = sorted(names - {HEADER} - {f"{c}.npy" for c in columns})
    if extra:
        raise CollsynthError(f"{where}: unknown entry {extra[0]!r} in a {kind}")
    try:
        head = parse_structured(z.read(HEADER).decode("utf-8"), f"{where} ({HEADER})")
    except UnicodeDecodeError:
        raise CollsynthError(f"{where}: {HEADER} is not UTF-8 text") from None
    except _ZIP_ERRORS as e:
        raise CollsynthError(f"{where}: {HEADER} cannot be read ({e})") from None
    if not isinstance(head, dict):
        raise CollsynthError(f"{where}: {HEADER} must hold a JSON object")
    return z, names, head


def head_count(head: dict, where: str, key: str = "count") -> int:
    """A non-negative integer of the header."""
    count = head.get(key)
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise CollsynthError(f"{where}: {HEADER}: {key} must be a non-negative integer")
    return count


def read_columns(z, names, where: str, columns: dict[str, bool], together, kind: str,
                 floats: frozenset[str] = frozenset(_FLOAT)) -> dict[str, np.ndarray]:  # fmt: skip
    """The columns of an archive (``columns``: name -> required; ``together``: groups given
    all or none), each checked by :func:`_array`."""
    cols: dict[str, np.ndarray] = {}
    for name, required in columns.items():
        entry = f"{name}.npy"
        if entry not in names:
            if required:
                raise CollsynthError(f"{where}: a {kind} needs the column {name!r}")
            continue
        cols[name] = _array(z, entry, name, where, name in floats)
    for group in together:
        have = [g for g in group if g in cols]
        if have and len(have) != len(group):
            missing = next(g for g in group if g not in cols)
            raise CollsynthError(f"{where}: column {have[0]!r} needs {missing!r} too")
    return cols


def _array(z: zipfile.ZipFile, entry: str, name: str, where: str, is_float: bool) -> np.ndarray:
    """One column: a one-dimensional array of the right type, as int64 or float64. The
    ``.npy`` header is checked against the bytes that follow it before any array is made."""
    try:
        raw = z.read(entry)
        f = io.BytesIO(raw)
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, _, dtype = np.lib.format.read_array_header_1_0(f)
        elif version == (2, 0):
            shape, _, dtype = np.lib.format.read_array_header_2_0(f)
        else:
            raise ValueError(f"unsupported .npy version {version}")
    except _ZIP_ERRORS as e:
        raise CollsynthError(f"{where}: column {name!r} cannot be read ({e})") from None
    if dtype.hasobject:
        raise CollsynthError(f"{where}: column {name!r} cannot be read (it holds objects)")
    if len(shape) != 1:
        raise CollsynthError(f"{where}: column {name!r} must be one-dimensional")
    body = memoryview(raw)[f.tell() :]
    if shape[0] * dtype.itemsize != len(body):
        raise CollsynthError(
            f"{where}: column {name!r} declares {shape[0]} values but holds {len(body)} bytes"
        )
    a = np.frombuffer(body, dtype=dtype, count=shape[0])
    if is_float:
        if a.dtype.kind not in "fiu":
            raise CollsynthError(f"{where}: column {name!r} must hold numbers")
        a = a.astype(np.float64)
        if np.any(np.isinf(a)):
            raise CollsynthError(f"{where}: column {name!r} holds an infinite value")
        return a
    if a.dtype.kind not in "iu" or (a.dtype.kind == "u" and a.size and a.max() >= 2**63):
        raise CollsynthError(f"{where}: column {name!r} must hold 64-bit integers")
    return a.astype(np.int64)


def _check_columns(cols: dict[str, np.ndarray], count: int, where: str) -> None:
    """Lengths, offsets and value ranges that the IR relies on (the rest is the verifier's)."""
    per_op = [n for n in ("src", "dst", "chunk", "kind", "start", "duration", "step", "group",
                          "part_lo", "part_hi", "part_den") if n in cols]  # fmt: skip
    for name in per_op:
        if len(cols[name]) != count:
            raise CollsynthError(
                f"{where}: column {name!r} has {len(cols[name])} values for {count} operations"
            )
    if np.any((cols["kind"] < 0) | (cols["kind"] > 2)):
        raise CollsynthError(f"{where}: column 'kind' must hold 0 (copy), 1 (reduce) or 2 (join)")
    check_offsets(cols["route_ptr"], len(cols["route_links"]), count, "route", where)
    check_offsets(cols["dep_ptr"], len(cols["dep_ids"]), count, "dep", where)
    if "group" in cols and np.any(cols["group"] < -1):
        raise CollsynthError(f"{where}: column 'group' must hold group ids or -1 (none)")
    check_plan_columns(cols, where)
    if "order_ptr" in cols:
        links = cols["order_links"]
        check_offsets(cols["order_ptr"], len(cols["order_ops"]), len(links), "order", where)
        if len(unique(links)) != len(links):
            raise CollsynthError(f"{where}: column 'order_links' names a link twice")
    if "tree_ptr" in cols:
        _check_trees(cols, where)


def check_plan_columns(cols: dict[str, np.ndarray], where: str) -> None:
    """Steps (a number or -1) and byte ranges (``0 <= lo < hi <= den``) where a file has
    them: what every binary schedule form checks on reading."""
    if "step" in cols and np.any(cols["step"] < -1):
        raise CollsynthError(f"{where}: column 'step' must hold step numbers or -1 (none)")
    if "part_den" in cols:
        lo, hi, den = cols["part_lo"], cols["part_hi"], cols["part_den"]
        if np.any(den < 1) or np.any(lo < 0) or np.any(lo >= hi) or np.any(hi > den):
            raise CollsynthError(
                f"{where}: parts need 0 <= part_lo < part_hi <= part_den (byte ranges of chunks)"
            )


def _check_trees(cols: dict[str, np.ndarray], where: str) -> None:
    """The tree columns' lengths, offsets and flags (the trees' shape is checked where they
    are lowered)."""
    n_trees = len(cols["tree_root"])
    for name in ("tree_mult", "tree_in"):
        if len(cols[name]) != n_trees:
            raise CollsynthError(
                f"{where}: column {name!r} has {len(cols[name])} values for {n_trees} trees"
            )
    n_edges = len(cols["edge_from"])
    check_offsets(cols["tree_ptr"], n_edges, n_trees, "tree", where)
    for name in ("edge_to", "edge_routed"):
        if len(cols[name]) != n_edges:
            raise CollsynthError(
                f"{where}: column {name!r} has {len(cols[name])} values for {n_edges} edges"
            )
    check_offsets(
        cols["edge_route_ptr"], len(cols["edge_route_links"]), n_edges, "edge_route", where
    )
    if np.any(cols["tree_mult"] < 1):
        raise CollsynthError(f"{where}: column 'tree_mult' must hold multiplicities >= 1")
    for name in ("tree_in", "edge_routed"):
        if np.any((cols[name] != 0) & (cols[name] != 1)):
            raise CollsynthError(f"{where}: column {name!r} must hold 0 or 1")
    unrouted = cols["edge_routed"] == 0
    if np.any(np.diff(cols["edge_route_ptr"])[unrouted] != 0):
        raise CollsynthError(f"{where}: an edge without a route (edge_routed 0) has links")


def trees_of(cols: dict[str, np.ndarray]):
    """The tree form of checked columns (None when the file has none)."""
    if "tree_ptr" not in cols:
        return None
    from .trees import TreeForm

    return TreeForm.from_columns(cols)


def check_offsets(ptr: np.ndarray, n_items: int, n_rows: int, what: str, where: str) -> None:
    if len(ptr) != n_rows + 1 or (len(ptr) and (ptr[0] != 0 or ptr[-1] != n_items)):
        raise CollsynthError(
            f"{where}: column '{what}_ptr' must hold {n_rows + 1} offsets from 0 to {n_items}"
        )
    if np.any(np.diff(ptr) < 0):
        raise CollsynthError(f"{where}: column '{what}_ptr' must not decrease")


def link_order_of(cols: dict[str, np.ndarray]) -> dict[int, np.ndarray] | None:
    """The planned link orders of checked columns (None when the file has none)."""
    if "order_ptr" not in cols:
        return None
    ptr, ops = cols["order_ptr"], cols["order_ops"]
    return {
        int(l): ops[ptr[i] : ptr[i + 1]].copy() for i, l in enumerate(cols["order_links"].tolist())
    }


__all__ = [
    "FORMAT",
    "VERSION",
    "check_offsets",
    "check_plan_columns",
    "head_count",
    "is_binary",
    "open_zip",
    "parse_npz",
    "read_columns",
    "read_npz",
    "schedule_to_npz",
    "write_zip",
]
