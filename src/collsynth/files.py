"""Reading input files within limits: size, text encoding, nesting depth, expanded size.

Every file collsynth reads (topologies, schedules, demands, link statistics, TE-CCL inputs, XML)
goes through :func:`read_text`; structured files through :func:`parse_structured`, which also
refuses documents nested deeper than :data:`MAX_DEPTH` and YAML whose aliases expand beyond
:data:`MAX_NODES` values ("billion laughs"), before any further work starts. Each limit is named
in the error with the environment variable that raises it.
"""

from __future__ import annotations

import json
import os
from typing import Any

from .errors import CollsynthError


def _limit(name: str, default: int) -> int:
    """A limit, from the environment variable ``name`` when it is set to a positive integer."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise CollsynthError(f"{name}={raw!r} is not a positive integer") from None
    if value < 1:
        raise CollsynthError(f"{name}={raw!r} is not a positive integer")
    return value


#: Largest input file read, in bytes (``COLLSYNTH_MAX_FILE_BYTES``).
MAX_FILE_BYTES = 1 << 30
#: Deepest nesting of lists and objects in a structured file (``COLLSYNTH_MAX_DEPTH``).
MAX_DEPTH = 64
#: Most values a structured file may expand to, aliases counted at every use
#: (``COLLSYNTH_MAX_NODES``).
MAX_NODES = 50_000_000


def structure_limits() -> tuple[int, int]:
    """(deepest nesting, most values) a structured input may have, from the environment.

    The XML importers (:mod:`collsynth.topology.xmltree`) count elements as values.
    """
    return _limit("COLLSYNTH_MAX_DEPTH", MAX_DEPTH), _limit("COLLSYNTH_MAX_NODES", MAX_NODES)


#: Most dependency entries (summed over operations) one lowered schedule may hold.
MAX_DEPENDENCIES = 300_000_000


def dependency_limit() -> int:
    """The dependency-entry limit in force (``COLLSYNTH_MAX_DEPS`` or
    :data:`MAX_DEPENDENCIES`)."""
    return _limit("COLLSYNTH_MAX_DEPS", MAX_DEPENDENCIES)


def file_size_limit() -> int:
    """The largest input file read (and the most an archive may expand to), in bytes."""
    return _limit("COLLSYNTH_MAX_FILE_BYTES", MAX_FILE_BYTES)


def read_bytes(path: str) -> bytes:
    """A file's bytes, or one line naming what is wrong (missing, a directory, too large)."""
    limit = file_size_limit()
    try:
        if os.path.isdir(path):
            raise CollsynthError(f"{path} is a directory, not a file")
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except FileNotFoundError:
        raise CollsynthError(f"file not found: {path}") from None
    except IsADirectoryError:
        raise CollsynthError(f"{path} is a directory, not a file") from None
    except OSError as e:
        raise CollsynthError(f"cannot read {path}: {e.strerror or e.__class__.__name__}") from None
    except ValueError:  # a NUL byte in the name
        raise CollsynthError(f"{path!r} is not a usable file name") from None
    if len(data) > limit:
        raise CollsynthError(
            f"{path} is larger than {limit} bytes (set COLLSYNTH_MAX_FILE_BYTES to raise the limit)"
        )
    return data


def read_text(path: str) -> str:
    """A UTF-8 text file's content, or one line naming what is wrong."""
    return decode_text(read_bytes(path), path)


def decode_text(data: bytes, path: str) -> str:
    """``data`` (read from ``path``) as UTF-8 text, or one line naming what is wrong."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CollsynthError(f"{path} is not UTF-8 text (byte {e.start})") from None


def read_structured(path: str) -> Any:
    """Read a JSON or YAML file (YAML by a .yaml/.yml extension, JSON otherwise)."""
    return parse_structured(read_text(path), path)


def parse_structured(text: str, path: str = "input") -> Any:
    """Parse JSON or YAML text and check its shape (:func:`check_shape`)."""
    ext = os.path.splitext(path)[1].lower()
    data = _parse_yaml(text, path) if ext in (".yaml", ".yml") else _parse_json(text, path)
    check_shape(data, path)
    return data


def _parse_yaml(text: str, path: str) -> Any:
    """YAML with the safe loader; errors as one line."""
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise CollsynthError(f"{path}: not valid YAML{where}") from None
    except RecursionError:
        raise CollsynthError(
            f"{path}: nested deeper than {MAX_DEPTH} levels (set "
            f"COLLSYNTH_MAX_DEPTH to raise the limit)"
        ) from None


def _parse_json(text: str, path: str) -> Any:
    """JSON; errors as one line."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise CollsynthError(
            f"{path}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})"
        ) from None
    except RecursionError:
        raise CollsynthError(
            f"{path}: nested deeper than {MAX_DEPTH} levels (set "
            f"COLLSYNTH_MAX_DEPTH to raise the limit)"
        ) from None


def check_shape(data: Any, path: str = "input") -> None:
    """Refuse data nested deeper than the depth limit or expanding to more values than the
    node limit (shared objects, such as YAML aliases, count at every use).

    Each distinct list or object is visited once (its expanded size and depth memoised), so
    the check is linear in the file even when aliases make the expansion exponential.
    """
    max_depth = _limit("COLLSYNTH_MAX_DEPTH", MAX_DEPTH)
    max_nodes = _limit("COLLSYNTH_MAX_NODES", MAX_NODES)
    memo: dict[int, tuple[int, int]] = {}  # id -> (expanded values, depth)
    stack: list[tuple[Any, bool]] = [(data, False)]
    while stack:
        obj, done = stack.pop()
        if not isinstance(obj, (dict, list)) or (id(obj) in memo and not done):
            continue
        children = [
            v
            for v in (obj.values() if isinstance(obj, dict) else obj)
            if isinstance(v, (dict, list))
        ]
        if not done:
            memo[id(obj)] = (0, 0)  # visiting: a cycle counts as a leaf
            stack.append((obj, True))
            stack.extend((c, False) for c in children if id(c) not in memo)
            continue
        values = len(obj) + 1 + sum(memo[id(c)][0] for c in children)
        depth = 1 + max((memo[id(c)][1] for c in children), default=0)
        if depth > max_depth:
            raise CollsynthError(
                f"{path}: nested deeper than {max_depth} levels (set "
                f"COLLSYNTH_MAX_DEPTH to raise the limit)"
            )
        if values > max_nodes:
            raise CollsynthError(
                f"{path}: expands to more than {max_nodes} values (YAML "
                f"aliases count at every use; set COLLSYNTH_MAX_NODES to raise "
                f"the limit)"
            )
        memo[id(obj)] = (values, depth)
