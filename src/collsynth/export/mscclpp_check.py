"""An independent checker for MSCCL++ execution plans (JSON), by structure and by execution.

It reads a plan with no knowledge of how it was made (not the schedule IR, not the exporter)
and checks, failing at the first violation with one line that names the rule and the place:

1. **structure**: the keys the executor's parser needs, ids contiguous from 0 (``gpus[i].id ==
   i``, ``threadblocks[k].id == k``), chunk counts that fit the collective, at most 64
   operations, 16 channels and 16 remote buffers (per type) per thread block, at most 8
   channels, sources or destinations per operation;
2. **references**: every block-local channel id resolves through the block's channel list to a
   GPU-level channel of the op's type, every ``buffer_id`` through the block's
   ``remote_buffer_refs`` of that type to a remote buffer that may be accessed that way, the
   channel of a ``put`` leads to the rank that owns the buffer it writes, every chunk index is
   inside its buffer; every channel has a partner (the k-th channel from A to B pairs with the
   k-th from B to A, per type);
3. **execution**: every thread block runs its operations in order, as the executor would;
   ``signal`` gives one to the partner channel's semaphore, ``wait`` takes one and blocks until
   there is one. A plan whose blocks cannot all finish is a *deadlock* (the blocked waits are
   named); a wait left without its signal, or a signal never waited for, breaks the pairing.
   Values are symbolic (which rank's data, which chunk; for reductions, the set of ranks
   summed), so a wrong chunk, a reduction counting a rank twice or missing one, or a read of a
   slot nothing wrote is caught, and the end state must be the collective's result;
4. **races**: operations of one block between two ``nop`` s run concurrently (the executor's
   threads do not wait for each other without ``__syncthreads``), and a ``signal`` publishes,
   and a ``wait`` acquires, only what precedes the latest ``nop``. Every read and write of a
   chunk slot must be ordered after the last conflicting access by these rules (vector clocks
   per block and epoch); a put that lands while its receiver may still read or write the slot,
   or a read of data whose ``wait`` is not yet fenced by a ``nop``, is a race. ``pws``/``pwsf``
   (port channels) signal after their own put; their signal also covers the block's other
   operations since the latest ``nop``, so a plan should put a ``nop`` before them.

Operations understood: ``nop``, ``put``, ``pws``, ``pwsf``, ``signal``, ``wait``, ``flush``,
``copy``, ``re`` and, over a switch channel (NVLS: a multicast object bound to one buffer of
every rank of a rank group, which every member must declare alike), ``glres``: it reads the
chunks at every member (each read must be ordered after that member's last write, as for a
local read) and writes their sum to every member. Other operations (packets, ``get``,
``rre``, semaphores across blocks, ``barrier``, ``pipeline``) are refused by name: this
checker cannot vouch for them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NoReturn

from ..collective import max_chunks
from ..errors import CollsynthError
from ..files import parse_structured

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


@dataclass
class PlanCheckReport:
    ok: bool
    collective: str
    ngpus: int
    chunks_per_rank: int
    threadblocks: int
    operations: int
    channels: int
    transfers: int
    inplace: bool

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def _fail(check: str, msg: str) -> NoReturn:
    raise PlanCheckError(msg, check=check)


# ---------------------------------------------------------------------- parsing helpers
def _get(obj: Any, key: str, kind: type | tuple, where: str, default: Any = ...) -> Any:
    if not isinstance(obj, dict):
        _fail("structure", f"{where} is not a JSON object")
    if key not in obj:
        if default is not ...:
            return default
        _fail("structure", f"{where} has no {key!r}")
    v = obj[key]
    ok = isinstance(v, kind) and not (isinstance(v, bool) and kind in (int, (int,)))
    if not ok:
        shown = repr(v) if isinstance(v, (int, float)) else type(v).__name__
        _fail("structure", f"{where}.{key} is {shown}, not {_kind_name(kind)}")
    return v


def _kind_name(kind: type | tuple) -> str:
    if isinstance(kind, tuple):
        return " or ".join(k.__name__ for k in kind)
    return kind.__name__


def _nat(obj: dict, key: str, where: str, default: Any = ...) -> int:
    v = _get(obj, key, int, where, default)
    if v < 0:
        _fail("structure", f"{where}.{key} is negative ({v})")
    return v


@dataclass
class _Chan:
    ctype: str
    peer: int
    ordinal: int  # k-th channel of this type from this GPU to ``peer``


@dataclass
class _Gpu:
    id: int
    chunks: dict  # "i"/"o"/"s" -> count
    channels: dict  # ctype -> [_Chan] in GPU-level order
    buffers: list  # [(rank, type, access types)]
    tbs: list
    switches: list = field(default_factory=list)  # [(buffer type, ranks)] GPU-level order


@dataclass
class _Tb:
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


def check_mscclpp_plan(text: str, *, root: int = 0, source: str = "plan") -> PlanCheckReport:
    """Check MSCCL++ plan JSON ``text``; raise :class:`PlanCheckError` at the first violation.
    ``root``: the root of a broadcast plan (the plan itself does not say); ``source`` names
    the text in errors. The JSON is read within the input limits of :mod:`collsynth.files`
    (nesting depth, values, integer digits)."""
    try:
        doc = parse_structured(text, source, fmt="json")
    except PlanCheckError:
        raise
    except CollsynthError as e:
        if type(e) is not CollsynthError:  # a time limit keeps its kind (and exit status)
            raise
        _fail("json", str(e))
    if not isinstance(doc, dict):
        _fail("structure", "the plan is not a JSON object")
    _check_settings(doc)
    coll = _get(doc, "collective", str, "plan")
    if coll not in COLLECTIVES:
        _fail("structure", f"collective {coll!r} is not one of {', '.join(COLLECTIVES)}")
    _get(doc, "name", str, "plan")
    proto = _get(doc, "protocol", str, "plan")
    if proto != "Simple":
        _fail("structure", f"protocol {proto!r}: this checker knows the Simple protocol only")
    inplace = _get(doc, "inplace", bool, "plan")
    raw = _get(doc, "gpus", list, "plan")
    if not raw:
        _fail("structure", "the plan has no GPUs")
    n = len(raw)
    gpus = [_parse_gpu(g, i, n) for i, g in enumerate(raw)]
    c = _chunks_per_rank(coll, gpus, n)
    if coll == "broadcast" and not 0 <= root < n:
        _fail("structure", f"broadcast root {root} is not a rank of the {n} GPUs")
    _pair_channels(gpus)
    _pair_switches(gpus)
    tbs = [tb for g in gpus for tb in g.tbs]
    for tb in tbs:
        _check_refs(tb, gpus)
    run = _Execution(coll, gpus, n, c, inplace, root)
    transfers = run.run(tbs)
    run.postcondition()
    return PlanCheckReport(
        ok=True,
        collective=coll,
        ngpus=n,
        chunks_per_rank=c,
        threadblocks=len(tbs),
        operations=sum(len(tb.ops) for tb in tbs),
        channels=sum(len(v) for g in gpus for v in g.channels.values()),
        transfers=transfers,
        inplace=inplace,
    )


#: The plan-wide settings the executor reads (each optional): key -> (lowest, highest) whole
#: number; ``buffer_alignment`` must also be a power of two.
SETTINGS = {
    "num_threads_per_block": (1, 1024),  # CUDA's and ROCm's most threads per block
    "buffer_alignment": (1, 1 << 30),
    "min_message_size": (0, (1 << 64) - 1),
    "max_message_size": (0, (1 << 64) - 1),
}


def _check_settings(doc: dict) -> None:
    """The plan-wide settings: whole numbers in range (not NaN, not negative, not a string),
    flags true or false, and ``min_message_size <= max_message_size``."""
    for key, (lo, hi) in SETTINGS.items():
        if key not in doc:
            continue
        v = _get(doc, key, int, "plan")
        if not lo <= v <= hi:
            _fail("structure", f"plan.{key} is {v}: it must be a whole number from {lo} to {hi}")
    align = doc.get("buffer_alignment", 1)
    if align & (align - 1):
        _fail("structure", f"plan.buffer_alignment is {align}: it must be a power of two")
    if doc.get("min_message_size", 0) > doc.get("max_message_size", (1 << 64) - 1):
        _fail("structure", "plan.min_message_size is larger than plan.max_message_size")
    for key in ("reuse_resources", "use_double_scratch_buffer"):
        _get(doc, key, bool, "plan", False)


def _parse_gpu(g: Any, i: int, n: int) -> _Gpu:
    where = f"gpus[{i}]"
    gid = _nat(g, "id", where)
    if gid != i:
        _fail("structure", f"{where}.id is {gid}: GPUs must be listed by rank from 0")
    chunks = {
        "i": _nat(g, "input_chunks", where),
        "o": _nat(g, "output_chunks", where),
        "s": _nat(g, "scratch_chunks", where),
    }
    most = max_chunks()
    for key, count in zip(("input_chunks", "output_chunks", "scratch_chunks"), chunks.values()):
        if count > most:
            _fail("limits", f"{where}.{key} is {count}, more than {most} (set "
                  "COLLSYNTH_MAX_CHUNKS to raise the limit)")  # fmt: skip
    channels: dict[str, list[_Chan]] = {t: [] for t in CHANNEL_TYPES}
    switches: list[tuple[str, tuple[int, ...]]] = []
    for k, ch in enumerate(_get(g, "channels", list, where)):
        cw = f"{where}.channels[{k}]"
        t = _get(ch, "channel_type", str, cw)
        if t == "switch":
            switches.extend(_parse_switch(ch, cw, i, n))
            continue
        if t not in CHANNEL_TYPES:
            _fail("structure", f"{cw}: channel type {t!r} is not supported (memory, port, "
                  "switch)")  # fmt: skip
        for p in _get(ch, "connected_to", list, cw):
            if not isinstance(p, int) or isinstance(p, bool) or not 0 <= p < n or p == i:
                _fail("structure", f"{cw}: peer {p!r} is not another rank of the plan")
            ordinal = sum(1 for x in channels[t] if x.peer == p)
            channels[t].append(_Chan(t, p, ordinal))
    buffers = []
    for k, b in enumerate(_get(g, "remote_buffers", list, where)):
        bw = f"{where}.remote_buffers[{k}]"
        r = _nat(b, "rank", bw)
        bt = _get(b, "type", str, bw)
        acc = _get(b, "access_channel_types", list, bw)
        if not 0 <= r < n or r == i:
            _fail("structure", f"{bw}: rank {r} is not another rank of the plan")
        if bt not in ("i", "o", "s"):
            _fail("structure", f"{bw}: buffer type {bt!r} is not i, o or s")
        if not acc or any(a not in CHANNEL_TYPES for a in acc):
            _fail("structure", f"{bw}: access_channel_types {acc!r} must list memory/port")
        buffers.append((r, bt, set(acc)))
    tbs = []
    for k, t in enumerate(_get(g, "threadblocks", list, where)):
        tw = f"{where}.threadblocks[{k}]"
        tid = _nat(t, "id", tw)
        if tid != k:
            _fail("structure", f"{tw}.id is {tid}: thread blocks must be numbered from 0")
        ops = _get(t, "ops", list, tw)
        if len(ops) > MAX_OPS:
            _fail("limits", f"{tw} has {len(ops)} operations, more than {MAX_OPS}")
        chans: dict[str, list[int]] = {}
        for e in _get(t, "channels", list, tw):
            ct = _get(e, "channel_type", str, f"{tw}.channels")
            ids = _get(e, "channel_ids", list, f"{tw}.channels")
            chans.setdefault(ct, []).extend(ids)
        bufs: dict[str, list[int]] = {}
        for e in _get(t, "remote_buffer_refs", list, tw, []):
            ct = _get(e, "access_channel_type", str, f"{tw}.remote_buffer_refs")
            ids = _get(e, "remote_buffer_ids", list, f"{tw}.remote_buffer_refs")
            bufs.setdefault(ct, []).extend(ids)
        for ct, ids in chans.items():
            if len(ids) > MAX_CHANNELS:
                _fail("limits", f"{tw} uses {len(ids)} {ct} channels, more than {MAX_CHANNELS}")
            have = len(switches) if ct == "switch" else len(channels.get(ct, []))
            for x in ids:
                if not isinstance(x, int) or not 0 <= x < have:
                    _fail("references", f"{tw}: {ct} channel {x!r} is not declared by the GPU")
        for ct, ids in bufs.items():
            if len(ids) > MAX_BUFFERS:
                _fail("limits", f"{tw} uses {len(ids)} {ct} remote buffers, more than "
                      f"{MAX_BUFFERS}")  # fmt: skip
            for x in ids:
                if not isinstance(x, int) or not 0 <= x < len(buffers):
                    _fail("references", f"{tw}: remote buffer {x!r} is not declared by the GPU")
                if ct not in buffers[x][2]:
                    _fail("references", f"{tw}: remote buffer {x} may not be accessed over "
                          f"{ct} channels")  # fmt: skip
        tbs.append(_Tb(i, k, ops, chans, bufs))
    return _Gpu(i, chunks, channels, buffers, tbs, switches)


def _parse_switch(ch: dict, cw: str, i: int, n: int) -> list[tuple[str, tuple[int, ...]]]:
    """A switch channel declaration: one GPU-level switch channel per rank group."""
    bt = _get(ch, "buffer_type", str, cw)
    if bt not in ("i", "o", "s"):
        _fail("structure", f"{cw}: buffer type {bt!r} is not i, o or s")
    out = []
    for k, grp in enumerate(_get(ch, "rank_groups", list, cw)):
        gw = f"{cw}.rank_groups[{k}]"
        ranks = _get(grp, "ranks", list, gw)
        if any(not isinstance(r, int) or isinstance(r, bool) or not 0 <= r < n for r in ranks):
            _fail("structure", f"{gw}: ranks {ranks!r} are not ranks of the plan")
        if len(set(ranks)) != len(ranks) or i not in ranks:
            _fail("structure", f"{gw}: ranks {ranks!r} repeat a rank or leave out rank {i}")
        if _nat(grp, "size", gw) != len(ranks):
            _fail("structure", f"{gw}: size is not the number of ranks")
        out.append((bt, tuple(ranks)))
    return out


def _pair_switches(gpus: list[_Gpu]) -> None:
    """Every member of a switch channel's rank group declares the same channel (the multicast
    object is made by all of them together)."""
    for g in gpus:
        for bt, ranks in g.switches:
            for m in ranks:
                if (bt, ranks) not in gpus[m].switches:
                    _fail("channels", f"gpus[{g.id}]: switch channel over ranks {list(ranks)} "
                          f"(buffer {bt}) is not declared by rank {m}")  # fmt: skip


def _chunks_per_rank(coll: str, gpus: list[_Gpu], n: int) -> int:
    """The collective's chunks per rank, from the first GPU's counts (every GPU must agree)."""
    ic, oc = gpus[0].chunks["i"], gpus[0].chunks["o"]
    most = max_chunks()
    if n * max(ic, oc) > most:
        _fail("limits", f"{n} GPUs of {max(ic, oc)} chunks each hold more than {most} chunks "
              "(set COLLSYNTH_MAX_CHUNKS to raise the limit)")  # fmt: skip
    if coll == "allgather":
        c, want = ic, (ic, n * ic)
    elif coll == "reducescatter":
        c, want = oc, (n * oc, oc)
    elif coll in ("allreduce", "alltoall"):
        c, want = ic // n if ic % n == 0 else 0, (ic, ic)
    else:
        c, want = ic, (ic, ic)
    if c < 1 or (ic, oc) != want:
        _fail("structure", f"gpus[0]: input_chunks {ic} and output_chunks {oc} do not fit a "
              f"{coll} of {n} ranks")  # fmt: skip
    for g in gpus[1:]:
        if (g.chunks["i"], g.chunks["o"]) != (ic, oc):
            _fail("structure", f"gpus[{g.id}]: chunk counts differ from gpus[0]'s")
    return c


def _pair_channels(gpus: list[_Gpu]) -> None:
    for g in gpus:
        for t, chans in g.channels.items():
            for ch in chans:
                back = [x for x in gpus[ch.peer].channels[t] if x.peer == g.id]
                if ch.ordinal >= len(back):
                    _fail("channels", f"gpus[{g.id}]: {t} channel #{ch.ordinal} toward rank "
                          f"{ch.peer} has no partner (rank {ch.peer} declares {len(back)} "
                          f"toward rank {g.id})")  # fmt: skip


def _check_refs(tb: _Tb, gpus: list[_Gpu]) -> None:
    for i, op in enumerate(tb.ops):
        where = tb.where(i)
        name = _get(op, "name", str, where)
        if name not in KNOWN_OPS:
            _fail("operations", f"{where}: operation {name!r} is not one this checker can vouch "
                  f"for ({', '.join(sorted(KNOWN_OPS))})")  # fmt: skip
        for key in ("channel_ids", "src_buff", "dst_buff"):
            if len(_get(op, key, list, where, [])) > MAX_OP_REFS:
                _fail("limits", f"{where}: more than {MAX_OP_REFS} {key}")


# ---------------------------------------------------------------------- execution
class _Execution:
    """Symbolic execution with semaphores and happens-before tracking."""

    def __init__(self, coll: str, gpus: list[_Gpu], n: int, c: int, inplace: bool, root: int):
        self.coll, self.gpus, self.n, self.c = coll, gpus, n, c
        self.inplace, self.root = inplace, root
        self.reduces = coll in ("reducescatter", "allreduce")
        self.mem: dict[tuple[int, str, int], Any] = {}
        self.last_write: dict[tuple[int, str, int], tuple[tuple[int, int], int, str]] = {}
        self.reads: dict[tuple[int, str, int], list[tuple[tuple[int, int], int, str]]] = {}
        self.sems: dict[tuple, list[dict]] = {}  # (type, from, to, ordinal) -> published clocks
        self.signals = 0
        self._initial()

    # -- the collective
    def _initial(self) -> None:
        n, c = self.n, self.c
        for r in range(n):
            if self.coll == "allgather":
                for j in range(c):
                    slot = ("o", r * c + j) if self.inplace else ("i", j)
                    self._init(r, slot, ("ag", r * c + j))
            elif self.coll == "broadcast":
                if r == self.root:
                    for j in range(c):
                        self._init(r, ("o" if self.inplace else "i", j), ("bc", j))
            elif self.coll == "alltoall":
                for d in range(n):
                    for j in range(c):
                        self._init(r, ("i", d * c + j), ("a2a", r, d, j))
            else:  # reductions: every rank's contribution to every chunk
                for k in range(n * c):
                    self._init(r, ("i", k), ("sum", k, frozenset([r])))

    def _init(self, r: int, slot: tuple[str, int], value: Any) -> None:
        self.mem[r, slot[0], slot[1]] = value

    def _expected(self) -> list[tuple[int, tuple[str, int], Any]]:
        n, c = self.n, self.c
        out: list[tuple[int, tuple[str, int], Any]] = []
        every = frozenset(range(n))
        for r in range(n):
            if self.coll in ("allgather", "broadcast"):
                for k in range(n * c if self.coll == "allgather" else c):
                    val = ("ag", k) if self.coll == "allgather" else ("bc", k)
                    out.append((r, ("o", k), val))
            elif self.coll == "alltoall":
                for s in range(n):
                    for j in range(c):
                        out.append((r, ("o", s * c + j), ("a2a", s, r, j)))
            elif self.coll == "allreduce":
                for k in range(n * c):
                    slot = ("i", k) if self.inplace else ("o", k)
                    out.append((r, slot, ("sum", k, every)))
            else:  # reducescatter
                for j in range(c):
                    slot = ("i", r * c + j) if self.inplace else ("o", j)
                    out.append((r, slot, ("sum", r * c + j, every)))
        return out

    def postcondition(self) -> None:
        for r, slot, want in self._expected():
            got = self.mem.get((r, slot[0], slot[1]))
            if got != want:
                _fail("postcondition", f"rank {r} ends with {_show(got)} in {slot[0]}[{slot[1]}]"
                      f", not {_show(want)}")  # fmt: skip

    # -- running
    def run(self, tbs: list[_Tb]) -> int:
        transfers = 0
        live = [tb for tb in tbs if tb.ops]
        while live:
            progressed = False
            for tb in live:
                while tb.pc < len(tb.ops):
                    moved, sent = self._step(tb)
                    if not moved:
                        break
                    transfers += sent
                    progressed = True
            live = [tb for tb in live if tb.pc < len(tb.ops)]
            if live and not progressed:
                stuck = "; ".join(f"{tb.where(tb.pc)} waits on {_chan_text(tb.ops[tb.pc])}"
                                  for tb in live[:3])  # fmt: skip
                _fail("deadlock", f"{len(live)} thread block(s) can never finish: {stuck}")
        left = [(k, q) for k, q in self.sems.items() if q]
        if left:
            (t, a, b, k), q = left[0]
            _fail("pairing", f"{len(q)} signal(s) from rank {a} to rank {b} on {t} channel "
                  f"#{k} are never waited for")  # fmt: skip
        return transfers

    def _step(self, tb: _Tb) -> tuple[bool, int]:
        op = tb.ops[tb.pc]
        name = op["name"]
        where = tb.where(tb.pc)
        if name == "wait":
            for ch in self._channels(tb, op, where):
                q = self.sems.get((ch.ctype, ch.peer, tb.gpu, ch.ordinal))
                if not q:
                    return False, 0
            for ch in self._channels(tb, op, where):
                clock = self.sems[ch.ctype, ch.peer, tb.gpu, ch.ordinal].pop(0)
                _join(tb.pending, clock)
            tb.pc += 1
            return True, 0
        tb.pc += 1
        if name == "nop":
            _join(tb.clock, tb.pending)
            tb.pending = {}
            tb.clock[tb.key] = tb.epoch
            tb.epoch += 1
            return True, 0
        if name == "flush":
            self._channels(tb, op, where)
            return True, 0
        if name == "signal":
            self._signal(tb, op, where, tb.epoch - 1)
            return True, 0
        if name == "copy":
            (src,) = self._locals(tb, op, "src_buff", where, 1)
            (dst,) = self._locals(tb, op, "dst_buff", where, 1)
            self._move(tb, src, dst, where)
            return True, 0
        if name == "re":
            srcs = self._locals(tb, op, "src_buff", where)
            (dst,) = self._locals(tb, op, "dst_buff", where, 1)
            self._reduce(tb, srcs, dst, op, where)
            return True, 0
        if name == "glres":
            self._glres(tb, op, where)
            return True, 1
        # put / pws / pwsf
        self._put(tb, op, where)
        if name in ("pws", "pwsf"):
            if _get(op, "channel_type", str, where) != "port":
                _fail("operations", f"{where}: {name} is a port-channel operation")
            self._signal(tb, op, where, tb.epoch)
        return True, 1

    def _channels(self, tb: _Tb, op: dict, where: str) -> list[_Chan]:
        ct = _get(op, "channel_type", str, where)
        ids = _get(op, "channel_ids", list, where)
        local = tb.channels.get(ct, [])
        out = []
        for x in ids:
            if not isinstance(x, int) or not 0 <= x < len(local):
                _fail("references", f"{where}: {ct} channel {x!r} is not in the block's list")
            out.append(self.gpus[tb.gpu].channels[ct][local[x]])
        if not out:
            _fail("references", f"{where}: no channel_ids")
        return out

    def _signal(self, tb: _Tb, op: dict, where: str, upto: int) -> None:
        clock = dict(tb.clock)
        clock[tb.key] = max(clock.get(tb.key, -1), upto)
        for ch in self._channels(tb, op, where):
            self.sems.setdefault((ch.ctype, tb.gpu, ch.peer, ch.ordinal), []).append(clock)
            self.signals += 1

    def _locals(self, tb: _Tb, op: dict, key: str, where: str, count: int | None = None):
        refs = _get(op, key, list, where)
        if count is not None and len(refs) != count:
            _fail("operations", f"{where}: {key} must hold {count} reference(s)")
        return [self._slot(tb.gpu, ref, f"{where}.{key}", local=True) for ref in refs]

    def _slot(self, gpu: int, ref: Any, where: str, local: bool) -> tuple[int, str, int, int]:
        if local:
            bt = _get(ref, "type", str, where)
            if bt not in ("i", "o", "s"):
                _fail("references", f"{where}: buffer type {bt!r} is not i, o or s")
        else:
            bt = ref[1]
            gpu = ref[0]
            ref = ref[2]
        idx = _nat(ref, "index", where)
        size = _nat(ref, "size", where)
        count = self.gpus[gpu].chunks[bt]
        if size < 1 or idx + size > count:
            _fail("references", f"{where}: chunks {idx}..{idx + size - 1} are outside rank "
                  f"{gpu}'s {bt} buffer of {count} chunk(s)")  # fmt: skip
        return (gpu, bt, idx, size)

    def _put(self, tb: _Tb, op: dict, where: str) -> None:
        chans = self._channels(tb, op, where)
        ct = chans[0].ctype
        srcs = self._locals(tb, op, "src_buff", where)
        dsts = _get(op, "dst_buff", list, where)
        if len(srcs) != len(dsts):
            _fail("operations", f"{where}: {len(srcs)} sources for {len(dsts)} destinations")
        refs = tb.buffers.get(ct, [])
        for k, (src, d) in enumerate(zip(srcs, dsts)):
            b = _nat(d, "buffer_id", f"{where}.dst_buff[{k}]")
            if not 0 <= b < len(refs):
                _fail("references", f"{where}: buffer_id {b} is not in the block's {ct} "
                      "remote buffers")  # fmt: skip
            rank, bt, _ = self.gpus[tb.gpu].buffers[refs[b]]
            peer = chans[min(k, len(chans) - 1)].peer
            if rank != peer:
                _fail("references", f"{where}: writes rank {rank}'s buffer over a channel to "
                      f"rank {peer}")  # fmt: skip
            dst = self._slot(tb.gpu, (rank, bt, d), f"{where}.dst_buff[{k}]", local=False)
            self._move(tb, src, dst, where)

    def _move(self, tb: _Tb, src, dst, where: str) -> None:
        if src[3] != dst[3]:
            _fail("operations", f"{where}: source and destination sizes differ")
        for j in range(src[3]):
            s = (src[0], src[1], src[2] + j)
            d = (dst[0], dst[1], dst[2] + j)
            val = self._read(tb, s, where)
            self._write(tb, d, val, where)

    def _reduce(self, tb: _Tb, srcs, dst, op: dict, where: str) -> None:
        self._reduction(op, where)
        for j in range(dst[3]):
            val = self._sum(tb, [(s[0], s[1], s[2] + j) for s in srcs], where)
            self._write(tb, (dst[0], dst[1], dst[2] + j), val, where)

    def _reduction(self, op: dict, where: str) -> None:
        if op.get("reduce_op", "sum") != "sum":
            _fail("operations", f"{where}: reduce_op {op.get('reduce_op')!r} (sum only)")
        if not self.reduces:
            _fail("operations", f"{where}: a reduction in a {self.coll} plan")

    def _sum(self, tb: _Tb, locs: list, where: str) -> tuple:
        vals = [self._read(tb, loc, where) for loc in locs]
        chunk = vals[0][1]
        seen: frozenset = frozenset()
        for v in vals:
            if v[0] != "sum" or v[1] != chunk:
                _fail("values", f"{where}: adds {_show(v)} to chunk {chunk}")
            if seen & v[2]:
                _fail("values", f"{where}: counts rank(s) {sorted(seen & v[2])} twice in "
                      f"chunk {chunk}")  # fmt: skip
            seen = seen | v[2]
        return ("sum", chunk, seen)

    def _glres(self, tb: _Tb, op: dict, where: str) -> None:
        """Multimem load-reduce-store: the sum over the group's ranks, stored at every one."""
        if _get(op, "channel_type", str, where) != "switch":
            _fail("operations", f"{where}: glres runs over a switch channel")
        self._reduction(op, where)
        (src,) = self._switch_refs(tb, op, "src_buff", where)
        (dst,) = self._switch_refs(tb, op, "dst_buff", where)
        if src[3] != dst[3] or src[4] != dst[4]:
            _fail("operations", f"{where}: source and destination differ in size or ranks")
        for j in range(src[3]):
            val = self._sum(tb, [(m, src[0], src[2] + j) for m in src[4]], where)
            for m in dst[4]:
                self._write(tb, (m, dst[0], dst[2] + j), val, where)

    def _switch_refs(self, tb: _Tb, op: dict, key: str, where: str) -> list[tuple]:
        """``(buffer type, -, first chunk, size, ranks)`` of each switch buffer reference."""
        refs = _get(op, key, list, where)
        if len(refs) != 1:
            _fail("operations", f"{where}: {key} must hold 1 reference(s)")
        out = []
        local = tb.channels.get("switch", [])
        for k, ref in enumerate(refs):
            rw = f"{where}.{key}[{k}]"
            x = _nat(ref, "switch_channel_id", rw)
            if not 0 <= x < len(local):
                _fail("references", f"{rw}: switch channel {x} is not in the block's list")
            bt, ranks = self.gpus[tb.gpu].switches[local[x]]
            for m in ranks:  # the same chunks of every member's buffer
                self._slot(m, (m, bt, ref), rw, local=False)
            out.append((bt, -1, _nat(ref, "index", rw), _nat(ref, "size", rw), ranks))
        return out

    # -- happens-before
    def _before(self, tb: _Tb, ev: tuple[tuple[int, int], int, str]) -> bool:
        who, epoch, _ = ev
        if who == tb.key:
            return epoch < tb.epoch
        return tb.clock.get(who, -1) >= epoch

    def _read(self, tb: _Tb, loc: tuple[int, str, int], where: str) -> Any:
        if loc not in self.mem:
            _fail("values", f"{where}: reads {_loc(loc)} before anything was written there")
        w = self.last_write.get(loc)
        if w is not None and not self._before(tb, w):
            _fail("race", f"{where}: reads {_loc(loc)} while {w[2]} may still be writing it "
                  "(no signal/wait or nop orders them)")  # fmt: skip
        self.reads.setdefault(loc, []).append((tb.key, tb.epoch, where))
        return self.mem[loc]

    def _write(self, tb: _Tb, loc: tuple[int, str, int], val: Any, where: str) -> None:
        w = self.last_write.get(loc)
        if w is not None and not self._before(tb, w) and w[2] != where:
            _fail("race", f"{where}: writes {_loc(loc)} while {w[2]} may still be writing it")
        for r in self.reads.get(loc, []):
            if r[2] != where and not self._before(tb, r):
                _fail("race", f"{where}: writes {_loc(loc)} while {r[2]} may still be "
                      "reading it")  # fmt: skip
        self.mem[loc] = val
        self.last_write[loc] = (tb.key, tb.epoch, where)
        self.reads[loc] = []


def _join(into: dict, other: dict) -> None:
    for k, v in other.items():
        if v > into.get(k, -1):
            into[k] = v


def _loc(loc: tuple[int, str, int]) -> str:
    return f"rank {loc[0]}'s {loc[1]}[{loc[2]}]"


def _show(v: Any) -> str:
    if v is None:
        return "nothing"
    if v[0] == "sum":
        return f"chunk {v[1]} summed over ranks {sorted(v[2])}"
    if v[0] == "a2a":
        return f"rank {v[1]}'s chunk {v[3]} for rank {v[2]}"
    return f"chunk {v[1]}"


def _chan_text(op: dict) -> str:
    return f"{op.get('channel_type', '?')} channel(s) {op.get('channel_ids', [])}"
