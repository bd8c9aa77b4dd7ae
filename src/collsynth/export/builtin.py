"""collsynth's own exporters, registered with :func:`collsynth.export.registry.register`."""

from __future__ import annotations

from typing import Any

from ..errors import CollsynthError
from ..schedule.ir import Schedule
from ..synth.options import Option
from .check import check_msccl_xml
from .msccl import to_msccl_xml
from .mscclpp import to_mscclpp_plan
from .mscclpp_check import check_mscclpp_plan
from .registry import register


def _max_bytes_option(help: str) -> Option:
    return Option("max_bytes", "size", "none", words=("none",), minimum=0, help=help)


MSCCL_OPTIONS = (
    Option(
        "dialect",
        "choice",
        "msccl",
        choices=("msccl", "executor"),
        help="msccl (the microsoft/msccl fork) or executor (msccl-executor-nccl, RCCL)",
    ),
    Option(
        "protocol",
        "choice",
        "Simple",
        choices=("Simple", "LL", "LL128"),
        help="NCCL protocol, as msccl-tools names it",
    ),
    Option("instances", "int", 1, minimum=1, maximum=64, help="copies of the program (channels)"),
    Option("inplace", "bool", False, help="in-place buffers"),
    Option(
        "min_bytes",
        "size",
        "none",
        words=("none",),
        minimum=0,
        help="executor: smallest size this XML serves",
    ),
    _max_bytes_option("executor: largest size this XML serves"),
)


def _bytes(value: Any) -> int | None:
    return None if value in (None, "none") else int(value)


def _check_msccl(text: str, schedule: Schedule, opts: dict[str, Any]) -> Any:
    """The independent XML checker, on the schedule's topology."""
    root = schedule.collective.root if schedule.collective.rooted else 0
    return check_msccl_xml(text, schedule.topology, dialect=opts["dialect"], root=root or 0)


@register(
    "msccl",
    summary="MSCCL XML (old fork or executor dialect), checked independently",
    suffix=".xml",
    options=MSCCL_OPTIONS,
    check=_check_msccl,
)
def export_msccl(
    schedule: Schedule,
    dialect: str = "msccl",
    protocol: str = "Simple",
    instances: int = 1,
    inplace: bool = False,
    min_bytes: Any = "none",
    max_bytes: Any = "none",
) -> str:
    """MSCCL XML of a verified schedule."""
    lo, hi = _bytes(min_bytes), _bytes(max_bytes)
    if lo is not None and hi is not None and lo > hi:
        raise CollsynthError(f"export msccl: min_bytes {lo} is larger than max_bytes {hi}")
    return to_msccl_xml(
        schedule,
        dialect=dialect,
        proto=protocol,
        instances=instances,
        min_bytes=_bytes(min_bytes),
        max_bytes=_bytes(max_bytes),
        inplace=inplace,
    )


MSCCLPP_OPTIONS = (
    Option("inplace", "bool", False, help="an in-place plan (send and receive buffers alias)"),
    Option(
        "channel",
        "choice",
        "auto",
        choices=("auto", "memory", "port"),
        help="auto: port channels where a route crosses a network link, memory channels "
        "(NVLink, PCIe peer access) elsewhere",
    ),
    Option("max_tbs", "int", 108, minimum=1, maximum=1024, help="most thread blocks per GPU"),
    Option("min_bytes", "size", 0, minimum=0, help="smallest message size the plan serves"),
    _max_bytes_option("largest message size the plan serves (none: no limit)"),
)


def _check_mscclpp(text: str, schedule: Schedule, opts: dict[str, Any]) -> Any:
    """The independent plan checker."""
    root = schedule.collective.root if schedule.collective.rooted else 0
    return check_mscclpp_plan(text, root=root or 0)


@register(
    "mscclpp",
    summary="MSCCL++ execution plan (JSON), checked independently",
    suffix=".plan.json",
    options=MSCCLPP_OPTIONS,
    check=_check_mscclpp,
)
def export_mscclpp(
    schedule: Schedule,
    inplace: bool = False,
    channel: str = "auto",
    max_tbs: int = 108,
    min_bytes: Any = 0,
    max_bytes: Any = "none",
) -> str:
    """MSCCL++ execution plan of a verified schedule."""
    lo, hi = int(min_bytes), _bytes(max_bytes)
    if hi is not None and lo > hi:
        raise CollsynthError(f"export mscclpp: min_bytes {lo} is larger than max_bytes {hi}")
    return to_mscclpp_plan(
        schedule, inplace=inplace, channel=channel, max_tbs=max_tbs, min_bytes=lo, max_bytes=hi
    )
