"""The ``dependency``, ``pairing`` and ``dependency-cycle`` rules of the MSCCL XML checker.

The cycle search is a depth-first search of its own (not :mod:`collsynth.schedule.dag`): it
reports the steps along the cycle it finds, and the checker shares no code with the exporter."""

from __future__ import annotations

from .msccl_check_model import STEP_TYPES, GpuTable, XmlStep, XmlThreadBlock, fail


def check_dependencies(gpus: GpuTable, ngpus: int) -> None:
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
                        fail("dependency", f"{st.where()}: a nop without a dependency")
                    pending.append((st.depid, st.deps))
                    continue
                if pending and st.depid < 0:
                    fail(
                        "dependency",
                        f"{st.where()}: follows a chain of nops but has no dependency of its own",
                    )
                st.waits = pending + ([(st.depid, st.deps)] if st.depid >= 0 else [])
                pending = []
            if pending:
                fail("dependency", f"gpu {g} tb {tb.id}: ends with nops")


def _check_dep_target(st: XmlStep, g: int, tb: XmlThreadBlock, tbl: list[XmlThreadBlock]) -> None:
    """``depid``/``deps`` name a non-nop step with ``hasdep="1"`` of another thread block."""
    if not 0 <= st.depid < len(tbl):
        fail("dependency", f"{st.where()}: depid={st.depid} is not a thread block of gpu {g}")
    if st.depid == tb.id:
        fail("dependency", f"{st.where()}: depends on its own thread block")
    target = tbl[st.depid]
    if not 0 <= st.deps < len(target.steps):
        fail("dependency", f"{st.where()}: deps={st.deps} is not a step of gpu {g} tb {st.depid}")
    t = target.steps[st.deps]
    if t.type == "nop":
        fail(
            "dependency",
            f"{st.where()}: depends on {t.where()}, a nop, which never publishes completion",
        )
    if t.hasdep != 1:
        fail(
            "dependency",
            f"{st.where()}: depends on {t.where()}, which has "
            f'hasdep="0" (its completion is never published)',
        )


def transfers_by_connection(gpus: GpuTable, ngpus: int) -> tuple[dict, dict]:
    """Sending and receiving steps per (sender, receiver, channel), in order."""
    sends: dict = {}
    recvs: dict = {}
    for g in range(ngpus):
        for tb in gpus[g][1]:
            for st in tb.steps:
                s_, r_, *_ = STEP_TYPES[st.type]
                if s_:
                    sends.setdefault((g, tb.send, tb.chan), []).append(st)
                if r_:
                    recvs.setdefault((tb.recv, g, tb.chan), []).append(st)
    return sends, recvs


def check_pairing(sends: dict, recvs: dict) -> int:
    """Sends and receives agree in number and ``cnt`` per connection; the transfer count."""
    transfers = 0
    for key in sorted(set(sends) | set(recvs)):
        a, b, ch = key
        ss, rr = sends.get(key, []), recvs.get(key, [])
        for i, (x, y) in enumerate(zip(ss, rr)):
            if x.cnt != y.cnt:
                fail(
                    "pairing",
                    f"transfer {i} from gpu {a} to gpu {b} on channel {ch}: "
                    f"{x.where()} sends cnt={x.cnt} but {y.where()} receives "
                    f"cnt={y.cnt}",
                )
        if len(ss) != len(rr):
            extra = (ss if len(ss) > len(rr) else rr)[min(len(ss), len(rr))]
            fail(
                "pairing",
                f"gpu {a} sends {len(ss)} time(s) to gpu {b} on channel {ch} but "
                f"gpu {b} receives {len(rr)} time(s); first unmatched: "
                f"{extra.where()}",
            )
        transfers += len(ss)
    return transfers


def merge_clock(vc: list, other: list) -> None:
    """``vc`` becomes the element-wise maximum of ``vc`` and ``other``."""
    for k, v in enumerate(other):
        if v > vc[k]:
            vc[k] = v


def check_cycles(gpus: GpuTable, ngpus: int, sends: dict, recvs: dict) -> None:
    """Cycles in: previous step in the thread block, dependencies, the i-th send -> i-th recv."""
    node_id: dict = {}
    nodes: list[XmlStep] = []
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
                    fail(
                        "dependency-cycle",
                        f"{desc}{' ...' if len(cyc) > 6 else ''} (waits form a cycle)",
                    )
            else:
                color[v] = 2
                path.pop()
                stack.pop()
