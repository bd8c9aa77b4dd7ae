"""Topology spec strings: ``NAME``, ``NAME:key=value,key=value``, a source or a path to a file.

A spec that names an existing file is loaded with :func:`collsynth.topology.io.load_topology_file`.
A spec whose name is a topology source (``nccl-xml``, ``nvidia-smi``, ``rocm-smi``; see
:mod:`collsynth.topology.sources`) imports its file: ``nccl-xml:/path/topo.xml,nodes=4``, the
file first (it may contain ``/``), then ``key=value`` options. Any other spec that looks like a
path (it contains a path separator or ends in ``.json``, ``.yaml`` or ``.yml``) is a topology
file; anything else is a zoo name with optional parameters.
"""

from __future__ import annotations

import os

from ..errors import CollsynthError
from .model import Topology

_FILE_EXTS = (".json", ".yaml", ".yml")


def parse_spec(spec: str) -> tuple[str, dict[str, str]]:
    """Split ``NAME:key=value,...`` into the name and a dict of raw string arguments."""
    if not isinstance(spec, str) or not spec.strip():
        raise CollsynthError("empty topology spec")
    name, _, rest = spec.strip().partition(":")
    name = name.strip()
    if not name:
        raise CollsynthError(f"topology spec {spec!r} has no name")
    if rest.strip():
        return name, parse_items(spec, rest.split(","))
    if _:
        raise CollsynthError(f"topology spec {spec!r} has ':' but no parameters")
    return name, {}


def parse_items(spec: str, items: list[str]) -> dict[str, str]:
    """``key=value`` items (empty ones skipped) as a dict; one-line errors naming the item."""
    args: dict[str, str] = {}
    for item in items:
        if not item.strip():
            continue
        key, eq, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not eq or not key or not value:
            raise CollsynthError(
                f"topology spec {spec!r}: expected key=value, got {item.strip()!r}"
            )
        if key in args:
            raise CollsynthError(f"topology spec {spec!r}: parameter {key!r} given twice")
        args[key] = value
    return args


def _looks_like_path(spec: str) -> bool:
    """A path, not ``NAME:key=value`` (whose values may contain '/', as in ``bw=25GB/s``)."""
    head = spec.split(":", 1)[0] if "=" in spec else spec
    return os.sep in head or "/" in head or head.lower().endswith(_FILE_EXTS)


def load_topology(spec: str) -> Topology:
    """Build a topology from a spec string (zoo name with parameters, source, or file path)."""
    from . import zoo  # noqa: F401  (registers the constructors)
    from .io import load_topology_file
    from .registry import build_named
    from .sources import build_source, split_source_spec

    if not isinstance(spec, str) or not spec.strip():
        raise CollsynthError("empty topology spec")
    if os.path.isfile(spec):
        return load_topology_file(spec)
    found = split_source_spec(spec)
    if found is not None:
        return build_source(spec, *found)
    if _looks_like_path(spec):
        return load_topology_file(spec)
    name, args = parse_spec(spec)
    return build_named(name, args)
