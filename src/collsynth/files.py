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

#: The largest value each limit variable accepts (a larger one is refused, not clamped).
LIMIT_MAXIMUMS = {
    "COLLSYNTH_MAX_FILE_BYTES": 1 << 40,
    "COLLSYNTH_MAX_DEPTH": 400,  # deeper than the YAML and JSON parsers themselves can go
    "COLLSYNTH_MAX_NODES": 1 << 40,
    "COLLSYNTH_MAX_DEPS": 1 << 40,
    "COLLSYNTH_MAX_RUN_BYTES": 1 << 60,
    "COLLSYNTH_MAX_CHUNKS": 10**18,  # the verifier copes with any count up to this (int64)
}


def env_limit(name: str, default: int) -> int:
    """The limit ``name`` (a ``COLLSYNTH_MAX_*`` variable), or ``default`` when it is unset
    or empty: the one parser of every limit variable.

    The value must be a decimal integer of ASCII digits from 1 to ``LIMIT_MAXIMUMS[name]``
    (surrounding spaces allowed; no sign, exponent, ``_`` or Unicode digits); anything else
    is refused in one line naming the variable and the accepted range.
    """
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    top = LIMIT_MAXIMUMS[name]
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 20 and 1 <= int(raw) <= top):
        shown = ascii(raw) if len(raw) <= 40 else ascii(raw[:37]) + "..."
        raise CollsynthError(f"{name}={shown} is not an integer from 1 to {top}")
    return int(raw)


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
    return env_limit("COLLSYNTH_MAX_DEPTH", MAX_DEPTH), env_limit("COLLSYNTH_MAX_NODES", MAX_NODES)


#: Most dependency entries (summed over operations) one lowered schedule may hold.
MAX_DEPENDENCIES = 300_000_000


def dependency_limit() -> int:
    """The dependency-entry limit in force (``COLLSYNTH_MAX_DEPS`` or
    :data:`MAX_DEPENDENCIES`)."""
    return env_limit("COLLSYNTH_MAX_DEPS", MAX_DEPENDENCIES)


def file_size_limit() -> int:
    """The largest input file read (and the most an archive may expand to), in bytes."""
    return env_limit("COLLSYNTH_MAX_FILE_BYTES", MAX_FILE_BYTES)


def read_bytes(path: str) -> bytes:
    """A file's bytes, or one line naming what is wrong (missing, a directory, too large)."""
    limit = file_size_limit()
    try:
        if os.path.isdir(path):
            raise CollsynthError(f"{path} is a directory, not a file")
        with open(path, "rb") as f:
            data = _read_at_most(f, limit + 1)
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


def _read_at_most(f: Any, count: int) -> bytes:
    """Up to ``count`` bytes of ``f``, read in blocks (a huge limit allocates nothing)."""
    blocks: list[bytes] = []
    left = count
    while left > 0:
        block = f.read(min(left, 1 << 24))
        if not block:
            break
        blocks.append(block)
        left -= len(block)
    return b"".join(blocks)


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


def parse_structured(text: str, path: str = "input", fmt: str | None = None) -> Any:
    """Parse JSON or YAML text and check its shape (:func:`check_shape`).

    ``fmt`` (``"json"`` or ``"yaml"``) names the syntax; unset, a ``.yaml``/``.yml``
    extension of ``path`` means YAML and anything else JSON.
    """
    if fmt is None:
        ext = os.path.splitext(path)[1].lower()
        fmt = "yaml" if ext in (".yaml", ".yml") else "json"
    data = _parse_yaml(text, path) if fmt == "yaml" else _parse_json(text, path)
    check_shape(data, path)
    return data


#: Most decimal digits an integer in a structured file may have: any more cannot even be
#: converted to a float, and no count, size or rate collsynth reads comes near it.
MAX_INT_DIGITS = 308
_INT_BOUND = 10**MAX_INT_DIGITS


def _too_deep(path: str) -> CollsynthError:
    limit = env_limit("COLLSYNTH_MAX_DEPTH", MAX_DEPTH)
    return CollsynthError(
        f"{path}: nested deeper than {limit} levels (set COLLSYNTH_MAX_DEPTH to raise the limit)"
    )


def _too_long(path: str) -> CollsynthError:
    return CollsynthError(
        f"{path}: an integer has more than {MAX_INT_DIGITS} digits (past any finite number "
        f"collsynth reads)"
    )


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
        raise _too_deep(path) from None
    except ValueError as e:  # an integer past Python's conversion limit, a date like 2020-13-45
        if "integer string conversion" in str(e):
            raise _too_long(path) from None
        raise CollsynthError(f"{path}: not valid YAML ({e})") from None


def _parse_json(text: str, path: str) -> Any:
    """JSON; errors as one line."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise CollsynthError(
            f"{path}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})"
        ) from None
    except RecursionError:
        raise _too_deep(path) from None
    except ValueError as e:  # an integer past Python's conversion limit
        if "integer string conversion" in str(e):
            raise _too_long(path) from None
        raise CollsynthError(f"{path}: not valid JSON ({e})") from None


def check_shape(data: Any, path: str = "input") -> None:
    """Refuse data nested deeper than the depth limit, expanding to more values than the
    node limit (shared objects, such as YAML aliases, count at every use), containing itself
    (a YAML alias inside the value it names) or holding an integer of more than
    :data:`MAX_INT_DIGITS` digits.

    Each distinct list or object is visited once (its expanded size and depth memoised), so
    the check is linear in the file even when aliases make the expansion exponential.
    """
    max_depth = env_limit("COLLSYNTH_MAX_DEPTH", MAX_DEPTH)
    max_nodes = env_limit("COLLSYNTH_MAX_NODES", MAX_NODES)
    if not isinstance(data, (dict, list)):
        _check_leaves((data,), path)
        return
    memo: dict[int, tuple[int, int]] = {}  # id -> (expanded values, depth)
    path_ids = {id(data)}  # the objects on the path from the root: one met again is a cycle
    stack: list[tuple[Any, Any]] = [(data, iter(_members(data)))]
    while stack:
        obj, members = stack[-1]
        for v in members:
            if not isinstance(v, (dict, list)):
                continue
            if id(v) in path_ids:
                raise CollsynthError(
                    f"{path}: a value contains itself (a YAML alias used inside the "
                    f"value its anchor names)"
                )
            if id(v) not in memo:
                if len(stack) >= max_depth:
                    raise _too_deep(path)
                path_ids.add(id(v))
                stack.append((v, iter(_members(v))))
                break
        else:
            stack.pop()
            path_ids.discard(id(obj))
            _check_leaves(_members(obj), path)
            children = [v for v in _members(obj) if isinstance(v, (dict, list))]
            values = len(obj) + 1 + sum(memo[id(c)][0] for c in children)
            depth = 1 + max((memo[id(c)][1] for c in children), default=0)
            if depth > max_depth:
                raise _too_deep(path)
            if values > max_nodes:
                raise CollsynthError(
                    f"{path}: expands to more than {max_nodes} values (YAML "
                    f"aliases count at every use; set COLLSYNTH_MAX_NODES to raise "
                    f"the limit)"
                )
            memo[id(obj)] = (values, depth)


def _members(obj: dict | list) -> list:
    """A list's items, or an object's keys and values."""
    return [*obj.keys(), *obj.values()] if isinstance(obj, dict) else obj


def _check_leaves(values: Any, path: str) -> None:
    """Refuse an integer of more than :data:`MAX_INT_DIGITS` digits among ``values``."""
    bound = _INT_BOUND
    for v in values:
        if type(v) is int and not -bound < v < bound:
            raise _too_long(path)
