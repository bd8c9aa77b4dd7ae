"""What the zoo's families share: units of the defaults, the lanes parameter, wiring helpers."""

from __future__ import annotations

from typing import NoReturn

from ...errors import CollsynthError
from ..model import TopologyBuilder
from ..registry import Param

GB = 1e9
US = 1e-6

#: The ``lanes`` parameter of the fabrics whose GPU pairs have several physical links.
LANES = Param(
    "choice",
    "merge",
    "merge: one link per GPU pair carrying all its physical links "
    "(lanes=count); split: one parallel link per physical link",
    choices=("merge", "split"),
)


def fail(message: str) -> NoReturn:
    """Refuse a combination of parameters with one line."""
    raise CollsynthError(message)


def wire_pairs(
    b: TopologyBuilder,
    gpus: list[int],
    counts: dict[tuple[int, int], int],
    per_link_bw: float,
    alpha: float,
    cls: str,
    split: bool,
) -> None:
    """Wire ``counts[(i, j)]`` physical links between local GPUs i and j, both directions.

    With ``split`` every physical link is its own parallel link; otherwise they are bundled into
    one link of ``count * per_link_bw`` with ``lanes=count``.
    """
    for (i, j), count in counts.items():
        if split:
            for _ in range(count):
                b.bilink(gpus[i], gpus[j], per_link_bw, alpha, cls, 1)
        else:
            b.bilink(gpus[i], gpus[j], count * per_link_bw, alpha, cls, count)
