"""The MSCCL++ plan's building blocks: one rank's half of a transfer (:class:`Event`), a thread
block being emitted (:class:`BlockBuilder`: its operations, the ``nop`` s and ``signal`` s it
needs, its block-local channel and remote-buffer lists) and the GPU-level channels and remote
buffers of every rank (:class:`ChannelTable`)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field


@dataclass
class Event:
    """One rank's half of a transfer (or an initial copy), in ``L`` order."""

    pos: int  # position in L (-1: initial copy)
    kind: str  # "init", "send" or "recv"
    chunk: int
    op: int = -1
    peer: int = -1
    ctype: str = "memory"


@dataclass
class BlockBuilder:
    """One thread block being emitted."""

    group: int
    ops: list = field(default_factory=list)
    dirty: set = field(default_factory=set)  # slots written since the last nop
    channels: dict = field(default_factory=dict)  # ctype -> [gpu-level channel ids]
    buffers: dict = field(default_factory=dict)  # ctype -> [gpu-level remote buffer ids]

    unsignalled: list = field(default_factory=list)  # memory channels put to, not signalled

    def sync(self, *slots: tuple[str, int]) -> None:
        """A ``nop`` first if one of ``slots`` was written since the last one."""
        if any(s in self.dirty for s in slots):
            self.nop()

    def nop(self) -> None:
        if self.ops and self.ops[-1]["name"] != "nop":
            self.ops.append({"name": "nop"})
        self.dirty.clear()

    def signal(self) -> None:
        """Signal every memory channel put to since the last signal, after a ``nop`` (so the
        puts are complete): one ``signal`` per up to 8 distinct channels."""
        if not self.unsignalled:
            return
        self.nop()
        batch: list[int] = []
        for ch in self.unsignalled:
            if ch in batch or len(batch) == 8:
                self.ops.append({"name": "signal", "channel_ids": batch,
                                 "channel_type": "memory"})  # fmt: skip
                batch = []
            batch.append(ch)
        self.ops.append({"name": "signal", "channel_ids": batch, "channel_type": "memory"})
        self.unsignalled = []

    def local_channel(self, ctype: str, gpu_level: int) -> int:
        ids = self.channels.setdefault(ctype, [])
        if gpu_level not in ids:
            ids.append(gpu_level)
        return ids.index(gpu_level)

    def local_buffer(self, ctype: str, gpu_level: int) -> int:
        ids = self.buffers.setdefault(ctype, [])
        if gpu_level not in ids:
            ids.append(gpu_level)
        return ids.index(gpu_level)


class ChannelTable:
    """Channel pairs per (pair of ranks, group, type), and remote buffers per rank."""

    def __init__(self, n: int):
        self.n = n
        self.pairs: dict[tuple[int, int, str], set[int]] = defaultdict(set)  # (lo, hi, type)
        self._order: dict[int, dict[str, list[tuple[int, int]]]] | None = None
        self.bufs: list[dict[tuple[int, str], set[str]]] = [defaultdict(set) for _ in range(n)]

    def need(self, a: int, b: int, group: int, ctype: str) -> None:
        self.pairs[min(a, b), max(a, b), ctype].add(group)
        self._order = None

    def _declared_order(self) -> dict[int, dict[str, list[tuple[int, int]]]]:
        """Per rank and type: its channels as (peer, group), in GPU-level order (by peer,
        then group: the k-th channel toward a peer pairs with the peer's k-th toward it)."""
        if self._order is None:
            out: dict[int, dict[str, list[tuple[int, int]]]] = {
                r: defaultdict(list) for r in range(self.n)
            }
            for (lo, hi, ctype), groups in sorted(self.pairs.items()):
                for g in sorted(groups):
                    out[lo][ctype].append((hi, g))
                    out[hi][ctype].append((lo, g))
            for r in out:
                for ctype in out[r]:
                    out[r][ctype].sort()
            self._order = out
        return self._order

    def index(self, r: int, peer: int, group: int, ctype: str) -> int:
        return self._declared_order()[r][ctype].index((peer, group))

    def declared(self, r: int) -> list[dict]:
        order = self._declared_order()[r]
        return [{"channel_type": t, "connected_to": [p for p, _ in order[t]]}
                for t in sorted(order) if order[t]]  # fmt: skip

    def need_buffer(self, r: int, peer: int, btype: str, ctype: str) -> None:
        self.bufs[r][peer, btype].add(ctype)

    def buffer(self, r: int, peer: int, btype: str, ctype: str) -> int:
        """GPU-level id of ``peer``'s buffer ``btype`` in ``r``'s remote buffers (every
        buffer declared first with :meth:`need_buffer`)."""
        assert ctype in self.bufs[r][peer, btype]
        return sorted(self.bufs[r]).index((peer, btype))

    def remote_buffers(self, r: int) -> list[dict]:
        return [{"rank": p, "type": t, "access_channel_types": sorted(self.bufs[r][p, t])}
                for p, t in sorted(self.bufs[r])]  # fmt: skip


def slot_ref(slot: tuple[str, int]) -> dict:
    """A plan buffer reference to one chunk slot."""
    return {"type": slot[0], "index": int(slot[1]), "size": 1}
