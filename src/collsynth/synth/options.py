"""Option parsing shared by synthesizers (options arrive as strings from the CLI)."""

from __future__ import annotations

import math
from typing import Any

from ..errors import CollsynthError
from ..units import parse_size


def int_option(value: Any, name: str, algo: str, minimum: int = 1) -> int | None:
    """Parse an integer option; ``None``, ``""`` and ``"auto"`` mean automatic (``None``)."""
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "auto")):
        return None
    if isinstance(value, bool):
        raise CollsynthError(f"{algo} option {name}={value!r} is not an integer")
    try:
        iv = int(value.strip()) if isinstance(value, str) else int(value)
        if isinstance(value, float) and iv != value:
            raise ValueError
    except (TypeError, ValueError):
        raise CollsynthError(f"{algo} option {name}={value!r} is not an integer") from None
    if iv < minimum:
        raise CollsynthError(f"{algo} option {name}={iv} must be at least {minimum}")
    return iv


def size_option(size: Any, algo: str, default: float) -> float:
    """The message size in bytes a size-aware synthesizer plans for (``default`` if none)."""
    if size is None:
        return float(default)
    s = parse_size(size, f"{algo} size")
    if not (math.isfinite(s) and s > 0):
        raise CollsynthError(f"{algo} size {size!r} must be a positive number of bytes")
    return float(s)
