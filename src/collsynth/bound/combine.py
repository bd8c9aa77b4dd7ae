""":func:`bound`: every registered provider (plugins' included) for one size; the largest
binds."""

from __future__ import annotations

import numpy as np

from ..collective import Collective
from ..errors import CollsynthError
from ..plugins import load_group
from ..topology.model import Topology
from .model import PROVIDERS, Bound, BoundResult

#: Most ranks :func:`bound` takes: its demand and distance matrices are ranks x ranks
#: (at 8192 ranks, ``dgx_a100:nodes=1024``: 58 s and 3.1 GiB peak on a 2-core machine).
MAX_BOUND_RANKS = 8192


def bound(
    topology: Topology, collective: Collective, size: float, providers: list[str] | None = None
) -> BoundResult:
    """All registered lower bounds for moving ``size`` bytes; ``.best`` binds."""
    if not (np.isfinite(size) and size > 0):
        raise CollsynthError(f"size {size!r} must be a positive number of bytes")
    if collective.num_ranks != topology.num_ranks:
        raise CollsynthError(
            f"collective has {collective.num_ranks} ranks but the topology has "
            f"{topology.num_ranks} compute nodes"
        )
    if collective.num_ranks > MAX_BOUND_RANKS:
        r = collective.num_ranks
        raise CollsynthError(
            f"bound: {r} ranks is more than {MAX_BOUND_RANKS} (the bounds keep rank x rank "
            f"demand and distance matrices: {r * r * 8 / 2**30:.1f} GiB each)"
        )
    load_group("collsynth.bounds")
    names = providers or list(PROVIDERS)
    bounds: list[Bound] = []
    for name in names:
        if name not in PROVIDERS:
            raise CollsynthError(f"unknown bound {name!r} (known: {', '.join(PROVIDERS)})")
        bounds.extend(PROVIDERS[name](topology, collective, size))
    if not bounds:
        bounds.append(Bound("trivial", 0.0, ""))
    return BoundResult(float(size), bounds)
