"""The order a link serves its hops in: planned priorities and per-link orders (models
``auto``/``plan`` and ``fcfs``), and the connections that share a link (model ``fair``)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..errors import CollsynthError
from ..jit import compiled
from ..schedule.ir import Schedule


def order_arrays(
    s: Schedule,
    policy: str,
    hop_link: np.ndarray,
    route_ptr: np.ndarray,
    n_links: int,
    compiled: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, str]:
    """Priorities and explicit per-link orders: (hop_order_pos, link_order_ptr,
    link_order_hops, op_prio, description). ``route_ptr``: each operation's hops;
    ``compiled``: find the ordered hops with the compiled loop (:func:`find_hops`)."""
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
        ptr, hops, pos = link_order_hops(s, hop_link, route_ptr, n_links, compiled)
        used += " + planned link orders"
    return pos, ptr, hops, prio, used


def link_order_hops(
    s: Schedule, hop_link: np.ndarray, route_ptr: np.ndarray, n_links: int,
    compiled: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """The schedule's link orders as hops: (per link, the start of its ordered hops; the hops,
    link by link in each link's order; each hop's position in its link's order, -1 where it
    has none). Each listed operation's hop on the link is found in its own route
    (:func:`find_hops`; ``compiled``: its compiled loop): no sort."""
    assert s.link_order is not None
    links = sorted(s.link_order, key=int)
    seqs = [np.asarray(s.link_order[l], dtype=np.int64).ravel() for l in links]
    lengths = np.array([len(q) for q in seqs], dtype=np.int64)
    want_link = np.repeat(np.array([int(l) for l in links], dtype=np.int64), lengths)
    want_op = np.concatenate(seqs) if seqs else np.zeros(0, dtype=np.int64)
    find = compiled_find_hops() if compiled else find_hops
    hops = find(want_op, want_link, route_ptr.astype(np.int64), hop_link.astype(np.int64),
                np.int64(n_links))  # fmt: skip
    if len(hops) and hops.min() < 0:
        bad = int(np.flatnonzero(hops < 0)[0])
        raise CollsynthError(
            f"planned order of link {int(want_link[bad])} lists op {int(want_op[bad])}, which "
            f"does not use it (verify the schedule first)"
        )
    ptr = np.zeros(n_links + 1, dtype=np.int64)
    np.cumsum(np.bincount(want_link, minlength=n_links), out=ptr[1:])
    pos = np.full(len(hop_link), -1, dtype=np.int64)
    pos[hops] = np.arange(len(hops), dtype=np.int64) - ptr[want_link]
    return ptr, hops, pos


def find_hops(want_op, want_link, route_ptr, hop_link, n_links):
    """For each (operation, link) listed, the hop of the operation's route on that link, or
    -1 (no such operation or link, or the route does not use it): one scan of each listed
    route, linear in the hops looked at."""
    n_ops = route_ptr.shape[0] - 1
    out = np.full(want_op.shape[0], -1, dtype=np.int64)
    for i in range(want_op.shape[0]):
        op = want_op[i]
        link = want_link[i]
        if op < 0 or op >= n_ops or link < 0 or link >= n_links:
            continue
        for h in range(route_ptr[op], route_ptr[op + 1]):
            if hop_link[h] == link:
                out[i] = h
                break
    return out


def compiled_find_hops() -> Callable:
    """:func:`find_hops`, compiled."""
    return compiled(find_hops)


def connections(
    s: Schedule, hop_link: np.ndarray, hop_op: np.ndarray, n_links: int, n_all: int,
    compiled: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """Shared links for ``order="fair"``: (the connection of every hop on a real link, -1 on
    the virtual issue links; the start of each connection's queue segment; which links are
    shared). A connection is one (link, sender, receiver): transfers between the same two ranks
    over one link go one after another, different pairs share the link. Numbered link by link,
    in order of first use (:func:`connection_classes`; ``compiled``: its compiled loop)."""
    number = compiled_connection_classes() if compiled else connection_classes
    hop_class, n_classes = number(
        hop_link, hop_op, s.src.astype(np.int64), s.dst.astype(np.int64), n_links,
        np.int64(s.topology.num_ranks),
    )  # fmt: skip
    class_ptr = np.zeros(n_classes + 1, dtype=np.int64)
    class_ptr[1:] = np.cumsum(np.bincount(hop_class[hop_class >= 0], minlength=n_classes))
    shared = np.zeros(n_all, dtype=np.bool_)
    shared[:n_links] = True
    return hop_class, class_ptr, shared


def connection_classes(hop_link, hop_op, src, dst, n_links, n_ranks):
    """Number the (link, sender, receiver) of every hop on a real link (``< n_links``; -1 on
    the others): the hops bucketed by link (a counting pass), then per link an open-addressing
    table of the rank pairs seen on it, sized for the busiest link and reused link after link.
    No sort: linear in the hops. Returns (each hop's connection, number of connections)."""
    n = hop_link.shape[0]
    start = np.zeros(n_links + 1, dtype=np.int64)
    for h in range(n):
        if hop_link[h] < n_links:
            start[hop_link[h] + 1] += 1
    most = 0
    for l in range(n_links):
        most = max(most, start[l + 1])
        start[l + 1] += start[l]
    fill = start[:n_links].copy()
    by_link = np.empty(start[n_links], dtype=np.int64)
    for h in range(n):
        l = hop_link[h]
        if l < n_links:
            by_link[fill[l]] = h
            fill[l] += 1
    size = 2
    while size < 2 * most:
        size *= 2
    mask = size - 1
    seen = np.full(size, -1, dtype=np.int64)  # the link that last wrote the slot
    key_at = np.zeros(size, dtype=np.int64)
    class_at = np.zeros(size, dtype=np.int64)
    out = np.full(n, -1, dtype=np.int64)
    n_classes = 0
    for l in range(n_links):
        for i in range(start[l], start[l + 1]):
            h = by_link[i]
            op = hop_op[h]
            key = src[op] * n_ranks + dst[op]
            mix = (key ^ (key >> 15)) * 625341585  # no overflow below 65,536 ranks
            slot = (mix ^ (mix >> 29)) & mask
            while seen[slot] == l and key_at[slot] != key:
                slot = (slot + 1) & mask
            if seen[slot] != l:
                seen[slot] = l
                key_at[slot] = key
                class_at[slot] = n_classes
                n_classes += 1
            out[h] = class_at[slot]
    return out, n_classes


def compiled_connection_classes() -> Callable:
    """:func:`connection_classes`, compiled."""
    return compiled(connection_classes)


def connection_positions(
    hop_class: np.ndarray,
    n_classes: int,
    link_order_hops: np.ndarray,
    compiled: bool,
) -> np.ndarray:
    """Each hop's position in its connection's planned order, -1 where its link has none. A
    connection's order is its link's planned order restricted to the connection's sender and
    receiver: what an executor realizes by posting each pair's messages in that order (one
    connection carries them one after another; different pairs share the link). ``compiled``:
    count with the compiled loop (:func:`occurrences`)."""
    pos = np.full(len(hop_class), -1, dtype=np.int64)
    if not len(link_order_hops):
        return pos
    count = compiled_occurrences() if compiled else occurrences
    ordered = link_order_hops[hop_class[link_order_hops] >= 0]  # real links only
    pos[ordered] = count(hop_class[ordered], n_classes)
    return pos


def occurrences(values, n_values):
    """For each entry, how many entries before it hold the same value (``0 <= value <
    n_values``): a counting pass, no sort."""
    seen = np.zeros(n_values, dtype=np.int64)
    out = np.empty(values.shape[0], dtype=np.int64)
    for i in range(values.shape[0]):
        v = values[i]
        out[i] = seen[v]
        seen[v] += 1
    return out


def compiled_occurrences() -> Callable:
    """:func:`occurrences`, compiled."""
    return compiled(occurrences)


__all__ = [
    "compiled_connection_classes",
    "compiled_find_hops",
    "compiled_occurrences",
    "connection_classes",
    "connection_positions",
    "connections",
    "find_hops",
    "link_order_hops",
    "occurrences",
    "order_arrays",
]
