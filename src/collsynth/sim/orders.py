"""The order a link serves its hops in: planned priorities and per-link orders (models
``auto``/``plan`` and ``fcfs``), and the connections that share a link (model ``fair``)."""

from __future__ import annotations

import numpy as np

from ..errors import CollsynthError
from ..schedule.dag import ragged_arange
from ..schedule.ir import Schedule


def order_arrays(
    s: Schedule, policy: str, hop_link: np.ndarray, hop_op: np.ndarray, n_links: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, str]:
    """Priorities and explicit per-link orders: (hop_order_pos, link_order_ptr,
    link_order_hops, op_prio, description)."""
    n_hops = len(hop_link)
    pos = np.full(n_hops, -1, dtype=np.int64)
    ptr = np.zeros(n_links + 1, dtype=np.int64)
    hops = np.zeros(0, dtype=np.int64)
    prio = np.zeros(s.num_ops, dtype=np.float64)
    if policy == "fcfs":
        return pos, ptr, hops, prio, "first ready, first served"
    used = "first ready, first served"
    if s.start is not None and not np.any(np.isnan(s.start)):
        prio = s.start.astype(np.float64)
        used = "planned start times first"
    elif s.step is not None and np.all(s.step >= 0):
        prio = s.step.astype(np.float64)
        used = "planned steps first"
    if s.link_order:
        ptr, hops, pos = link_order_hops(s, hop_link, hop_op, n_links)
        used += " + planned link orders"
    return pos, ptr, hops, prio, used


def link_order_hops(
    s: Schedule, hop_link: np.ndarray, hop_op: np.ndarray, n_links: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The schedule's link orders as hops: (per link, the start of its ordered hops; the hops,
    link by link in each link's order; each hop's position in its link's order, -1 where it
    has none). One sorted lookup of (link, op) for every listed operation."""
    assert s.link_order is not None
    n_ops = np.int64(max(s.num_ops, 1))
    links = sorted(s.link_order, key=int)
    seqs = [np.asarray(s.link_order[l], dtype=np.int64).ravel() for l in links]
    lengths = np.array([len(q) for q in seqs], dtype=np.int64)
    want_link = np.repeat(np.array([int(l) for l in links], dtype=np.int64), lengths)
    want_op = np.concatenate(seqs) if seqs else np.zeros(0, dtype=np.int64)
    hop_key = hop_link.astype(np.int64) * n_ops + hop_op.astype(np.int64)
    by_key = np.argsort(hop_key, kind="stable")
    sorted_keys = hop_key[by_key]
    want = want_link * n_ops + want_op
    at = np.minimum(np.searchsorted(sorted_keys, want), max(len(sorted_keys) - 1, 0))
    found = (want_op >= 0) & (want_op < s.num_ops) & (want_link >= 0) & (want_link < n_links)
    if len(sorted_keys):
        found &= sorted_keys[at] == want
    else:
        found[:] = False
    if not found.all():
        bad = int(np.flatnonzero(~found)[0])
        raise CollsynthError(
            f"planned order of link {int(want_link[bad])} lists op {int(want_op[bad])}, which "
            f"does not use it (verify the schedule first)"
        )
    hops = by_key[at].astype(np.int64) if len(want) else np.zeros(0, dtype=np.int64)
    ptr = np.zeros(n_links + 1, dtype=np.int64)
    np.cumsum(np.bincount(want_link, minlength=n_links), out=ptr[1:])
    pos = np.full(len(hop_link), -1, dtype=np.int64)
    pos[hops] = np.arange(len(hops), dtype=np.int64) - ptr[want_link]
    return ptr, hops, pos


def connections(
    s: Schedule, hop_link: np.ndarray, hop_op: np.ndarray, n_links: int, n_all: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Shared links for ``order="fair"``: (the connection of every hop on a real link, -1 on
    the virtual issue links; the start of each connection's queue segment; which links are
    shared). A connection is one (link, sender, receiver): transfers between the same two ranks
    over one link go one after another, different pairs share the link."""
    real = hop_link < n_links
    r = np.int64(s.topology.num_ranks)
    key = (hop_link * r + s.src.astype(np.int64)[hop_op]) * r + s.dst.astype(np.int64)[hop_op]
    hop_class = np.full(len(hop_link), -1, dtype=np.int64)
    uniq, inverse = np.unique(key[real], return_inverse=True)
    hop_class[real] = inverse
    class_ptr = np.zeros(len(uniq) + 1, dtype=np.int64)
    class_ptr[1:] = np.cumsum(np.bincount(inverse, minlength=len(uniq)))
    shared = np.zeros(n_all, dtype=np.bool_)
    shared[:n_links] = True
    return hop_class, class_ptr, shared


def connection_positions(
    s: Schedule, hop_class: np.ndarray, link_order_ptr: np.ndarray, link_order_hops: np.ndarray
) -> np.ndarray:
    """Each hop's position in its connection's planned order, -1 where its link has none. A
    connection's order is its link's planned order restricted to the connection's sender and
    receiver: what an executor realizes by posting each pair's messages in that order (one
    connection carries them one after another; different pairs share the link)."""
    pos = np.full(len(hop_class), -1, dtype=np.int64)
    if not len(link_order_hops):
        return pos
    cls = hop_class[link_order_hops]
    by = np.argsort(cls, kind="stable")  # per connection, in the link's planned order
    sorted_cls = cls[by]
    starts = np.flatnonzero(np.r_[True, sorted_cls[1:] != sorted_cls[:-1]])
    rank = ragged_arange(np.diff(np.r_[starts, len(by)]))
    pos[link_order_hops[by]] = rank
    return pos


__all__ = ["connection_positions", "connections", "link_order_hops", "order_arrays"]
