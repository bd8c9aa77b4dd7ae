"""Registry of named topology constructors (the zoo) and their typed parameters.

A constructor is registered with :func:`zoo` and declares each parameter with :class:`Param`;
``build_named("mi250", {"chassis": "2"})`` parses the strings with the declared types, rejects
unknown keys with a one-line error and calls the constructor with keyword arguments.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import CollsynthError
from ..units import LATENCY, parse_bandwidth, parse_integer, parse_number, parse_size, parse_time
from .model import Topology


def _parse_int(text: str, what: str) -> int:
    return parse_integer(text, what)


def _parse_float(text: str, what: str) -> float:
    return parse_number(text, what)


def _parse_bool(text: str, what: str) -> bool:
    t = str(text).strip().lower()
    if t in ("1", "true", "yes", "on"):
        return True
    if t in ("0", "false", "no", "off"):
        return False
    raise CollsynthError(f"{what} {text!r} is not a boolean (use true or false)")


_PARSERS: dict[str, Callable[[str, str], Any]] = {
    "int": _parse_int,
    "float": _parse_float,
    "bool": _parse_bool,
    "size": lambda t, w: parse_size(t, w),
    "bw": lambda t, w: parse_bandwidth(t, w),
    "time": lambda t, w: parse_time(t, w, LATENCY),
    "str": lambda t, w: str(t),
}


@dataclass(frozen=True)
class Param:
    """A typed zoo parameter: ``kind`` is int, float, bool, size, bw, time, str or choice."""

    kind: str
    default: Any
    doc: str = ""
    choices: tuple[str, ...] = ()
    min: float | None = None
    max: float | None = None

    def parse(self, text: Any, what: str) -> Any:
        if self.kind == "choice":
            value = str(text)
            if value not in self.choices:
                raise CollsynthError(f"{what} {value!r} is not one of {', '.join(self.choices)}")
        else:
            value = _PARSERS[self.kind](text, what) if isinstance(text, str) else text
        self.check(value, what)
        return value

    def check(self, value: Any, what: str) -> None:
        if self.min is not None and value is not None and value < self.min:
            raise CollsynthError(f"{what} {value!r} must be at least {self.min:g}")
        if self.max is not None and value is not None and value > self.max:
            raise CollsynthError(f"{what} {value!r} must be at most {self.max:g}")


@dataclass
class ZooEntry:
    name: str
    func: Callable[..., Topology]
    params: dict[str, Param]
    doc: str = ""
    aliases: tuple[str, ...] = field(default_factory=tuple)

    @property
    def summary(self) -> str:
        return (self.doc or "").strip().splitlines()[0] if self.doc else ""


ZOO: dict[str, ZooEntry] = {}
_ALIASES: dict[str, str] = {}


def zoo(name: str, aliases: tuple[str, ...] = (), **params: Param):
    """Decorator registering a zoo constructor under ``name`` with typed ``params``."""

    def deco(func: Callable[..., Topology]) -> Callable[..., Topology]:
        ZOO[name] = ZooEntry(name, func, dict(params), func.__doc__ or "", tuple(aliases))
        for a in aliases:
            _ALIASES[a] = name
        return func

    return deco


def lookup(name: str) -> ZooEntry:
    key = name.strip().lower().replace("-", "_")
    key = _ALIASES.get(key, key)
    if key not in ZOO:
        raise CollsynthError(
            f"unknown topology {name!r} (known: {', '.join(sorted(ZOO))}; or give a file path)"
        )
    return ZOO[key]


def build_named(name: str, args: dict[str, Any] | None = None) -> Topology:
    """Build zoo topology ``name`` with string (or already typed) arguments."""
    entry = lookup(name)
    kwargs: dict[str, Any] = {}
    for key, text in (args or {}).items():
        if key not in entry.params:
            known = ", ".join(entry.params) or "none"
            raise CollsynthError(
                f"unknown parameter {key!r} for topology {entry.name!r} (known: {known})"
            )
        kwargs[key] = entry.params[key].parse(text, f"{entry.name} parameter {key}")
    for key, p in entry.params.items():
        if key not in kwargs:
            kwargs[key] = p.default
    topo = entry.func(**kwargs)
    topo.meta.setdefault("zoo", entry.name)
    topo.meta.setdefault("params", {k: _jsonable(v) for k, v in kwargs.items()})
    return topo


def _jsonable(v: Any) -> Any:
    if isinstance(v, (int, float, str, bool)) or v is None:
        return v
    return str(v)
