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
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import NoReturn

from ..errors import CollsynthError
from ..files import structure_limits

_COLLS = {
    "allgather",
    "reduce_scatter",
    "reducescatter",
    "allreduce",
    "alltoall",
    "broadcast",
    "reduce",
}
_STEP_ATTRS = (
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
# type -> (sends, receives, reads src, writes dst, reduces)
_TYPES = {
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


def _fail(check: str, msg: str) -> NoReturn:
    raise XmlCheckError(msg, check=check)


# ---------------------------------------------------------------------- strict mini-parser
@dataclass
class _Elem:
    tag: str
    attrs: dict
    line: int
    children: list = field(default_factory=list)


_TOKEN = re.compile(r"<!--.*?-->|<[^>]*>|[^<]+", re.S)
_ATTR = re.compile(r'([A-Za-z_][\w.-]*)="([^"<>]*)"')


def _parse(text: str) -> _Elem:
    """The element tree of ``text``, enforcing MSCCL's formatting rules."""
    _check_preamble(text)
    max_depth, max_nodes = structure_limits()
    elements = 0
    root = None
    stack: list[_Elem] = []
    line, counted = 1, 0  # line number of the token, counted incrementally (linear time)
    for m in _TOKEN.finditer(text):
        tok = m.group(0)
        line += text.count("\n", counted, m.start())
        counted = m.start()
        if tok.startswith("<!--"):
            continue
        if not tok.startswith("<"):
            if tok.strip(" \r\n"):
                _fail("format", f"line {line}: unexpected text {tok.strip()[:30]!r}")
            continue
        if tok.startswith("<?") or tok.startswith("<!"):
            _fail("format", f"line {line}: {tok[:20]!r} is not allowed")
        if "\n" in tok or "\r" in tok:
            _fail(
                "format",
                f"line {line}: a tag spans several lines (attributes must be on the tag's line)",
            )
        if tok.startswith("</"):
            tag = tok[2:-1].strip()
            if not stack or stack[-1].tag != tag:
                _fail("format", f"line {line}: unexpected closing tag </{tag}>")
            stack.pop()
            continue
        body = tok[1:-1]
        selfclose = body.endswith("/")
        if selfclose:
            body = body[:-1]
        mt = re.match(r"([A-Za-z_][\w-]*)", body)
        if not mt:
            _fail("format", f"line {line}: malformed tag {tok[:30]!r}")
        tag = mt.group(1)
        elements += 1
        if elements > max_nodes:
            _fail("format", f"line {line}: more than {max_nodes} elements (set "
                  "COLLSYNTH_MAX_NODES to raise the limit)")  # fmt: skip
        if len(stack) >= max_depth:
            _fail("format", f"line {line}: <{tag}> is nested deeper than {max_depth} levels "
                  "(set COLLSYNTH_MAX_DEPTH to raise the limit)")  # fmt: skip
        el = _Elem(tag, _parse_attrs(body[mt.end() :], tag, line), line)
        if stack:
            stack[-1].children.append(el)
            if len(stack[-1].children) > 1024:
                _fail("format", f"line {line}: <{stack[-1].tag}> has more than 1024 children")
        elif root is None:
            root = el
        else:
            _fail("format", f"line {line}: a second top-level element <{tag}>")
        if not selfclose:
            stack.append(el)
    if stack:
        _fail("format", f"<{stack[-1].tag}> (line {stack[-1].line}) is never closed")
    if root is None or root.tag != "algo":
        _fail("format", "the top-level element must be <algo>")
    return root


def _check_preamble(text: str) -> None:
    """No tab anywhere; the document starts with ``<algo>`` or a comment, no declaration."""
    if "\t" in text:
        line = text[: text.index("\t")].count("\n") + 1
        _fail(
            "format",
            f"line {line}: tab character (MSCCL's parser allows only spaces and "
            f"newlines between elements)",
        )
    stripped = text.lstrip(" \r\n")
    if stripped.startswith("<?"):
        _fail(
            "format",
            "XML declaration '<?xml ...?>' is not allowed (the first element must be <algo>)",
        )
    if not (stripped.startswith("<algo") or stripped.startswith("<!--")):
        _fail("format", "the document must start with <algo> or a comment")


def _parse_attrs(rest: str, tag: str, line: int) -> dict:
    """The attributes after a tag's name: double-quoted, space-separated, at most 16 slots."""
    attrs: dict = {}
    i = 0
    nslots = 0
    while i < len(rest):
        if rest[i] == " ":
            j = i
            while j < len(rest) and rest[j] == " ":
                j += 1
            nslots += j - i - 1  # extra spaces create empty attribute slots
            i = j
            continue
        ma = _ATTR.match(rest, i)
        if not ma:
            _fail(
                "format",
                f"line {line}: <{tag}> has a malformed attribute near "
                f"{rest[i : i + 20]!r} (values must be in double quotes)",
            )
        if ma.group(1) in attrs:
            _fail("format", f"line {line}: <{tag}> repeats attribute {ma.group(1)!r}")
        attrs[ma.group(1)] = ma.group(2)
        nslots += 1
        i = ma.end()
        if i < len(rest) and rest[i] != " ":
            _fail("format", f"line {line}: attributes of <{tag}> must be separated by spaces")
    if nslots > 16:
        _fail("format", f"line {line}: <{tag}> has more than 16 attribute slots")
    return attrs


def _int(el: _Elem, key: str, where: str, check: str = "structure") -> int:
    if key not in el.attrs:
        _fail(check, f"{where} lacks attribute {key!r}")
    v = el.attrs[key]
    if not re.fullmatch(r"-?\d{1,19}", v):  # at most 64 bits, as the runtimes read them
        shown = v if len(v) <= 40 else v[:37] + "..."
        _fail(check, f"{where}: {key}={shown!r} is not an integer of at most 19 digits")
    return int(v)


# ---------------------------------------------------------------------- model
@dataclass
class _St:
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
class _Tb:
    gpu: int
    id: int
    send: int
    recv: int
    chan: int
    steps: list


@dataclass
class _Header:
    """The ``<algo>`` attributes the later checks need."""

    dialect: str
    coll: str  # normalised: reducescatter for both spellings
    nch: int
    ncpl: int
    ngpus: int
    inplace: int
    max_steps: int


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
    algo = _parse(text)
    checks.append("format")
    h = _check_algo(algo, dialect, topology)
    gpus = _check_gpus(algo, h)
    if topology is not None:
        _check_routes(gpus, h.ngpus, topology)
    checks.append("structure")
    _check_dependencies(gpus, h.ngpus)
    checks.append("dependency")
    sends, recvs = _transfers(gpus, h.ngpus)
    transfers = _check_pairing(sends, recvs)
    checks.append("pairing")
    _check_cycles(gpus, h.ngpus, sends, recvs)
    checks.append("dependency-cycle")
    _Exec(gpus, h.ngpus, h.coll, h.ncpl, bool(h.inplace), root, fifo_slots).run()
    checks += ["deadlock", "data", "race", "postcondition"]
    return XmlCheckReport(
        True,
        h.dialect,
        algo.attrs["coll"],
        h.ngpus,
        h.nch,
        h.ncpl,
        bool(h.inplace),
        sum(len(gpus[g][1]) for g in range(h.ngpus)),
        sum(len(tb.steps) for g in range(h.ngpus) for tb in gpus[g][1]),
        transfers,
        checks,
    )


# ---------------------------------------------------------------------- structure
def _check_algo(algo: _Elem, dialect: str | None, topology) -> _Header:
    """The ``<algo>`` element: dialect, required attributes and their values."""
    A = algo.attrs
    if dialect is None:
        dialect = "executor" if ("outofplace" in A or A.get("coll") == "reducescatter") else "msccl"
    if dialect not in ("msccl", "executor"):
        _fail("structure", f"unknown dialect {dialect!r}")
    _check_algo_keys(A, dialect)
    coll = "reducescatter" if A["coll"] == "reduce_scatter" else A["coll"]
    nch = _int(algo, "nchannels", "<algo>")
    ncpl = _int(algo, "nchunksperloop", "<algo>")
    ngpus = _int(algo, "ngpus", "<algo>")
    inplace = _int(algo, "inplace", "<algo>")
    if inplace not in (0, 1):
        _fail("structure", "<algo> inplace must be 0 or 1")
    if dialect == "executor":
        oop = _int(algo, "outofplace", "<algo>")
        if oop not in (0, 1) or oop == inplace:
            _fail(
                "structure",
                "<algo> needs exactly one of inplace/outofplace set to 1 (the "
                "checker checks one mode)",
            )
        for key in ("minBytes", "maxBytes"):
            if _int(algo, key, "<algo>") < 0:
                _fail("structure", f"<algo> {key} is negative")
    if "minBytes" in algo.attrs and "maxBytes" in algo.attrs:
        lo, hi = _int(algo, "minBytes", "<algo>"), _int(algo, "maxBytes", "<algo>")
        if hi > 0 and lo > hi:  # maxBytes 0: no upper end
            _fail("structure", f"<algo> minBytes={lo} is above maxBytes={hi}")
    if not 1 <= nch <= 32:
        _fail("structure", f"<algo> nchannels={nch} is not in 1..32")
    if ngpus < 2 or ncpl < 1:
        _fail("structure", "<algo> needs ngpus >= 2 and nchunksperloop >= 1")
    if topology is not None and topology.num_ranks != ngpus:
        _fail("structure", f"ngpus={ngpus} but the topology has {topology.num_ranks} ranks")
    max_steps = 256 if dialect == "msccl" else 64
    return _Header(dialect, coll, nch, ncpl, ngpus, inplace, max_steps)


def _check_algo_keys(A: dict, dialect: str) -> None:
    """Required ``<algo>`` attributes per dialect, protocol and collective spelling."""
    for key in ("proto", "nchannels", "nchunksperloop", "ngpus", "coll", "inplace"):
        if key not in A:
            _fail("structure", f"<algo> lacks attribute {key!r}")
    if dialect == "msccl" and "name" not in A:
        _fail("structure", "<algo> lacks attribute 'name' (required by the msccl dialect)")
    if dialect == "executor":
        for key in ("outofplace", "minBytes", "maxBytes"):
            if key not in A:
                _fail(
                    "structure",
                    f"<algo> lacks attribute {key!r} (required by the executor dialect)",
                )
    if A["proto"] not in ("Simple", "LL", "LL128"):
        _fail("structure", f"<algo> proto={A['proto']!r} is not Simple, LL or LL128")
    coll = A["coll"]
    if coll not in _COLLS:
        _fail("structure", f"<algo> coll={coll!r} is not supported by the checker")
    if dialect == "msccl" and coll == "reducescatter":
        _fail(
            "structure",
            "coll='reducescatter' is the executor spelling; the msccl dialect "
            "needs 'reduce_scatter'",
        )
    if dialect == "executor" and coll == "reduce_scatter":
        _fail(
            "structure",
            "coll='reduce_scatter' is the old-fork spelling; the executor needs 'reducescatter'",
        )


def _check_gpus(algo: _Elem, h: _Header) -> dict[int, tuple[dict, list[_Tb]]]:
    """Every ``<gpu>`` once, each read into its buffer sizes and thread blocks."""
    gpus: dict[int, tuple[dict, list[_Tb]]] = {}
    for gel in algo.children:
        if gel.tag != "gpu":
            continue  # the runtime parsers ignore unknown elements
        g = _int(gel, "id", "<gpu>")
        if not 0 <= g < h.ngpus:
            _fail("structure", f"<gpu id={g}> is not a rank in 0..{h.ngpus - 1}")
        if g in gpus:
            _fail("structure", f"gpu {g} appears twice")
        gpus[g] = _read_gpu(gel, g, h)
    for g in range(h.ngpus):
        if g not in gpus:
            _fail("structure", f"gpu {g} is missing")
    return gpus


def _read_gpu(gel: _Elem, g: int, h: _Header) -> tuple[dict, list[_Tb]]:
    """One GPU: buffer sizes, contiguous thread blocks, per-channel peers, node count."""
    bufs = _gpu_buffers(gel, g, h)
    tbs: dict[int, _Tb] = {}
    for tel in gel.children:
        if tel.tag != "tb":
            continue
        tid = _int(tel, "id", f"gpu {g} <tb>")
        if tid in tbs:
            _fail("structure", f"gpu {g} tb {tid}: thread block id used twice")
        tbs[tid] = _read_tb(tel, g, tid, bufs, h)
    for k in range(len(tbs)):
        if k not in tbs:
            _fail(
                "structure", f"gpu {g}: thread block {k} is missing (ids must be contiguous from 0)"
            )
    tbl = [tbs[k] for k in range(len(tbs))]
    _check_channel_peers(g, tbl)
    nodes = 2 + len(tbl) + sum(len(tb.steps) for tb in tbl)
    if nodes > 4096:
        _fail("structure", f"gpu {g}: {nodes} XML nodes, more than the parser's 4096")
    return bufs, tbl


def _gpu_buffers(gel: _Elem, g: int, h: _Header) -> dict:
    """The ``i``/``o``/``s`` chunk counts of a GPU (msccl: consistent with nchunksperloop)."""
    bufs = {}
    for b in ("i", "o", "s"):
        bufs[b] = _int(gel, f"{b}_chunks", f"gpu {g}")
        if bufs[b] < 0:
            _fail("structure", f"gpu {g}: {b}_chunks is negative")
    if h.dialect == "msccl":  # the old fork's consistency check
        mi = h.ngpus if h.coll == "allgather" else 1
        mo = h.ngpus if h.coll == "reducescatter" else 1
        for b, mult in (("i", mi), ("o", mo)):
            if bufs[b] > 0 and bufs[b] * mult != h.ncpl:
                _fail(
                    "structure",
                    f"gpu {g}: {b}_chunks={bufs[b]} x {mult} is not "
                    f"nchunksperloop={h.ncpl} (rejected by the msccl fork)",
                )
    return bufs


def _read_tb(tel: _Elem, g: int, tid: int, bufs: dict, h: _Header) -> _Tb:
    """One thread block: peers, channel and its steps within the step limit."""
    w = f"gpu {g} tb {tid}"
    send = _int(tel, "send", w)
    recv = _int(tel, "recv", w)
    chan = _int(tel, "chan", w)
    for label, p in (("send", send), ("recv", recv)):
        if not -1 <= p < h.ngpus or p == g:
            _fail("structure", f"{w}: {label} peer {p} is not another rank")
    if not 0 <= chan < h.nch:
        _fail("structure", f"{w}: chan={chan} is not below nchannels={h.nch}")
    steps: list[_St] = []
    for sel in tel.children:
        if sel.tag == "step":
            steps.append(_read_step(sel, g, tid, len(steps), send, recv, bufs))
    if len(steps) > h.max_steps:
        _fail(
            "structure",
            f"{w} has {len(steps)} steps, more than the {h.dialect} limit of {h.max_steps}",
        )
    return _Tb(g, tid, send, recv, chan, steps)


def _read_step(sel: _Elem, g: int, tid: int, idx: int, send: int, recv: int, bufs: dict) -> _St:
    """One step: attributes, position, type, buffers, count, peers and offsets."""
    sw = f"gpu {g} tb {tid} step {idx}"
    for key in _STEP_ATTRS:
        if key not in sel.attrs:
            _fail("structure", f"{sw} lacks attribute {key!r}")
    vals = {
        k: _int(sel, k, sw) for k in ("s", "srcoff", "dstoff", "cnt", "depid", "deps", "hasdep")
    }
    st = _St(
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
        _fail(
            "structure",
            f"{sw}: s={vals['s']} but the step is at position "
            f"{idx} (dependency flags use the position)",
        )
    if st.type not in _TYPES:
        _fail("structure", f"{sw}: unknown step type {st.type!r}")
    for b in (st.srcbuf, st.dstbuf):
        if b not in ("i", "o", "s"):
            _fail("structure", f"{sw}: unknown buffer {b!r}")
    if st.hasdep not in (0, 1):
        _fail("structure", f"{sw}: hasdep must be 0 or 1")
    sends, recvs, reads, writes, _ = _TYPES[st.type]
    lo = 0 if st.type == "nop" else 1
    if not lo <= st.cnt < 72:
        _fail("structure", f"{sw}: cnt={st.cnt} is not in {lo}..71")
    if sends and send < 0:
        _fail("structure", f"{sw}: {st.type} sends but the thread block has no send peer")
    if recvs and recv < 0:
        _fail("structure", f"{sw}: {st.type} receives but the thread block has no recv peer")
    uses_src = reads or st.type == "s"
    uses_dst = writes
    for use, b, o, label in (
        (uses_src, st.srcbuf, st.srcoff, "src"),
        (uses_dst, st.dstbuf, st.dstoff, "dst"),
    ):
        if use and not (0 <= o and o + st.cnt <= bufs[b]):
            _fail(
                "structure",
                f"{sw}: {label} {b}[{o}..{o + st.cnt - 1}] is "
                f"outside the {bufs[b]}-chunk {b} buffer",
            )
    return st


def _check_channel_peers(g: int, tbl: list[_Tb]) -> None:
    """One thread block per (channel, peer) and direction, at most 32 per channel."""
    seen_s: dict = {}
    seen_r: dict = {}
    per_ch_s: dict = {}
    per_ch_r: dict = {}
    for tb in tbl:
        if tb.send >= 0:
            key = (tb.chan, tb.send)
            if key in seen_s:
                _fail(
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
                _fail(
                    "structure",
                    f"gpu {g}: thread blocks {seen_r[key]} and {tb.id} both "
                    f"receive from {tb.recv} on channel {tb.chan} (one "
                    f"thread block per (channel, peer) and direction)",
                )
            seen_r[key] = tb.id
            per_ch_r[tb.chan] = per_ch_r.get(tb.chan, 0) + 1
    for ch, k in sorted(per_ch_s.items()) + sorted(per_ch_r.items()):
        if k > 32:
            _fail(
                "structure",
                f"gpu {g}: channel {ch} has {k} sending or receiving thread blocks, more than 32",
            )


def _check_routes(gpus, ngpus: int, topology) -> None:
    """Every (GPU, send peer) pair has a direct route in the topology."""
    from ..topology.paths import RouteTable

    rt = RouteTable(topology)
    for g in range(ngpus):
        for tb in gpus[g][1]:
            if tb.send >= 0 and not rt.has_route(g, tb.send):
                _fail(
                    "structure",
                    f"gpu {g} tb {tb.id} sends to {tb.send}, but the "
                    f"topology has no direct route between them",
                )


# ---------------------------------------------------------------------- dependencies, pairing
def _check_dependencies(gpus, ngpus: int) -> None:
    """Every dependency names a published non-nop step; nop chains end on a dependency."""
    for g in range(ngpus):
        tbl = gpus[g][1]
        for tb in tbl:
            pending: list = []
            for st in tb.steps:
                if st.depid != -1 or st.deps != -1:
                    _check_dep_target(st, g, tb, tbl)
                if st.type == "nop":
                    if st.depid < 0:
                        _fail("dependency", f"{st.where()}: a nop without a dependency")
                    pending.append((st.depid, st.deps))
                    continue
                if pending and st.depid < 0:
                    _fail(
                        "dependency",
                        f"{st.where()}: follows a chain of nops but has no dependency of its own",
                    )
                st.waits = pending + ([(st.depid, st.deps)] if st.depid >= 0 else [])
                pending = []
            if pending:
                _fail("dependency", f"gpu {g} tb {tb.id}: ends with nops")


def _check_dep_target(st: _St, g: int, tb: _Tb, tbl: list[_Tb]) -> None:
    """``depid``/``deps`` name a non-nop step with ``hasdep="1"`` of another thread block."""
    if not 0 <= st.depid < len(tbl):
        _fail("dependency", f"{st.where()}: depid={st.depid} is not a thread block of gpu {g}")
    if st.depid == tb.id:
        _fail("dependency", f"{st.where()}: depends on its own thread block")
    target = tbl[st.depid]
    if not 0 <= st.deps < len(target.steps):
        _fail("dependency", f"{st.where()}: deps={st.deps} is not a step of gpu {g} tb {st.depid}")
    t = target.steps[st.deps]
    if t.type == "nop":
        _fail(
            "dependency",
            f"{st.where()}: depends on {t.where()}, a nop, which never publishes completion",
        )
    if t.hasdep != 1:
        _fail(
            "dependency",
            f"{st.where()}: depends on {t.where()}, which has "
            f'hasdep="0" (its completion is never published)',
        )


def _transfers(gpus, ngpus: int) -> tuple[dict, dict]:
    """Sending and receiving steps per (sender, receiver, channel), in order."""
    sends: dict = {}
    recvs: dict = {}
    for g in range(ngpus):
        for tb in gpus[g][1]:
            for st in tb.steps:
                s_, r_, *_ = _TYPES[st.type]
                if s_:
                    sends.setdefault((g, tb.send, tb.chan), []).append(st)
                if r_:
                    recvs.setdefault((tb.recv, g, tb.chan), []).append(st)
    return sends, recvs


def _check_pairing(sends: dict, recvs: dict) -> int:
    """Sends and receives agree in number and ``cnt`` per connection; the transfer count."""
    transfers = 0
    for key in sorted(set(sends) | set(recvs)):
        a, b, ch = key
        ss, rr = sends.get(key, []), recvs.get(key, [])
        for i, (x, y) in enumerate(zip(ss, rr)):
            if x.cnt != y.cnt:
                _fail(
                    "pairing",
                    f"transfer {i} from gpu {a} to gpu {b} on channel {ch}: "
                    f"{x.where()} sends cnt={x.cnt} but {y.where()} receives "
                    f"cnt={y.cnt}",
                )
        if len(ss) != len(rr):
            extra = (ss if len(ss) > len(rr) else rr)[min(len(ss), len(rr))]
            _fail(
                "pairing",
                f"gpu {a} sends {len(ss)} time(s) to gpu {b} on channel {ch} but "
                f"gpu {b} receives {len(rr)} time(s); first unmatched: "
                f"{extra.where()}",
            )
        transfers += len(ss)
    return transfers


def _merge(vc: list, other: list) -> None:
    for k, v in enumerate(other):
        if v > vc[k]:
            vc[k] = v


def _check_cycles(gpus, ngpus, sends, recvs) -> None:
    """Cycles in: previous step in the thread block, dependencies, the i-th send -> i-th recv."""
    node_id: dict = {}
    nodes: list[_St] = []
    for g in range(ngpus):
        for tb in gpus[g][1]:
            for st in tb.steps:
                node_id[(g, tb.id, st.i)] = len(nodes)
                nodes.append(st)
    preds: list[list[int]] = [[] for _ in nodes]
    for g in range(ngpus):
        for tb in gpus[g][1]:
            for st in tb.steps:
                v = node_id[(g, tb.id, st.i)]
                if st.i > 0:
                    preds[v].append(node_id[(g, tb.id, st.i - 1)])
                if st.depid >= 0:
                    preds[v].append(node_id[(g, st.depid, st.deps)])
    for key, ss in sends.items():
        for x, y in zip(ss, recvs.get(key, [])):
            preds[node_id[(y.gpu, y.tb, y.i)]].append(node_id[(x.gpu, x.tb, x.i)])
    # iterative DFS for a cycle
    color = [0] * len(nodes)
    for start in range(len(nodes)):
        if color[start]:
            continue
        stack = [(start, 0)]
        path = []
        color[start] = 1
        path.append(start)
        while stack:
            v, k = stack[-1]
            if k < len(preds[v]):
                stack[-1] = (v, k + 1)
                u = preds[v][k]
                if color[u] == 0:
                    color[u] = 1
                    path.append(u)
                    stack.append((u, 0))
                elif color[u] == 1:
                    cyc = path[path.index(u) :]
                    desc = " <- ".join(nodes[i].where() for i in cyc[:6])
                    _fail(
                        "dependency-cycle",
                        f"{desc}{' ...' if len(cyc) > 6 else ''} (waits form a cycle)",
                    )
            else:
                color[v] = 2
                path.pop()
                stack.pop()


class _Exec:
    """Symbolic execution. Values: ("d", chunk id) or ("r", chunk id, contribution bitmask)."""

    def __init__(self, gpus, ngpus, coll, ncpl, inplace, root, fifo_slots):
        self.gpus, self.n, self.coll, self.ncpl = gpus, ngpus, coll, ncpl
        self.inplace, self.root, self.slots = inplace, root, max(1, int(fifo_slots))
        self.reduces = coll in ("reducescatter", "allreduce", "reduce")
        n = ngpus
        if coll in ("allgather", "reducescatter", "alltoall") and ncpl % n:
            _fail("structure", f"nchunksperloop={ncpl} is not a multiple of ngpus={n} for {coll}")
        if coll in ("broadcast", "reduce") and not 0 <= root < n:
            _fail("structure", f"root {root} is not a rank")
        self.c = ncpl // n if coll in ("allgather", "reducescatter", "alltoall") else ncpl
        self.mem = [dict() for _ in range(n)]
        self.expect = [dict() for _ in range(n)]  # (buf, off) -> value
        c = self.c
        for r in range(n):
            mem, exp = self.mem[r], self.expect[r]
            if coll == "allgather":
                for j in range(c):
                    mem[("o" if inplace else "i", (r * c + j) if inplace else j)] = ("d", r * c + j)
                for k in range(ncpl):
                    exp[("o", k)] = ("d", k)
            elif coll == "alltoall":
                for d in range(n):
                    for j in range(c):
                        mem[("i", d * c + j)] = ("d", (r * n + d) * c + j)
                for s in range(n):
                    for j in range(c):
                        exp[("o", s * c + j)] = ("d", (s * n + r) * c + j)
            elif coll == "broadcast":
                if r == root:
                    for k in range(c):
                        mem[("o" if inplace else "i", k)] = ("d", k)
                for k in range(c):
                    exp[("o", k)] = ("d", k)
            else:  # reductions: contributions in i
                full = (1 << n) - 1
                for k in range(ncpl):
                    mem[("i", k)] = ("r", k, 1 << r)
                if coll == "allreduce":
                    for k in range(ncpl):
                        exp[("i" if inplace else "o", k)] = ("r", k, full)
                elif coll == "reducescatter":
                    for j in range(c):
                        exp[("i", r * c + j) if inplace else ("o", j)] = ("r", r * c + j, full)
                elif r == root:  # reduce
                    for k in range(c):
                        exp[("i" if inplace else "o", k)] = ("r", k, full)

    def _desc(self, v) -> str:
        if v is None:
            return "nothing"
        if v[0] == "d":
            return f"chunk {v[1]}"
        ranks = [i for i in range(self.n) if v[2] >> i & 1]
        return f"chunk {v[1]} with contributions of rank(s) {ranks}"

    def _hb(self, ident, vc) -> bool:
        return vc[ident[0]] > ident[1]

    def _access(self, g, loc, write=None, red=False) -> None:
        """Race check: conflicting accesses to one location must be ordered (happens-before
        through thread-block order, dependencies and send/receive matching)."""
        ti, st, vc = self._cur
        me = (ti, st.i)
        state = self.loc_state.setdefault((g,) + loc, {"w": None, "r": []})
        w = state["w"]
        name = f"{loc[0]}[{loc[1]}] of gpu {g}"
        if write is None:
            if w is not None and w[3] and not self._hb(w, vc):
                _fail(
                    "race",
                    f"{st.where()} reads {name} while {w[2]} may still be writing "
                    f"it (no dependency orders them)",
                )
            state["r"].append((ti, st.i, st.where()))
            return
        changed = self.mem[g].get(loc) != write
        if w is not None and not self._hb(w, vc) and (changed or red or w[4]):
            _fail(
                "race", f"{st.where()} and {w[2]} both write {name} with no dependency between them"
            )
        if changed:
            for r in state["r"]:
                if r[:2] != me and not self._hb(r, vc):
                    _fail(
                        "race",
                        f"{st.where()} writes {name} while {r[2]} may still be "
                        f"reading it (no dependency orders them)",
                    )
        state["w"] = (ti, st.i, st.where(), changed, red)
        state["r"] = []

    def _read(self, st, g, buf, off):
        self._access(g, (buf, off))
        v = self.mem[g].get((buf, off))
        if v is None:
            _fail(
                "data",
                f"{st.where()} reads {buf}[{off}] on gpu {g}, which holds no data "
                f"yet (missing chunk or missing dependency)",
            )
        return v

    def _combine(self, st, a, b):
        if a[0] != "r" or b[0] != "r":
            _fail("data", f"{st.where()} reduces in a non-reducing collective ({self.coll})")
        if a[1] != b[1]:
            _fail(
                "data",
                f"{st.where()} combines {self._desc(a)} with {self._desc(b)} "
                f"(different chunks; sends and receives out of order?)",
            )
        if a[2] & b[2]:
            dup = [i for i in range(self.n) if (a[2] & b[2]) >> i & 1]
            _fail(
                "data",
                f"{st.where()} combines the contribution of rank(s) {dup} twice (chunk {a[1]})",
            )
        return ("r", a[1], a[2] | b[2])

    def run(self) -> None:
        """Run every thread block as far as it can; fail on a deadlock or a wrong result."""
        n, gpus = self.n, self.gpus
        pc = {(g, tb.id): 0 for g in range(n) for tb in gpus[g][1]}
        fifo: dict = {}
        tb_list = [(g, tb) for g in range(n) for tb in gpus[g][1]]
        tb_index = {(g, tb.id): k for k, (g, tb) in enumerate(tb_list)}
        self.tb_list = tb_list
        ntb = len(tb_list)
        vcs = [[0] * ntb for _ in range(ntb)]  # vector clock of each thread block
        done: dict = {}  # (g, tb, step) -> vector clock when the step completed
        self.loc_state: dict = {}
        remaining = sum(len(tb.steps) for _, tb in tb_list)
        progress = True
        while remaining and progress:
            progress = False
            for g, tb in tb_list:
                while True:
                    i = pc[(g, tb.id)]
                    if i >= len(tb.steps):
                        break
                    st = tb.steps[i]
                    if any(pc[(g, d)] <= s for d, s in st.waits):
                        break
                    sends, recvs, reads, writes, reduces = _TYPES[st.type]
                    qin = fifo.setdefault((tb.recv, g, tb.chan), []) if recvs else None
                    qout = fifo.setdefault((g, tb.send, tb.chan), []) if sends else None
                    if recvs and not qin:
                        break
                    if qout is not None and len(qout) >= self.slots:
                        break
                    ti = tb_index[(g, tb.id)]
                    vc = vcs[ti]
                    for d, s_ in st.waits:
                        _merge(vc, done[(g, d, s_)])
                    if qin is not None:  # exactly when the step receives
                        _merge(vc, qin[0][1])
                    vc[ti] = i
                    self._cur = (ti, st, vc)
                    self._step(st, g, qin, qout, sends, recvs, reads, writes, reduces)
                    vc[ti] = i + 1
                    done[(g, tb.id, i)] = list(vc)
                    if qout is not None:  # exactly when the step sends
                        qout[-1] = (qout[-1], list(vc))
                    pc[(g, tb.id)] = i + 1
                    remaining -= 1
                    progress = True
        if remaining:
            self._report_deadlock(pc, fifo)
        self._check_postcondition()

    def _report_deadlock(self, pc: dict, fifo: dict) -> None:
        """Fail with what the first stuck thread blocks wait for."""
        blocked = []
        for g, tb in self.tb_list:
            i = pc[(g, tb.id)]
            if i < len(tb.steps):
                st = tb.steps[i]
                why = []
                for d, s in st.waits:
                    if pc[(g, d)] <= s:
                        why.append(f"tb {d} step {s}")
                if _TYPES[st.type][1] and not fifo.get((tb.recv, g, tb.chan)):
                    why.append(f"data from gpu {tb.recv} chan {tb.chan}")
                if _TYPES[st.type][0] and len(fifo.get((g, tb.send, tb.chan), [])) >= self.slots:
                    why.append(f"a free slot to gpu {tb.send} chan {tb.chan}")
                blocked.append(f"{st.where()} waits for {', '.join(why)}")
        _fail(
            "deadlock",
            f"{len(blocked)} thread block(s) stuck, e.g. {blocked[0]}"
            + (f"; {blocked[1]}" if len(blocked) > 1 else ""),
        )

    def _check_postcondition(self) -> None:
        """Every output location holds what the collective requires."""
        for r in range(self.n):
            for loc in sorted(self.expect[r]):
                want = self.expect[r][loc]
                got = self.mem[r].get(loc)
                if got != want:
                    _fail(
                        "postcondition",
                        f"gpu {r} ends with {self._desc(got)} in "
                        f"{loc[0]}[{loc[1]}], expected {self._desc(want)} "
                        f"({self.coll})",
                    )

    def _step(self, st, g, qin, qout, sends, recvs, reads, writes, reduces):
        cnt = st.cnt
        mem = self.mem[g]
        if st.type == "nop":
            return
        vals = None
        if recvs:
            vals = qin.pop(0)[0]
            if len(vals) != cnt:
                _fail("pairing", f"{st.where()} receives {len(vals)} chunk(s), expected {cnt}")
        if st.type in ("s",):
            vals = [self._read(st, g, st.srcbuf, st.srcoff + k) for k in range(cnt)]
        elif st.type == "cpy":
            vals = [self._read(st, g, st.srcbuf, st.srcoff + k) for k in range(cnt)]
        elif st.type == "re":
            vals = [
                self._combine(
                    st,
                    self._read(st, g, st.dstbuf, st.dstoff + k),
                    self._read(st, g, st.srcbuf, st.srcoff + k),
                )
                for k in range(cnt)
            ]
        elif reduces:  # rrc, rrs, rrcs
            vals = [
                self._combine(st, v, self._read(st, g, st.srcbuf, st.srcoff + k))
                for k, v in enumerate(vals)
            ]
        if writes:
            exp = self.expect[g]
            for k, v in enumerate(vals):
                loc = (st.dstbuf, st.dstoff + k)
                want = exp.get(loc)
                if want is not None and v[1] != want[1]:
                    hint = " (sends and receives out of order?)" if recvs else ""
                    _fail(
                        "data",
                        f"{st.where()} writes {self._desc(v)} into "
                        f"{loc[0]}[{loc[1]}] of gpu {g}, where chunk {want[1]} "
                        f"belongs{hint}",
                    )
                self._access(g, loc, write=v, red=reduces)
                mem[loc] = v
        if sends:
            qout.append(list(vals))
