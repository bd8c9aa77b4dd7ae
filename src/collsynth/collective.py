"""Collectives: chunking, precondition and postcondition.

A collective over ``n`` ranks (the topology's compute nodes, in node order) splits its data
into numbered *chunks* and says

* **precondition** — which rank holds which chunk at the start. For reductions every rank holds
  its own *contribution* to every chunk;
* **postcondition** — which rank must end with which chunk. For reductions the result must
  combine the contributions of every rank, each exactly once.

Chunk layout (``C`` = chunks per rank, ``n`` = ranks):

=============== ============== ============================== ==================================
collective      chunks         initial holder of chunk ``c``  who must end with chunk ``c``
=============== ============== ============================== ==================================
allgather       n*C            rank c // C                    every rank
reducescatter   n*C            every rank (contribution)      rank c // C (full reduction)
allreduce       n*C            every rank (contribution)      every rank (full reduction)
broadcast       C              root                           every rank
reduce          C              every rank (contribution)      root (full reduction)
alltoall        n*n*C          rank (c // C) // n             rank (c // C) % n
gather          n*C            rank c // C                    root
scatter         n*C            root                           rank c // C
custom          given          given source                   given destinations
=============== ============== ============================== ==================================

Sizes follow the nccl-tests convention: ``size`` is the whole gathered/reduced array (allgather:
the output buffer; reducescatter: the input buffer; alltoall: one rank's send buffer; broadcast
and reduce: the buffer). :meth:`Collective.chunk_bytes` turns a size into bytes per chunk.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from functools import cached_property
from typing import Any

import numpy as np

from .errors import CollsynthError


class CollKind(str, Enum):
    ALLGATHER = "allgather"
    REDUCESCATTER = "reducescatter"
    ALLREDUCE = "allreduce"
    BROADCAST = "broadcast"
    REDUCE = "reduce"
    ALLTOALL = "alltoall"
    GATHER = "gather"
    SCATTER = "scatter"
    CUSTOM = "custom"


_ALIASES = {
    "ag": CollKind.ALLGATHER,
    "all_gather": CollKind.ALLGATHER,
    "rs": CollKind.REDUCESCATTER,
    "reduce_scatter": CollKind.REDUCESCATTER,
    "ar": CollKind.ALLREDUCE,
    "all_reduce": CollKind.ALLREDUCE,
    "bcast": CollKind.BROADCAST,
    "a2a": CollKind.ALLTOALL,
    "all_to_all": CollKind.ALLTOALL,
}

ROOTED = {CollKind.BROADCAST, CollKind.REDUCE, CollKind.GATHER, CollKind.SCATTER}
REDUCING = {CollKind.REDUCESCATTER, CollKind.ALLREDUCE, CollKind.REDUCE}


def parse_kind(name: Any) -> CollKind:
    key = str(name).strip().lower().replace("-", "_")
    if key in _ALIASES:
        return _ALIASES[key]
    try:
        return CollKind(key.replace("_", ""))
    except ValueError:
        known = ", ".join(k.value for k in CollKind)
        raise CollsynthError(f"unknown collective {name!r} (known: {known})") from None


#: Most chunks one collective may have (``COLLSYNTH_MAX_CHUNKS``): checked before any work.
MAX_CHUNKS = 1 << 22


def max_chunks() -> int:
    """The chunk limit in force (``COLLSYNTH_MAX_CHUNKS`` or :data:`MAX_CHUNKS`)."""
    from .files import env_limit

    return env_limit("COLLSYNTH_MAX_CHUNKS", MAX_CHUNKS)


@dataclass(frozen=True)
class Collective:
    """A collective on ``num_ranks`` ranks with ``chunks_per_rank`` chunks per rank.

    For ``custom`` collectives, ``custom_chunks`` lists ``(source rank, destination ranks)``
    per chunk and ``chunks_per_rank`` is ignored.
    """

    kind: CollKind
    num_ranks: int
    chunks_per_rank: int = 1
    root: int | None = None
    custom_chunks: tuple[tuple[int, tuple[int, ...]], ...] = field(default=(), repr=False)

    def __post_init__(self) -> None:
        n = self.num_ranks
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 2:
            raise CollsynthError(f"a collective needs at least 2 ranks, got {n!r}")
        c = self.chunks_per_rank
        if isinstance(c, bool) or not isinstance(c, (int, np.integer)) or c < 1:
            raise CollsynthError(f"chunks per rank must be a positive integer, got {c!r}")
        if self.kind in ROOTED:
            r = self.root
            if isinstance(r, bool) or not isinstance(r, (int, np.integer)) or not 0 <= r < n:
                raise CollsynthError(f"{self.kind.value} root {r!r} is not a rank in 0..{n - 1}")
        elif self.root is not None:
            raise CollsynthError(f"{self.kind.value} takes no root")
        if self.kind is CollKind.CUSTOM:
            if not self.custom_chunks:
                raise CollsynthError("custom collective has no chunks")
            for i, (s, dsts) in enumerate(self.custom_chunks):
                if not 0 <= s < n:
                    raise CollsynthError(f"custom chunk {i}: source {s} is not a rank")
                if not dsts:
                    raise CollsynthError(f"custom chunk {i}: no destinations")
                for d in dsts:
                    if not 0 <= d < n:
                        raise CollsynthError(f"custom chunk {i}: destination {d} is not a rank")
        elif self.custom_chunks:
            raise CollsynthError(f"{self.kind.value} takes no custom chunk list")
        limit = max_chunks()
        if self.num_chunks > limit:
            raise CollsynthError(
                f"{self.describe()} has {self.num_chunks} chunks, more than "
                f"{limit} (set COLLSYNTH_MAX_CHUNKS to raise the limit)"
            )

    # ------------------------------------------------------------------ constructors
    @classmethod
    def make(
        cls, kind: Any, num_ranks: int, chunks_per_rank: int = 1, root: int | None = None
    ) -> Collective:
        k = kind if isinstance(kind, CollKind) else parse_kind(kind)
        if k is CollKind.CUSTOM:
            raise CollsynthError("a custom collective needs a demand matrix or chunk list")
        if k in ROOTED and root is None:
            root = 0
        return cls(k, int(num_ranks), int(chunks_per_rank), root)

    @classmethod
    def custom(cls, num_ranks: int, chunks: Iterable[tuple[int, Iterable[int]]]) -> Collective:
        """A custom collective: each entry is one chunk ``(source, destinations)`` (multicast)."""
        n = int(num_ranks)
        limit = max_chunks()
        items = []
        for i, entry in enumerate(chunks):
            if i >= limit:  # refused before the rest is read
                raise CollsynthError(
                    f"custom collective has more than {limit} chunks (set "
                    f"COLLSYNTH_MAX_CHUNKS to raise the limit)"
                )
            try:
                s, dsts = entry
                s = _as_rank(s, f"custom chunk {i} source")
                d = tuple(sorted({_as_rank(x, f"custom chunk {i} destination") for x in dsts}))
            except (TypeError, ValueError):
                raise CollsynthError(
                    f"custom chunk {i} must be [source, [destinations...]]"
                ) from None
            if not 0 <= s < n:
                raise CollsynthError(f"custom chunk {i}: source {s} is not a rank")
            bad = [x for x in d if not 0 <= x < n]
            if bad:
                raise CollsynthError(f"custom chunk {i}: destination {bad[0]} is not a rank")
            d = tuple(x for x in d if x != s)
            items.append((s, d))
        return cls(CollKind.CUSTOM, int(num_ranks), 1, None, tuple(items))

    @classmethod
    def from_demand_matrix(
        cls, matrix: Sequence[Sequence[int]], num_ranks: int | None = None
    ) -> Collective:
        """A custom collective where ``matrix[s][d]`` distinct chunks go from rank s to rank d.

        ``num_ranks`` (a topology's): the matrix must be that many rows and columns. The
        matrix's shape and its total against :func:`max_chunks` are checked before any chunk
        is listed."""
        try:
            m = np.asarray(matrix)
        except Exception:
            raise CollsynthError("demand matrix must be a square matrix of integers") from None
        if m.ndim != 2 or m.shape[0] != m.shape[1] or m.shape[0] < 2:
            raise CollsynthError("demand matrix must be square with at least 2 ranks")
        if num_ranks is not None and m.shape[0] != num_ranks:
            raise CollsynthError(
                f"demand matrix is not {num_ranks}x{num_ranks} (it is {m.shape[0]}x{m.shape[0]})"
            )
        if not np.issubdtype(m.dtype, np.integer):
            if (
                not np.issubdtype(m.dtype, np.floating)
                or not np.all(np.isfinite(m))
                or not np.all(m == np.round(m))
            ):
                raise CollsynthError("demand matrix entries must be non-negative integers")
        if np.any(m < 0):
            raise CollsynthError("demand matrix entries must be non-negative integers")
        n = m.shape[0]
        m = m * ~np.eye(n, dtype=bool)  # the diagonal asks for nothing
        limit = max_chunks()
        if np.any(m > limit) or m.sum() > limit:
            raise CollsynthError(
                f"demand matrix asks for more than {limit} chunks (set COLLSYNTH_MAX_CHUNKS "
                f"to raise the limit)"
            )
        m = m.astype(np.int64)
        chunks = []
        for s in range(n):
            for d in range(n):
                if s != d:
                    chunks.extend([(s, (d,))] * int(m[s, d]))
        if not chunks:
            raise CollsynthError("demand matrix asks for no transfer")
        return cls(CollKind.CUSTOM, n, 1, None, tuple(chunks))

    def with_chunks(self, chunks_per_rank: int) -> Collective:
        """The same collective with a different number of chunks per rank."""
        if self.kind is CollKind.CUSTOM:
            raise CollsynthError("a custom collective has a fixed chunk list")
        return Collective(self.kind, self.num_ranks, int(chunks_per_rank), self.root)

    # ------------------------------------------------------------------ facts
    @property
    def name(self) -> str:
        return self.kind.value

    @property
    def reduces(self) -> bool:
        return self.kind in REDUCING

    @property
    def rooted(self) -> bool:
        return self.kind in ROOTED

    @cached_property
    def num_chunks(self) -> int:
        n, c = self.num_ranks, self.chunks_per_rank
        k = self.kind
        if k is CollKind.CUSTOM:
            return len(self.custom_chunks)
        if k in (CollKind.BROADCAST, CollKind.REDUCE):
            return c
        if k is CollKind.ALLTOALL:
            return n * n * c
        return n * c

    @property
    def size_units(self) -> int:
        """How many chunks make up ``size`` bytes (nccl-tests convention)."""
        if self.kind is CollKind.ALLTOALL:
            return self.num_ranks * self.chunks_per_rank
        return self.num_chunks

    def chunk_bytes(self, size: float) -> float:
        return float(size) / self.size_units

    @property
    def busbw_factor(self) -> float:
        """nccl-tests bus-bandwidth factor: busbw = algbw * factor."""
        n = self.num_ranks
        if self.kind is CollKind.ALLREDUCE:
            return 2.0 * (n - 1) / n
        if self.kind in (
            CollKind.REDUCESCATTER,
            CollKind.ALLGATHER,
            CollKind.ALLTOALL,
            CollKind.GATHER,
            CollKind.SCATTER,
        ):
            return (n - 1) / n
        return 1.0

    @cached_property
    def chunk_source(self) -> np.ndarray:
        """Initial holder of each chunk; ``-1`` for reductions (every rank holds a contribution)."""
        n, c, k = self.num_ranks, self.chunks_per_rank, self.kind
        ids = np.arange(self.num_chunks, dtype=np.int64)
        if k in REDUCING:
            return np.full(self.num_chunks, -1, dtype=np.int64)
        if k in (CollKind.ALLGATHER, CollKind.GATHER):
            return ids // c
        if k in (CollKind.BROADCAST, CollKind.SCATTER):
            return np.full(self.num_chunks, self.root, dtype=np.int64)
        if k is CollKind.ALLTOALL:
            return (ids // c) // n
        return np.array([s for s, _ in self.custom_chunks], dtype=np.int64)

    def destinations(self, chunk: int) -> tuple[int, ...]:
        """Ranks that must end with ``chunk`` (for reductions: with the full reduction)."""
        n, c, k = self.num_ranks, self.chunks_per_rank, self.kind
        if not 0 <= chunk < self.num_chunks:
            raise CollsynthError(f"chunk {chunk} does not exist in {self.describe()}")
        if k in (CollKind.ALLGATHER, CollKind.ALLREDUCE, CollKind.BROADCAST):
            return tuple(range(n))
        if k in (CollKind.REDUCESCATTER, CollKind.SCATTER):
            return (chunk // c,)
        if k in (CollKind.REDUCE, CollKind.GATHER):
            assert self.root is not None  # __post_init__ requires a root for rooted kinds
            return (int(self.root),)
        if k is CollKind.ALLTOALL:
            return ((chunk // c) % n,)
        s, dsts = self.custom_chunks[chunk]
        return tuple(sorted(set(dsts) | {s}))

    def postcondition(self) -> tuple[np.ndarray, np.ndarray]:
        """Arrays ``(ranks, chunks)``: rank ``ranks[i]`` must end holding ``chunks[i]``."""
        n, k = self.num_ranks, self.kind
        m = self.num_chunks
        if k in (CollKind.ALLGATHER, CollKind.ALLREDUCE, CollKind.BROADCAST):
            ranks = np.repeat(np.arange(n, dtype=np.int64), m)
            chunks = np.tile(np.arange(m, dtype=np.int64), n)
            return ranks, chunks
        chunk_list: list[int] = []
        rank_list: list[int] = []
        for ch in range(m):
            for r in self.destinations(ch):
                rank_list.append(r)
                chunk_list.append(ch)
        return np.array(rank_list, dtype=np.int64), np.array(chunk_list, dtype=np.int64)

    @property
    def full_mask(self) -> int:
        """Bit mask with one bit per rank: the contribution set of a complete reduction."""
        return (1 << self.num_ranks) - 1

    def describe(self) -> str:
        extra = f", root={self.root}" if self.rooted else ""
        if self.kind is CollKind.CUSTOM:
            return f"custom({self.num_ranks} ranks, {self.num_chunks} chunks)"
        per_rank = f"{self.chunks_per_rank} chunk(s)/rank"
        return f"{self.kind.value}({self.num_ranks} ranks, {per_rank}{extra})"

    # ------------------------------------------------------------------ serialisation
    def to_dict(self) -> dict:
        d: dict[str, Any] = {
            "kind": self.kind.value,
            "ranks": self.num_ranks,
            "chunks_per_rank": self.chunks_per_rank,
        }
        if self.rooted:
            d["root"] = self.root
        if self.kind is CollKind.CUSTOM:
            d["chunks"] = [[s, list(ds)] for s, ds in self.custom_chunks]
            del d["chunks_per_rank"]
        return d

    @classmethod
    def from_dict(cls, data: Any, source: str = "collective") -> Collective:
        if not isinstance(data, dict):
            raise CollsynthError(f"{source}: collective must be an object")
        allowed = {"kind", "ranks", "chunks_per_rank", "root", "chunks", "demand"}
        bad = set(data) - allowed
        if bad:
            first = sorted(bad, key=str)[0]  # YAML keys need not be strings
            raise CollsynthError(f"{source}: collective has unknown key {first!r}")
        if "kind" not in data or "ranks" not in data:
            raise CollsynthError(f"{source}: collective needs 'kind' and 'ranks'")
        kind = parse_kind(data["kind"])
        n = data["ranks"]
        if isinstance(n, bool) or not isinstance(n, int):
            raise CollsynthError(f"{source}: collective ranks must be an integer")
        if kind is CollKind.CUSTOM:
            if data.get("chunks_per_rank", 1) != 1 or "root" in data:
                raise CollsynthError(
                    f"{source}: a custom collective takes neither "
                    f"chunks_per_rank nor root (list its chunks instead)"
                )
            if "demand" in data:
                try:
                    return cls.from_demand_matrix(data["demand"], n)
                except CollsynthError as e:
                    raise CollsynthError(f"{source}: {e}") from None
            chunks = data.get("chunks")
            if not isinstance(chunks, list):
                raise CollsynthError(f"{source}: custom collective needs a 'chunks' list")
            try:
                return cls.custom(n, chunks)
            except CollsynthError as e:
                raise CollsynthError(f"{source}: {e}") from None
        cpr = data.get("chunks_per_rank", 1)
        if isinstance(cpr, bool) or not isinstance(cpr, int):
            raise CollsynthError(f"{source}: chunks_per_rank must be an integer")
        root = data.get("root")
        if root is not None and (isinstance(root, bool) or not isinstance(root, int)):
            raise CollsynthError(f"{source}: root must be an integer rank")
        return cls.make(kind, n, cpr, root)


def _as_rank(x: Any, what: str) -> int:
    if isinstance(x, bool) or not isinstance(x, (int, np.integer)):
        raise CollsynthError(f"{what} {x!r} is not a rank number")
    return int(x)
