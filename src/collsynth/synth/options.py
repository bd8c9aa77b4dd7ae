"""Declared algorithm options: one declaration per option, one parser for all of them.

Each algorithm declares its options once, as :class:`Option` records (name, kind, unit,
default, allowed range or words, help). Everything else is derived from that declaration:
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
from dataclasses import dataclass
from typing import Any

from ..errors import CollsynthError
from ..units import fmt_size, fmt_time, parse_size, parse_time

#: The message size (bytes) every size-aware algorithm plans for when none is given: 1 MiB.
DEFAULT_SIZE = float(1 << 20)

#: The kinds of option value, with the unit their numbers carry.
KINDS = {"int": "", "float": "", "bool": "", "choice": "", "time": "s", "size": "B", "text": ""}

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


@dataclass(frozen=True)
class Option:
    """One declared option of an algorithm.

    ``kind`` is one of :data:`KINDS`. ``default`` is the typed value used when the option is not
    given (a word such as ``"auto"`` where the algorithm decides). Numeric kinds accept the
    literal ``words`` besides numbers (returned lower-case) and enforce ``minimum``/``maximum``
    (inclusive; ``exclusive_minimum`` makes the lower end strict). ``choice`` accepts exactly
    ``choices``. ``shorthand`` also offers the option as a ``--NAME`` flag of ``synth``,
    ``compare`` and ``tune``.
    """

    name: str
    kind: str
    default: Any = None
    help: str = ""
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: bool = False
    choices: tuple[str, ...] = ()
    words: tuple[str, ...] = ()
    unit: str = ""
    shorthand: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"option {self.name}: unknown kind {self.kind!r}")
        if self.kind == "choice" and not self.choices:
            raise ValueError(f"option {self.name}: a choice needs choices")
        if not self.unit and KINDS[self.kind]:
            object.__setattr__(self, "unit", KINDS[self.kind])

    # ------------------------------------------------------------------ parsing
    def parse(self, value: Any, algo: str) -> Any:
        """The typed value of ``value`` (a string from the command line, or a typed value)."""
        where = f"{algo} option {self.name}={value!r}"
        if isinstance(value, str):
            text = value.strip()
            low = text.lower()
            if self.kind == "choice":
                for choice in self.choices:  # case-insensitive, the declared spelling back
                    if low == choice.lower():
                        return choice
                raise CollsynthError(f"{where} is not one of {', '.join(self.choices)}")
            if low in self.words:
                return low
            if self.kind == "text":
                return text
        elif self.kind == "text":
            return value  # a structured value from a Python caller (e.g. a dict)
        elif self.kind == "choice":
            raise CollsynthError(f"{where} is not {self._expects()}")
        if self.kind == "bool":
            return self._parse_bool(value, where)
        number = self._parse_number(value, where)
        return self._check_range(number, f"{algo} option {self.name}={self._show(number)}")

    def _parse_bool(self, value: Any, where: str) -> bool:
        """``true/false``, ``yes/no``, ``on/off``, ``1/0`` (or a bool)."""
        if isinstance(value, bool):
            return value
        low = str(value).strip().lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
        raise CollsynthError(f"{where} is not true or false")

    def _parse_number(self, value: Any, where: str) -> float | int:
        """A number of this option's kind (time and size accept human units)."""
        if isinstance(value, bool):
            raise CollsynthError(f"{where} is not {self._expects()}")
        try:
            if self.kind == "time":
                number: float | int = parse_time(value, f"{self.name}")
            elif self.kind == "size":
                number = parse_size(value, f"{self.name}")
            else:
                number = float(value.strip()) if isinstance(value, str) else float(value)
        except CollsynthError:
            raise CollsynthError(f"{where} is not {self._expects()}") from None
        except (TypeError, ValueError, OverflowError):
            raise CollsynthError(f"{where} is not {self._expects()}") from None
        if not math.isfinite(number):
            raise CollsynthError(f"{where} is not {self._expects()}")
        if self.kind == "int":
            if number != int(number):
                raise CollsynthError(f"{where} is not {self._expects()}")
            return int(number)
        return float(number)

    def _check_range(self, number: float | int, where: str) -> float | int:
        """Enforce the declared bounds."""
        lo, hi = self.minimum, self.maximum
        if lo is not None and (number < lo or (self.exclusive_minimum and number <= lo)):
            rel = "greater than" if self.exclusive_minimum else "at least"
            raise CollsynthError(f"{where} must be {rel} {self._show(lo)}")
        if hi is not None and number > hi:
            raise CollsynthError(f"{where} must be at most {self._show(hi)}")
        return number

    # ------------------------------------------------------------------ describing
    def _show(self, value: Any) -> str:
        """A value in human units."""
        if isinstance(value, str) or value is None or isinstance(value, bool):
            return str(value).lower() if isinstance(value, bool) else str(value)
        if self.kind == "time":
            return fmt_time(value)
        if self.kind == "size":
            return fmt_size(value)
        if self.kind == "int":
            return str(int(value))
        return f"{value:g}"

    def _expects(self) -> str:
        """What a valid value looks like, in words."""
        base = {
            "int": "an integer",
            "float": "a number",
            "bool": "true or false",
            "time": "a duration (e.g. 2us)",
            "size": "a size (e.g. 1MB)",
            "choice": "one of " + ", ".join(self.choices),
            "text": "text",
        }[self.kind]
        if self.words:
            base += " or " + ", ".join(self.words)
        return base

    def values_text(self) -> str:
        """The accepted values and range, e.g. ``integer >= 1, or auto``."""
        if self.kind == "choice":
            return " | ".join(self.choices)
        if self.kind in ("bool", "text"):
            return {"bool": "true | false", "text": "text"}[self.kind]
        name = {"int": "integer", "float": "number", "time": "duration", "size": "size"}
        text = name[self.kind]
        bounds = []
        if self.minimum is not None:
            bounds.append(
                (">" if self.exclusive_minimum else ">=") + " " + self._show(self.minimum)
            )
        if self.maximum is not None:
            bounds.append("<= " + self._show(self.maximum))
        if bounds:
            text += " " + ", ".join(bounds)
        if self.words:
            text += " | " + " | ".join(self.words)
        return text

    def default_text(self) -> str:
        """The default in human units."""
        return self._show(self.default)

    def to_dict(self) -> dict[str, Any]:
        """The declaration as JSON (numbers in bytes, seconds)."""
        out: dict[str, Any] = {
            "kind": self.kind,
            "default": self.default,
            "values": self.values_text(),
            "help": self.help,
        }
        if self.unit:
            out["unit"] = self.unit
        for key in ("minimum", "maximum"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.choices:
            out["choices"] = list(self.choices)
        if self.words:
            out["words"] = list(self.words)
        if self.shorthand:
            out["shorthand"] = f"--{self.name.replace('_', '-')}"
        return out


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
