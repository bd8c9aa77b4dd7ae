"""Exporters: schedule IR -> runtime formats (MSCCL XML, MSCCL++ plans) and independent checkers.

* :func:`collsynth.export.msccl.to_msccl_xml` lowers a verified schedule to MSCCL XML
  (``msccl`` = microsoft/msccl old fork, ``executor`` = Azure/msccl-executor-nccl / RCCL).
* :func:`collsynth.export.check.check_msccl_xml` parses an MSCCL XML file on its own and
  checks it structurally and by symbolic execution.
* :func:`collsynth.export.mscclpp.to_mscclpp_plan` lowers a verified schedule to an MSCCL++
  execution plan (JSON); :func:`collsynth.export.mscclpp_check.check_mscclpp_plan` checks any
  plan on its own (references, pairing, deadlock, races, symbolic execution).
* :mod:`collsynth.export.lowering` — what both exporters share (buffer layout, operation
  order, whole chunks).
* :mod:`collsynth.export.registry` — the exporter registry (``collsynth export FORMAT``), fed
  by :mod:`collsynth.export.builtin` and ``collsynth.exporters`` entry points.
"""

from .check import XmlCheckError, XmlCheckReport, check_msccl_xml
from .msccl import to_msccl_xml
from .mscclpp import to_mscclpp_plan
from .mscclpp_check import PlanCheckError, PlanCheckReport, check_mscclpp_plan
from .registry import EXPORTERS, Exporter, get_exporter, load_exporters, register

__all__ = [
    "EXPORTERS",
    "Exporter",
    "PlanCheckError",
    "PlanCheckReport",
    "XmlCheckError",
    "XmlCheckReport",
    "check_msccl_xml",
    "check_mscclpp_plan",
    "get_exporter",
    "load_exporters",
    "register",
    "to_msccl_xml",
    "to_mscclpp_plan",
]
