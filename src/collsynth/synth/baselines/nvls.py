"""``nvls`` — AllReduce, ReduceScatter and AllGather through a switch that reduces and
multicasts (NVLink SHARP, as NCCL's NVLS algorithm uses it on NVSwitch).

Every rank is linked to and from one switch with the needed capabilities. The data is cut
into ``N * P`` chunks (``P`` pipeline pieces per rank; chunk ``r * P + i`` belongs to rank
``r``):

* **ReduceScatter**: for every chunk, one in-switch reduction: the other ranks each send their
  contribution up their link, the switch combines the ``N - 1`` streams and sends one down to
  the chunk's owner (``reduce`` operations in one group).
* **AllGather**: for every chunk, one multicast: its owner sends it up once and the switch
  copies it down to every other rank (``copy`` operations in one group).
* **AllReduce**: the ReduceScatter, then for each chunk, once its reduction is complete (one
  join at the owner), the AllGather's multicast of the result.

Each rank's uplink carries ``(N-1)/N`` of the data for the reductions and ``1/N`` for its own
multicasts; its downlink ``1/N`` and ``(N-1)/N``: an AllReduce moves ``M`` bytes each way per
rank, where without the switch's help every byte crosses ``2(N-1)`` times (``2(N-1)/N · M``
per rank; ``docs/bounds.md``). With pipelining (links serve older pieces first) the two halves
overlap and the
AllReduce approaches ``M / bw``: ``2(N-1)/N`` times faster than any schedule without in-network
reduction can be (1.75 for 8 GPUs). Steps: ``3i`` for piece ``i``'s reductions, ``3i + 1``
its joins, ``3i + 2`` its multicasts.
"""

from __future__ import annotations

import math

from ...collective import Collective, CollKind
from ...errors import CollsynthError
from ...schedule.ir import OpKind, Schedule, ScheduleBuilder
from ...topology.model import Topology
from .. import DEFAULT_SIZE, register
from ..options import Option

#: bytes per pipeline piece when ``pipeline=auto`` (up to MAX_PIECES pieces)
PIECE_BYTES = 4 << 20
MAX_PIECES = 16


def _switch(t: Topology, need_reduce: bool, need_multicast: bool) -> tuple[int, list, list]:
    """The switch every rank is linked to and from, with the capabilities; its up and down
    link per rank."""
    ranks = [int(v) for v in t.compute_nodes]
    for sw in range(t.num_nodes):
        if t.is_compute(sw):
            continue
        if (need_reduce and not t.reduce_nodes[sw]) or (
            need_multicast and not t.multicast_nodes[sw]
        ):
            continue
        ups = [t.links_between(v, sw) for v in ranks]
        downs = [t.links_between(sw, v) for v in ranks]
        if all(ups) and all(downs):
            return sw, [u[0] for u in ups], [d[0] for d in downs]
    what = " and ".join(
        w for w, on in (("reduces", need_reduce), ("multicasts", need_multicast)) if on
    )
    raise CollsynthError(
        f"nvls needs one switch that {what} in flight and links every rank both ways "
        f"({t.name!r} has none; see the topology's 'multicast' and 'reduce' switch attributes)"
    )


@register(
    "nvls",
    collectives={CollKind.ALLREDUCE, CollKind.REDUCESCATTER, CollKind.ALLGATHER},
    summary="NVLink SHARP: in-switch reduction and multicast through one switch every rank "
    "is linked to (NCCL's NVLS); pipelined",
    options=(
        Option(
            "pipeline",
            "int",
            "auto",
            words=("auto",),
            minimum=1,
            unit="pieces",
            help="pipeline pieces per rank's share; auto: one per 4 MiB of each rank's share "
            "of the data, 1 to 16",
        ),
    ),
    size_aware=True,
    reference="NVIDIA NCCL's NVLS algorithm on NVLink SHARP (NVSwitch multicast and "
    "in-switch reduction, Hopper)",
)
def synthesize(
    topology: Topology, collective: Collective, *, size: float | None = None, pipeline=None
) -> Schedule:
    t = topology
    kind = collective.kind
    n = t.num_ranks
    if n < 2:
        raise CollsynthError("nvls needs at least two ranks")
    reduces = kind in (CollKind.ALLREDUCE, CollKind.REDUCESCATTER)
    gathers = kind in (CollKind.ALLREDUCE, CollKind.ALLGATHER)
    _, up, down = _switch(t, reduces, gathers)
    if pipeline in (None, "auto"):
        share = (DEFAULT_SIZE if size is None else size) / n
        pipeline = max(1, min(MAX_PIECES, math.ceil(share / PIECE_BYTES)))
    pieces = int(pipeline) * collective.chunks_per_rank
    coll = collective.with_chunks(pieces)
    b = ScheduleBuilder(t, coll, meta={"nvls": {"pipeline": int(pipeline)}})
    group = 0
    for i in range(pieces):
        for owner in range(n):
            chunk = owner * pieces + i
            others = [r for r in range(n) if r != owner]
            deps: list[int] = []
            if reduces:
                into = [
                    b.add(
                        r,
                        owner,
                        chunk,
                        route=[up[r], down[owner]],
                        kind=OpKind.REDUCE,
                        group=group,
                        step=3 * i,
                    )  # fmt: skip
                    for r in others
                ]
                group += 1
                if gathers:
                    deps = [b.add(owner, owner, chunk, kind=OpKind.JOIN, deps=into, step=3 * i + 1)]
            if gathers:
                for r in others:
                    b.add(owner, r, chunk, route=[up[owner], down[r]], deps=deps, group=group,
                          step=3 * i + 2)  # fmt: skip
                group += 1
    return b.build()
