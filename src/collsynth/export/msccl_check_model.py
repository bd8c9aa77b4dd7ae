"""The MSCCL XML checker's vocabulary: its error, the step types, and the records the parser's
text is read into (:class:`XmlStep`, :class:`XmlThreadBlock`, :class:`AlgoHeader`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NoReturn

from ..errors import CollsynthError

COLLECTIVES = {
    "allgather",
    "reduce_scatter",
    "reducescatter",
    "allreduce",
    "alltoall",
    "broadcast",
    "reduce",
}
STEP_ATTRIBUTES = (
    "s",
    "type",
    "srcbuf",
    "srcoff",
    "dstbuf",
    "dstoff",
    "cnt",
    "depid",
    "deps",
    "hasdep",
)
#: step type -> (sends, receives, reads src, writes dst, reduces)
STEP_TYPES = {
    "s": (True, False, True, False, False),
    "r": (False, True, False, True, False),
    "rcs": (True, True, False, True, False),
    "rrs": (True, True, True, False, True),
    "rrc": (False, True, True, True, True),
    "rrcs": (True, True, True, True, True),
    "cpy": (False, False, True, True, False),
    "re": (False, False, True, True, True),
    "nop": (False, False, False, False, False),
}


class XmlCheckError(CollsynthError):
    """The XML breaks a rule; ``check`` names the rule."""

    def __init__(self, message: str, *, check: str):
        super().__init__(f"{check}: {message}")
        self.check = check


def fail(check: str, msg: str) -> NoReturn:
    """Raise :class:`XmlCheckError` for rule ``check``."""
    raise XmlCheckError(msg, check=check)


@dataclass
class XmlStep:
    """One ``<step>`` as read: ``i`` its position in thread block ``tb`` of ``gpu``; ``waits``
    the (thread block, step) pairs it waits for, its nops' dependencies included."""

    gpu: int
    tb: int
    i: int
    type: str
    srcbuf: str
    srcoff: int
    dstbuf: str
    dstoff: int
    cnt: int
    depid: int
    deps: int
    hasdep: int
    waits: list = field(default_factory=list)  # (tb, step)

    def where(self) -> str:
        return f"gpu {self.gpu} tb {self.tb} step {self.i} ({self.type})"


@dataclass
class XmlThreadBlock:
    """One ``<tb>`` as read: its peers (``-1``: none), channel and steps."""

    gpu: int
    id: int
    send: int
    recv: int
    chan: int
    steps: list


@dataclass
class AlgoHeader:
    """The ``<algo>`` attributes the later checks need."""

    dialect: str
    coll: str  # normalised: reducescatter for both spellings
    nchannels: int
    nchunksperloop: int
    ngpus: int
    inplace: int
    max_steps: int


#: per GPU: its buffer sizes (``i``/``o``/``s`` chunks) and its thread blocks in id order
GpuTable = dict[int, tuple[dict, list[XmlThreadBlock]]]
