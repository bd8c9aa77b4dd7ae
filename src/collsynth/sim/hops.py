"""The simulator's hops: one entry per use of a link by an operation (:func:`hop_arrays`), and
the virtual hops in front of routes that model the per-operation issue cost and joins
(:func:`virtual_hops`)."""

from __future__ import annotations

import numpy as np

from ..schedule.dag import owners
from ..schedule.ir import OpKind, Schedule


def hop_arrays(
    s: Schedule, size: float, route_ptr: np.ndarray, route_links: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One entry per hop (an operation's use of one link), in route order: (link, operation,
    transmission time, alpha, alpha from the hop to the end of its route inclusive), and the
    bytes of each operation. ``route_ptr``/``route_links``: the schedule's routes, or the
    links each operation owns in its in-network group."""
    hop_link = route_links.astype(np.int64)
    nbytes = s.op_bytes(size)
    hop_tx, hop_alpha, hop_alpha_tail = hop_times_of(s.topology, nbytes, route_ptr, hop_link)
    return hop_link, owners(route_ptr), hop_tx, hop_alpha, hop_alpha_tail, nbytes


def hop_times_of(
    t, nbytes: np.ndarray, route_ptr: np.ndarray, hop_link: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per hop of the routes ``route_ptr`` over links ``hop_link`` of topology ``t``, for
    operations of ``nbytes`` bytes: (transmission time, alpha, alpha from the hop to the end
    of its route inclusive)."""
    lengths = np.diff(route_ptr)
    hop_tx = np.repeat(nbytes, lengths) / t.link_bw[hop_link]
    hop_alpha = t.link_alpha[hop_link]
    # alpha from this hop to the end of its route (inclusive)
    csum = np.cumsum(hop_alpha[::-1])[::-1] if len(hop_alpha) else hop_alpha
    route_end = route_ptr[1:]
    after_route = np.concatenate((csum, [0.0]))[route_end]  # sum of alphas after the route
    hop_alpha_tail = csum - np.repeat(after_route, lengths)
    return hop_tx, hop_alpha, hop_alpha_tail


def prepend_hops(
    route_ptr: np.ndarray, which: np.ndarray, arrays: tuple, virtual: tuple
) -> tuple[tuple, np.ndarray]:
    """The per-hop ``arrays`` with one virtual hop in front of the route of each operation
    in the boolean mask ``which``, taking the per-operation values ``virtual`` (one array per
    hop array, indexed by operation); and the route pointers of the extended routes."""
    n_ops = len(route_ptr) - 1
    lengths = np.diff(route_ptr)
    add = which.astype(np.int64)
    ptr = np.zeros(n_ops + 1, dtype=np.int64)
    ptr[1:] = np.cumsum(lengths + add)
    first = ptr[:-1][which]
    real = np.ones(int(ptr[-1]), dtype=bool)
    real[first] = False

    def spread(values: np.ndarray, v: np.ndarray) -> np.ndarray:
        out = np.empty(len(real), dtype=np.result_type(values, v))
        out[real] = values
        out[first] = v[which]
        return out

    return tuple(spread(a, v) for a, v in zip(arrays, virtual)), ptr


def virtual_hops(
    s: Schedule,
    op_cost: float,
    hops: tuple,
    route_ptr: np.ndarray,
    n_all: int,
    forked: np.ndarray | None = None,
) -> tuple[tuple, np.ndarray, int]:
    """Virtual hops, on links after the topology's: with ``op_cost``, one in front of every
    transfer on the link ``n_links + sender``, held for ``op_cost`` seconds, whose head reaches
    the first real link ``op_cost`` after it starts (its latency; it adds nothing to the
    arrival itself, the real hops after it do); and for every join, one hop of no time on a
    link of its own kind (a join finishes as soon as it is ready). A multicast's branches
    (``forked``) pay no issue cost: one stream leaves the sender. The hop arrays (link, op,
    transmission, alpha, alpha to the route's end), route pointers and number of links."""
    n_ops = s.num_ops
    ops = np.arange(n_ops, dtype=np.int64)
    join = s.kind == OpKind.JOIN
    if op_cost > 0:
        cost = np.full(n_ops, float(op_cost))
        virtual = (n_all + s.src.astype(np.int64), ops, cost, cost, np.zeros(n_ops))
        issued = ~join if forked is None else ~join & ~forked
        hops, route_ptr = prepend_hops(route_ptr, issued, hops, virtual)
        n_all += s.topology.num_ranks
    if join.any():
        zero = np.zeros(n_ops)
        virtual = (np.full(n_ops, n_all, dtype=np.int64), ops, zero, zero, zero)
        hops, route_ptr = prepend_hops(route_ptr, join, hops, virtual)
        n_all += 1
    return hops, route_ptr, n_all


__all__ = ["hop_arrays", "hop_times_of", "prepend_hops", "virtual_hops"]
