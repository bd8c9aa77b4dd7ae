"""The collsynth topology file format (JSON or YAML), version 1.

See ``docs/formats.md`` for the full description. In short::

    {
      "format": "collsynth-topology", "version": 1, "name": "my-fabric",
      "meta": {...},                                   # optional, free-form
      "nodes": [{"name": "gpu0", "kind": "compute", "attrs": {"chassis": 0}}, ...],
      "links": [{"src": "gpu0", "dst": "sw0", "bw": "25GB/s", "alpha": "0.7us",
                 "class": "nvswitch", "lanes": 1, "bidirectional": true}, ...]
    }

``bw`` is bytes/s (a number) or a bandwidth string; ``alpha`` seconds or a time string;
``class`` defaults to ``link``, ``lanes`` to 1, ``bidirectional`` to false (true adds the reverse
link with the same parameters). Writers always emit plain numbers and one entry per direction,
so a written file reads back to an identical topology (same fingerprint).
"""

from __future__ import annotations

import json
import os
from typing import Any

from ..atomic import write_text_atomic
from ..errors import CollsynthError
from ..files import parse_structured, read_structured, read_text  # noqa: F401  (re-exported)
from ..units import LATENCY, parse_bandwidth, parse_time
from .model import Topology, TopologyBuilder

FORMAT = "collsynth-topology"
VERSION = 1

_TOP_KEYS = {"format", "version", "name", "meta", "nodes", "links"}
_NODE_KEYS = {"name", "kind", "attrs"}
_LINK_KEYS = {"src", "dst", "bw", "alpha", "class", "lanes", "bidirectional"}


def topology_to_dict(topo: Topology) -> dict:
    nodes = []
    for n in topo.nodes:
        entry: dict[str, Any] = {"name": n.name, "kind": n.kind.value}
        if n.attrs:
            entry["attrs"] = dict(n.attrs)
        nodes.append(entry)
    links = []
    for l in topo.links:
        entry = {
            "src": topo.nodes[l.src].name,
            "dst": topo.nodes[l.dst].name,
            "bw": l.bw,
            "alpha": l.alpha,
            "class": l.cls,
        }
        if l.lanes != 1:
            entry["lanes"] = l.lanes
        links.append(entry)
    return {
        "format": FORMAT,
        "version": VERSION,
        "name": topo.name,
        "meta": _plain(topo.meta),
        "nodes": nodes,
        "links": links,
    }


def _plain(obj: Any) -> Any:
    """Make meta JSON/YAML-safe (tuples to lists, unknown objects to strings)."""
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if isinstance(obj, (str, int, float, bool)) or obj is None:
        return obj
    return str(obj)


def topology_from_dict(data: Any, source: str = "topology") -> Topology:
    """Validate and build a topology from the parsed file content (errors name ``source``)."""
    try:
        return _from_dict(data, source)
    except CollsynthError as e:
        if type(e) is not CollsynthError or str(e).startswith(f"{source}:"):
            raise  # a time limit or another kind of error keeps its kind (and exit status)
        raise CollsynthError(f"{source}: {e}") from None


def _from_dict(data: Any, source: str) -> Topology:
    if not isinstance(data, dict):
        raise CollsynthError(f"{source}: top level must be an object with nodes and links")
    fmt = data.get("format", FORMAT)
    if fmt != FORMAT:
        raise CollsynthError(f"{source}: format {fmt!r} is not {FORMAT!r}")
    version = data.get("version", VERSION)
    if isinstance(version, bool) or version != VERSION:
        raise CollsynthError(
            f"{source}: unsupported topology format version {version!r} "
            f"(this collsynth reads version {VERSION})"
        )
    unknown = set(data) - _TOP_KEYS
    if unknown:
        raise CollsynthError(f"{source}: unknown key {sorted(unknown, key=str)[0]!r} at top level")
    name = data.get("name", os.path.splitext(os.path.basename(source))[0] or "topology")
    if not isinstance(name, str) or not name:
        raise CollsynthError(f"{source}: name must be a non-empty string")
    meta = data.get("meta", {})
    if not isinstance(meta, dict):
        raise CollsynthError(f"{source}: meta must be an object")
    nodes = data.get("nodes")
    links = data.get("links")
    if not isinstance(nodes, list):
        raise CollsynthError(f"{source}: 'nodes' must be a list")
    if not isinstance(links, list):
        raise CollsynthError(f"{source}: 'links' must be a list")
    b = TopologyBuilder(name, meta=meta)
    for i, nd in enumerate(nodes):
        if isinstance(nd, str):
            b.node(nd, "compute")
            continue
        if not isinstance(nd, dict):
            raise CollsynthError(f"{source}: node {i} must be an object or a name")
        bad = set(nd) - _NODE_KEYS
        if bad:
            raise CollsynthError(f"{source}: node {i} has unknown key {sorted(bad, key=str)[0]!r}")
        if "name" not in nd:
            raise CollsynthError(f"{source}: node {i} has no name")
        attrs = nd.get("attrs", {})
        if not isinstance(attrs, dict):
            raise CollsynthError(f"{source}: node {i} attrs must be an object")
        b.node(nd["name"], nd.get("kind", "compute"), **{str(k): v for k, v in attrs.items()})
    for i, ln in enumerate(links):
        if not isinstance(ln, dict):
            raise CollsynthError(f"{source}: link {i} must be an object")
        bad = set(ln) - _LINK_KEYS
        if bad:
            raise CollsynthError(f"{source}: link {i} has unknown key {sorted(bad, key=str)[0]!r}")
        for key in ("src", "dst", "bw"):
            if key not in ln:
                raise CollsynthError(f"{source}: link {i} has no {key!r}")
        what = f"{source}: link {i}"
        bw = (
            parse_bandwidth(ln["bw"], f"{what} bandwidth")
            if isinstance(ln["bw"], str)
            else ln["bw"]
        )
        alpha = ln.get("alpha", 0.0)
        alpha = parse_time(alpha, f"{what} alpha", LATENCY) if isinstance(alpha, str) else alpha
        cls = ln.get("class", "link")
        lanes = ln.get("lanes", 1)
        bidir = ln.get("bidirectional", False)
        if not isinstance(bidir, bool):
            raise CollsynthError(f"{what}: bidirectional must be true or false")
        if bidir:
            b.bilink(ln["src"], ln["dst"], bw, alpha, cls, lanes)
        else:
            b.link(ln["src"], ln["dst"], bw, alpha, cls, lanes)
    return b.build()


def _format_of(path: str, fmt: str | None) -> str:
    if fmt:
        return fmt
    ext = os.path.splitext(path)[1].lower()
    return "yaml" if ext in (".yaml", ".yml") else "json"


def load_topology_file(path: str) -> Topology:
    """Load a collsynth topology file, or a TE-CCL input file (detected by TopologyParams)."""
    data = read_structured(path)
    if isinstance(data, dict) and "TopologyParams" in data:
        from .teccl_params import topology_from_teccl

        return topology_from_teccl(data, source=path)
    return topology_from_dict(data, source=path)


def save_topology(topo: Topology, path: str, fmt: str | None = None) -> None:
    """Write ``topo`` as JSON or YAML (chosen by ``fmt`` or the file extension)."""
    data = topology_to_dict(topo)
    kind = _format_of(path, fmt)
    if kind == "yaml":
        import yaml

        text = yaml.safe_dump(data, sort_keys=False)
    else:
        text = json.dumps(data, indent=1) + "\n"
    write_text_atomic(path, text)
