"""Registry of named topology constructors (the zoo) and their typed parameters.

A constructor is registered with :func:`zoo` and declares each parameter with :class:`Param`
(the one declared-parameter type of :mod:`collsynth.params`, in the registry's spelling);
``build_named("mi250", {"chassis": "2"})`` parses the strings with the declared types, rejects
unknown keys with a one-line error and calls the constructor with keyword arguments.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import CollsynthError
from ..params import Parameter
from .model import Topology


def Param(
    kind: str,
    default: Any,
    doc: str = "",
    choices: tuple[str, ...] = (),
    min: float | None = None,
    max: float | None = None,
) -> Parameter:
    """A topology parameter: the one declared-parameter type (:class:`~collsynth.params.Parameter`)
    in the spec syntax, declared in the topology registry's short form.

    ``Param(kind, default, doc, choices=..., min=..., max=...)`` is
    ``Parameter("", kind, default, doc, minimum=min, maximum=max, choices=choices,
    syntax="spec")``: ``kind`` is int, float, bool, size, bw, time, text or choice; the name is
    the keyword the parameter is declared under (filled in by :func:`register`).
    """
    return Parameter(
        "", kind, default, doc, minimum=min, maximum=max, choices=choices, syntax="spec"
    )


@dataclass
class ZooEntry:
    name: str
    func: Callable[..., Topology]
    params: dict[str, Parameter]
    doc: str = ""
    aliases: tuple[str, ...] = field(default_factory=tuple)

    @property
    def summary(self) -> str:
        return (self.doc or "").strip().splitlines()[0] if self.doc else ""


ZOO: dict[str, ZooEntry] = {}
_ALIASES: dict[str, str] = {}


def zoo(name: str, aliases: tuple[str, ...] = (), **params: Parameter):
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
