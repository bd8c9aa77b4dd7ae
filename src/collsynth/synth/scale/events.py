"""The SCALE-CCL loop's event heaps and the links listed for a round's decisions.

* completion events (transmission and reception completion) are a binary heap ordered by
  ``(time, type, seq)``; start events (transmission and reception start) change no state and
  are counted when scheduled, but they still make rounds, so their times are a second heap;
* the links to reconsider after a round are listed once each (:func:`trigger`), fully or for
  the subchunks that became sendable on them, and decided in link order (:func:`sort_links`).

Compiled with the rest of the loop (:mod:`.kernel`).
"""

from __future__ import annotations

from .state import HEAP_LEN, SEQ, STARTS_LEN, TRIGGERED_LEN


# ---------------------------------------------------------------------------- event heaps
def _event_less(time, kind, seq, i, j):
    """Heap order of completion events: (time, type, seq)."""
    if time[i] != time[j]:
        return time[i] < time[j]
    if kind[i] != kind[j]:
        return kind[i] < kind[j]
    return seq[i] < seq[j]


def _event_swap(time, kind, seq, arg, i, j):
    """Swap two completion-heap slots."""
    time[i], time[j] = time[j], time[i]
    kind[i], kind[j] = kind[j], kind[i]
    seq[i], seq[j] = seq[j], seq[i]
    arg[i], arg[j] = arg[j], arg[i]


def push_event(events, counters, t, kind, arg):
    """Schedule a completion event."""
    times, kinds, seqs, args = events.time, events.kind, events.seq, events.arg
    counters[SEQ] += 1
    i = counters[HEAP_LEN]
    counters[HEAP_LEN] = i + 1
    times[i] = t
    kinds[i] = kind
    seqs[i] = counters[SEQ]
    args[i] = arg
    while i > 0:
        parent = (i - 1) >> 1
        if not _event_less(times, kinds, seqs, i, parent):
            break
        _event_swap(times, kinds, seqs, args, i, parent)
        i = parent


def pop_event(events, counters):
    """Remove the earliest completion event; returns the slot it was moved to."""
    times, kinds, seqs, args = events.time, events.kind, events.seq, events.arg
    n = counters[HEAP_LEN] - 1
    counters[HEAP_LEN] = n
    _event_swap(times, kinds, seqs, args, 0, n)
    i = 0
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and _event_less(times, kinds, seqs, c + 1, c):
            c += 1
        if not _event_less(times, kinds, seqs, c, i):
            break
        _event_swap(times, kinds, seqs, args, i, c)
        i = c
    return n


def push_start(events, counters, t):
    """Schedule a start event (only its time is kept)."""
    h = events.starts
    i = counters[STARTS_LEN]
    counters[STARTS_LEN] = i + 1
    h[i] = t
    while i > 0:
        parent = (i - 1) >> 1
        if not h[i] < h[parent]:
            break
        h[i], h[parent] = h[parent], h[i]
        i = parent


def pop_start(events, counters):
    """Remove the earliest start event."""
    h = events.starts
    n = counters[STARTS_LEN] - 1
    counters[STARTS_LEN] = n
    h[0] = h[n]
    i = 0
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and h[c + 1] < h[c]:
            c += 1
        if not h[c] < h[i]:
            break
        h[i], h[c] = h[c], h[i]
        i = c


# ---------------------------------------------------------------------------- triggers
def trigger(listed, order, reset, counters, link, fully):
    """List ``link`` for this round's decisions, once; ``fully``: for everything it could send.

    Otherwise only the subchunks ``Triggers.bits`` says became sendable on it are considered."""
    if not listed[link]:
        listed[link] = 1
        order[counters[TRIGGERED_LEN]] = link
        counters[TRIGGERED_LEN] += 1
    if fully:
        reset[link] = 1


def trigger_all(graph, triggers, counters):
    """List every GPU out-link, fully (the planner's schedule-all)."""
    gpu_out_ptr, gpu_out = graph.gpu_out_ptr, graph.gpu_out
    listed, order, reset = triggers.listed, triggers.order, triggers.reset
    for u in range(graph.n_ranks):
        for q in range(gpu_out_ptr[u], gpu_out_ptr[u + 1]):
            trigger(listed, order, reset, counters, gpu_out[q], True)


def clear_triggers(triggers, counters, words):
    """Forget this round's listed links."""
    listed, order, reset, bits = triggers.listed, triggers.order, triggers.reset, triggers.bits
    for i in range(counters[TRIGGERED_LEN]):
        link = order[i]
        listed[link] = 0
        reset[link] = 0
        for w in range(words):
            bits[link, w] = 0
    counters[TRIGGERED_LEN] = 0


def sort_links(a, n, mark):
    """Sort the distinct links ``a[:n]`` (``mark[l]`` set for each) in place."""
    if n < 48:
        for i in range(1, n):
            x = a[i]
            j = i - 1
            while j >= 0 and a[j] > x:
                a[j + 1] = a[j]
                j -= 1
            a[j + 1] = x
    else:
        j = 0
        for link in range(len(mark)):
            if mark[link]:
                a[j] = link
                j += 1
