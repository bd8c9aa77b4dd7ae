"""The MSCCL exporter's options (one frozen :class:`MscclOptions`) and the MSCCL runtimes'
limits that the lowering respects."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import CollsynthError

DIALECTS = ("msccl", "executor")
PROTOS = ("Simple", "LL", "LL128")
#: channels of one program (all instances together)
MAX_CHANNELS = 32
#: sending (or receiving) thread blocks of one GPU on one channel
MAX_TBS_PER_CHANNEL = 32
#: steps of one thread block, per dialect
MAX_STEPS = {"msccl": 256, "executor": 64}
#: XML nodes of one GPU the runtime's parser accepts
MAX_NODES = 4096
#: children of one XML element the runtime's parser accepts
MAX_CHILDREN = 1024


@dataclass(frozen=True)
class MscclOptions:
    """What :func:`collsynth.export.msccl.to_msccl_xml` was asked for (see its docstring);
    ``instances`` validated, the others as given (``channels`` is validated when the channel
    counts to try are chosen, after the schedule's own refusals)."""

    dialect: str = "msccl"
    proto: str = "Simple"
    instances: int = 1
    min_bytes: int | None = None
    max_bytes: int | None = None
    inplace: bool = False
    channels: int | None = None
    max_tbs: int = 108
    name: str | None = None
    verify: bool = True


def msccl_options(
    dialect: str,
    proto: str,
    instances,
    min_bytes,
    max_bytes,
    inplace: bool,
    channels: int | None,
    max_tbs: int,
    name: str | None,
    verify: bool,
) -> MscclOptions:
    """The options, once the dialect, protocol, instance count and byte range are valid."""
    if dialect not in DIALECTS:
        raise CollsynthError(f"unknown MSCCL dialect {dialect!r} (known: msccl, executor)")
    if proto not in PROTOS:
        raise CollsynthError(f"unknown MSCCL protocol {proto!r} (known: Simple, LL, LL128)")
    if (
        isinstance(instances, bool)
        or not isinstance(instances, (int, np.integer))
        or not 1 <= instances <= MAX_CHANNELS
    ):
        raise CollsynthError(
            f"instances must be an integer in 1..{MAX_CHANNELS}, got {instances!r}"
        )
    for label, v in (("min_bytes", min_bytes), ("max_bytes", max_bytes)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0):
            raise CollsynthError(f"{label} must be a non-negative integer, got {v!r}")
    return MscclOptions(
        dialect=dialect,
        proto=proto,
        instances=int(instances),
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        inplace=inplace,
        channels=channels,
        max_tbs=max_tbs,
        name=name,
        verify=verify,
    )
