"""Topology sources: importers of files other tools write, named in a spec with their options.

A source spec is ``NAME:FILE[,key=value...]`` or ``NAME:file=FILE[,key=value...]``, for example
``nccl-xml:/data/topo.xml,nodes=4,fabric=rail``. The first item after the colon is the file
unless it is a ``key=value`` item; FILE may contain ``/`` and ``:`` but not ``,``. Options are
typed with :class:`~collsynth.topology.registry.Param`, exactly like the zoo's parameters.

Importers register with :func:`source`; the importer modules are imported by :func:`entries`
(``nccl_xml`` and ``smi``). Names are matched like zoo names: case-insensitive, ``-`` and ``_``
alike (``nccl-xml`` is ``nccl_xml``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import CollsynthError
from ..params import Parameter
from .model import Topology

_KEY_ITEM = re.compile(r"^\s*[A-Za-z_][A-Za-z0-9_]*\s*=")


@dataclass
class SourceEntry:
    name: str
    func: Callable[..., Topology]
    params: dict[str, Parameter]
    doc: str = ""

    @property
    def summary(self) -> str:
        return (self.doc or "").strip().splitlines()[0] if self.doc else ""


SOURCES: dict[str, SourceEntry] = {}


def _key(name: str) -> str:
    return name.strip().lower().replace("-", "_")


def source(
    name: str, **params: Parameter
) -> Callable[[Callable[..., Topology]], Callable[..., Topology]]:
    """Decorator registering importer ``func(path, **options)`` as source ``name``."""

    def deco(func: Callable[..., Topology]) -> Callable[..., Topology]:
        SOURCES[_key(name)] = SourceEntry(name, func, dict(params), func.__doc__ or "")
        return func

    return deco


def entries() -> dict[str, SourceEntry]:
    """Every registered source (importing the importer modules registers them)."""
    from . import nccl_xml, smi  # noqa: F401  (register the sources)

    return SOURCES


def is_source(name: str) -> bool:
    return _key(name) in entries()


def split_source_spec(spec: str) -> tuple[str, str | None, list[str]] | None:
    """``(source name, file or None, the other items)`` if ``spec`` names a source, else None."""
    name, colon, rest = spec.strip().partition(":")
    if not name.strip() or not is_source(name):
        return None
    items = [i for i in rest.split(",")] if colon else []
    path: str | None = None
    if items and items[0].strip() and not _KEY_ITEM.match(items[0]):
        path = items.pop(0).strip()
    return name.strip(), path, items


def files_read(spec: str) -> list[str]:
    """The files a topology spec reads: the spec itself where it is a file name, the source's
    file (``nccl-xml:t.xml,nodes=2``, ``...,file=t.xml``) where it names an importer; what an
    output must never replace."""
    parts = split_source_spec(spec)
    if parts is None:
        return [spec]
    _, path, items = parts
    files = [path] if path else []
    for item in items:
        key, eq, value = item.partition("=")
        if eq and key.strip() == "file" and value.strip():
            files.append(value.strip())
    return files


def input_files(inputs: Mapping[str, str | Sequence[str] | None]) -> dict[str, list[str]]:
    """``{flag: paths}`` of a command's inputs with every topology spec replaced by the files
    it reads (:func:`files_read`), for the output checks of :mod:`collsynth.atomic`."""
    out: dict[str, list[str]] = {}
    for flag, value in inputs.items():
        if not value:
            continue
        paths = [value] if isinstance(value, str) else list(value)
        out[flag] = [f for p in paths if p for f in [p, *files_read(p)]]
    return out


def build_source(spec: str, name: str, path: str | None, items: list[str]) -> Topology:
    """Parse the option items of a source spec and run the importer."""
    from .spec import parse_items

    entry = SOURCES[_key(name)]
    args = parse_items(spec, items)
    if "file" in args:
        if path is not None:
            raise CollsynthError(f"topology spec {spec!r}: the file is given twice")
        path = args.pop("file")
    if not path:
        raise CollsynthError(
            f"topology spec {spec!r}: {entry.name} needs a file ({entry.name}:FILE[,key=value...])"
        )
    kwargs: dict[str, Any] = {}
    for key, text in args.items():
        if key not in entry.params:
            known = ", ".join(["file", *entry.params])
            raise CollsynthError(
                f"unknown parameter {key!r} for topology source {entry.name!r} (known: {known})"
            )
        kwargs[key] = entry.params[key].parse(text, f"{entry.name} parameter {key}")
    for key, p in entry.params.items():
        kwargs.setdefault(key, p.default)
    try:
        topo = entry.func(path, **kwargs)
    except CollsynthError as e:  # name the file in every error (most already do)
        if type(e) is not CollsynthError or path in str(e):
            raise  # a time limit or another kind of error keeps its kind (and exit status)
        raise CollsynthError(f"{path}: {e}") from None
    topo.meta.setdefault("importer", entry.name)
    topo.meta.setdefault("file", path)
    topo.meta.setdefault("params", {k: _plain(v) for k, v in kwargs.items()})
    return topo


def _plain(v: Any) -> Any:
    return v if isinstance(v, (int, float, str, bool)) or v is None else str(v)
