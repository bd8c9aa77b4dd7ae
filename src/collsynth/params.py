"""Declared parameters: one type for every named, typed value a user gives as text.

Topology constructors (the zoo and the topology sources: ``NAME:key=value``), algorithms and
exporters (``--opt KEY=VALUE``) declare each of their parameters once, as a :class:`Parameter`:
name, kind, default, help, bounds, accepted choices or words. The declaration parses and
validates the value and describes itself for ``collsynth list``, ``--help`` and
``docs/options.md``.

A parameter reads text in one of two syntaxes (``syntax``), because the two kinds of input have
always been read differently:

* ``"option"`` (algorithm and exporter options): numbers as Python reads them (``2.0`` is the
  integer 2), time and size with units, choices in any case (the declared spelling back),
  literal ``words`` such as ``auto``, bounds with an optionally strict lower end; typed values
  from Python callers are checked the same way. Messages read
  ``ALGO option NAME=VALUE is not ...``.
* ``"spec"`` (topology parameters): the strict readers of :mod:`collsynth.units` (ASCII digits,
  bandwidth units, latencies within :data:`~collsynth.units.LATENCY`), choices exactly as
  declared; typed values from Python callers are taken as given and only bounds-checked.
  Messages read ``WHAT VALUE ...``, ``WHAT`` given by the caller
  (``mi250 parameter chassis``).

:func:`parse_bool` is the one reading of a boolean word, for both.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .errors import CollsynthError
from .units import (
    LATENCY,
    fmt_bandwidth,
    fmt_size,
    fmt_time,
    parse_bandwidth,
    parse_integer,
    parse_number,
    parse_size,
    parse_time,
)

#: The kinds of parameter value, with the unit their numbers carry.
KINDS = {
    "int": "",
    "float": "",
    "bool": "",
    "choice": "",
    "time": "s",
    "size": "B",
    "bw": "B/s",
    "text": "",
}

#: How a parameter reads text (see the module docstring).
SYNTAXES = ("option", "spec")

#: The words :func:`parse_bool` reads as true and as false (in any case, around spaces).
TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")


def parse_bool(value: Any, message: str) -> bool:
    """``true/false``, ``yes/no``, ``on/off``, ``1/0`` in any case (or a bool); anything else
    raises :class:`CollsynthError` with ``message``."""
    if isinstance(value, bool):
        return value
    word = str(value).strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise CollsynthError(message)


def _spec_bool(text: str, what: str) -> bool:
    return parse_bool(text, f"{what} {text!r} is not a boolean (use true or false)")


#: The spec syntax's reader of each kind but ``choice``: ``reader(text, what)``.
_SPEC_READERS: dict[str, Callable[[str, str], Any]] = {
    "int": parse_integer,
    "float": parse_number,
    "bool": _spec_bool,
    "size": lambda text, what: parse_size(text, what),
    "bw": lambda text, what: parse_bandwidth(text, what),
    "time": lambda text, what: parse_time(text, what, LATENCY),
    "text": lambda text, what: text,
}


@dataclass(frozen=True)
class Parameter:
    """One declared parameter.

    ``kind`` is one of :data:`KINDS`. ``default`` is the typed value used when the parameter is
    not given (a word such as ``"auto"`` where the owner decides). Numeric kinds enforce
    ``minimum``/``maximum`` (inclusive). ``choice`` accepts exactly ``choices``. ``syntax`` is
    ``"option"`` or ``"spec"`` (see the module docstring); options alone also take the literal
    ``words`` besides numbers (returned lower-case), a strict lower end
    (``exclusive_minimum``) and ``shorthand`` (the option is also a ``--NAME`` flag of
    ``synth``, ``compare`` and ``tune``).
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
    syntax: str = "option"

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"option {self.name}: unknown kind {self.kind!r}")
        if self.kind == "choice" and not self.choices:
            raise ValueError(f"option {self.name}: a choice needs choices")
        if self.syntax not in SYNTAXES:
            raise ValueError(f"option {self.name}: unknown syntax {self.syntax!r}")
        if self.syntax == "spec" and (self.words or self.exclusive_minimum or self.shorthand):
            raise ValueError(
                f"parameter {self.name}: words, exclusive_minimum and shorthand are options' only"
            )
        if not self.unit and KINDS[self.kind]:
            object.__setattr__(self, "unit", KINDS[self.kind])

    # ------------------------------------------------------------------ parsing
    def parse(self, value: Any, where: str) -> Any:
        """The typed, validated value of ``value`` (text, or a typed value from Python).

        ``where`` names the owner in messages: the algorithm or exporter (option syntax), or
        the whole subject such as ``"mi250 parameter chassis"`` (spec syntax).
        """
        if self.syntax == "spec":
            return self._parse_spec(value, where)
        return self._parse_option(value, where)

    def _parse_spec(self, text: Any, what: str) -> Any:
        """Spec syntax: the units readers for text, typed values as given; then the bounds."""
        value: Any
        if self.kind == "choice":
            value = str(text)
            if value not in self.choices:
                raise CollsynthError(f"{what} {value!r} is not one of {', '.join(self.choices)}")
        else:
            value = _SPEC_READERS[self.kind](text, what) if isinstance(text, str) else text
        if self.minimum is not None and value is not None and value < self.minimum:
            raise CollsynthError(f"{what} {value!r} must be at least {self.minimum:g}")
        if self.maximum is not None and value is not None and value > self.maximum:
            raise CollsynthError(f"{what} {value!r} must be at most {self.maximum:g}")
        return value

    def _parse_option(self, value: Any, algo: str) -> Any:
        """Option syntax (see the module docstring)."""
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
            return parse_bool(value, f"{where} is not true or false")
        number = self._parse_number(value, where)
        return self._check_range(number, f"{algo} option {self.name}={self._show(number)}")

    def _parse_number(self, value: Any, where: str) -> float | int:
        """A number of this option's kind (time, size and bandwidth accept human units)."""
        if isinstance(value, bool):
            raise CollsynthError(f"{where} is not {self._expects()}")
        try:
            if self.kind == "time":
                number: float | int = parse_time(value, f"{self.name}")
            elif self.kind == "size":
                number = parse_size(value, f"{self.name}")
            elif self.kind == "bw":
                number = parse_bandwidth(value, f"{self.name}")
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
        """Enforce the declared bounds (option syntax)."""
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
        if self.kind == "bw":
            return fmt_bandwidth(value)
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
            "bw": "a bandwidth (e.g. 25GB/s)",
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
        name = {
            "int": "integer",
            "float": "number",
            "time": "duration",
            "size": "size",
            "bw": "bandwidth",
        }
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
