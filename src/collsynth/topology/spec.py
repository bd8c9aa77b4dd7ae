"""Topology spec strings: ``NAME``, ``NAME:key=value,key=value`` or a path to a file.

A spec that names an existing file (or looks like a path: it contains a path separator or ends in
``.json``, ``.yaml`` or ``.yml``) is loaded with :func:`collsynth.topology.io.load_topology_file`;
anything else is a zoo name with optional parameters.
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
    args: dict[str, str] = {}
    if rest.strip():
        for item in rest.split(","):
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
    elif _:
        raise CollsynthError(f"topology spec {spec!r} has ':' but no parameters")
    return name, args


def _looks_like_path(spec: str) -> bool:
    """A path, not ``NAME:key=value`` (whose values may contain '/', as in ``bw=25GB/s``)."""
    head = spec.split(":", 1)[0] if "=" in spec else spec
    return os.sep in head or "/" in head or head.lower().endswith(_FILE_EXTS)


def load_topology(spec: str) -> Topology:
    """Build a topology from a spec string (zoo name with parameters, or a file path)."""
    from . import zoo  # noqa: F401  (registers the constructors)
    from .io import load_topology_file
    from .registry import build_named

    if not isinstance(spec, str) or not spec.strip():
        raise CollsynthError("empty topology spec")
    if os.path.isfile(spec) or _looks_like_path(spec):
        return load_topology_file(spec)
    name, args = parse_spec(spec)
    return build_named(name, args)
