"""SyCCL's chunk allocation: per-dimension loads of a sketch and the exact min-max split of every
rank's data over the sketches (rational arithmetic), then rounded to multiples of 1/QUANT for
the IR. See :mod:`.algo` for the method as a whole.
"""

from __future__ import annotations

from fractions import Fraction

from ...collective import CollKind
from ...errors import CollsynthError

#: allocation fractions are rounded to multiples of 1 / QUANT
QUANT = 64


def sketch_loads(
    sketch: tuple[str, ...], sizes: dict[str, int], kind: CollKind = CollKind.ALLGATHER
) -> dict[str, int]:
    """Pieces each GPU receives per dimension for one unit of every rank's data.

    AllGather: a stage on groups of size g after stages of sizes g_1..g_k: ``(g-1) g_1..g_k``.
    AllToAll (unit: one block per source-destination pair): a stage on groups of size g moves,
    to each GPU, ``(g-1)/g`` of the ``N`` blocks it will hold, N = number of ranks.
    """
    loads = {d: 0 for d in sizes}
    if kind is CollKind.ALLTOALL:
        n = 1
        for d in sizes:
            n *= sizes[d]
        for d in sketch:
            loads[d] += n * (sizes[d] - 1) // sizes[d]
        return loads
    held = 1
    for d in sketch:
        loads[d] += (sizes[d] - 1) * held
        held *= sizes[d]
    return loads


def allocate(
    loads: list[dict[str, int]], caps: dict[str, Fraction]
) -> tuple[list[Fraction], Fraction]:
    """Exact min-max chunk allocation over two dimensions: (fractions per sketch, time/unit)."""
    dims = sorted(caps)
    if len(dims) != 2:
        raise CollsynthError("syccl: chunk allocation needs exactly two dimensions")
    d1, d2 = dims
    K = len(loads)

    def cost(t: list[Fraction]) -> Fraction:
        return max(sum(t[k] * loads[k][d] for k in range(K)) / caps[d] for d in dims)

    cands: list[list[Fraction]] = []
    for a in range(K):
        cands.append([Fraction(int(k == a)) for k in range(K)])
    for a in range(K):
        for b in range(a + 1, K):
            la, lb = loads[a], loads[b]
            den = Fraction(lb[d1] - la[d1]) / caps[d1] + Fraction(la[d2] - lb[d2]) / caps[d2]
            if den == 0:
                continue
            ta = (Fraction(lb[d1]) / caps[d1] - Fraction(lb[d2]) / caps[d2]) / den
            if 0 <= ta <= 1:
                t = [Fraction(0)] * K
                t[a], t[b] = ta, 1 - ta
                cands.append(t)
    best = min(cands, key=cost)  # min keeps the first of equal costs
    return best, cost(best)


def quantize(fracs: list[Fraction]) -> list[Fraction]:
    q = [f.limit_denominator(QUANT) for f in fracs]
    q[-1] = 1 - sum(q[:-1], Fraction(0))
    return q
