"""An independent MSCCL XML checker (shares no code with the exporter).

:func:`check_msccl_xml` reads MSCCL XML text with its own strict parser and checks, in order
(the first violation raises :class:`XmlCheckError`, one line naming the GPU, thread block and
step; ``XmlCheckError.check`` names the rule):

``format``        no ``<?xml?>`` declaration, no tabs, double-quoted attributes on the tag's own
                  line, at most 16 attributes per element, at most 1024 children per element,
                  nesting and element count within ``COLLSYNTH_MAX_DEPTH`` and
                  ``COLLSYNTH_MAX_NODES`` (counted as the text is parsed).
``structure``     required attributes per dialect, known protocol/collective/buffers/step types,
                  GPU ids 0..ngpus-1 once each, contiguous thread-block ids, peers in range and
                  not the GPU itself, ``chan`` < ``nchannels`` <= 32, at most one thread block
                  per (channel, send peer) and per (channel, recv peer), at most 32 sending and
                  32 receiving thread blocks per channel, ``s`` equal to the step's position,
                  the step limit (256 old fork, 64 executor), ``cnt`` in 1..71 (nops: 0..71),
                  offsets inside their buffer, send/receive halves only with a peer, at most
                  4096 parsed nodes per rank; msccl dialect: i_chunks/o_chunks consistent with
                  nchunksperloop; with a topology: ngpus matches and every (sender, send peer)
                  pair has a direct route.
``dependency``    ``depid``/``deps`` name an existing non-nop step of another thread block of the
                  same GPU that has ``hasdep="1"``; every nop carries a dependency and a nop
                  chain ends on a step with its own dependency.
``pairing``       per (sender, receiver, channel) the sending steps and the receiving steps agree
                  in number and, in order, in ``cnt``.
``dependency-cycle`` the thread-block order plus the dependencies have no cycle.
``deadlock``      symbolic execution of all thread blocks (FIFO per (sender, receiver, channel)
                  with ``fifo_slots`` slots; a step runs when its dependencies are done, its
                  data has arrived and, for a send, a slot is free) finishes every step.
``data``          no step reads an empty location, writes a chunk into the output slot of
                  another chunk, combines a contribution twice, or reduces in a non-reducing
                  collective.
``race``          accesses of one location (GPU, buffer, offset) by different thread blocks are
                  ordered (vector clocks: thread-block order, dependencies, send -> matching
                  receive) when one is a reduction, or when a write changes what another
                  access reads or writes.
``postcondition`` at the end every output location holds what the collective requires
                  (reductions: each rank's contribution exactly once).

Chunks are MSCCL chunks (1/nchunksperloop of the larger buffer). Collectives and their
buffers: allgather (i: own ``c`` chunks, o: ``n*c``; in-place: own chunks already in o),
reduce_scatter/reducescatter (i: ``n*c`` contributions, o: ``c`` results; in-place: results in
i), allreduce (i contributions, o results; in-place: i), alltoall (i[d*c+j] at s -> o[s*c+j]
at d), broadcast and reduce (root given by ``root``, default 0).

The parser is in :mod:`.msccl_check_parse`, the records and the error in
:mod:`.msccl_check_model`, the ``structure`` rule in :mod:`.msccl_check_structure`, the
``dependency``/``pairing``/``dependency-cycle`` rules in :mod:`.msccl_check_dependencies` and
the symbolic execution (the last four rules) in :mod:`.msccl_check_execution`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .msccl_check_dependencies import (
    check_cycles,
    check_dependencies,
    check_pairing,
    transfers_by_connection,
)
from .msccl_check_execution import SymbolicExecution
from .msccl_check_model import XmlCheckError
from .msccl_check_parse import parse_xml
from .msccl_check_structure import check_algo, check_gpus, check_routes


@dataclass
class XmlCheckReport:
    ok: bool
    dialect: str
    coll: str
    ngpus: int
    nchannels: int
    nchunksperloop: int
    inplace: bool
    threadblocks: int
    steps: int
    transfers: int
    checks: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return dict(self.__dict__)


#: transfers one (sender, receiver, channel) connection of the MSCCL runtime buffers before a
#: send waits: NCCL's ``NCCL_STEPS`` slots per connection, which MSCCL's runtime inherits
RUNTIME_FIFO_SLOTS = 8


def check_msccl_xml(
    text: str, topology=None, *, dialect: str | None = None, root: int = 0, fifo_slots: int = 1
) -> XmlCheckReport:
    """Check MSCCL XML ``text``; raise :class:`XmlCheckError` at the first violation.

    ``topology`` (optional, a collsynth Topology): ``ngpus`` must equal its rank count and every
    send peer pair must have a direct route (through switches only) in it. ``dialect``:
    ``msccl``/``executor`` or None (detect: ``outofplace`` or ``reducescatter`` -> executor).
    ``root``: root rank of broadcast/reduce (not stored in MSCCL XML). ``fifo_slots``:
    transfers a (sender, receiver, channel) connection buffers (1 = most conservative).
    """
    checks: list[str] = []
    algo = parse_xml(text)
    checks.append("format")
    header = check_algo(algo, dialect, topology)
    gpus = check_gpus(algo, header)
    if topology is not None:
        check_routes(gpus, header.ngpus, topology)
    checks.append("structure")
    check_dependencies(gpus, header.ngpus)
    checks.append("dependency")
    sends, recvs = transfers_by_connection(gpus, header.ngpus)
    transfers = check_pairing(sends, recvs)
    checks.append("pairing")
    check_cycles(gpus, header.ngpus, sends, recvs)
    checks.append("dependency-cycle")
    execution = SymbolicExecution(
        gpus,
        header.ngpus,
        header.coll,
        header.nchunksperloop,
        bool(header.inplace),
        root,
        fifo_slots,
    )
    execution.run()
    checks += ["deadlock", "data", "race", "postcondition"]
    return XmlCheckReport(
        True,
        header.dialect,
        algo.attrs["coll"],
        header.ngpus,
        header.nchannels,
        header.nchunksperloop,
        bool(header.inplace),
        sum(len(gpus[g][1]) for g in range(header.ngpus)),
        sum(len(tb.steps) for g in range(header.ngpus) for tb in gpus[g][1]),
        transfers,
        checks,
    )


__all__ = ["XmlCheckError", "XmlCheckReport", "check_msccl_xml"]
