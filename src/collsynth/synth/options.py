"""Declared algorithm options: one declaration per option, one parser for all of them.

Each algorithm declares its options once, as :class:`Option` records (name, kind, unit,
default, allowed range or words, help); ``Option`` is :class:`collsynth.params.Parameter`, the
one declared-parameter type, which the topology registry uses too. Everything else is derived
from that declaration:
parsing and validating ``--opt KEY=VALUE`` strings (and typed values from Python callers), the
``--k``/``--slot``/... shorthands of the command line, ``collsynth list``, ``--help`` and the
option tables of ``docs/options.md``.

The values an algorithm receives are typed: ``int``, ``float``, ``bool``, seconds (``time``),
bytes (``size``), a lower-case word from ``choices``/``words`` (``"auto"``, ``"off"``, ...) or
text. A missing option gets its declared default.

The message size a size-aware algorithm plans for when the caller gives none is
:data:`DEFAULT_SIZE` for every algorithm.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import Any

from ..errors import CollsynthError
from ..params import KINDS, Parameter
from ..units import parse_size

__all__ = [
    "DEFAULT_SIZE",
    "KINDS",
    "Option",
    "declare",
    "int_option",
    "parse_assignments",
    "plan_size",
    "resolve",
    "size_option",
    "split_items",
]

#: The message size (bytes) every size-aware algorithm plans for when none is given: 1 MiB.
DEFAULT_SIZE = float(1 << 20)

#: An algorithm's or exporter's declared option: the one declared-parameter type, read in its
#: ``option`` syntax (the default).
Option = Parameter


def declare(options: Iterable[Option] | None) -> dict[str, Option]:
    """``{name: Option}`` of a declaration, refusing duplicates."""
    out: dict[str, Option] = {}
    for opt in options or ():
        if opt.name in out:
            raise ValueError(f"option {opt.name!r} declared twice")
        out[opt.name] = opt
    return out


def resolve(declared: dict[str, Option], given: dict[str, Any], algo: str) -> dict[str, Any]:
    """Every declared option's typed value: ``given`` parsed and validated, defaults filled."""
    unknown = sorted(set(given) - set(declared))
    if unknown:
        known = ", ".join(sorted(declared)) or "none"
        raise CollsynthError(
            f"algorithm {algo!r} has no option {unknown[0]!r} (its options: {known})"
        )
    return {
        name: (opt.parse(given[name], algo) if name in given else opt.default)
        for name, opt in declared.items()
    }


#: Splits ``a=x,b=y``: a comma starts a new item only where ``KEY=`` follows it, so values that
#: contain commas (``highs=name:value,name:value``) stay whole.
_ITEM_SPLIT = re.compile(r",(?=\s*[A-Za-z_][\w.\-]*\s*=)")


def split_items(items: Iterable[str] | None) -> list[str]:
    """``["a=x,b=y", "c=z"]`` -> ``["a=x", "b=y", "c=z"]`` (see :data:`_ITEM_SPLIT`)."""
    out: list[str] = []
    for item in items or []:
        out.extend(part for part in _ITEM_SPLIT.split(item) if part.strip())
    return out


def parse_assignments(
    items: Iterable[str] | None, algo: str | None = None
) -> dict[str, dict[str, str]]:
    """``KEY=VALUE`` / ``ALGO.KEY=VALUE`` strings (comma-joined or repeated) as
    ``{algo or '*': {key: value}}``; ``algo`` is the target of untargeted keys (``'*'``: every
    algorithm that declares the key)."""
    out: dict[str, dict[str, str]] = {}
    for raw in items or []:
        if not raw.strip():
            raise CollsynthError(f"option {raw!r} is empty: give KEY=VALUE")
        if any(not part.strip() for part in _ITEM_SPLIT.split(raw)):
            raise CollsynthError(f"option {raw!r} has an empty item: give KEY=VALUE,...")
    for item in split_items(items):
        key, eq, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not eq or not key:
            raise CollsynthError(f"option {item.strip()!r} is not KEY=VALUE")
        target, dot, opt = key.rpartition(".")
        target = target if dot else (algo or "*")
        if not opt or not target:
            raise CollsynthError(f"option {item.strip()!r} is not [ALGO.]KEY=VALUE")
        if opt in out.get(target, {}):
            raise CollsynthError(f"option {key!r} is given twice; give it once")
        out.setdefault(target, {})[opt] = value
    return out


def plan_size(size: Any, algo: str) -> float:
    """The message size in bytes a size-aware synthesizer plans for (:data:`DEFAULT_SIZE` if
    none is given)."""
    if size is None:
        return DEFAULT_SIZE
    s = parse_size(size, f"{algo} size")
    if not (math.isfinite(s) and s > 0):
        raise CollsynthError(f"{algo} size {size!r} must be a positive number of bytes")
    return float(s)


def size_option(size: Any, algo: str, default: float = DEFAULT_SIZE) -> float:
    """Alias of :func:`plan_size` (``default`` is ignored: one default size for every
    algorithm)."""
    return plan_size(size, algo)


def int_option(value: Any, name: str, algo: str, minimum: int = 1) -> int | None:
    """Transitional: an integer option already parsed by its declaration (``"auto"`` and
    ``None`` mean automatic)."""
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "auto")):
        return None
    return int(Option(name, "int", minimum=minimum).parse(value, algo))
