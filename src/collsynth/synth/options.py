"""Option parsing shared by synthesizers (options arrive as strings from the CLI)."""

from __future__ import annotations

from typing import Any

from ..errors import CollsynthError


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
