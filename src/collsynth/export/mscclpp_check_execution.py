"""The MSCCL++ plan checker's execution: every thread block runs in order with symbolic values,
signals and waits pair per channel, vector clocks per block and epoch find races, and the end
state must be the collective's result (rules 3 and 4 of :mod:`collsynth.export.mscclpp_check`)."""

from __future__ import annotations

from typing import Any

from .mscclpp_check_model import (
    PlanChannel,
    PlanGpu,
    PlanThreadBlock,
    fail,
    get_field,
    natural_field,
)


class PlanExecution:
    """Symbolic execution with semaphores and happens-before tracking."""

    def __init__(self, coll: str, gpus: list[PlanGpu], n: int, c: int, inplace: bool, root: int):
        self.coll, self.gpus, self.n, self.chunks_per_rank = coll, gpus, n, c
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
        n, c = self.n, self.chunks_per_rank
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
        n, c = self.n, self.chunks_per_rank
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
                fail("postcondition", f"rank {r} ends with {_show(got)} in {slot[0]}[{slot[1]}]"
                      f", not {_show(want)}")  # fmt: skip

    # -- running
    def run(self, tbs: list[PlanThreadBlock]) -> int:
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
                fail("deadlock", f"{len(live)} thread block(s) can never finish: {stuck}")
        left = [(k, q) for k, q in self.sems.items() if q]
        if left:
            (t, a, b, k), q = left[0]
            fail("pairing", f"{len(q)} signal(s) from rank {a} to rank {b} on {t} channel "
                  f"#{k} are never waited for")  # fmt: skip
        return transfers

    def _step(self, tb: PlanThreadBlock) -> tuple[bool, int]:
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
            if get_field(op, "channel_type", str, where) != "port":
                fail("operations", f"{where}: {name} is a port-channel operation")
            self._signal(tb, op, where, tb.epoch)
        return True, 1

    def _channels(self, tb: PlanThreadBlock, op: dict, where: str) -> list[PlanChannel]:
        ct = get_field(op, "channel_type", str, where)
        ids = get_field(op, "channel_ids", list, where)
        local = tb.channels.get(ct, [])
        out = []
        for x in ids:
            if not isinstance(x, int) or not 0 <= x < len(local):
                fail("references", f"{where}: {ct} channel {x!r} is not in the block's list")
            out.append(self.gpus[tb.gpu].channels[ct][local[x]])
        if not out:
            fail("references", f"{where}: no channel_ids")
        return out

    def _signal(self, tb: PlanThreadBlock, op: dict, where: str, upto: int) -> None:
        clock = dict(tb.clock)
        clock[tb.key] = max(clock.get(tb.key, -1), upto)
        for ch in self._channels(tb, op, where):
            self.sems.setdefault((ch.ctype, tb.gpu, ch.peer, ch.ordinal), []).append(clock)
            self.signals += 1

    def _locals(
        self, tb: PlanThreadBlock, op: dict, key: str, where: str, count: int | None = None
    ):
        refs = get_field(op, key, list, where)
        if count is not None and len(refs) != count:
            fail("operations", f"{where}: {key} must hold {count} reference(s)")
        return [self._slot(tb.gpu, ref, f"{where}.{key}", local=True) for ref in refs]

    def _slot(self, gpu: int, ref: Any, where: str, local: bool) -> tuple[int, str, int, int]:
        if local:
            bt = get_field(ref, "type", str, where)
            if bt not in ("i", "o", "s"):
                fail("references", f"{where}: buffer type {bt!r} is not i, o or s")
        else:
            bt = ref[1]
            gpu = ref[0]
            ref = ref[2]
        idx = natural_field(ref, "index", where)
        size = natural_field(ref, "size", where)
        count = self.gpus[gpu].chunks[bt]
        if size < 1 or idx + size > count:
            fail("references", f"{where}: chunks {idx}..{idx + size - 1} are outside rank "
                  f"{gpu}'s {bt} buffer of {count} chunk(s)")  # fmt: skip
        return (gpu, bt, idx, size)

    def _put(self, tb: PlanThreadBlock, op: dict, where: str) -> None:
        chans = self._channels(tb, op, where)
        ct = chans[0].ctype
        srcs = self._locals(tb, op, "src_buff", where)
        dsts = get_field(op, "dst_buff", list, where)
        if len(srcs) != len(dsts):
            fail("operations", f"{where}: {len(srcs)} sources for {len(dsts)} destinations")
        refs = tb.buffers.get(ct, [])
        for k, (src, d) in enumerate(zip(srcs, dsts)):
            b = natural_field(d, "buffer_id", f"{where}.dst_buff[{k}]")
            if not 0 <= b < len(refs):
                fail("references", f"{where}: buffer_id {b} is not in the block's {ct} "
                      "remote buffers")  # fmt: skip
            rank, bt, _ = self.gpus[tb.gpu].buffers[refs[b]]
            peer = chans[min(k, len(chans) - 1)].peer
            if rank != peer:
                fail("references", f"{where}: writes rank {rank}'s buffer over a channel to "
                      f"rank {peer}")  # fmt: skip
            dst = self._slot(tb.gpu, (rank, bt, d), f"{where}.dst_buff[{k}]", local=False)
            self._move(tb, src, dst, where)

    def _move(self, tb: PlanThreadBlock, src, dst, where: str) -> None:
        if src[3] != dst[3]:
            fail("operations", f"{where}: source and destination sizes differ")
        for j in range(src[3]):
            s = (src[0], src[1], src[2] + j)
            d = (dst[0], dst[1], dst[2] + j)
            val = self._read(tb, s, where)
            self._write(tb, d, val, where)

    def _reduce(self, tb: PlanThreadBlock, srcs, dst, op: dict, where: str) -> None:
        self._reduction(op, where)
        for j in range(dst[3]):
            val = self._sum(tb, [(s[0], s[1], s[2] + j) for s in srcs], where)
            self._write(tb, (dst[0], dst[1], dst[2] + j), val, where)

    def _reduction(self, op: dict, where: str) -> None:
        if op.get("reduce_op", "sum") != "sum":
            fail("operations", f"{where}: reduce_op {op.get('reduce_op')!r} (sum only)")
        if not self.reduces:
            fail("operations", f"{where}: a reduction in a {self.coll} plan")

    def _sum(self, tb: PlanThreadBlock, locs: list, where: str) -> tuple:
        vals = [self._read(tb, loc, where) for loc in locs]
        chunk = vals[0][1]
        seen: frozenset = frozenset()
        for v in vals:
            if v[0] != "sum" or v[1] != chunk:
                fail("values", f"{where}: adds {_show(v)} to chunk {chunk}")
            if seen & v[2]:
                fail("values", f"{where}: counts rank(s) {sorted(seen & v[2])} twice in "
                      f"chunk {chunk}")  # fmt: skip
            seen = seen | v[2]
        return ("sum", chunk, seen)

    def _glres(self, tb: PlanThreadBlock, op: dict, where: str) -> None:
        """Multimem load-reduce-store: the sum over the group's ranks, stored at every one."""
        if get_field(op, "channel_type", str, where) != "switch":
            fail("operations", f"{where}: glres runs over a switch channel")
        self._reduction(op, where)
        (src,) = self._switch_refs(tb, op, "src_buff", where)
        (dst,) = self._switch_refs(tb, op, "dst_buff", where)
        if src[3] != dst[3] or src[4] != dst[4]:
            fail("operations", f"{where}: source and destination differ in size or ranks")
        for j in range(src[3]):
            val = self._sum(tb, [(m, src[0], src[2] + j) for m in src[4]], where)
            for m in dst[4]:
                self._write(tb, (m, dst[0], dst[2] + j), val, where)

    def _switch_refs(self, tb: PlanThreadBlock, op: dict, key: str, where: str) -> list[tuple]:
        """``(buffer type, -, first chunk, size, ranks)`` of each switch buffer reference."""
        refs = get_field(op, key, list, where)
        if len(refs) != 1:
            fail("operations", f"{where}: {key} must hold 1 reference(s)")
        out = []
        local = tb.channels.get("switch", [])
        for k, ref in enumerate(refs):
            rw = f"{where}.{key}[{k}]"
            x = natural_field(ref, "switch_channel_id", rw)
            if not 0 <= x < len(local):
                fail("references", f"{rw}: switch channel {x} is not in the block's list")
            bt, ranks = self.gpus[tb.gpu].switches[local[x]]
            for m in ranks:  # the same chunks of every member's buffer
                self._slot(m, (m, bt, ref), rw, local=False)
            out.append(
                (bt, -1, natural_field(ref, "index", rw), natural_field(ref, "size", rw), ranks)
            )
        return out

    # -- happens-before
    def _before(self, tb: PlanThreadBlock, ev: tuple[tuple[int, int], int, str]) -> bool:
        who, epoch, _ = ev
        if who == tb.key:
            return epoch < tb.epoch
        return tb.clock.get(who, -1) >= epoch

    def _read(self, tb: PlanThreadBlock, loc: tuple[int, str, int], where: str) -> Any:
        if loc not in self.mem:
            fail("values", f"{where}: reads {_loc(loc)} before anything was written there")
        w = self.last_write.get(loc)
        if w is not None and not self._before(tb, w):
            fail("race", f"{where}: reads {_loc(loc)} while {w[2]} may still be writing it "
                  "(no signal/wait or nop orders them)")  # fmt: skip
        self.reads.setdefault(loc, []).append((tb.key, tb.epoch, where))
        return self.mem[loc]

    def _write(self, tb: PlanThreadBlock, loc: tuple[int, str, int], val: Any, where: str) -> None:
        w = self.last_write.get(loc)
        if w is not None and not self._before(tb, w) and w[2] != where:
            fail("race", f"{where}: writes {_loc(loc)} while {w[2]} may still be writing it")
        for r in self.reads.get(loc, []):
            if r[2] != where and not self._before(tb, r):
                fail("race", f"{where}: writes {_loc(loc)} while {r[2]} may still be "
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
