"""Tests of collectives: chunk layout, pre/postconditions, sizes and serialisation."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collsynth.collective import REDUCING, ROOTED, Collective, CollKind, parse_kind
from collsynth.errors import CollsynthError

STANDARD = [k for k in CollKind if k is not CollKind.CUSTOM]


def post_set(coll: Collective) -> set[tuple[int, int]]:
    ranks, chunks = coll.postcondition()
    assert ranks.dtype == np.int64 and chunks.dtype == np.int64
    pairs = list(zip(ranks.tolist(), chunks.tolist()))
    assert len(pairs) == len(set(pairs)), "postcondition lists a (rank, chunk) twice"
    return set(pairs)


# ------------------------------------------------------------------------------ kinds
@pytest.mark.parametrize(
    "name, kind",
    [
        ("allgather", CollKind.ALLGATHER),
        ("AllGather", CollKind.ALLGATHER),
        ("all-gather", CollKind.ALLGATHER),
        ("all_gather", CollKind.ALLGATHER),
        ("ag", CollKind.ALLGATHER),
        ("rs", CollKind.REDUCESCATTER),
        ("reduce_scatter", CollKind.REDUCESCATTER),
        ("ar", CollKind.ALLREDUCE),
        ("all-reduce", CollKind.ALLREDUCE),
        ("bcast", CollKind.BROADCAST),
        ("a2a", CollKind.ALLTOALL),
        ("all_to_all", CollKind.ALLTOALL),
        (" Reduce ", CollKind.REDUCE),
        ("gather", CollKind.GATHER),
        ("scatter", CollKind.SCATTER),
        ("custom", CollKind.CUSTOM),
    ],
)
def test_parse_kind(name, kind):
    assert parse_kind(name) is kind


@pytest.mark.parametrize("bad", ["allgatherr", "", "sum", "all reduce", "none", 3])
def test_parse_kind_rejects_unknown(bad):
    with pytest.raises(CollsynthError, match="unknown collective") as exc:
        parse_kind(bad)
    assert "allgather" in str(exc.value)  # lists the known ones


# ------------------------------------------------------------------------------ layout
N, C = 4, 2


def test_allgather_layout():
    c = Collective.make("allgather", N, C)
    assert c.num_chunks == N * C
    assert c.chunk_source.tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    for ch in range(c.num_chunks):
        assert c.destinations(ch) == (0, 1, 2, 3)
    assert post_set(c) == {(r, ch) for r in range(N) for ch in range(N * C)}
    assert not c.reduces and not c.rooted and c.root is None


def test_reducescatter_layout():
    c = Collective.make("reducescatter", N, C)
    assert c.num_chunks == N * C
    assert c.chunk_source.tolist() == [-1] * (N * C)
    assert [c.destinations(ch) for ch in range(N * C)] == [(ch // C,) for ch in range(N * C)]
    assert post_set(c) == {(ch // C, ch) for ch in range(N * C)}
    assert c.reduces and c.full_mask == 0b1111


def test_allreduce_layout():
    c = Collective.make("allreduce", N, C)
    assert c.num_chunks == N * C
    assert (c.chunk_source == -1).all()
    assert post_set(c) == {(r, ch) for r in range(N) for ch in range(N * C)}
    assert c.reduces


@pytest.mark.parametrize("root", [0, 2, 3])
def test_broadcast_layout(root):
    c = Collective.make("broadcast", N, C, root=root)
    assert c.num_chunks == C
    assert c.chunk_source.tolist() == [root] * C
    assert post_set(c) == {(r, ch) for r in range(N) for ch in range(C)}
    assert c.rooted and not c.reduces


@pytest.mark.parametrize("root", [0, 3])
def test_reduce_layout(root):
    c = Collective.make("reduce", N, C, root=root)
    assert c.num_chunks == C
    assert (c.chunk_source == -1).all()
    assert post_set(c) == {(root, ch) for ch in range(C)}
    assert c.rooted and c.reduces


def test_alltoall_layout():
    c = Collective.make("alltoall", N, C)
    assert c.num_chunks == N * N * C
    src = c.chunk_source.tolist()
    post = post_set(c)
    # every ordered pair (s, d), s == d included, gets exactly C chunks
    pairs = {}
    for ch in range(c.num_chunks):
        (d,) = c.destinations(ch)
        pairs.setdefault((src[ch], d), []).append(ch)
        assert (d, ch) in post
    assert sorted(pairs) == [(s, d) for s in range(N) for d in range(N)]
    assert all(len(v) == C for v in pairs.values())
    # chunk c: source (c // C) // n, destination (c // C) % n
    assert src[5] == (5 // C) // N and c.destinations(5) == ((5 // C) % N,)
    assert len(post) == c.num_chunks


@pytest.mark.parametrize("root", [0, 1])
def test_gather_layout(root):
    c = Collective.make("gather", N, C, root=root)
    assert c.num_chunks == N * C
    assert c.chunk_source.tolist() == [ch // C for ch in range(N * C)]
    assert post_set(c) == {(root, ch) for ch in range(N * C)}


@pytest.mark.parametrize("root", [0, 2])
def test_scatter_layout(root):
    c = Collective.make("scatter", N, C, root=root)
    assert c.num_chunks == N * C
    assert c.chunk_source.tolist() == [root] * (N * C)
    assert post_set(c) == {(ch // C, ch) for ch in range(N * C)}


@pytest.mark.parametrize("kind", STANDARD)
@pytest.mark.parametrize("n", [2, 3, 8])
@pytest.mark.parametrize("cpr", [1, 3])
def test_postcondition_matches_destinations(kind, n, cpr):
    c = Collective.make(kind, n, cpr)
    expected = {(r, ch) for ch in range(c.num_chunks) for r in c.destinations(ch)}
    assert post_set(c) == expected
    assert len(c.chunk_source) == c.num_chunks
    assert c.chunk_source.min() >= -1 and c.chunk_source.max() < n
    assert (c.chunk_source == -1).all() == c.reduces


@pytest.mark.parametrize("kind", STANDARD)
def test_destinations_rejects_bad_chunk(kind):
    c = Collective.make(kind, 3, 2)
    for bad in (-1, c.num_chunks):
        with pytest.raises(CollsynthError, match=f"chunk {bad} does not exist"):
            c.destinations(bad)


def test_rooted_default_root_is_zero():
    for kind in ROOTED:
        assert Collective.make(kind, 4).root == 0
    for kind in set(STANDARD) - ROOTED:
        assert Collective.make(kind, 4).root is None


def test_reducing_set():
    assert REDUCING == {CollKind.REDUCESCATTER, CollKind.ALLREDUCE, CollKind.REDUCE}


# ------------------------------------------------------------------------------ sizes
@pytest.mark.parametrize("n", [2, 4, 8, 16])
def test_busbw_factors_follow_nccl_tests(n):
    f = {k: Collective.make(k, n).busbw_factor for k in STANDARD}
    assert f[CollKind.ALLREDUCE] == pytest.approx(2 * (n - 1) / n)
    for k in (CollKind.REDUCESCATTER, CollKind.ALLGATHER, CollKind.ALLTOALL):
        assert f[k] == pytest.approx((n - 1) / n)
    assert f[CollKind.BROADCAST] == 1.0
    assert f[CollKind.REDUCE] == 1.0


@pytest.mark.parametrize(
    "kind, expected_units",
    [
        ("allgather", N * C),
        ("reducescatter", N * C),
        ("allreduce", N * C),
        ("broadcast", C),
        ("reduce", C),
        ("gather", N * C),
        ("scatter", N * C),
        ("alltoall", N * C),  # size is one rank's send buffer: n * C chunks of it
    ],
)
def test_chunk_bytes(kind, expected_units):
    c = Collective.make(kind, N, C)
    assert c.size_units == expected_units
    assert c.chunk_bytes(8e6) == pytest.approx(8e6 / expected_units)
    # the whole buffer is exactly the chunks of one size unit
    assert c.chunk_bytes(1.0) * c.size_units == pytest.approx(1.0)


def test_alltoall_total_bytes_is_n_times_send_buffer():
    c = Collective.make("alltoall", N, C)
    assert c.chunk_bytes(1e6) * c.num_chunks == pytest.approx(N * 1e6)


def test_with_chunks():
    c = Collective.make("broadcast", 5, 1, root=3)
    d = c.with_chunks(4)
    assert (d.kind, d.num_ranks, d.chunks_per_rank, d.root) == (c.kind, 5, 4, 3)
    assert d.num_chunks == 4
    with pytest.raises(CollsynthError):
        c.with_chunks(0)


# ------------------------------------------------------------------------------ custom
def test_custom_from_demand_matrix():
    m = [[0, 2, 0], [1, 0, 0], [0, 0, 0]]
    c = Collective.from_demand_matrix(m)
    assert c.kind is CollKind.CUSTOM and c.num_ranks == 3 and c.num_chunks == 3
    assert c.chunk_source.tolist() == [0, 0, 1]
    assert [c.destinations(i) for i in range(3)] == [(0, 1), (0, 1), (0, 1)]
    # the postcondition includes the source, which holds the chunk from the start
    assert post_set(c) == {(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2)}
    assert c.busbw_factor == 1.0
    assert c.size_units == 3


def test_demand_matrix_ignores_diagonal_and_accepts_integral_floats():
    c = Collective.from_demand_matrix(np.array([[5.0, 1.0], [0.0, 7.0]]))
    assert c.num_chunks == 1 and c.chunk_source.tolist() == [0]
    c = Collective.from_demand_matrix([[10**12, 2], [1, 10**15]])
    assert c.num_chunks == 3 and c.chunk_source.tolist() == [0, 0, 1]


@pytest.mark.parametrize(
    "bad, match",
    [
        ([[0, 1, 0], [1, 0, 0]], "square"),
        ([[0]], "square"),
        ([0, 1], "square"),
        ([[0, -1], [1, 0]], "non-negative"),
        ([[0, 0.5], [1, 0]], "non-negative"),
        ([[0, float("nan")], [1, 0]], "non-negative"),
        ([[0, "x"], [1, 0]], "non-negative"),
        ([[False, True], [True, False]], "non-negative"),
        ([[0, 0], [0, 0]], "no transfer"),
        ([[0, 10**12], [0, 0]], "more than 4194304 chunks"),
        ([[0, 1e300], [0, 0]], "more than 4194304 chunks"),
        ([[0, 2**24], [2**24 + 1, 0]], "more than 4194304 chunks"),
        ([[0, 10**30], [0, 0]], "non-negative integers"),
        ([[0, 1], [1]], "matrix"),
    ],
)
def test_demand_matrix_errors(bad, match):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no numpy warning may leak onto stderr
        with pytest.raises(CollsynthError, match=match):
            Collective.from_demand_matrix(bad)


def test_custom_multicast_chunk_list():
    c = Collective.custom(4, [(0, [1, 2, 3]), (2, [0]), (3, [3, 1, 1])])
    assert c.num_chunks == 3
    assert c.chunk_source.tolist() == [0, 2, 3]
    assert c.destinations(0) == (0, 1, 2, 3)
    assert c.destinations(1) == (0, 2)
    assert c.destinations(2) == (1, 3)  # the source itself and duplicates are dropped
    assert c.custom_chunks[2] == (3, (1,))
    assert not c.reduces and not c.rooted
    with pytest.raises(CollsynthError, match="fixed chunk list"):
        c.with_chunks(2)


@pytest.mark.parametrize(
    "chunks, match",
    [
        ([], "no chunks"),
        ([(0, [])], "no destinations"),
        ([(1, [1])], "no destinations"),
        ([(4, [0])], "source 4 is not a rank"),
        ([(0, [9])], "destination 9 is not a rank"),
        ([(-1, [0])], "source -1"),
        ([(0, 1)], "must be"),
        ([(0,)], "must be"),
        ([("a", [1])], "not a rank number"),
        ([(0, [1.5])], "not a rank number"),
        ([(True, [1])], "not a rank number"),
    ],
)
def test_custom_errors(chunks, match):
    with pytest.raises(CollsynthError, match=match):
        Collective.custom(4, chunks)


def test_make_refuses_custom():
    with pytest.raises(CollsynthError, match="demand matrix or chunk list"):
        Collective.make("custom", 4)


# ------------------------------------------------------------------------------ errors
@pytest.mark.parametrize("kind", sorted(ROOTED))
@pytest.mark.parametrize("root", [-1, 4, 100])
def test_bad_root(kind, root):
    with pytest.raises(CollsynthError, match=f"root {root} is not a rank in 0..3"):
        Collective.make(kind, 4, 1, root=root)


@pytest.mark.parametrize("kind", sorted(set(STANDARD) - ROOTED))
def test_root_on_unrooted_collective(kind):
    with pytest.raises(CollsynthError, match="takes no root"):
        Collective.make(kind, 4, 1, root=0)


@pytest.mark.parametrize("ranks", [0, 1, -3])
def test_too_few_ranks(ranks):
    with pytest.raises(CollsynthError, match="at least 2 ranks"):
        Collective.make("allgather", ranks)


@pytest.mark.parametrize("cpr", [0, -1])
def test_bad_chunk_count(cpr):
    with pytest.raises(CollsynthError, match="chunks per rank must be a positive integer"):
        Collective.make("allgather", 4, cpr)


def test_direct_constructor_type_checks():
    with pytest.raises(CollsynthError):
        Collective(CollKind.ALLGATHER, 4.0, 1)  # type: ignore[arg-type]
    with pytest.raises(CollsynthError):
        Collective(CollKind.ALLGATHER, True, 1)  # type: ignore[arg-type]
    with pytest.raises(CollsynthError):
        Collective(CollKind.BROADCAST, 4, 1, root=True)  # type: ignore[arg-type]
    with pytest.raises(CollsynthError, match="no custom chunk list"):
        Collective(CollKind.ALLGATHER, 4, 1, None, ((0, (1,)),))


# ------------------------------------------------------------------------------ serialisation
ALL_EXAMPLES = [Collective.make(k, n, cpr) for k in STANDARD for n in (2, 5) for cpr in (1, 3)] + [
    Collective.make("broadcast", 5, 2, root=4),
    Collective.make("reduce", 3, 1, root=1),
    Collective.make("gather", 6, 1, root=5),
    Collective.make("scatter", 6, 2, root=2),
    Collective.from_demand_matrix([[0, 1, 2], [0, 0, 1], [3, 0, 0]]),
    Collective.custom(5, [(0, [1, 2, 3, 4]), (4, [0]), (2, [1, 3])]),
]


@pytest.mark.parametrize("coll", ALL_EXAMPLES, ids=lambda c: c.describe())
def test_to_dict_round_trip(coll):
    d = coll.to_dict()
    again = Collective.from_dict(json.loads(json.dumps(d)))
    assert again == coll
    assert again.num_chunks == coll.num_chunks
    assert np.array_equal(again.chunk_source, coll.chunk_source)
    assert post_set(again) == post_set(coll)


def test_from_dict_demand_matrix_and_ranks_check():
    c = Collective.from_dict({"kind": "custom", "ranks": 2, "demand": [[0, 3], [1, 0]]})
    assert c.num_chunks == 4
    with pytest.raises(CollsynthError, match="not 3x3"):
        Collective.from_dict({"kind": "custom", "ranks": 3, "demand": [[0, 3], [1, 0]]})


@pytest.mark.parametrize(
    "data, match",
    [
        ([], "must be an object"),
        ("allgather", "must be an object"),
        ({"kind": "allgather"}, "needs 'kind' and 'ranks'"),
        ({"ranks": 4}, "needs 'kind' and 'ranks'"),
        ({"kind": "allgather", "ranks": 4, "extra": 1}, "unknown key 'extra'"),
        ({"kind": "allgather", "ranks": "4"}, "ranks must be an integer"),
        ({"kind": "allgather", "ranks": 4.0}, "ranks must be an integer"),
        ({"kind": "allgather", "ranks": True}, "ranks must be an integer"),
        ({"kind": "allgather", "ranks": 1}, "at least 2 ranks"),
        ({"kind": "allgather", "ranks": 4, "chunks_per_rank": 0}, "positive integer"),
        ({"kind": "allgather", "ranks": 4, "chunks_per_rank": "2"}, "must be an integer"),
        ({"kind": "allgather", "ranks": 4, "chunks_per_rank": None}, "must be an integer"),
        ({"kind": "broadcast", "ranks": 4, "root": 4}, "root 4 is not a rank"),
        ({"kind": "broadcast", "ranks": 4, "root": "0"}, "root must be an integer"),
        ({"kind": "allgather", "ranks": 4, "root": 0}, "takes no root"),
        ({"kind": "bogus", "ranks": 4}, "unknown collective"),
        ({"kind": "custom", "ranks": 4}, "needs a 'chunks' list"),
        ({"kind": "custom", "ranks": 4, "chunks": [[0, [7]]]}, "destination 7"),
        ({"kind": "custom", "ranks": 4, "chunks": [5]}, "must be"),
    ],
)
def test_from_dict_errors(data, match):
    with pytest.raises(CollsynthError, match=match) as exc:
        Collective.from_dict(data, source="f.json")
    assert "\n" not in str(exc.value)


@settings(max_examples=80, deadline=None, derandomize=True)
@given(kind=st.sampled_from(STANDARD), n=st.integers(2, 9), cpr=st.integers(1, 4), data=st.data())
def test_layout_invariants(kind, n, cpr, data):
    root = data.draw(st.integers(0, n - 1)) if kind in ROOTED else None
    c = Collective.make(kind, n, cpr, root)
    src = c.chunk_source
    post = post_set(c)
    # every chunk has at least one destination, and every destination is a rank
    assert {ch for _, ch in post} == set(range(c.num_chunks))
    assert all(0 <= r < n for r, _ in post)
    if not c.reduces:
        assert ((src >= 0) & (src < n)).all()
    # bytes: size_units chunks make one size
    assert c.chunk_bytes(c.size_units) == pytest.approx(1.0)
    assert Collective.from_dict(c.to_dict()) == c
