"""The compact schedule file (``.npz``): representatives, their dependencies as pairs, the group.

A zip archive like the binary schedule (:mod:`.binary`), with ``header.json`` holding
``format: "collsynth-compact-npz"``, ``version: 1``, ``count`` (representatives),
``generators`` (how many), ``group_order`` (the number of elements they generate, checked),
``topology``, ``collective``, ``size`` and ``meta`` as in every schedule file, and the
columns:

* the representatives' operation columns, as in the binary schedule: ``src``, ``dst``,
  ``chunk``, ``kind``, ``route_ptr``, ``route_links`` and the optional ``start``,
  ``duration``, ``step``, ``part_lo``, ``part_hi``, ``part_den``;
* dependencies as pairs: ``dep_ptr`` (count + 1 offsets), ``dep_orbit`` (a representative),
  ``dep_elem`` (a group element, numbered as :mod:`.compact` says);
* the group: ``group_generators`` (generators x nodes, row by row: node permutations) and
  ``group_chunk_generators`` (generators x chunks);
* optional planned link orders: ``order_links`` (one link per orbit), ``order_ptr``,
  ``order_orbit``, ``order_elem``.

Reading checks every array and refuses in one line a group that is not one the schedule can
use (:func:`~.compact.group_action`: a generator that is not an automorphism of the topology or
of the collective, chunk generators that do not act as the group does, a group that fixes a
rank or is larger than the header says), pairs that name no representative or element, and
ranks, chunks or links out of range. See ``docs/formats.md``.
"""

from __future__ import annotations

import numpy as np

from ..errors import CollsynthError
from ..files import file_size_limit
from ..topology.model import Topology
from .binary import check_offsets, check_plan_columns, head_count, open_zip, read_columns, write_zip
from .compact import BadGroup, CompactSchedule, group_action
from .ir import Schedule

FORMAT = "collsynth-compact-npz"
VERSION = 1
_OPS = ("src", "dst", "chunk", "kind", "route_ptr", "route_links")
_OPTIONAL = ("start", "duration", "step", "part_lo", "part_hi", "part_den")
_ORDER = ("order_links", "order_ptr", "order_orbit", "order_elem")
_COLUMNS = {
    **{name: True for name in _OPS},
    "dep_ptr": True,
    "dep_orbit": True,
    "dep_elem": True,
    "group_generators": True,
    "group_chunk_generators": True,
    **{name: False for name in _OPTIONAL},
    **{name: False for name in _ORDER},
}
_TOGETHER = (("part_lo", "part_hi", "part_den"), _ORDER)
_FLOATS = frozenset({"start", "duration"})


def compact_to_npz(c: CompactSchedule, header: dict) -> bytes:
    """The file of ``c``; ``header``: a schedule file's top level (topology, collective, size,
    meta) as :mod:`.io` builds it."""
    r = c.reps
    cols: dict[str, np.ndarray] = {name: getattr(r, name) for name in _OPS}
    cols.update(dep_ptr=c.dep_ptr, dep_orbit=c.dep_orbit, dep_elem=c.dep_elem,
                group_generators=c.action.generators.ravel(),
                group_chunk_generators=c.action.chunk_generators.ravel())  # fmt: skip
    for name in _OPTIONAL:
        value = getattr(r, name)
        if value is not None:
            cols[name] = value
    if c.order_links is not None:
        assert c.order_ptr is not None and c.order_orbit is not None
        assert c.order_elem is not None
        cols.update(order_links=c.order_links, order_ptr=c.order_ptr, order_orbit=c.order_orbit,
                    order_elem=c.order_elem)  # fmt: skip
    head = {"format": FORMAT, "version": VERSION, "count": c.num_reps,
            "generators": int(len(c.action.generators)), "group_order": c.action.order}  # fmt: skip
    head.update({k: v for k, v in header.items() if k not in ("format", "version", "trees")})
    return write_zip(head, cols)


def is_compact(data: bytes) -> bool:
    """Whether a binary file's bytes hold a compact schedule (its header says so)."""
    try:
        _, _, head = open_zip(data, "?", set(_COLUMNS), "compact schedule")
    except CollsynthError:
        return False
    return head.get("format") == FORMAT


def compact_from_npz(data: bytes, where: str, topology: Topology | None = None) -> CompactSchedule:
    """The compact schedule of a file's bytes (see the module doc for what is checked)."""
    from .io import check_format, header_fields

    z, names, head = open_zip(data, where, set(_COLUMNS), "compact schedule")
    check_format(head, where, FORMAT, VERSION, "compact collsynth schedule", "compact schedule")
    known = {"format", "version", "count", "generators", "group_order", "topology", "collective",
             "size", "meta"}  # fmt: skip
    bad = set(head) - known
    if bad:
        raise CollsynthError(f"{where}: unknown key {sorted(bad, key=str)[0]!r} in its header")
    if "topology" not in head or "collective" not in head:
        raise CollsynthError(f"{where}: a schedule needs 'topology' and 'collective'")
    count = head_count(head, where)
    n_gens = head_count(head, where, "generators")
    order = head_count(head, where, "group_order")
    topo, coll, size, meta = header_fields(head, where, topology)
    cols = read_columns(z, names, where, _COLUMNS, _TOGETHER, "compact schedule", _FLOATS)
    _check(cols, count, topo, coll.num_chunks, where)
    gens = _rows(cols["group_generators"], n_gens, topo.num_nodes, "group_generators", where)
    cgens = _rows(cols["group_chunk_generators"], n_gens, coll.num_chunks,
                  "group_chunk_generators", where)  # fmt: skip
    try:
        action = group_action(topo, coll, gens, cgens)
    except BadGroup as e:
        raise CollsynthError(f"{where}: {e}") from None
    if action.order != order:
        raise CollsynthError(f"{where}: the generators make a group of {action.order} elements, "
                             f"the header says {order}")  # fmt: skip
    for orb, el, what in ((cols["dep_orbit"], cols["dep_elem"], "dep"),
                          (cols.get("order_orbit"), cols.get("order_elem"), "order")):  # fmt: skip
        if orb is None or el is None:
            continue
        if len(orb) and (orb.min() < 0 or orb.max() >= count or el.min() < 0
                         or el.max() >= order):  # fmt: skip
            raise CollsynthError(f"{where}: column '{what}_orbit' or '{what}_elem' names no "
                                 f"representative ({count}) or element ({order})")  # fmt: skip
    if "order_links" in cols:
        links = cols["order_links"]
        check_offsets(cols["order_ptr"], len(cols["order_orbit"]), len(links), "order", where)
        if len(cols["order_elem"]) != len(cols["order_orbit"]):
            raise CollsynthError(f"{where}: columns 'order_orbit' and 'order_elem' differ in "
                                 "length")  # fmt: skip
        if len(links) and (links.min() < 0 or links.max() >= len(topo.links)):
            raise CollsynthError(f"{where}: column 'order_links' names a link that does not "
                                 "exist")  # fmt: skip
        if (np.diff(links) <= 0).any():
            raise CollsynthError(f"{where}: column 'order_links' must increase")
    reps = Schedule(
        topo, coll, cols["src"], cols["dst"], cols["chunk"], cols["kind"].astype(np.int8),
        cols["route_ptr"], cols["route_links"], np.zeros(count + 1, dtype=np.int64),
        np.zeros(0, dtype=np.int64), cols.get("start"), cols.get("duration"), cols.get("step"),
        cols.get("part_lo"), cols.get("part_hi"), cols.get("part_den"), None, size, meta,
    )  # fmt: skip
    return CompactSchedule(action, reps, cols["dep_ptr"], cols["dep_orbit"], cols["dep_elem"],
                           cols.get("order_links"), cols.get("order_ptr"),
                           cols.get("order_orbit"), cols.get("order_elem"), meta)  # fmt: skip


def _rows(flat: np.ndarray, rows: int, width: int, name: str, where: str) -> np.ndarray:
    if rows < 1 or len(flat) != rows * width:
        raise CollsynthError(f"{where}: column {name!r} must hold {rows} x {width} values "
                             f"(generators x {'nodes' if 'chunk' not in name else 'chunks'}), "
                             f"not {len(flat)}")  # fmt: skip
    return flat.reshape(rows, width)


def _check(cols: dict, count: int, topo: Topology, n_chunks: int, where: str) -> None:
    """Lengths, offsets and ranges that expansion and the compact verifier index by."""
    for name in ("src", "dst", "chunk", "kind", *(n for n in _OPTIONAL if n in cols)):
        if len(cols[name]) != count:
            raise CollsynthError(f"{where}: column {name!r} has {len(cols[name])} values for "
                                 f"{count} representatives")  # fmt: skip
    check_offsets(cols["route_ptr"], len(cols["route_links"]), count, "route", where)
    check_offsets(cols["dep_ptr"], len(cols["dep_orbit"]), count, "dep", where)
    if len(cols["dep_elem"]) != len(cols["dep_orbit"]):
        raise CollsynthError(f"{where}: columns 'dep_orbit' and 'dep_elem' differ in length")
    ranges = (("src", topo.num_ranks), ("dst", topo.num_ranks), ("chunk", n_chunks),
              ("route_links", len(topo.links)), ("kind", 3))  # fmt: skip
    for name, top in ranges:
        a = cols[name]
        if len(a) and (a.min() < 0 or a.max() >= top):
            raise CollsynthError(f"{where}: column {name!r} holds a value outside 0..{top - 1}")
    check_plan_columns(cols, where)


def expansion_fits(c: CompactSchedule, where: str) -> None:
    """Refuse in one line to expand ``c`` when its explicit form would pass the file limit
    (about 64 bytes an operation and hop): a command that needs every operation cannot take
    it; ``verify`` and ``simulate`` work on the compact form itself."""
    need = 64 * (c.num_ops + c.num_hops)
    if need > file_size_limit():
        raise CollsynthError(
            f"{where}: a compact schedule of {c.num_ops:,} operations; expanded it needs about "
            f"{need:,} bytes, more than COLLSYNTH_MAX_FILE_BYTES allows (verify and simulate "
            "take the compact form as it is)"
        )


__all__ = ["FORMAT", "VERSION", "compact_from_npz", "compact_to_npz", "expansion_fits",
           "is_compact"]  # fmt: skip
