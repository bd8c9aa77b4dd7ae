"""What a TE-CCL input (``teccl solve --input_args FILE.json``) means, as collsynth objects.

This module interprets the parsed sections; it reads no file. TE-CCL's files are read and
written in one place, :mod:`collsynth.export.teccl` (input in, output out), and the topology
reader (:mod:`.io`) hands a topology file that is a TE-CCL input to
:func:`topology_from_teccl`.

A TE-CCL input has ``TopologyParams`` {name, chassis, chunk_size (GB), alpha [link, switch],
side_length}, ``GurobiParams`` and ``InstanceParams`` (the JSON of TE-CCL's public code, Liu et
al., SIGCOMM 2024). This module builds the topology TE-CCL *means*, from collsynth's zoo,
without the bugs of TE-CCL's own topology constructors (the table below), and records in
``topology.meta['notes']`` every place where the result differs from what TE-CCL's own
constructors would build:

====== ===================================================================================
DGX1   ``dgx1`` with alpha = alpha[0] (TE-CCL always builds one 8-GPU chassis)
DGX2   ``dgx2:chassis=C`` (TE-CCL hard-codes 2 chassis; alphas are fixed at 0.35 / 2.6 us)
NDv2   ``ndv2:chassis=C`` — every GPU is a GPU (TE-CCL marks GPU 0 as a switch when C > 1);
       chassis=1 has no IB loop; alphas are fixed at 0.7 / 1.3 us as in TE-CCL
AMD    ``mi250:chassis=C,inter=teccl`` — alpha[0] on xGMI, alpha[1] on switch links; the
       per-pair switches are wired as intended (TE-CCL's off-by-one bugs are not reproduced)
Mesh   ``mesh2d:w=L,h=L`` at 100 GB/s, alpha[0] — a true mesh (TE-CCL wraps row ends)
====== ===================================================================================

:func:`teccl_instance` returns the instance facts (collective, chunks, data size) for the
synthesizers that read TE-CCL inputs.
"""

from __future__ import annotations

import math
from typing import Any

from ..errors import CollsynthError
from .model import Topology

_KNOWN_TOPO_KEYS = {"name", "chassis", "chunk_size", "alpha", "side_length", "option"}
GB = 1e9


def _section(data: Any, name: str, source: str, required: bool = True) -> dict:
    if not isinstance(data, dict):
        raise CollsynthError(f"{source}: a TE-CCL input must be a JSON object")
    sec = data.get(name)
    if sec is None and not required:
        return {}
    if not isinstance(sec, dict):
        raise CollsynthError(f"{source}: {name} must be an object")
    return sec


def _int(value: Any, what: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise CollsynthError(f"{what} must be an integer >= {minimum}, got {value!r}")
    return value


def _alphas(value: Any, source: str) -> tuple[float, float]:
    if value is None:
        return 0.0, 0.0
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = [value, value]
    if not isinstance(value, list) or len(value) not in (1, 2):
        raise CollsynthError(f"{source}: TopologyParams.alpha must be [link_alpha, switch_alpha]")
    out = []
    for x in value:
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x < 0:
            raise CollsynthError(
                f"{source}: TopologyParams.alpha values must be non-negative seconds, got {x!r}"
            )
        out.append(float(x))
    if len(out) == 1:
        out.append(out[0])
    return out[0], out[1]


def topology_from_teccl(data: Any, source: str = "TE-CCL input") -> Topology:
    """Build the topology a TE-CCL input file describes (see the module table)."""
    from . import zoo  # noqa: F401  (registers constructors)
    from .registry import build_named

    tp = _section(data, "TopologyParams", source)
    unknown = set(tp) - _KNOWN_TOPO_KEYS
    if unknown:
        raise CollsynthError(f"{source}: unknown TopologyParams key {sorted(unknown)[0]!r}")
    name = tp.get("name", "DGX1")
    if not isinstance(name, str):
        raise CollsynthError(f"{source}: TopologyParams.name must be a string")
    chassis = _int(tp.get("chassis", 1), f"{source}: TopologyParams.chassis", 1)
    link_alpha, switch_alpha = _alphas(tp.get("alpha"), source)
    notes: list[str] = []
    key = name.strip().upper()
    if key == "DGX1":
        if chassis != 1:
            notes.append(
                f"TE-CCL's DGX1 ignores chassis={chassis} and builds one 8-GPU chassis; "
                f"so does this import (use NDv2 for several chassis)"
            )
        topo = build_named("dgx1", {"alpha": link_alpha})
    elif key == "DGX2":
        if chassis != 2:
            notes.append(
                f"TE-CCL's DGX2 always builds 2 chassis; this import honours chassis={chassis}"
            )
        topo = build_named("dgx2", {"chassis": chassis})
        if tp.get("alpha") is not None:
            notes.append("TE-CCL's DGX2 ignores the alpha field (0.35 us NVSwitch, 2.6 us IB)")
    elif key == "NDV2":
        if chassis >= 2:
            notes.append(
                "TE-CCL treats GPU 0 as a switch when chassis > 1; here all "
                f"{8 * chassis} GPUs are compute nodes"
            )
        topo = build_named("ndv2", {"chassis": chassis})
        if tp.get("alpha") is not None:
            notes.append("TE-CCL's NDv2 ignores the alpha field (0.7 us NVLink, 1.3 us IB)")
    elif key == "AMD":
        args: dict[str, Any] = {"chassis": chassis, "xgmi_alpha": link_alpha}
        if chassis > 1:
            args.update(inter="teccl", switch_alpha=switch_alpha, ib_alpha=switch_alpha)
            notes.append(
                "TE-CCL's multi-chassis AMD constructor has off-by-one bugs (GPU 15 "
                "marked as a switch, a pair switch without uplink); this import builds "
                "the intended design"
            )
        topo = build_named("mi250", args)
    elif key == "MESH":
        side = _int(tp.get("side_length", 4), f"{source}: TopologyParams.side_length", 1)
        if side * side < 2:
            raise CollsynthError(f"{source}: a Mesh needs side_length >= 2")
        topo = build_named("mesh2d", {"w": side, "h": side, "bw": 100 * GB, "alpha": link_alpha})
        notes.append(
            "TE-CCL's Mesh wraps each row end to the next row; this import builds a true 2-D mesh"
        )
    else:
        raise CollsynthError(
            f"{source}: unknown TE-CCL topology {name!r} (expected DGX1, DGX2, NDv2, AMD or Mesh)"
        )
    topo.meta["source"] = f"TE-CCL input {source}"
    topo.meta["teccl"] = {"name": name, "chassis": chassis, "alpha": [link_alpha, switch_alpha]}
    if notes:
        topo.meta["notes"] = notes
    return topo


def teccl_instance(data: Any, topology: Topology, source: str = "TE-CCL input") -> dict:
    """Instance facts from a TE-CCL input: collective, chunks per rank and data size in bytes.

    TE-CCL's ``chunk_size`` is in GB per chunk; the output buffer is ``#GPUs * chunk_size``
    (TE-CCL's convention) per chunk of each source, so the nccl-tests size is ``#GPUs * num_chunks *
    chunk_size`` for AllGather (the output buffer) and for AlltoAll (one rank's send buffer,
    ``num_chunks`` chunks per destination).
    """
    tp = _section(data, "TopologyParams", source)
    ip = _section(data, "InstanceParams", source, required=False)
    chunk_gb = tp.get("chunk_size", 1)
    if (
        isinstance(chunk_gb, bool)
        or not isinstance(chunk_gb, (int, float))
        or not math.isfinite(chunk_gb)
        or chunk_gb <= 0
    ):
        raise CollsynthError(f"{source}: TopologyParams.chunk_size must be a positive number of GB")
    coll_code = ip.get("collective", 1)
    if coll_code not in (1, 2):
        raise CollsynthError(
            f"{source}: InstanceParams.collective must be 1 (AllGather) or "
            f"2 (AlltoAll), got {coll_code!r}"
        )
    chunks = _int(ip.get("num_chunks", 1), f"{source}: InstanceParams.num_chunks", 1)
    n = topology.num_ranks
    kind = "allgather" if coll_code == 1 else "alltoall"
    chunk_bytes = float(chunk_gb) * GB
    return {
        "collective": kind,
        "chunks_per_rank": chunks,
        "chunk_bytes": chunk_bytes,
        "size_bytes": chunk_bytes * n * chunks,
    }
