"""The ``structure`` rule of the MSCCL XML checker: ``<algo>`` attributes per dialect, every
GPU's buffers, thread blocks and steps, channel peers and (with a topology) routes."""

from __future__ import annotations

from .msccl_check_model import (
    COLLECTIVES,
    STEP_ATTRIBUTES,
    STEP_TYPES,
    AlgoHeader,
    GpuTable,
    XmlStep,
    XmlThreadBlock,
    fail,
)
from .msccl_check_parse import XmlElement, xml_int


def check_algo(algo: XmlElement, dialect: str | None, topology) -> AlgoHeader:
    """The ``<algo>`` element: dialect, required attributes and their values."""
    attrs = algo.attrs
    if dialect is None:
        dialect = (
            "executor"
            if ("outofplace" in attrs or attrs.get("coll") == "reducescatter")
            else "msccl"
        )
    if dialect not in ("msccl", "executor"):
        fail("structure", f"unknown dialect {dialect!r}")
    _check_algo_keys(attrs, dialect)
    coll = "reducescatter" if attrs["coll"] == "reduce_scatter" else attrs["coll"]
    nch = xml_int(algo, "nchannels", "<algo>")
    ncpl = xml_int(algo, "nchunksperloop", "<algo>")
    ngpus = xml_int(algo, "ngpus", "<algo>")
    inplace = xml_int(algo, "inplace", "<algo>")
    if inplace not in (0, 1):
        fail("structure", "<algo> inplace must be 0 or 1")
    if dialect == "executor":
        oop = xml_int(algo, "outofplace", "<algo>")
        if oop not in (0, 1) or oop == inplace:
            fail(
                "structure",
                "<algo> needs exactly one of inplace/outofplace set to 1 (the "
                "checker checks one mode)",
            )
        for key in ("minBytes", "maxBytes"):
            if xml_int(algo, key, "<algo>") < 0:
                fail("structure", f"<algo> {key} is negative")
    if "minBytes" in algo.attrs and "maxBytes" in algo.attrs:
        lo, hi = xml_int(algo, "minBytes", "<algo>"), xml_int(algo, "maxBytes", "<algo>")
        if hi > 0 and lo > hi:  # maxBytes 0: no upper end
            fail("structure", f"<algo> minBytes={lo} is above maxBytes={hi}")
    if not 1 <= nch <= 32:
        fail("structure", f"<algo> nchannels={nch} is not in 1..32")
    if ngpus < 2 or ncpl < 1:
        fail("structure", "<algo> needs ngpus >= 2 and nchunksperloop >= 1")
    if topology is not None and topology.num_ranks != ngpus:
        fail("structure", f"ngpus={ngpus} but the topology has {topology.num_ranks} ranks")
    max_steps = 256 if dialect == "msccl" else 64
    return AlgoHeader(dialect, coll, nch, ncpl, ngpus, inplace, max_steps)


def _check_algo_keys(attrs: dict, dialect: str) -> None:
    """Required ``<algo>`` attributes per dialect, protocol and collective spelling."""
    for key in ("proto", "nchannels", "nchunksperloop", "ngpus", "coll", "inplace"):
        if key not in attrs:
            fail("structure", f"<algo> lacks attribute {key!r}")
    if dialect == "msccl" and "name" not in attrs:
        fail("structure", "<algo> lacks attribute 'name' (required by the msccl dialect)")
    if dialect == "executor":
        for key in ("outofplace", "minBytes", "maxBytes"):
            if key not in attrs:
                fail(
                    "structure",
                    f"<algo> lacks attribute {key!r} (required by the executor dialect)",
                )
    if attrs["proto"] not in ("Simple", "LL", "LL128"):
        fail("structure", f"<algo> proto={attrs['proto']!r} is not Simple, LL or LL128")
    coll = attrs["coll"]
    if coll not in COLLECTIVES:
        fail("structure", f"<algo> coll={coll!r} is not supported by the checker")
    if dialect == "msccl" and coll == "reducescatter":
        fail(
            "structure",
            "coll='reducescatter' is the executor spelling; the msccl dialect "
            "needs 'reduce_scatter'",
        )
    if dialect == "executor" and coll == "reduce_scatter":
        fail(
            "structure",
            "coll='reduce_scatter' is the old-fork spelling; the executor needs 'reducescatter'",
        )


def check_gpus(algo: XmlElement, header: AlgoHeader) -> GpuTable:
    """Every ``<gpu>`` once, each read into its buffer sizes and thread blocks."""
    gpus: GpuTable = {}
    for gel in algo.children:
        if gel.tag != "gpu":
            continue  # the runtime parsers ignore unknown elements
        g = xml_int(gel, "id", "<gpu>")
        if not 0 <= g < header.ngpus:
            fail("structure", f"<gpu id={g}> is not a rank in 0..{header.ngpus - 1}")
        if g in gpus:
            fail("structure", f"gpu {g} appears twice")
        gpus[g] = _read_gpu(gel, g, header)
    for g in range(header.ngpus):
        if g not in gpus:
            fail("structure", f"gpu {g} is missing")
    return gpus


def _read_gpu(gel: XmlElement, g: int, header: AlgoHeader) -> tuple[dict, list[XmlThreadBlock]]:
    """One GPU: buffer sizes, contiguous thread blocks, per-channel peers, node count."""
    bufs = _gpu_buffers(gel, g, header)
    tbs: dict[int, XmlThreadBlock] = {}
    for tel in gel.children:
        if tel.tag != "tb":
            continue
        tid = xml_int(tel, "id", f"gpu {g} <tb>")
        if tid in tbs:
            fail("structure", f"gpu {g} tb {tid}: thread block id used twice")
        tbs[tid] = _read_tb(tel, g, tid, bufs, header)
    for k in range(len(tbs)):
        if k not in tbs:
            fail(
                "structure", f"gpu {g}: thread block {k} is missing (ids must be contiguous from 0)"
            )
    tbl = [tbs[k] for k in range(len(tbs))]
    _check_channel_peers(g, tbl)
    nodes = 2 + len(tbl) + sum(len(tb.steps) for tb in tbl)
    if nodes > 4096:
        fail("structure", f"gpu {g}: {nodes} XML nodes, more than the parser's 4096")
    return bufs, tbl


def _gpu_buffers(gel: XmlElement, g: int, header: AlgoHeader) -> dict:
    """The ``i``/``o``/``s`` chunk counts of a GPU (msccl: consistent with nchunksperloop)."""
    bufs = {}
    for b in ("i", "o", "s"):
        bufs[b] = xml_int(gel, f"{b}_chunks", f"gpu {g}")
        if bufs[b] < 0:
            fail("structure", f"gpu {g}: {b}_chunks is negative")
    if header.dialect == "msccl":  # the old fork's consistency check
        mi = header.ngpus if header.coll == "allgather" else 1
        mo = header.ngpus if header.coll == "reducescatter" else 1
        for b, mult in (("i", mi), ("o", mo)):
            if bufs[b] > 0 and bufs[b] * mult != header.nchunksperloop:
                fail(
                    "structure",
                    f"gpu {g}: {b}_chunks={bufs[b]} x {mult} is not "
                    f"nchunksperloop={header.nchunksperloop} (rejected by the msccl fork)",
                )
    return bufs


def _read_tb(tel: XmlElement, g: int, tid: int, bufs: dict, header: AlgoHeader) -> XmlThreadBlock:
    """One thread block: peers, channel and its steps within the step limit."""
    w = f"gpu {g} tb {tid}"
    send = xml_int(tel, "send", w)
    recv = xml_int(tel, "recv", w)
    chan = xml_int(tel, "chan", w)
    for label, p in (("send", send), ("recv", recv)):
        if not -1 <= p < header.ngpus or p == g:
            fail("structure", f"{w}: {label} peer {p} is not another rank")
    if not 0 <= chan < header.nchannels:
        fail("structure", f"{w}: chan={chan} is not below nchannels={header.nchannels}")
    steps: list[XmlStep] = []
    for sel in tel.children:
        if sel.tag == "step":
            steps.append(_read_step(sel, g, tid, len(steps), send, recv, bufs))
    if len(steps) > header.max_steps:
        fail(
            "structure",
            f"{w} has {len(steps)} steps, more than the {header.dialect} limit of "
            f"{header.max_steps}",
        )
    return XmlThreadBlock(g, tid, send, recv, chan, steps)


def _read_step(
    sel: XmlElement, g: int, tid: int, idx: int, send: int, recv: int, bufs: dict
) -> XmlStep:
    """One step: attributes, position, type, buffers, count, peers and offsets."""
    sw = f"gpu {g} tb {tid} step {idx}"
    for key in STEP_ATTRIBUTES:
        if key not in sel.attrs:
            fail("structure", f"{sw} lacks attribute {key!r}")
    vals = {
        k: xml_int(sel, k, sw) for k in ("s", "srcoff", "dstoff", "cnt", "depid", "deps", "hasdep")
    }
    st = XmlStep(
        g,
        tid,
        idx,
        sel.attrs["type"],
        sel.attrs["srcbuf"],
        vals["srcoff"],
        sel.attrs["dstbuf"],
        vals["dstoff"],
        vals["cnt"],
        vals["depid"],
        vals["deps"],
        vals["hasdep"],
    )
    if vals["s"] != idx:
        fail(
            "structure",
            f"{sw}: s={vals['s']} but the step is at position "
            f"{idx} (dependency flags use the position)",
        )
    if st.type not in STEP_TYPES:
        fail("structure", f"{sw}: unknown step type {st.type!r}")
    for b in (st.srcbuf, st.dstbuf):
        if b not in ("i", "o", "s"):
            fail("structure", f"{sw}: unknown buffer {b!r}")
    if st.hasdep not in (0, 1):
        fail("structure", f"{sw}: hasdep must be 0 or 1")
    sends, recvs, reads, writes, _ = STEP_TYPES[st.type]
    lo = 0 if st.type == "nop" else 1
    if not lo <= st.cnt < 72:
        fail("structure", f"{sw}: cnt={st.cnt} is not in {lo}..71")
    if sends and send < 0:
        fail("structure", f"{sw}: {st.type} sends but the thread block has no send peer")
    if recvs and recv < 0:
        fail("structure", f"{sw}: {st.type} receives but the thread block has no recv peer")
    uses_src = reads or st.type == "s"
    uses_dst = writes
    for use, b, o, label in (
        (uses_src, st.srcbuf, st.srcoff, "src"),
        (uses_dst, st.dstbuf, st.dstoff, "dst"),
    ):
        if use and not (0 <= o and o + st.cnt <= bufs[b]):
            fail(
                "structure",
                f"{sw}: {label} {b}[{o}..{o + st.cnt - 1}] is "
                f"outside the {bufs[b]}-chunk {b} buffer",
            )
    return st


def _check_channel_peers(g: int, tbl: list[XmlThreadBlock]) -> None:
    """One thread block per (channel, peer) and direction, at most 32 per channel."""
    seen_s: dict = {}
    seen_r: dict = {}
    per_ch_s: dict = {}
    per_ch_r: dict = {}
    for tb in tbl:
        if tb.send >= 0:
            key = (tb.chan, tb.send)
            if key in seen_s:
                fail(
                    "structure",
                    f"gpu {g}: thread blocks {seen_s[key]} and {tb.id} both "
                    f"send to {tb.send} on channel {tb.chan} (one thread "
                    f"block per (channel, peer) and direction)",
                )
            seen_s[key] = tb.id
            per_ch_s[tb.chan] = per_ch_s.get(tb.chan, 0) + 1
        if tb.recv >= 0:
            key = (tb.chan, tb.recv)
            if key in seen_r:
                fail(
                    "structure",
                    f"gpu {g}: thread blocks {seen_r[key]} and {tb.id} both "
                    f"receive from {tb.recv} on channel {tb.chan} (one "
                    f"thread block per (channel, peer) and direction)",
                )
            seen_r[key] = tb.id
            per_ch_r[tb.chan] = per_ch_r.get(tb.chan, 0) + 1
    for ch, k in sorted(per_ch_s.items()) + sorted(per_ch_r.items()):
        if k > 32:
            fail(
                "structure",
                f"gpu {g}: channel {ch} has {k} sending or receiving thread blocks, more than 32",
            )


def check_routes(gpus: GpuTable, ngpus: int, topology) -> None:
    """Every (GPU, send peer) pair has a direct route in the topology."""
    from ..topology.paths import RouteTable

    rt = RouteTable(topology)
    for g in range(ngpus):
        for tb in gpus[g][1]:
            if tb.send >= 0 and not rt.has_route(g, tb.send):
                fail(
                    "structure",
                    f"gpu {g} tb {tb.id} sends to {tb.send}, but the "
                    f"topology has no direct route between them",
                )
