"""Pieces shared by the suites that keep their own table format (teccl, mteg, syccl).

Each of these suites is a list of cases; a case has a label (what ``--only`` matches, as a
case-insensitive substring) and a key (what identifies its rows in the results file). With
``--only`` just the matching cases run and their rows replace theirs in the existing results
file; the other cases' rows are kept, in the suite's case order.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any

from ..atomic import write_text_atomic
from ..errors import CollsynthError


def matches(only: str | None, label: str) -> bool:
    """Whether a case with this label runs under ``--only`` (case-insensitive substring)."""
    return only is None or only.lower() in label.lower()


def select(
    suite: str, cases: Sequence[Any], label: Callable[[Any], str], only: str | None
) -> list[Any]:
    """The cases of ``suite`` that run under ``only``; an error when ``only`` matches none."""
    chosen = [c for c in cases if matches(only, label(c))]
    if only is not None and not chosen:
        raise CollsynthError(f"no case of bench suite {suite!r} matches --only {only!r}")
    return chosen


def legacy_units(row: Any) -> Any:
    """A results row written before bandwidths were bytes/s: ``*_GBps`` keys become ``*_Bps``."""
    if not isinstance(row, dict) or not any(k.endswith("_GBps") for k in row):
        return row
    return {
        (k[: -len("_GBps")] + "_Bps" if k.endswith("_GBps") else k): (
            v * 1e9 if k.endswith("_GBps") and isinstance(v, (int, float)) else v
        )
        for k, v in row.items()
    }


def read_json(path: str) -> dict:
    """The results file at ``path``, or ``{}`` when it is missing, unreadable or outside the
    input limits (:mod:`collsynth.files`)."""
    from ..files import parse_structured, read_text

    if not os.path.isfile(path):
        return {}
    try:
        data = parse_structured(read_text(path), path, fmt="json")
    except CollsynthError:
        return {}
    return data if isinstance(data, dict) else {}


def merge_rows(
    old: Iterable[Any],
    new: list[Any],
    ran: set[Hashable],
    key: Callable[[Any], Hashable],
    order: Sequence[Hashable],
) -> list[Any]:
    """``new`` replaces the rows of the cases in ``ran``; ``old`` rows of other cases are kept.
    Rows come out in case order (``order``: case keys), stable within a case; rows of keys
    not in ``order`` last."""
    kept = [legacy_units(r) for r in old if key(legacy_units(r)) not in ran]
    pos: dict[Hashable, int] = {}
    for i, k in enumerate(order):
        pos.setdefault(k, i)
    merged = kept + new
    merged.sort(key=lambda r: pos.get(key(r), len(pos)))
    return merged


def write_files(out_dir: str, files: dict[str, str]) -> None:
    """Write ``{name: text}`` into ``out_dir`` (created if needed)."""
    try:
        os.makedirs(out_dir, exist_ok=True)
    except OSError as e:
        raise CollsynthError(f"cannot write bench results to {out_dir}: {e}") from None
    for name, text in files.items():
        write_text_atomic(os.path.join(out_dir, name), text)


def summary(cases: int, ran: int, rows: int, wall_s: float, only: str | None) -> dict:
    """The ``summary`` part of a suite's return value (what ``collsynth bench`` prints)."""
    out: dict[str, Any] = {"cases": cases, "rows": rows, "wall_s": wall_s}
    if only is not None:
        out["only"] = {"pattern": only, "cases_run": ran}
    return out
