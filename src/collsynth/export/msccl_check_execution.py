"""The MSCCL XML checker's symbolic execution: the ``deadlock``, ``data``, ``race`` and
``postcondition`` rules of :mod:`collsynth.export.check`."""

from __future__ import annotations

from .msccl_check_dependencies import merge_clock
from .msccl_check_model import STEP_TYPES, fail


class SymbolicExecution:
    """Symbolic execution. Values: ("d", chunk id) or ("r", chunk id, contribution bitmask)."""

    def __init__(self, gpus, ngpus, coll, nchunksperloop, inplace, root, fifo_slots):
        self.gpus, self.n, self.coll, self.nchunksperloop = gpus, ngpus, coll, nchunksperloop
        self.inplace, self.root, self.slots = inplace, root, max(1, int(fifo_slots))
        self.reduces = coll in ("reducescatter", "allreduce", "reduce")
        n = ngpus
        if coll in ("allgather", "reducescatter", "alltoall") and nchunksperloop % n:
            fail(
                "structure",
                f"nchunksperloop={nchunksperloop} is not a multiple of ngpus={n} for {coll}",
            )
        if coll in ("broadcast", "reduce") and not 0 <= root < n:
            fail("structure", f"root {root} is not a rank")
        per_rank = coll in ("allgather", "reducescatter", "alltoall")
        self.chunks_per_rank = nchunksperloop // n if per_rank else nchunksperloop
        self.mem = [dict() for _ in range(n)]
        self.expect = [dict() for _ in range(n)]  # (buf, off) -> value
        c = self.chunks_per_rank
        for r in range(n):
            mem, exp = self.mem[r], self.expect[r]
            if coll == "allgather":
                for j in range(c):
                    mem[("o" if inplace else "i", (r * c + j) if inplace else j)] = ("d", r * c + j)
                for k in range(nchunksperloop):
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
                for k in range(nchunksperloop):
                    mem[("i", k)] = ("r", k, 1 << r)
                if coll == "allreduce":
                    for k in range(nchunksperloop):
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

    def _happens_before(self, ident, vc) -> bool:
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
            if w is not None and w[3] and not self._happens_before(w, vc):
                fail(
                    "race",
                    f"{st.where()} reads {name} while {w[2]} may still be writing "
                    f"it (no dependency orders them)",
                )
            state["r"].append((ti, st.i, st.where()))
            return
        changed = self.mem[g].get(loc) != write
        if w is not None and not self._happens_before(w, vc) and (changed or red or w[4]):
            fail(
                "race", f"{st.where()} and {w[2]} both write {name} with no dependency between them"
            )
        if changed:
            for r in state["r"]:
                if r[:2] != me and not self._happens_before(r, vc):
                    fail(
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
            fail(
                "data",
                f"{st.where()} reads {buf}[{off}] on gpu {g}, which holds no data "
                f"yet (missing chunk or missing dependency)",
            )
        return v

    def _combine(self, st, a, b):
        if a[0] != "r" or b[0] != "r":
            fail("data", f"{st.where()} reduces in a non-reducing collective ({self.coll})")
        if a[1] != b[1]:
            fail(
                "data",
                f"{st.where()} combines {self._desc(a)} with {self._desc(b)} "
                f"(different chunks; sends and receives out of order?)",
            )
        if a[2] & b[2]:
            dup = [i for i in range(self.n) if (a[2] & b[2]) >> i & 1]
            fail(
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
                    sends, recvs, reads, writes, reduces = STEP_TYPES[st.type]
                    qin = fifo.setdefault((tb.recv, g, tb.chan), []) if recvs else None
                    qout = fifo.setdefault((g, tb.send, tb.chan), []) if sends else None
                    if recvs and not qin:
                        break
                    if qout is not None and len(qout) >= self.slots:
                        break
                    ti = tb_index[(g, tb.id)]
                    vc = vcs[ti]
                    for d, s_ in st.waits:
                        merge_clock(vc, done[(g, d, s_)])
                    if qin is not None:  # exactly when the step receives
                        merge_clock(vc, qin[0][1])
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
                if STEP_TYPES[st.type][1] and not fifo.get((tb.recv, g, tb.chan)):
                    why.append(f"data from gpu {tb.recv} chan {tb.chan}")
                if (
                    STEP_TYPES[st.type][0]
                    and len(fifo.get((g, tb.send, tb.chan), [])) >= self.slots
                ):
                    why.append(f"a free slot to gpu {tb.send} chan {tb.chan}")
                blocked.append(f"{st.where()} waits for {', '.join(why)}")
        fail(
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
                    fail(
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
                fail("pairing", f"{st.where()} receives {len(vals)} chunk(s), expected {cnt}")
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
                    fail(
                        "data",
                        f"{st.where()} writes {self._desc(v)} into "
                        f"{loc[0]}[{loc[1]}] of gpu {g}, where chunk {want[1]} "
                        f"belongs{hint}",
                    )
                self._access(g, loc, write=v, red=reduces)
                mem[loc] = v
        if sends:
            qout.append(list(vals))
