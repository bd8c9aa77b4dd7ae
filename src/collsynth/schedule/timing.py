"""Wall-clock figures in a schedule's ``meta``: one ``timing`` block that can be left out.

Everything else in a schedule file depends only on the inputs, so two runs give the same
bytes; wall-clock figures (solver and synthesis times) do not. By convention a synthesizer
names such a figure with a key ending in ``wall_s``, anywhere in its ``meta``;
:func:`collect_timing` moves every one of them into ``meta["timing"]`` under its dotted path
(``teccl.horizons[0].wall_s``), and :func:`without_timing` drops that block (``--no-timing``).
"""

from __future__ import annotations

from typing import Any

TIMING = "timing"
SUFFIX = "wall_s"


def collect_timing(meta: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``meta`` whose wall-clock figures (keys ending in ``wall_s``) sit in its
    ``timing`` block, keyed by dotted path; ``meta`` itself is not changed."""
    found: dict[str, Any] = {}
    out = {k: _strip(v, k, found) for k, v in meta.items() if k != TIMING}
    for k, v in meta.items():
        if k != TIMING and k.endswith(SUFFIX):
            found[k] = v
            del out[k]
    timing = dict(meta.get(TIMING) or {})
    timing.update(found)
    if timing:
        out[TIMING] = timing
    return out


def without_timing(meta: dict[str, Any]) -> dict[str, Any]:
    """``meta`` without its wall-clock figures (the ``timing`` block and any stray ``*wall_s``)."""
    out = collect_timing(meta)
    out.pop(TIMING, None)
    return out


def _strip(value: Any, path: str, found: dict[str, Any]) -> Any:
    if isinstance(value, dict):
        kept = {}
        for k, v in value.items():
            sub = f"{path}.{k}"
            if isinstance(k, str) and k.endswith(SUFFIX):
                found[sub] = v
            else:
                kept[k] = _strip(v, sub, found)
        return kept
    if isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
        return [_strip(v, f"{path}[{i}]", found) for i, v in enumerate(value)]
    return value
