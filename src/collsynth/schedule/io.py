"""The collsynth schedule file format (JSON), version 1. See ``docs/formats.md``.

A name ending in ``.npz`` is written in the binary form (:mod:`collsynth.schedule.binary`: the
same header, operations as arrays); reading recognises either form by its first bytes.

A schedule file is self-contained: it embeds the topology it was made for::

    {
      "format": "collsynth-schedule", "version": 1,
      "topology": { ...a collsynth-topology object... },
      "collective": {"kind": "allgather", "ranks": 8, "chunks_per_rank": 1},
      "size": null,                       # bytes; required when ops carry start times
      "meta": {"algorithm": "spt", ...},
      "ops": {
        "count": 3,
        "src":   [0, 0, 1],               # ranks (topology compute nodes in order)
        "dst":   [1, 2, 3],
        "chunk": [0, 0, 0],
        "kind":  ["copy", "copy", "copy"],  # optional, default all copy
        "routes": [[0], [2], [7]],         # link ids (index into topology.links)
        "deps":  [[], [], [0]],            # optional, default none
        "start": [0.0, 0.0, 1e-6],         # optional (seconds, null = unplanned)
        "duration": [...],                 # optional (seconds, null = natural)
        "step":  [0, 0, 1],                # optional (-1 or null = none)
        "group": [-1, -1, -1],             # optional: multicast / in-switch reduction id
        "part":  [[0, 1, 2], ...]          # optional byte range [lo, hi, den] of the chunk
      },
      "link_order": {"7": [2, 5]},         # optional planned order per link id
      "trees": {"trees": [...]}            # optional tree form (see schedule/trees.py)
    }
"""

from __future__ import annotations

import json
import math
from typing import Any, TypeGuard

import numpy as np

from ..atomic import write_bytes_atomic, write_text_atomic
from ..collective import Collective
from ..errors import CollsynthError
from ..files import decode_text, parse_structured, read_bytes
from ..topology.io import topology_from_dict, topology_to_dict
from ..topology.model import Topology
from .compact import CompactSchedule
from .ir import OpKind, Schedule, ScheduleBuilder, _csr
from .timing import without_timing

FORMAT = "collsynth-schedule"
VERSION = 1

_TOP_KEYS = {
    "format",
    "version",
    "topology",
    "collective",
    "size",
    "meta",
    "ops",
    "link_order",
    "trees",
}
_OP_KEYS = {
    "count",
    "src",
    "dst",
    "chunk",
    "kind",
    "routes",
    "deps",
    "start",
    "duration",
    "step",
    "part",
    "group",
}


def _nan_to_none(values: np.ndarray) -> list:
    return [None if math.isnan(x) else x for x in values.tolist()]


def _header(s: Schedule, timing: bool, trees: bool = True) -> dict:
    """The file's top level without the operation columns and planned link orders (and
    without the tree form unless ``trees``)."""
    data: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "topology": topology_to_dict(s.topology),
        "collective": s.collective.to_dict(),
        "size": s.size,
        "meta": _plain(s.meta if timing else without_timing(s.meta)),
    }
    if trees and s.trees is not None:
        data["trees"] = s.trees.to_dict()
    return data


def schedule_to_dict(s: Schedule, *, timing: bool = True) -> dict:
    """The file form of ``s``; ``timing=False`` leaves out ``meta.timing``."""
    ops: dict[str, Any] = {
        "count": s.num_ops,
        "src": s.src.tolist(),
        "dst": s.dst.tolist(),
        "chunk": s.chunk.tolist(),
    }
    if np.any(s.kind != OpKind.COPY):
        names = [k.name.lower() for k in OpKind]
        ops["kind"] = [names[k] for k in s.kind.tolist()]
    ops["routes"] = [
        s.route_links[a:b].tolist()
        for a, b in zip(s.route_ptr[:-1].tolist(), s.route_ptr[1:].tolist())
    ]
    if len(s.dep_ids):
        ops["deps"] = [
            s.dep_ids[a:b].tolist() for a, b in zip(s.dep_ptr[:-1].tolist(), s.dep_ptr[1:].tolist())
        ]
    if s.start is not None:
        ops["start"] = _nan_to_none(s.start)
    if s.duration is not None:
        ops["duration"] = _nan_to_none(s.duration)
    if s.step is not None:
        ops["step"] = s.step.tolist()
    if s.group is not None:
        ops["group"] = s.group.tolist()
    if s.part_den is not None:
        assert s.part_lo is not None and s.part_hi is not None  # the part columns come together
        ops["part"] = np.stack([s.part_lo, s.part_hi, s.part_den], axis=1).tolist()
    head = _header(s, timing)
    trees = head.pop("trees", None)
    data = {**head, "ops": ops}
    if s.link_order:
        data["link_order"] = {str(k): v.tolist() for k, v in sorted(s.link_order.items())}
    if trees is not None:
        data["trees"] = trees
    return data


def _plain(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating,)):
        return float(obj)
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, (str, int, float, bool)) or obj is None:
        return obj
    return str(obj)


def save_schedule(s: Schedule | CompactSchedule, path: str, *, timing: bool = True) -> None:
    """Write ``s`` to ``path`` atomically (the old file or the whole new one, never half).

    ``timing=False`` leaves out the wall-clock figures (``meta.timing``), so the same inputs
    give the same bytes. A name ending in ``.npz`` gets the binary form. ``json.dumps`` (one
    shot) uses the C encoder; ``json.dump`` would not, and is several times slower on large
    schedules.
    """
    if isinstance(s, CompactSchedule):
        if not path.lower().endswith(".npz"):
            raise CollsynthError(f"{path}: the compact form is written as .npz only (name the "
                                 "file NAME.npz)")  # fmt: skip
        from .compact_io import compact_to_npz

        head = _header(s.reps, timing, trees=False)
        head["meta"] = _plain(s.meta if timing else without_timing(s.meta))
        write_bytes_atomic(path, compact_to_npz(s, head))
        return
    if path.lower().endswith(".npz"):
        from .binary import schedule_to_npz

        write_bytes_atomic(path, schedule_to_npz(s, _header(s, timing, trees=False)))
        return
    _json_fits(s, path)
    data = schedule_to_dict(s, timing=timing)
    text = json.dumps(data, separators=(",", ":"), allow_nan=False) + "\n"
    write_text_atomic(path, text)


#: the most values (four per operation, one per hop and per dependency) a schedule written as
#: JSON may have: about 250 MB of text at the 5-8 bytes a value takes (measured on ForestColl
#: schedules); beyond it the JSON form is refused and the binary form (``.npz``) holds it
JSON_MAX_VALUES = 32_000_000


def _json_fits(s: Schedule, path: str) -> None:
    """Refuse, before anything is built, a schedule too large for the JSON form (see
    :data:`JSON_MAX_VALUES`); the binary form holds it."""
    values = 4 * s.num_ops + len(s.route_links) + len(s.dep_ids)
    if values > JSON_MAX_VALUES:
        raise CollsynthError(
            f"{path}: a schedule of {s.num_ops:,} operations ({values:,} values) is written "
            f"as JSON up to {JSON_MAX_VALUES:,} values only; name the file NAME.npz for the "
            "binary form"
        )


def load_schedule(path: str, topology: Topology | None = None) -> Schedule:
    """Read a schedule file, JSON, binary or compact (expanded: see :func:`load_any` for
    the compact form as it is). With ``topology`` given, it must match the embedded one."""
    got = load_any(path, topology)
    if isinstance(got, CompactSchedule):
        from .compact_io import expansion_fits

        expansion_fits(got, path)
        return got.expand()
    return got


def load_any(path: str, topology: Topology | None = None) -> Schedule | CompactSchedule:
    """Read a schedule file of any form; a compact file gives its :class:`CompactSchedule`."""
    from .binary import is_binary
    from .compact_io import compact_from_npz, is_compact

    data = read_bytes(path)  # once: the path may be a pipe
    if is_binary(data):
        if is_compact(data):
            return compact_from_npz(data, path, topology)
        return schedule_from_npz(data, path, topology)
    return schedule_from_dict(
        parse_structured(decode_text(data, path), path), source=path, topology=topology
    )


def schedule_from_npz(data: bytes, path: str, topology: Topology | None = None) -> Schedule:
    """The schedule of a binary schedule file's bytes ``data`` (read from ``path``; see
    :mod:`collsynth.schedule.binary`)."""
    from .binary import HEADER as HEADER_NAME
    from .binary import link_order_of, parse_npz, trees_of

    head, cols = parse_npz(data, path)
    bad = set(head) - (_TOP_KEYS - {"ops", "link_order"}) - {"count"}
    if bad:
        raise CollsynthError(f"{path}: unknown key {sorted(bad, key=str)[0]!r} in its header")
    if "topology" not in head or "collective" not in head:
        raise CollsynthError(f"{path}: a schedule needs 'topology' and 'collective'")
    topo, coll, size, meta, trees = _common(head, path, topology)
    if trees is not None and "tree_ptr" in cols:
        raise CollsynthError(f"{path}: trees both in {HEADER_NAME} and as columns")
    if trees is None:
        trees = trees_of(cols)
    return Schedule(
        topo,
        coll,
        cols["src"],
        cols["dst"],
        cols["chunk"],
        cols["kind"].astype(np.int8),
        cols["route_ptr"],
        cols["route_links"],
        cols["dep_ptr"],
        cols["dep_ids"],
        cols.get("start"),
        cols.get("duration"),
        cols.get("step"),
        cols.get("part_lo"),
        cols.get("part_hi"),
        cols.get("part_den"),
        link_order_of(cols),
        size,
        meta,
        trees,
        cols.get("group"),
    )


# ---------------------------------------------------------------------- parsing
def _is_int(x: Any) -> TypeGuard[int]:
    """An integer that fits the int64 columns of the IR."""
    return isinstance(x, int) and not isinstance(x, bool) and -(2**63) <= x < 2**63


def _finite(x: Any) -> bool:
    try:
        return math.isfinite(x)
    except OverflowError:  # an integer beyond the float range
        return False


def _int_column(ops: dict, name: str, count: int, where: str) -> np.ndarray:
    col = ops.get(name)
    if not isinstance(col, list) or len(col) != count:
        raise CollsynthError(f"{where}: ops.{name} must be a list of {count} integers")
    for i, x in enumerate(col):
        if not _is_int(x):
            raise CollsynthError(f"{where}: ops.{name}[{i}] = {x!r} is not a 64-bit integer")
    return np.array(col, dtype=np.int64) if count else np.zeros(0, dtype=np.int64)


def _float_column(ops: dict, name: str, count: int, where: str) -> np.ndarray:
    col = ops.get(name)
    if not isinstance(col, list) or len(col) != count:
        raise CollsynthError(f"{where}: ops.{name} must be a list of {count} numbers or nulls")
    out = np.empty(count, dtype=np.float64)
    for i, x in enumerate(col):
        if x is None:
            out[i] = np.nan
        elif isinstance(x, (int, float)) and not isinstance(x, bool) and _finite(x):
            out[i] = float(x)
        else:
            raise CollsynthError(f"{where}: ops.{name}[{i}] = {x!r} is not a finite number")
    return out


def _list_of_int_lists(
    ops: dict, name: str, count: int, where: str, required: bool
) -> list[list[int]]:
    col = ops.get(name)
    if col is None and not required:
        return [[] for _ in range(count)]
    if not isinstance(col, list) or len(col) != count:
        raise CollsynthError(f"{where}: ops.{name} must be a list of {count} lists")
    for i, item in enumerate(col):
        if not isinstance(item, list) or not all(_is_int(x) for x in item):
            raise CollsynthError(f"{where}: ops.{name}[{i}] must be a list of integers")
    return col


def schedule_from_dict(
    data: Any, source: str = "schedule", topology: Topology | None = None
) -> Schedule:
    """The schedule of a parsed schedule file, every field checked (``source`` names it in
    errors; ``topology``, when given, must match the embedded one)."""
    where = source
    _check_header(data, where)
    topo, coll, size, meta, trees = _common(data, where, topology)
    ops = data["ops"]
    if not isinstance(ops, dict):
        raise CollsynthError(f"{where}: ops must be an object of columns")
    bad = set(ops) - _OP_KEYS
    if bad:
        raise CollsynthError(f"{where}: unknown operation column {sorted(bad, key=str)[0]!r}")
    count = ops.get("count")
    if not _is_int(count) or count < 0:
        raise CollsynthError(f"{where}: ops.count must be a non-negative integer")
    src = _int_column(ops, "src", count, where)
    dst = _int_column(ops, "dst", count, where)
    chunk = _int_column(ops, "chunk", count, where)
    kind = _kind_column(ops, count, where)
    routes = _list_of_int_lists(ops, "routes", count, where, required=True)
    deps = _list_of_int_lists(ops, "deps", count, where, required=False)
    route_ptr, route_links = _csr(routes)
    dep_ptr, dep_ids = _csr(deps)
    start = _float_column(ops, "start", count, where) if "start" in ops else None
    duration = _float_column(ops, "duration", count, where) if "duration" in ops else None
    step = _step_column(ops, count, where)
    group = _step_column(ops, count, where, "group", "a group id")
    part_lo, part_hi, part_den = _part_columns(ops, count, where)
    link_order = _link_order(data, where)
    return Schedule(
        topo,
        coll,
        src,
        dst,
        chunk,
        kind,
        route_ptr,
        route_links,
        dep_ptr,
        dep_ids,
        start,
        duration,
        step,
        part_lo,
        part_hi,
        part_den,
        link_order,
        size,
        meta,
        trees,
        group,
    )


def _common(
    data: dict, where: str, topology: Topology | None
) -> tuple[Topology, Collective, float | None, dict, Any]:
    """What both file forms share: (topology, collective, size, meta, tree form)."""
    topo = _topology_of(data, where, topology)
    coll = Collective.from_dict(data["collective"], source=where)
    size = data.get("size")
    if size is not None and (
        not isinstance(size, (int, float))
        or isinstance(size, bool)
        or not _finite(size)
        or size <= 0
    ):
        raise CollsynthError(f"{where}: size must be a positive number of bytes or null")
    meta = data.get("meta", {})
    if not isinstance(meta, dict):
        raise CollsynthError(f"{where}: meta must be an object")
    trees = None
    if data.get("trees") is not None:
        from .trees import TreeForm

        trees = TreeForm.from_dict(data["trees"], source=f"{where} trees")
    return topo, coll, float(size) if size is not None else None, dict(meta), trees


def header_fields(
    data: dict, where: str, topology: Topology | None
) -> tuple[Topology, Collective, float | None, dict]:
    """A binary file header's topology, collective, size and meta (no tree form)."""
    if data.get("trees") is not None:
        raise CollsynthError(f"{where}: a compact schedule has no tree form")
    topo, coll, size, meta, _ = _common(data, where, topology)
    return topo, coll, size, meta


def check_format(data: dict, where: str, fmt: str, version: int, what: str, kind: str) -> None:
    """``data["format"]`` is ``fmt`` ("not a WHAT" otherwise) and ``data["version"]`` is
    ``version`` ("unsupported KIND version" otherwise)."""
    if data.get("format") != fmt:
        raise CollsynthError(
            f"{where}: not a {what} (format is {data.get('format')!r}, expected {fmt!r})"
        )
    if isinstance(data.get("version"), bool) or data.get("version") != version:
        raise CollsynthError(
            f"{where}: unsupported {kind} version {data.get('version')!r} "
            f"(this collsynth reads {version})"
        )


def _check_header(data: Any, where: str) -> None:
    """A JSON object of this format and version, with known top-level keys and the required
    ones."""
    if not isinstance(data, dict):
        raise CollsynthError(f"{where}: a schedule file must hold a JSON object")
    check_format(data, where, FORMAT, VERSION, "collsynth schedule", "schedule format")
    bad = set(data) - _TOP_KEYS
    if bad:
        raise CollsynthError(f"{where}: unknown key {sorted(bad, key=str)[0]!r} at top level")
    if "topology" not in data or "collective" not in data or "ops" not in data:
        raise CollsynthError(f"{where}: a schedule needs 'topology', 'collective' and 'ops'")


def _topology_of(data: dict, where: str, topology: Topology | None) -> Topology:
    """The embedded topology, or ``topology`` when given and of the same fingerprint."""
    embedded = topology_from_dict(data["topology"], source=f"{where} (embedded topology)")
    if topology is not None and topology.fingerprint != embedded.fingerprint:
        raise CollsynthError(
            f"{where}: schedule was made for topology {embedded.name!r} "
            f"(fingerprint {embedded.fingerprint}) but the given topology {topology.name!r} "
            f"differs (fingerprint {topology.fingerprint})"
        )
    return topology or embedded


def _kind_column(ops: dict, count: int, where: str) -> np.ndarray:
    """``ops.kind`` as OpKind codes (all copy when absent)."""
    if "kind" not in ops:
        return np.zeros(count, dtype=np.int8)
    kcol = ops["kind"]
    if not isinstance(kcol, list) or len(kcol) != count:
        raise CollsynthError(f"{where}: ops.kind must be a list of {count} kinds")
    kinds = []
    for i, k in enumerate(kcol):
        try:
            kinds.append(int(OpKind.parse(k)))
        except CollsynthError:
            raise CollsynthError(
                f"{where}: ops.kind[{i}] = {k!r} is not copy, reduce or join"
            ) from None
    return np.array(kinds, dtype=np.int8) if count else np.zeros(0, dtype=np.int8)


def _step_column(
    ops: dict, count: int, where: str, name: str = "step", what: str = "a step number"
) -> np.ndarray | None:
    """``ops.step`` (or another column of integers >= -1; null: -1), or None when absent."""
    if name not in ops:
        return None
    raw = ops[name]
    if not isinstance(raw, list) or len(raw) != count:
        raise CollsynthError(f"{where}: ops.{name} must be a list of {count} integers")
    vals = []
    for i, x in enumerate(raw):
        if x is None:
            vals.append(-1)
        elif _is_int(x) and x >= -1:
            vals.append(x)
        else:
            raise CollsynthError(f"{where}: ops.{name}[{i}] = {x!r} is not {what}")
    return np.array(vals, dtype=np.int64) if count else np.zeros(0, dtype=np.int64)


def _part_columns(ops: dict, count: int, where: str) -> tuple[np.ndarray | None, ...]:
    """``ops.part`` as ``(lo, hi, den)`` columns, or three Nones when absent."""
    if "part" not in ops:
        return None, None, None
    raw = ops["part"]
    if not isinstance(raw, list) or len(raw) != count:
        raise CollsynthError(f"{where}: ops.part must be a list of {count} [lo, hi, den]")
    for i, p in enumerate(raw):
        if not isinstance(p, list) or len(p) != 3 or not all(_is_int(x) for x in p):
            raise CollsynthError(f"{where}: ops.part[{i}] must be [lo, hi, den] integers")
        if p[2] < 1:
            raise CollsynthError(
                f"{where}: ops.part[{i}] = {p}: the denominator (third number) must be at least 1"
            )
        if not 0 <= p[0] < p[1] <= p[2]:
            raise CollsynthError(
                f"{where}: ops.part[{i}] = {p}: needs 0 <= lo < hi <= den (the byte range "
                "lo/den..hi/den of the chunk)"
            )
    arr = np.array(raw, dtype=np.int64).reshape(count, 3)
    return arr[:, 0].copy(), arr[:, 1].copy(), arr[:, 2].copy()


def _link_order(data: dict, where: str) -> dict[int, np.ndarray] | None:
    """``link_order`` as link id -> op ids, or None when absent."""
    if data.get("link_order") is None:
        return None
    lo = data["link_order"]
    if not isinstance(lo, dict):
        raise CollsynthError(f"{where}: link_order must map link ids to op lists")
    link_order: dict = {}
    for k, v in lo.items():
        try:
            lid = int(k)
        except (TypeError, ValueError, OverflowError):
            lid = None
        if not _is_int(lid):
            raise CollsynthError(f"{where}: link_order key {k!r} is not a link id")
        if not isinstance(v, list) or not all(_is_int(x) for x in v):
            raise CollsynthError(f"{where}: link_order[{k}] must be a list of op ids")
        link_order[lid] = np.array(v, dtype=np.int64)
    return link_order


__all__ = [
    "FORMAT",
    "VERSION",
    "load_any",
    "load_schedule",
    "save_schedule",
    "schedule_from_npz",
    "schedule_from_dict",
    "schedule_to_dict",
    "ScheduleBuilder",
]
