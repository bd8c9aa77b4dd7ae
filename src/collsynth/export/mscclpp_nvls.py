"""In-network AllReduce to MSCCL++ switch channels (NVLink SHARP, ``glres``).

MSCCL++'s executor reaches an NVSwitch's multicast and in-switch reduction through a *switch
channel* (``channel_type: "switch"``: a multicast object bound to one buffer of every rank of a
rank group) and one operation on it, ``glres`` (multimem load-reduce-store): the issuing rank
reads a chunk of that buffer summed over every rank of the group, through the switch, and
stores the sum back to every rank of the group, through the switch. The latest executor has
no multicast store alone (its parser refuses the DSL's ``gstore``), so what maps is exactly
one pattern of the IR:

* an AllReduce in which every chunk ``c`` is reduced in one switch into one rank ``o`` (a
  ``reduce`` group with a member from every other rank) and multicast back from ``o`` (a
  ``copy`` group to every other rank) — what the ``nvls`` algorithm plans.

Each rank ``o`` then issues ``glres`` on its chunks, in the schedule's order (runs of
consecutive chunks as one operation). Around them, every rank signals and waits for every other
rank over memory channels (a ``nop`` first, so the signal publishes what came before): before,
so that every rank's input is in place when another rank's ``glres`` reads it; after, so that
no rank finishes while another rank's ``glres`` still stores into its buffer. Out of place,
each rank first copies its input to its output, and the switch channel is bound to the output
buffer; in place, to the input buffer. One thread block per rank.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from ..collective import CollKind
from ..errors import CollsynthError
from ..schedule.ir import OpKind, Schedule

#: most channels one signal/wait names (execution_common.hpp)
MAX_OP_CHANNELS = 8


def _refuse(why: str) -> None:
    raise CollsynthError(
        "the MSCCL++ export maps in-network groups only to glres (multimem load-reduce-"
        "store: an AllReduce whose every chunk is reduced in one switch into one rank and "
        f"multicast back from it; MSCCL++ has no multicast store alone): {why}"
    )


def owners(s: Schedule) -> tuple[np.ndarray, list[int]]:
    """Owner rank of every chunk (the rank it is reduced into and multicast from) and the
    chunks in the order their multicasts start; refuses any other use of groups."""
    coll = s.collective
    if coll.kind is not CollKind.ALLREDUCE:
        _refuse(f"this is a {coll.kind.value} schedule")
    assert s.group is not None
    n = coll.num_ranks
    loose = np.flatnonzero(s.group < 0)
    if len(loose):
        _refuse(f"{s.describe_op(int(loose[0]))} is not in a switch group")
    members: dict[int, list[int]] = defaultdict(list)
    for op, g in enumerate(s.group.tolist()):
        members[g].append(op)
    switch = -1
    red: dict[int, int] = {}
    mc: dict[int, tuple[int, float]] = {}
    for g, ops in sorted(members.items()):
        first = ops[0]
        c, kind = int(s.chunk[first]), OpKind(int(s.kind[first]))
        ends = s.dst if kind is OpKind.REDUCE else s.src
        far = s.src if kind is OpKind.REDUCE else s.dst
        hub = int(ends[first])
        routes = {tuple(int(s.topology.link_dst[l]) for l in s.route(op)[:-1]) for op in ops}
        if len(routes) != 1 or len(next(iter(routes))) != 1:
            _refuse(f"group {g} does not pass through exactly one switch")
        sw = next(iter(routes))[0]
        if switch not in (-1, sw):
            _refuse(f"groups use two switches (nodes {switch} and {sw})")
        switch = sw
        got = sorted(int(far[op]) for op in ops)
        if (
            any(int(s.chunk[op]) != c or int(ends[op]) != hub for op in ops)
            or any(OpKind(int(s.kind[op])) is not kind for op in ops)
            or got != [r for r in range(n) if r != hub]
        ):
            _refuse(f"group {g} does not join chunk {c} of every other rank at rank {hub}")
        book = red if kind is OpKind.REDUCE else mc
        if c in book:
            _refuse(f"chunk {c} is {'reduced' if book is red else 'multicast'} twice")
        if kind is OpKind.REDUCE:
            red[c] = hub
        else:
            mc[c] = (hub, float(np.min(s.start[ops])) if s.start is not None else float(g))
    owner = np.full(coll.num_chunks, -1, dtype=np.int64)
    for c in range(coll.num_chunks):
        if c not in red or c not in mc or red[c] != mc[c][0]:
            _refuse(f"chunk {c} is not reduced into and multicast from one rank")
        owner[c] = red[c]
    order = sorted(range(coll.num_chunks), key=lambda c: (mc[c][1], c))
    return owner, order


def nvls_gpus(s: Schedule, inplace: bool) -> list[dict]:
    """The plan's ``gpus`` array for an in-network AllReduce (see the module doc)."""
    owner, order = owners(s)
    n = s.collective.num_ranks
    C = s.collective.num_chunks
    buf = "i" if inplace else "o"
    gpus = []
    for r in range(n):
        peers = [p for p in range(n) if p != r]
        ops: list[dict] = []
        if not inplace:
            ops.append({"name": "copy", "src_buff": [{"type": "i", "index": 0, "size": C}],
                        "dst_buff": [{"type": "o", "index": 0, "size": C}]})  # fmt: skip
        _barrier(ops, len(peers))
        for lo, size in _runs([c for c in order if owner[c] == r]):
            ref = {"switch_channel_id": 0, "index": lo, "size": size}
            ops.append({"name": "glres", "src_buff": [ref], "dst_buff": [dict(ref)],
                        "channel_type": "switch", "reduce_op": "sum"})  # fmt: skip
        _barrier(ops, len(peers))
        chans: list[dict] = [{"channel_type": "switch", "channel_ids": [0]}]
        decl: list[dict] = [{"channel_type": "switch", "buffer_type": buf,
                 "rank_groups": [{"size": n, "ranks": list(range(n))}]}]  # fmt: skip
        if peers:
            chans.insert(0, {"channel_type": "memory", "channel_ids": list(range(len(peers)))})
            decl.insert(0, {"channel_type": "memory", "connected_to": peers})
        gpus.append(
            {
                "id": r,
                "input_chunks": C,
                "output_chunks": C,
                "scratch_chunks": 0,
                "threadblocks": [
                    {"id": 0, "ops": ops, "channels": chans, "remote_buffer_refs": []}
                ],
                "channels": decl,
                "remote_buffers": [],
                "semaphores": [],
            }
        )
    return gpus


def _barrier(ops: list[dict], npeers: int) -> None:
    """Signal every peer, then wait for every peer (a ``nop`` before each: the signal
    publishes what came before; what the waits acquire is fenced before the next step)."""
    for name in ("signal", "wait"):
        ops.append({"name": "nop"})
        for lo in range(0, npeers, MAX_OP_CHANNELS):
            ids = list(range(lo, min(npeers, lo + MAX_OP_CHANNELS)))
            ops.append({"name": name, "channel_ids": ids, "channel_type": "memory"})
    ops.append({"name": "nop"})


def _runs(chunks: list[int]) -> list[tuple[int, int]]:
    """Consecutive chunk ids as (first, count), in the given order."""
    out: list[tuple[int, int]] = []
    for c in chunks:
        if out and out[-1][0] + out[-1][1] == c:
            out[-1] = (out[-1][0], out[-1][1] + 1)
        else:
            out.append((c, 1))
    return out
