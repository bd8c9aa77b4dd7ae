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

This module reads a plan and checks rules 1 and 2; the execution (rules 3 and 4) is in
:mod:`.mscclpp_check_execution`, the limits, the error and the records in
:mod:`.mscclpp_check_model`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..collective import max_chunks
from ..errors import CollsynthError
from ..files import parse_structured
from .mscclpp_check_execution import PlanExecution
from .mscclpp_check_model import (
    CHANNEL_TYPES,
    COLLECTIVES,
    KNOWN_OPS,
    MAX_BUFFERS,
    MAX_CHANNELS,
    MAX_OP_REFS,
    MAX_OPS,
    PlanChannel,
    PlanCheckError,
    PlanGpu,
    PlanThreadBlock,
    fail,
    get_field,
    natural_field,
)


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
        fail("json", str(e))
    if not isinstance(doc, dict):
        fail("structure", "the plan is not a JSON object")
    _check_settings(doc)
    coll = get_field(doc, "collective", str, "plan")
    if coll not in COLLECTIVES:
        fail("structure", f"collective {coll!r} is not one of {', '.join(COLLECTIVES)}")
    get_field(doc, "name", str, "plan")
    proto = get_field(doc, "protocol", str, "plan")
    if proto != "Simple":
        fail("structure", f"protocol {proto!r}: this checker knows the Simple protocol only")
    inplace = get_field(doc, "inplace", bool, "plan")
    raw = get_field(doc, "gpus", list, "plan")
    if not raw:
        fail("structure", "the plan has no GPUs")
    n = len(raw)
    gpus = [_parse_gpu(g, i, n) for i, g in enumerate(raw)]
    c = _chunks_per_rank(coll, gpus, n)
    if coll == "broadcast" and not 0 <= root < n:
        fail("structure", f"broadcast root {root} is not a rank of the {n} GPUs")
    _pair_channels(gpus)
    _pair_switches(gpus)
    tbs = [tb for g in gpus for tb in g.tbs]
    for tb in tbs:
        _check_refs(tb, gpus)
    run = PlanExecution(coll, gpus, n, c, inplace, root)
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
        v = get_field(doc, key, int, "plan")
        if not lo <= v <= hi:
            fail("structure", f"plan.{key} is {v}: it must be a whole number from {lo} to {hi}")
    align = doc.get("buffer_alignment", 1)
    if align & (align - 1):
        fail("structure", f"plan.buffer_alignment is {align}: it must be a power of two")
    if doc.get("min_message_size", 0) > doc.get("max_message_size", (1 << 64) - 1):
        fail("structure", "plan.min_message_size is larger than plan.max_message_size")
    for key in ("reuse_resources", "use_double_scratch_buffer"):
        get_field(doc, key, bool, "plan", False)


def _parse_gpu(g: Any, i: int, n: int) -> PlanGpu:
    where = f"gpus[{i}]"
    gid = natural_field(g, "id", where)
    if gid != i:
        fail("structure", f"{where}.id is {gid}: GPUs must be listed by rank from 0")
    chunks = {
        "i": natural_field(g, "input_chunks", where),
        "o": natural_field(g, "output_chunks", where),
        "s": natural_field(g, "scratch_chunks", where),
    }
    most = max_chunks()
    for key, count in zip(("input_chunks", "output_chunks", "scratch_chunks"), chunks.values()):
        if count > most:
            fail("limits", f"{where}.{key} is {count}, more than {most} (set "
                  "COLLSYNTH_MAX_CHUNKS to raise the limit)")  # fmt: skip
    channels: dict[str, list[PlanChannel]] = {t: [] for t in CHANNEL_TYPES}
    switches: list[tuple[str, tuple[int, ...]]] = []
    for k, ch in enumerate(get_field(g, "channels", list, where)):
        cw = f"{where}.channels[{k}]"
        t = get_field(ch, "channel_type", str, cw)
        if t == "switch":
            switches.extend(_parse_switch(ch, cw, i, n))
            continue
        if t not in CHANNEL_TYPES:
            fail("structure", f"{cw}: channel type {t!r} is not supported (memory, port, "
                  "switch)")  # fmt: skip
        for p in get_field(ch, "connected_to", list, cw):
            if not isinstance(p, int) or isinstance(p, bool) or not 0 <= p < n or p == i:
                fail("structure", f"{cw}: peer {p!r} is not another rank of the plan")
            ordinal = sum(1 for x in channels[t] if x.peer == p)
            channels[t].append(PlanChannel(t, p, ordinal))
    buffers = []
    for k, b in enumerate(get_field(g, "remote_buffers", list, where)):
        bw = f"{where}.remote_buffers[{k}]"
        r = natural_field(b, "rank", bw)
        bt = get_field(b, "type", str, bw)
        acc = get_field(b, "access_channel_types", list, bw)
        if not 0 <= r < n or r == i:
            fail("structure", f"{bw}: rank {r} is not another rank of the plan")
        if bt not in ("i", "o", "s"):
            fail("structure", f"{bw}: buffer type {bt!r} is not i, o or s")
        if not acc or any(a not in CHANNEL_TYPES for a in acc):
            fail("structure", f"{bw}: access_channel_types {acc!r} must list memory/port")
        buffers.append((r, bt, set(acc)))
    tbs = []
    for k, t in enumerate(get_field(g, "threadblocks", list, where)):
        tw = f"{where}.threadblocks[{k}]"
        tid = natural_field(t, "id", tw)
        if tid != k:
            fail("structure", f"{tw}.id is {tid}: thread blocks must be numbered from 0")
        ops = get_field(t, "ops", list, tw)
        if len(ops) > MAX_OPS:
            fail("limits", f"{tw} has {len(ops)} operations, more than {MAX_OPS}")
        chans: dict[str, list[int]] = {}
        for e in get_field(t, "channels", list, tw):
            ct = get_field(e, "channel_type", str, f"{tw}.channels")
            ids = get_field(e, "channel_ids", list, f"{tw}.channels")
            chans.setdefault(ct, []).extend(ids)
        bufs: dict[str, list[int]] = {}
        for e in get_field(t, "remote_buffer_refs", list, tw, []):
            ct = get_field(e, "access_channel_type", str, f"{tw}.remote_buffer_refs")
            ids = get_field(e, "remote_buffer_ids", list, f"{tw}.remote_buffer_refs")
            bufs.setdefault(ct, []).extend(ids)
        for ct, ids in chans.items():
            if len(ids) > MAX_CHANNELS:
                fail("limits", f"{tw} uses {len(ids)} {ct} channels, more than {MAX_CHANNELS}")
            have = len(switches) if ct == "switch" else len(channels.get(ct, []))
            for x in ids:
                if not isinstance(x, int) or not 0 <= x < have:
                    fail("references", f"{tw}: {ct} channel {x!r} is not declared by the GPU")
        for ct, ids in bufs.items():
            if len(ids) > MAX_BUFFERS:
                fail("limits", f"{tw} uses {len(ids)} {ct} remote buffers, more than "
                      f"{MAX_BUFFERS}")  # fmt: skip
            for x in ids:
                if not isinstance(x, int) or not 0 <= x < len(buffers):
                    fail("references", f"{tw}: remote buffer {x!r} is not declared by the GPU")
                if ct not in buffers[x][2]:
                    fail("references", f"{tw}: remote buffer {x} may not be accessed over "
                          f"{ct} channels")  # fmt: skip
        tbs.append(PlanThreadBlock(i, k, ops, chans, bufs))
    return PlanGpu(i, chunks, channels, buffers, tbs, switches)


def _parse_switch(ch: dict, cw: str, i: int, n: int) -> list[tuple[str, tuple[int, ...]]]:
    """A switch channel declaration: one GPU-level switch channel per rank group."""
    bt = get_field(ch, "buffer_type", str, cw)
    if bt not in ("i", "o", "s"):
        fail("structure", f"{cw}: buffer type {bt!r} is not i, o or s")
    out = []
    for k, grp in enumerate(get_field(ch, "rank_groups", list, cw)):
        gw = f"{cw}.rank_groups[{k}]"
        ranks = get_field(grp, "ranks", list, gw)
        if any(not isinstance(r, int) or isinstance(r, bool) or not 0 <= r < n for r in ranks):
            fail("structure", f"{gw}: ranks {ranks!r} are not ranks of the plan")
        if len(set(ranks)) != len(ranks) or i not in ranks:
            fail("structure", f"{gw}: ranks {ranks!r} repeat a rank or leave out rank {i}")
        if natural_field(grp, "size", gw) != len(ranks):
            fail("structure", f"{gw}: size is not the number of ranks")
        out.append((bt, tuple(ranks)))
    return out


def _pair_switches(gpus: list[PlanGpu]) -> None:
    """Every member of a switch channel's rank group declares the same channel (the multicast
    object is made by all of them together)."""
    for g in gpus:
        for bt, ranks in g.switches:
            for m in ranks:
                if (bt, ranks) not in gpus[m].switches:
                    fail("channels", f"gpus[{g.id}]: switch channel over ranks {list(ranks)} "
                          f"(buffer {bt}) is not declared by rank {m}")  # fmt: skip


def _chunks_per_rank(coll: str, gpus: list[PlanGpu], n: int) -> int:
    """The collective's chunks per rank, from the first GPU's counts (every GPU must agree)."""
    ic, oc = gpus[0].chunks["i"], gpus[0].chunks["o"]
    most = max_chunks()
    if n * max(ic, oc) > most:
        fail("limits", f"{n} GPUs of {max(ic, oc)} chunks each hold more than {most} chunks "
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
        fail("structure", f"gpus[0]: input_chunks {ic} and output_chunks {oc} do not fit a "
              f"{coll} of {n} ranks")  # fmt: skip
    for g in gpus[1:]:
        if (g.chunks["i"], g.chunks["o"]) != (ic, oc):
            fail("structure", f"gpus[{g.id}]: chunk counts differ from gpus[0]'s")
    return c


def _pair_channels(gpus: list[PlanGpu]) -> None:
    for g in gpus:
        for t, chans in g.channels.items():
            for ch in chans:
                back = [x for x in gpus[ch.peer].channels[t] if x.peer == g.id]
                if ch.ordinal >= len(back):
                    fail("channels", f"gpus[{g.id}]: {t} channel #{ch.ordinal} toward rank "
                          f"{ch.peer} has no partner (rank {ch.peer} declares {len(back)} "
                          f"toward rank {g.id})")  # fmt: skip


def _check_refs(tb: PlanThreadBlock, gpus: list[PlanGpu]) -> None:
    for i, op in enumerate(tb.ops):
        where = tb.where(i)
        name = get_field(op, "name", str, where)
        if name not in KNOWN_OPS:
            fail("operations", f"{where}: operation {name!r} is not one this checker can vouch "
                  f"for ({', '.join(sorted(KNOWN_OPS))})")  # fmt: skip
        for key in ("channel_ids", "src_buff", "dst_buff"):
            if len(get_field(op, key, list, where, [])) > MAX_OP_REFS:
                fail("limits", f"{where}: more than {MAX_OP_REFS} {key}")


__all__ = [
    "CHANNEL_TYPES",
    "COLLECTIVES",
    "KNOWN_OPS",
    "MAX_BUFFERS",
    "MAX_CHANNELS",
    "MAX_OPS",
    "MAX_OP_REFS",
    "PlanCheckError",
    "PlanCheckReport",
    "check_mscclpp_plan",
]
