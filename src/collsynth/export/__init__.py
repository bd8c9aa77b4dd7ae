"""Exporters: schedule IR -> runtime formats (MSCCL XML) and an independent XML checker.

* :func:`collsynth.export.msccl.to_msccl_xml` lowers a verified schedule to MSCCL XML
  (``msccl`` = microsoft/msccl old fork, ``executor`` = Azure/msccl-executor-nccl / RCCL).
* :func:`collsynth.export.check.check_msccl_xml` parses an MSCCL XML file on its own and
  checks it structurally and by symbolic execution.
* :mod:`collsynth.export.registry` — the exporter registry (``collsynth export FORMAT``), fed
  by :mod:`collsynth.export.builtin` and ``collsynth.exporters`` entry points.
"""

from .check import XmlCheckError, XmlCheckReport, check_msccl_xml
from .msccl import to_msccl_xml
from .registry import EXPORTERS, Exporter, get_exporter, load_exporters, register

__all__ = [
    "EXPORTERS",
    "Exporter",
    "XmlCheckError",
    "XmlCheckReport",
    "check_msccl_xml",
    "get_exporter",
    "load_exporters",
    "register",
    "to_msccl_xml",
]
