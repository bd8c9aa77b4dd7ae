"""The verifier on absurd sizes: declared chunk counts far beyond what any schedule moves
(refused without per-chunk state), and byte ranges without a common denominator."""

from __future__ import annotations

import pytest

from collsynth.collective import Collective
from collsynth.errors import CollsynthError
from collsynth.schedule.io import schedule_from_dict, schedule_to_dict
from collsynth.schedule.ir import ScheduleBuilder
from collsynth.synth import synthesize
from collsynth.verify import segments as segments_module
from collsynth.verify import verify
from conftest import RL, engines_for, rejects, ring4, ring_allgather, subset, zoo

# ------------------------------------------------------------------------------ absurd sizes
C_BIG = 1 << 19  # chunks per rank: chunks x ranks above MANY_CHUNKS for every kind


@pytest.mark.parametrize(
    "kind, root, op, first",
    [
        ("allgather", None, (0, 1, 1, "copy"), 0),
        ("reducescatter", None, (1, 0, 0, "reduce"), 1),
        ("allreduce", None, (1, 0, 0, "reduce"), 1),
        ("alltoall", None, (0, 1, C_BIG, "copy"), C_BIG + 1),  # block 0: rank 0 to itself
        ("gather", 0, (1, 0, C_BIG, "copy"), C_BIG + 1),  # the root's own chunks stay put
        ("scatter", 0, (0, 1, C_BIG, "copy"), C_BIG + 1),
        ("broadcast", 0, (0, 1, 0, "copy"), 1),
        ("reduce", 0, (1, 0, 0, "reduce"), 1),
    ],
)
def test_huge_declared_chunk_count_is_rejected_quickly(kind, root, op, first, monkeypatch):
    monkeypatch.setenv("COLLSYNTH_MAX_CHUNKS", str(10**18))  # past the up-front limit
    t = ring4()
    coll = Collective.make(kind, 4, C_BIG, root)
    b = ScheduleBuilder(t, coll)
    src, dst, chunk, k = op
    b.add(src, dst, chunk, route=[RL(t, src, dst)], kind=k)
    check = "incomplete-reduction" if coll.reduces else "missing-delivery"
    e = rejects(b.build(), check, op=None, match=rf"no operation moves chunk {first} ")
    assert f"has {coll.num_chunks} chunks; the schedule moves 1" in str(e)


def test_chunk_count_from_file_is_not_allocated(tmp_path):
    d = schedule_to_dict(ring_allgather(ring4()))
    d["collective"]["chunks_per_rank"] = 10**17
    with pytest.raises(CollsynthError, match="COLLSYNTH_MAX_CHUNKS"):  # refused up front
        schedule_from_dict(d)


def test_chunk_count_from_file_past_the_limit_is_not_allocated(monkeypatch):
    monkeypatch.setenv("COLLSYNTH_MAX_CHUNKS", str(10**18))
    d = schedule_to_dict(ring_allgather(ring4()))
    d["collective"]["chunks_per_rank"] = 10**17
    rejects(schedule_from_dict(d), "missing-delivery", op=None, match="moves chunk 4 ")


@pytest.mark.parametrize(
    "kind, reduce_engine",
    [
        (k, e)
        for k in (
            "allgather",
            "reducescatter",
            "allreduce",
            "alltoall",
            "gather",
            "scatter",
            "broadcast",
            "reduce",
        )
        for e in engines_for(k)
    ],
)
def test_unmoved_chunk_check_accepts_valid_schedules(monkeypatch, kind, reduce_engine):
    """With the threshold lowered, the early check runs on small schedules: valid ones pass,
    and a schedule missing every op of one chunk fails it."""
    monkeypatch.setattr(segments_module, "MANY_CHUNKS", 0)
    t = zoo("ring:n=5")
    root = 3 if kind in ("gather", "scatter", "broadcast", "reduce") else None
    coll = Collective.make(kind, 5, 2, root)
    s = synthesize("spt", t, coll)
    assert verify(s, reduce_engine=reduce_engine).ok
    drop = int(s.chunk[-1])
    keep = [i for i in range(s.num_ops) if s.chunk[i] != drop]
    check = "incomplete-reduction" if coll.reduces else "missing-delivery"
    rejects(
        subset(s, keep),
        check,
        op=None,
        match=rf"no operation moves chunk {drop} ",
        reduce_engine=reduce_engine,
    )


def test_byte_range_denominators_too_large():
    t = ring4()
    big = 2**61 - 1  # a prime
    b = ScheduleBuilder(t, Collective.custom(4, [(0, [1])]))
    b.add(0, 1, 0, route=[RL(t, 0, 1)], part=(0, 1, big))
    b.add(0, 1, 0, route=[RL(t, 0, 1)], part=(1, big, big))
    assert verify(b.build()).ok
    b.add(0, 1, 0, route=[RL(t, 0, 1)], part=(0, 1, 3))  # common multiple 3 * big > 2**62
    rejects(b.build(), "structure", op=2, match="without a common multiple below 2..62")
