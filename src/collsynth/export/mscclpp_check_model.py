"""The MSCCL++ plan checker's vocabulary: the executor's limits, the error, typed field
access, and the records a plan is read into (:class:`PlanChannel`, :class:`PlanGpu`,
:class:`PlanThreadBlock`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NoReturn

from ..errors import CollsynthError

MAX_OPS = 64
MAX_CHANNELS = 16
MAX_BUFFERS = 16
MAX_OP_REFS = 8
KNOWN_OPS = frozenset(
    {"nop", "put", "pws", "pwsf", "signal", "wait", "flush", "copy", "re", "glres"}
)
COLLECTIVES = ("allgather", "reducescatter", "allreduce", "alltoall", "broadcast")
CHANNEL_TYPES = ("memory", "port")


class PlanCheckError(CollsynthError):
    """The plan breaks a rule; ``check`` names the rule."""

    def __init__(self, message: str, *, check: str):
        super().__init__(f"{check}: {message}")
        self.check = check


def fail(check: str, msg: str) -> NoReturn:
    """Raise :class:`PlanCheckError` for rule ``check``."""
    raise PlanCheckError(msg, check=check)


# ---------------------------------------------------------------------- parsing helpers
def get_field(obj: Any, key: str, kind: type | tuple, where: str, default: Any = ...) -> Any:
    """``obj[key]``, which must be of type ``kind`` (``default`` where it is absent, if given)."""
    if not isinstance(obj, dict):
        fail("structure", f"{where} is not a JSON object")
    if key not in obj:
        if default is not ...:
            return default
        fail("structure", f"{where} has no {key!r}")
    v = obj[key]
    ok = isinstance(v, kind) and not (isinstance(v, bool) and kind in (int, (int,)))
    if not ok:
        shown = repr(v) if isinstance(v, (int, float)) else type(v).__name__
        fail("structure", f"{where}.{key} is {shown}, not {_kind_name(kind)}")
    return v


def _kind_name(kind: type | tuple) -> str:
    """``int``, or ``int or float``: the type names of ``kind``."""
    if isinstance(kind, tuple):
        return " or ".join(k.__name__ for k in kind)
    return kind.__name__


def natural_field(obj: dict, key: str, where: str, default: Any = ...) -> int:
    """``obj[key]``, a non-negative integer."""
    v = get_field(obj, key, int, where, default)
    if v < 0:
        fail("structure", f"{where}.{key} is negative ({v})")
    return v


@dataclass
class PlanChannel:
    """A GPU-level channel of a plan: its type and peer."""

    ctype: str
    peer: int
    ordinal: int  # k-th channel of this type from this GPU to ``peer``


@dataclass
class PlanGpu:
    """One ``gpus[i]`` entry as read: buffer sizes, channels, remote buffers, thread blocks."""

    id: int
    chunks: dict  # "i"/"o"/"s" -> count
    channels: dict  # ctype -> [PlanChannel] in GPU-level order
    buffers: list  # [(rank, type, access types)]
    tbs: list
    switches: list = field(default_factory=list)  # [(buffer type, ranks)] GPU-level order


@dataclass
class PlanThreadBlock:
    """One thread block as read, with its execution state (program counter, epoch, clocks)."""

    gpu: int
    id: int
    ops: list
    channels: dict  # ctype -> [gpu-level ids]
    buffers: dict  # ctype -> [gpu-level remote buffer ids]
    pc: int = 0
    epoch: int = 0
    clock: dict = field(default_factory=dict)  # (gpu, tb) -> last epoch known complete
    pending: dict = field(default_factory=dict)  # acquired by waits since the latest nop

    @property
    def key(self) -> tuple[int, int]:
        return (self.gpu, self.id)

    def where(self, i: int | None = None) -> str:
        at = f"gpus[{self.gpu}].threadblocks[{self.id}]"
        return at if i is None else f"{at}.ops[{i}]"
