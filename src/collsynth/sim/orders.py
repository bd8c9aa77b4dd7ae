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
    if policy == "fcfs":
        prio = np.zeros(s.num_ops, dtype=np.float64)
        return pos, ptr, hops, prio, "first ready, first served"
    prio, used = planned_priorities(s)
    if s.link_order:
        ptr, hops, pos = link_order_hops(s, hop_link, route_ptr, n_links, compiled)
        used += " + planned link orders"
    return pos, ptr, hops, prio, used


def planned_priorities(s: Schedule) -> tuple[np.ndarray, str]:
    """Each operation's planned priority (its planned start, else its step, else 0: first
    ready, first served) and what it is, in words."""
    if s.start is not None and not np.any(np.isnan(s.start)):
        return s.start.astype(np.float64), "planned start times first"
    if s.step is not None and np.all(s.step >= 0):
        return s.step.astype(np.float64), "planned steps first"
    return np.zeros(s.num_ops, dtype=np.float64), "first ready, first served"


def link_order_hops(
    s: Schedule, hop_link: np.ndarray, route_ptr: np.ndarray, n_links: int,
    compiled: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """The schedule's link orders as hops: (per link, the start of its ordered hops; the hops,
    link by link in each link's order; each hop's position in its link's order, -1 where it
    has none). Each listed operation's hop on the link is found in its own route
    (:func:`find_hops`; ``compiled``: its compiled loop): no sort."""
    assert s.link_order is not None
    links, lengths, want_op = s.link_order_entries()
    want_link = np.repeat(links, lengths)
    hops = np.empty(len(want_op), dtype=np.int64)
    find = compiled_find_hops() if compiled else find_hops
    find(want_op, want_link, route_ptr.astype(np.int64), hop_link.astype(np.int64),
         np.int64(n_links), hops)  # fmt: skip
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


def find_hops(want_op, want_link, route_ptr, hop_link, n_links, out):
    """For each (operation, link) listed, the hop of the operation's route on that link, or
    -1 (no such operation or link, or the route does not use it), into ``out``: one scan of
    each listed route, linear in the hops looked at."""
    n_ops = route_ptr.shape[0] - 1
    for i in range(want_op.shape[0]):
        out[i] = -1
        op = want_op[i]
        link = want_link[i]
        if op < 0 or op >= n_ops or link < 0 or link >= n_links:
            continue
        for h in range(route_ptr[op], route_ptr[op + 1]):
            if hop_link[h] == link:
                out[i] = h
                break


def compiled_find_hops() -> Callable:
    """:func:`find_hops`, compiled (it allocates nothing)."""
    return compiled(find_hops, refcount=False)


def connections(
    src: np.ndarray, dst: np.ndarray, n_ranks: int, hop_link: np.ndarray, hop_op: np.ndarray,
    n_links: int, n_all: int, compiled: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """Shared links for ``order="fair"``: (the connection of every hop on a real link, -1 on
    the virtual issue links; the start of each connection's queue segment; which links are
    shared). A connection is one (link, sender, receiver): transfers between the same two ranks
    over one link go one after another, different pairs share the link. ``src``/``dst``: the
    sender and receiver of each operation (``hop_op`` indexes them). Numbered link by link,
    in order of first use (:func:`number_connections`; ``compiled``: its compiled loop)."""
    number = compiled_number_connections() if compiled else number_connections
    hop_class, *arrays = connection_arrays(hop_link, n_links)
    n_classes = number(
        hop_link, hop_op, src.astype(np.int64), dst.astype(np.int64), np.int64(n_ranks),
        hop_class, *arrays,
    )  # fmt: skip
    class_ptr = np.zeros(n_classes + 1, dtype=np.int64)
    class_ptr[1:] = np.cumsum(np.bincount(hop_class[hop_class >= 0], minlength=n_classes))
    shared = np.zeros(n_all, dtype=np.bool_)
    shared[:n_links] = True
    return hop_class, class_ptr, shared


def connection_arrays(hop_link, n_links):
    """The arrays :func:`number_connections` fills, made with numpy (so the compiled loop
    allocates nothing): each hop's connection (-1), the start of each link's hops, the hops
    by link, each link's fill position, and the tables (sized for the busiest link)."""
    real = hop_link < n_links
    counts = np.bincount(hop_link[real], minlength=n_links)[:n_links]
    start = np.zeros(n_links + 1, dtype=np.int64)
    np.cumsum(counts, out=start[1:])
    size = 2
    while size < 2 * (int(counts.max()) if n_links else 0):
        size *= 2
    out = np.full(len(hop_link), -1, dtype=np.int64)
    tables = (np.full(size, -1, dtype=np.int64), np.zeros(size, dtype=np.int64),
              np.zeros(size, dtype=np.int64))  # fmt: skip
    return out, start, np.empty(int(start[-1]), dtype=np.int64), start[:-1].copy(), tables


def number_connections(hop_link, hop_op, src, dst, n_ranks, out, start, by_link, fill, tables):
    """Number the (link, sender, receiver) of every hop on a real link (``< n_links``; -1 on
    the others) into ``out``: the hops bucketed by link (a counting pass), then per link an
    open-addressing table of the rank pairs seen on it (``tables``: the link that last wrote
    each slot, the rank pair there and its connection), reused link after link. No sort:
    linear in the hops. The arrays come from :func:`connection_arrays`. Returns the number of
    connections."""
    n_links = start.shape[0] - 1
    seen, key_at, class_at = tables
    for h in range(hop_link.shape[0]):
        l = hop_link[h]
        if l < n_links:
            by_link[fill[l]] = h
            fill[l] += 1
    mask = seen.shape[0] - 1
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
    return n_classes


def compiled_number_connections() -> Callable:
    """:func:`number_connections`, compiled (it allocates nothing)."""
    return compiled(number_connections, refcount=False)


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
    counts = np.empty(len(ordered), dtype=np.int64)
    count(hop_class[ordered], np.zeros(n_classes, dtype=np.int64), counts)
    pos[ordered] = counts
    return pos


def occurrences(values, seen, out):
    """For each entry, how many entries before it hold the same value (``0 <= value <
    len(seen)``; ``seen`` starts at zero, ``out`` receives the counts): a counting pass, no
    sort."""
    for i in range(values.shape[0]):
        v = values[i]
        out[i] = seen[v]
        seen[v] += 1


def compiled_occurrences() -> Callable:
    """:func:`occurrences`, compiled."""
    return compiled(occurrences, refcount=False)


__all__ = [
    "compiled_find_hops",
    "compiled_number_connections",
    "compiled_occurrences",
    "connection_arrays",
    "connection_positions",
    "connections",
    "find_hops",
    "link_order_hops",
    "number_connections",
    "occurrences",
    "order_arrays",
    "planned_priorities",
]
