"""nccl-tests, both ways: read its output logs, write its result table.

`nccl-tests <https://github.com/NVIDIA/nccl-tests>`_ (``all_gather_perf``, ``all_reduce_perf``,
``reduce_scatter_perf``, ``alltoall_perf``, ...) prints a commented header (the run's
parameters, one ``#  Rank ... device ...`` line per rank), a two-line column header::

    #                                   out-of-place                       in-place
    #  size  count  type  redop  root   time  algbw  busbw #wrong     time  algbw  busbw #wrong
    #   (B) (elements)                  (us) (GB/s) (GB/s)            (us) (GB/s) (GB/s)

then one row per size, and a footer (``# Avg bus bandwidth : ...``). Older releases name the
last column ``error`` and leave out ``redop``/``root`` for collectives without them; the
columns are read from the header, not assumed. Sizes follow the same convention as collsynth's
(allgather: the output buffer; reducescatter: the input; alltoall: one rank's send buffer), and
busbw uses the same factors (:attr:`~collsynth.collective.Collective.busbw_factor`), so a row
of a log and a collsynth row of the same size compare directly.

:func:`read_log` returns a :class:`NcclTestsLog`; :func:`table` writes rows in nccl-tests'
layout (sizes in bytes, times in microseconds, bandwidths in GB/s: one unit per column).
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import CollsynthError

#: element sizes of nccl-tests' ``type`` column (bytes)
TYPE_BYTES = {
    "int8": 1, "char": 1, "uint8": 1, "int32": 4, "int": 4, "uint32": 4, "int64": 8,
    "uint64": 8, "half": 2, "float16": 2, "bfloat16": 2, "float": 4, "float32": 4,
    "double": 8, "float64": 8, "fp8_e4m3": 1, "fp8_e5m2": 1, "f8e4m3": 1, "f8e5m2": 1,
}  # fmt: skip
_LEAD = ("size", "count", "type", "redop", "root")
_GROUP = ("time", "algbw", "busbw", "#wrong")
_RANK_RE = re.compile(r"^#\s*Rank\s+(\d+)\b.*\bon\s+(\S+)\s+device\s+(\d+)")
_PARAMS_RE = re.compile(r"(\w+)(?:\s*:)?\s+(-?\d+)")


@dataclass
class Timing:
    """One column group (out-of-place or in-place) of one row."""

    time_s: float
    algbw_Bps: float
    busbw_Bps: float
    wrong: int | None  # None: not checked (``N/A``)

    def to_dict(self) -> dict:
        return {"time_s": self.time_s, "algbw_Bps": self.algbw_Bps,
                "busbw_Bps": self.busbw_Bps, "wrong": self.wrong}  # fmt: skip


@dataclass
class LogRow:
    size_bytes: int
    count: int
    type: str
    redop: str | None
    root: int | None
    out_of_place: Timing | None
    in_place: Timing | None
    line: int

    def best(self) -> Timing:
        """The faster of out-of-place and in-place."""
        got = [t for t in (self.out_of_place, self.in_place) if t is not None]
        return min(got, key=lambda t: t.time_s)

    def to_dict(self) -> dict:
        return {
            "size_bytes": self.size_bytes,
            "count": self.count,
            "type": self.type,
            "redop": self.redop,
            "root": self.root,
            "out_of_place": None if self.out_of_place is None else self.out_of_place.to_dict(),
            "in_place": None if self.in_place is None else self.in_place.to_dict(),
        }


@dataclass
class NcclTestsLog:
    """What one nccl-tests log holds."""

    path: str
    rows: list[LogRow]
    #: ranks named by ``#  Rank N ... on HOST device D`` lines (0 when the header has none)
    ranks: int = 0
    hosts: list[str] = field(default_factory=list)
    params: dict[str, int] = field(default_factory=dict)
    avg_busbw_Bps: float | None = None

    def infer_ranks(self) -> int | None:
        """Ranks from the header, else from ``count`` and ``size`` where they say it (AllGather,
        ReduceScatter and AllToAll print one rank's count); None when neither does."""
        if self.ranks:
            return self.ranks
        for r in self.rows:
            elem = TYPE_BYTES.get(r.type)
            if elem and r.count and r.size_bytes != r.count * elem:
                n = r.size_bytes / (r.count * elem)
                if n == int(n):
                    return int(n)
        return None

    def to_dict(self) -> dict:
        return {
            "path": self.path,
            "ranks": self.infer_ranks(),
            "hosts": self.hosts,
            "params": self.params,
            "avg_busbw_Bps": self.avg_busbw_Bps,
            "rows": [r.to_dict() for r in self.rows],
        }


def read_log(path: str) -> NcclTestsLog:
    """Parse the nccl-tests output in ``path`` (see the module); a malformed log raises a
    one-line CollsynthError naming the line."""
    from ..files import read_text

    return parse_log(read_text(path), path)


def parse_log(text: str, path: str = "<log>") -> NcclTestsLog:
    """Parse nccl-tests output held in ``text`` (``path`` names it in errors).

    At most :data:`~collsynth.units.MAX_SIZES` result rows (the cap of ``--sizes``) are read:
    the row past it is refused at once, before any more of the text is parsed.
    """
    from ..units import MAX_SIZES

    columns: list[str] | None = None
    log = NcclTestsLog(path, [])
    hosts: dict[str, None] = {}
    for no, raw in enumerate(io.StringIO(text, newline=None), 1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            body = line.lstrip("#").strip()
            words = body.split()
            if words[:2] == ["size", "count"] or (words and words[0] == "size" and "type" in words):
                columns = _columns(words, path, no)
            elif m := _RANK_RE.match(line):
                log.ranks += 1
                hosts.setdefault(m.group(2))
            elif body.startswith("nThread"):
                log.params = {
                    k: _whole(v, path, no, f"parameter {k}") for k, v in _PARAMS_RE.findall(body)
                }
            elif body.startswith("Avg bus bandwidth"):
                avg = _float(body.split(":")[-1], path, no, "average bus bandwidth")
                log.avg_busbw_Bps = (
                    None if avg is None else _scaled(avg, 1e9, path, no, "average bus bandwidth")
                )
            continue
        if columns is None or _is_chatter(line):
            continue  # NCCL's own INFO/WARN lines, a launcher's messages before the table
        if len(log.rows) >= MAX_SIZES:
            raise CollsynthError(
                f"{path}: line {no}: the nccl-tests log has more than {MAX_SIZES} result rows "
                "(the most sizes one comparison takes)"
            )
        log.rows.append(_row(line.split(), columns, path, no))
    if columns is None:
        raise CollsynthError(
            f"{path}: not an nccl-tests log (no '# size count type ...' column header)"
        )
    if not log.rows:
        raise CollsynthError(f"{path}: the nccl-tests log has a column header but no result rows")
    log.hosts = list(hosts)
    return log


def _is_chatter(line: str) -> bool:
    return " NCCL INFO " in line or " NCCL WARN " in line or line.startswith(("[", "NCCL "))


def _columns(words: list[str], path: str, no: int) -> list[str]:
    names = ["#wrong" if w in ("#wrong", "error", "wrong") else w for w in words]
    lead = [w for w in names if w in _LEAD]
    rest = names[len(lead) :]
    if lead[:3] != ["size", "count", "type"] or rest not in (list(_GROUP), list(_GROUP) * 2):
        raise CollsynthError(
            f"{path}: line {no}: unexpected nccl-tests columns {' '.join(words)!r} (want size, "
            "count, type[, redop, root], then time, algbw, busbw, #wrong once or twice)"
        )
    return names


def _row(words: list[str], columns: list[str], path: str, no: int) -> LogRow:
    if len(words) != len(columns):
        raise CollsynthError(
            f"{path}: line {no}: expected {len(columns)} columns ({' '.join(columns)}), got "
            f"{len(words)}: {' '.join(words)[:80]!r}"
        )
    lead = len([c for c in columns if c in _LEAD])
    val = dict(zip(columns[:lead], words[:lead]))
    size = _whole(val["size"], path, no, "size")
    count = _whole(val["count"], path, no, "count")
    if size < 0 or count < 0:
        raise CollsynthError(f"{path}: line {no}: size and count must be whole numbers >= 0")
    groups = [words[lead + 4 * g : lead + 4 * g + 4] for g in range((len(words) - lead) // 4)]
    timings = [_timing(g, path, no) for g in groups]
    root = val.get("root")
    return LogRow(
        size_bytes=size,
        count=count,
        type=val["type"],
        redop=val.get("redop"),
        root=None if root is None else _whole(root, path, no, "root"),
        out_of_place=timings[0],
        in_place=timings[1] if len(timings) > 1 else None,
        line=no,
    )


def _timing(group: list[str], path: str, no: int) -> Timing | None:
    t_us = _float(group[0], path, no, "time")
    algbw = _float(group[1], path, no, "algbw")
    busbw = _float(group[2], path, no, "busbw")
    if t_us is None:
        return None  # N/A: this variant was not run
    if t_us <= 0 or algbw is None or busbw is None:
        raise CollsynthError(f"{path}: line {no}: time must be > 0 with algbw and busbw given")
    wrong = group[3]
    if wrong.upper() == "N/A":
        nwrong = None
    else:
        w = _float(wrong, path, no, "#wrong")  # old releases print 0e+00
        if w is None or w < 0 or w != int(w):
            raise CollsynthError(f"{path}: line {no}: #wrong must be a count, not {wrong!r}")
        nwrong = int(w)
    return Timing(
        t_us * 1e-6,
        _scaled(algbw, 1e9, path, no, "algbw"),
        _scaled(busbw, 1e9, path, no, "busbw"),
        nwrong,
    )


def _scaled(x: float, factor: float, path: str, no: int, what: str) -> float:
    """``x * factor``, refused when that is past the range of a float."""
    y = x * factor
    if not math.isfinite(y):
        raise CollsynthError(f"{path}: line {no}: {what} {x!r} is out of range")
    return y


def _float(text: str, path: str, no: int, what: str) -> float | None:
    if text.strip().upper() == "N/A":
        return None
    shown = text.strip() if len(text.strip()) <= 24 else text.strip()[:20] + "..."
    try:
        x = float(text)
    except ValueError:
        msg = f"{path}: line {no}: {what} {shown!r} is not a number"
        raise CollsynthError(msg) from None
    if not math.isfinite(x):
        raise CollsynthError(f"{path}: line {no}: {what} {shown!r} is not finite")
    return x


#: Largest whole number of a log: nccl-tests prints sizes and counts as 64-bit integers.
MAX_WHOLE = (1 << 64) - 1
_WHOLE_RE = re.compile(r"[+-]?([0-9]+)")


def _whole(text: str, path: str, no: int, what: str) -> int:
    """A whole number of at most 64 bits (nccl-tests' ``size_t``), or one line naming it."""
    text = text.strip()
    shown = text if len(text) <= 24 else text[:20] + "..."
    m = _WHOLE_RE.fullmatch(text)
    if not m:
        raise CollsynthError(f"{path}: line {no}: {what} {shown!r} is not a whole number")
    digits = m.group(1).lstrip("0") or "0"
    if len(digits) > 20 or int(digits) > MAX_WHOLE:
        raise CollsynthError(
            f"{path}: line {no}: {what} {shown} is larger than a 64-bit count ({MAX_WHOLE})"
        )
    return -int(digits) if text.startswith("-") else int(digits)


# --- writing ----------------------------------------------------------------------------


@dataclass
class TableRow:
    """One row to print in nccl-tests' layout."""

    size_bytes: float
    count: int
    type: str
    redop: str
    root: int
    time_s: float
    algbw_Bps: float
    busbw_Bps: float
    wrong: int | None = None
    in_place: tuple[float, float, float, int | None] | None = None  # time, algbw, busbw, wrong


def table(rows: Sequence[TableRow], title: str = "") -> str:
    """``rows`` as nccl-tests prints them (out-of-place; in-place where given, else N/A)."""
    head = [
        f"# {title}" if title else "#",
        "#",
        "#" + " " * 56 + "out-of-place" + " " * 23 + "in-place",
        "#       size         count      type   redop    root     time   algbw   busbw #wrong"
        "     time   algbw   busbw #wrong",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)       "
        "     (us)  (GB/s)  (GB/s)       ",
    ]
    out = list(head)
    for r in rows:
        left = (
            f"{int(round(r.size_bytes)):>12d}  {r.count:>12d}  {r.type:>8s}  {r.redop:>6s}  "
            f"{r.root:>6d}  "
        )
        out.append(left + _group(r.time_s, r.algbw_Bps, r.busbw_Bps, r.wrong) + "  "
                   + (_group(*r.in_place) if r.in_place else _na()))  # fmt: skip
    return "\n".join(out) + "\n"


def _group(t: float, algbw: float, busbw: float, wrong: int | None) -> str:
    w = "N/A" if wrong is None else str(wrong)
    return f"{t * 1e6:>7.2f}  {algbw / 1e9:>6.2f}  {busbw / 1e9:>6.2f}  {w:>5s}"


def _na() -> str:
    return f"{'N/A':>7s}  {'N/A':>6s}  {'N/A':>6s}  {'N/A':>5s}"


#: collectives whose nccl-tests ``count`` is one rank's share of ``size``
PER_RANK_COUNT = ("allgather", "reducescatter", "alltoall", "gather", "scatter")


def redop_root(kind: str, root: int | None) -> tuple[str, int]:
    """nccl-tests' ``redop`` and ``root`` columns for a collective."""
    if kind in ("allreduce", "reducescatter", "reduce"):
        return "sum", root if kind == "reduce" and root is not None else -1
    return "none", root if kind in ("broadcast", "gather", "scatter") and root is not None else -1


# --- collsynth's comparison beside a log, and in nccl-tests' and CSV layouts ------------------


def measured_at(log: NcclTestsLog) -> dict[float, Timing]:
    """Per size of the log, its faster variant (out-of-place or in-place)."""
    return {float(r.size_bytes): r.best() for r in log.rows}


def check_ranks(log: NcclTestsLog, ranks: int) -> None:
    """A log from another number of ranks than the topology's is refused."""
    got = log.infer_ranks()
    if got is not None and got != ranks:
        raise CollsynthError(
            f"{log.path}: the nccl-tests log is from {got} ranks, the topology has {ranks}"
        )


def with_baseline(rows: list[dict], log: NcclTestsLog) -> list[dict]:
    """``rows`` (comparison rows as dicts) with the log's busbw at the same size and the
    predicted speed-up (predicted busbw over measured); sizes the log lacks get None."""
    at = measured_at(log)
    out = []
    for r in rows:
        m = at.get(float(r["size_bytes"]))
        out.append(
            dict(
                r,
                baseline_busbw_Bps=None if m is None else m.busbw_Bps,
                baseline_time_s=None if m is None else m.time_s,
                predicted_speedup=None if m is None else m.time_s / r["time_s"],
            )
        )
    return out


def table_rows(collective: Any, rows: Sequence[dict], type_name: str = "float",
               elem: int = 4) -> list[TableRow]:  # fmt: skip
    """:class:`TableRow` s of ``collective`` from dicts with ``size_bytes``, ``time_s``,
    ``algbw_Bps``, ``busbw_Bps`` and optionally ``wrong`` (``count`` in elements of ``elem``
    bytes, one rank's share where nccl-tests prints that)."""
    kind = collective.kind.value
    redop, root = redop_root(kind, collective.root)
    per = collective.num_ranks if kind in PER_RANK_COUNT else 1
    return [
        TableRow(
            r["size_bytes"],
            int(r["size_bytes"] // elem // per),
            type_name,
            redop,
            root,
            r["time_s"],
            r["algbw_Bps"],
            r["busbw_Bps"],
            r.get("wrong"),
        )  # fmt: skip
        for r in rows
    ]


def comparison_table(comparison: Any, collective: Any) -> str:
    """Every algorithm of a :class:`~collsynth.report.compare.Comparison` of ``collective`` as
    an nccl-tests table of its own (simulated times; ``#wrong`` is N/A: nothing was run)."""
    parts = []
    for algo in dict.fromkeys(r.algo for r in comparison.rows):
        mine = sorted((r for r in comparison.rows if r.algo == algo), key=lambda r: r.size_bytes)
        rows = [{"size_bytes": r.size_bytes, "time_s": r.time_s, "algbw_Bps": r.algbw_Bps,
                 "busbw_Bps": r.busbw_Bps} for r in mine]  # fmt: skip
        title = f"collsynth {algo}: {comparison.collective} on {comparison.topology} (simulated)"
        parts.append(table(table_rows(collective, rows), title=title))
    return "".join(parts)


def to_csv(rows: list[dict], columns: Sequence[str]) -> str:
    """``rows`` as CSV with ``columns`` (one unit per column: bytes, seconds, bytes/s)."""
    import csv
    import io

    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(columns)
    for r in rows:
        w.writerow(["" if r.get(c) is None else r.get(c) for c in columns])
    return buf.getvalue()
