"""Seeded input data, a computed reference result and the comparison used by ``--check``.

Copy collectives move raw bytes (uint8); reductions sum elements of ``dtype`` (float32 by
default; float64 and int32 are also accepted). Rank ``r``'s input is a pure function of
``(seed, r)``, so any rank can regenerate any other rank's input.
"""

from __future__ import annotations

import numpy as np

from ..collective import Collective
from ..errors import CollsynthError
from .plan import input_chunks, output_chunks

DTYPES = {"float32": np.float32, "float64": np.float64, "int32": np.int32}


def parse_dtype(name: str) -> np.dtype:
    key = str(name).strip().lower()
    if key not in DTYPES:
        raise CollsynthError(f"unknown --dtype {name!r} (known: {', '.join(DTYPES)})")
    return np.dtype(DTYPES[key])


def element_dtype(coll: Collective, dtype: np.dtype) -> np.dtype:
    """The element type the collective moves: ``dtype`` for reductions, bytes otherwise."""
    return np.dtype(dtype) if coll.reduces else np.dtype(np.uint8)


def make_input(
    coll: Collective, rank: int, chunk_bytes: int, dtype: np.dtype, seed: int
) -> np.ndarray:
    """Rank ``rank``'s input buffer (uint8 view), deterministic in ``(seed, rank)``."""
    nbytes = len(input_chunks(coll, rank)) * chunk_bytes
    rng = np.random.default_rng([int(seed) & 0xFFFFFFFF, int(rank)])
    et = element_dtype(coll, dtype)
    if et == np.uint8:
        return rng.integers(0, 256, nbytes, dtype=np.uint8)
    count = nbytes // et.itemsize
    if et.kind == "f":
        data = rng.standard_normal(count).astype(et)
    else:
        data = rng.integers(-(1 << 20), 1 << 20, count).astype(et)
    return data.view(np.uint8)


def computed_reference(
    coll: Collective, rank: int, chunk_bytes: int, dtype: np.dtype, seed: int
) -> np.ndarray:
    """Rank ``rank``'s expected output, computed from every rank's regenerated input."""
    n = coll.num_ranks
    outs = output_chunks(coll, rank)
    out = np.empty(len(outs) * chunk_bytes, dtype=np.uint8)
    if not outs:
        return out
    cb = chunk_bytes
    inputs = {r: make_input(coll, r, cb, dtype, seed) for r in range(n)}
    pos = {r: {ch: i for i, ch in enumerate(input_chunks(coll, r))} for r in range(n)}
    et = element_dtype(coll, dtype)
    for i, ch in enumerate(outs):
        if coll.reduces:
            acc = np.zeros(cb // et.itemsize, dtype=np.float64 if et.kind == "f" else et)
            for r in range(n):
                k = pos[r][ch]
                acc += inputs[r][k * cb : (k + 1) * cb].view(et)
            out[i * cb : (i + 1) * cb] = acc.astype(et).view(np.uint8)
        else:
            src = int(coll.chunk_source[ch])
            k = pos[src][ch]
            out[i * cb : (i + 1) * cb] = inputs[src][k * cb : (k + 1) * cb]
    return out


def compare(
    coll: Collective,
    rank: int,
    chunk_bytes: int,
    dtype: np.dtype,
    got: np.ndarray,
    want: np.ndarray,
) -> str | None:
    """``None`` when ``got`` matches ``want``, else a one-line description of the difference.

    Copies must match bit for bit; float reductions to ``allclose`` with ``rtol=1e-5`` and
    ``atol=4e-6 * ranks`` (the order of summation differs between engines; the inputs are
    standard normal), integer reductions exactly.
    """
    if got.shape != want.shape:
        return f"rank {rank}: output has {got.size} bytes, expected {want.size}"
    et = element_dtype(coll, dtype)
    outs = output_chunks(coll, rank)
    if et.kind == "f":
        g, w = got.view(et), want.view(et)
        bad = ~np.isclose(g, w, rtol=1e-5, atol=4e-6 * coll.num_ranks)
        if not bad.any():
            return None
        i = int(np.flatnonzero(bad)[0])
        byte = i * et.itemsize
        err = (
            np.nanmax(np.abs(g.astype(np.float64) - w.astype(np.float64)))
            if np.isfinite(g).all()
            else float("nan")
        )
        return (
            f"rank {rank}: output chunk {outs[byte // chunk_bytes]} differs at byte "
            f"{byte % chunk_bytes} (got {float(g[i]):.7g}, expected {float(w[i]):.7g}; "
            f"max error {err:.3g})"
        )
    diff = np.flatnonzero(got != want)
    if not len(diff):
        return None
    byte = int(diff[0])
    return (
        f"rank {rank}: output chunk {outs[byte // chunk_bytes]} differs at byte "
        f"{byte % chunk_bytes} ({len(diff)} byte(s) differ)"
    )


def count_wrong(coll: Collective, dtype: np.dtype, got: np.ndarray, want: np.ndarray) -> int:
    """How many elements of ``dtype`` in ``got`` differ from ``want`` (nccl-tests' ``#wrong``):
    float reductions by the tolerance of :func:`compare`, everything else bit for bit (an
    element with any differing byte counts once)."""
    if got.shape != want.shape:
        return max(got.size, want.size) // max(1, np.dtype(dtype).itemsize)
    et = element_dtype(coll, dtype)
    if et.kind == "f":
        g, w = got.view(et), want.view(et)
        return int(np.count_nonzero(~np.isclose(g, w, rtol=1e-5, atol=4e-6 * coll.num_ranks)))
    word = np.dtype(dtype).itemsize
    diff = got != want
    if word > 1 and diff.size % word == 0:
        return int(np.count_nonzero(diff.reshape(-1, word).any(axis=1)))
    return int(np.count_nonzero(diff))
