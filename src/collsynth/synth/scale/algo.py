"""SCALE-CCL planner: the plan record, engine choice, IR lowering, registry entry, re-planning.

The event loop itself (time- and event-driven rounds, Load-Aware Neighbor Forwarding and
Subchunk Scheduling) is :func:`.loop.run_loop`, compiled by :func:`.kernel.compiled_run_loop`;
the topology tables it reads are :func:`.tables.graph_tables`. :func:`plan` runs the loop
compiled with numba or as plain Python (``engine``); both give the same plan, bit for bit.
"""

from __future__ import annotations

import time as _time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ... import jit
from ...collective import Collective, CollKind
from ...errors import CollsynthError
from ...schedule.ir import Schedule
from ...topology.model import Topology
from .. import register
from ..options import Option, int_option, size_option
from .kernel import SOURCES, compiled_run_loop
from .loop import run_loop
from .state import (
    EVENTS,
    LWNF,
    LWNF_REFUSED,
    ROUNDS,
    RX_END,
    RX_START,
    SS_CALLS,
    SS_DUPLICATES,
    STALLED,
    TX_END,
    TX_START,
    Links,
    Params,
)
from .stats import LinkStats
from .tables import WORD, graph_tables

#: Data size planned for when none is given.
DEFAULT_SIZE = float(1 << 20)
#: Default number of subchunks per chunk.
DEFAULT_SUBCHUNKS = 1
#: Collectives planned: every chunk travels from one source to its destinations.
SUPPORTED = {CollKind.ALLGATHER, CollKind.BROADCAST, CollKind.CUSTOM}

#: The four event types of the loop.
EVENT_NAMES = {
    TX_START: "transmission start",
    TX_END: "transmission completion",
    RX_START: "reception start",
    RX_END: "reception completion",
}

#: Events within EPS (seconds; relative beyond 1 s) of a round's time belong to the round.
#: At most the verifier's own causality slack (1e-15 s absolute): with per-link random alphas,
#: events 0.5 ps apart are distinct, and a stream started with its input 0.5 ps later failed
#: verification at 1 ps.
EPS = 1e-15
#: A link busy for less than this fraction of the current time past a stream's start is
#: float rounding of equal times (a few hundred ulps at most), not a wait.
NOISE = 1e-13

#: Operations the loop makes room for at first (it grows its arrays as needed).
INITIAL_OPS = 1 << 16
#: ``engine="auto"`` runs the compiled loop once it is loaded in this process, and loads it
#: itself for instances of at least this size, where the uncompiled run would take longer than
#: loading numba (about 1 s); smaller one-off plans run uncompiled. Size: (rank, subchunk)
#: pairs x (datacenters + 1), since the uncompiled run's per-datacenter loops dominate on
#: fabrics of many datacenters (3 DCs x 8 GPUs with 8 subchunks: 18,432, about 1 s uncompiled).
AUTO_SIZE = 1 << 15


@dataclass
class Plan:
    """The planner's output before lowering: one entry per operation (numpy columns).

    Routes are CSR arrays: operation ``i`` uses ``route_links[route_ptr[i]:route_ptr[i + 1]]``."""

    topology: Topology
    collective: Collective
    subchunks: int
    size: float
    op_src: np.ndarray
    op_dst: np.ndarray
    op_sub: np.ndarray
    op_start: np.ndarray
    op_finish: np.ndarray
    op_dep: np.ndarray
    route_ptr: np.ndarray
    route_links: np.ndarray
    events: dict = field(default_factory=dict)
    decisions: dict = field(default_factory=dict)
    plan_s: float = 0.0
    wall_s: float = 0.0
    engine: str = "python"

    def routes(self) -> list[tuple[int, ...]]:
        """The route (link ids) of every operation."""
        ptr, links = self.route_ptr.tolist(), self.route_links.tolist()
        return [tuple(links[ptr[i] : ptr[i + 1]]) for i in range(len(ptr) - 1)]


def _check(topology: Topology, collective: Collective) -> None:
    """One-line errors for what the planner cannot plan."""
    if collective.num_ranks != topology.num_ranks:
        raise CollsynthError(
            f"collective has {collective.num_ranks} ranks but topology "
            f"{topology.name!r} has {topology.num_ranks} compute nodes"
        )
    if collective.kind not in SUPPORTED:
        raise CollsynthError(
            f"scale does not support {collective.kind.value} (it plans "
            f"allgather, broadcast and multicast)"
        )


def _bitsets(collective: Collective, n: int, k: int, W: int) -> tuple[np.ndarray, np.ndarray]:
    """``has`` and ``want`` of every rank as W words of 63 bits (subchunk ``j * nch + ch``)."""
    nch = collective.num_chunks
    pre = np.zeros((n, nch), dtype=bool)
    pre[collective.chunk_source, np.arange(nch)] = True
    post = np.zeros((n, nch), dtype=bool)
    ranks, chunks = collective.postcondition()
    post[ranks, chunks] = True
    weights = np.left_shift(np.int64(1), np.arange(WORD, dtype=np.int64))
    out = []
    for a in (pre, post):
        full = np.zeros((n, W * WORD), dtype=np.int64)
        full[:, : nch * k] = np.tile(a, (1, k))
        out.append((full.reshape(n, W, WORD) * weights).sum(axis=2, dtype=np.int64))
    return out[0], out[1]


def _run(
    topology: Topology,
    collective: Collective,
    k: int,
    size: float,
    link_free0: np.ndarray | None,
    compiled: bool,
) -> Plan:
    """Run the loop, compiled or not, on one instance and wrap its output as a :class:`Plan`.

    ``link_free0``: when each link has drained its queue (re-planning input)."""
    wall0 = _time.perf_counter()
    _check(topology, collective)
    graph = graph_tables(topology)
    nch = collective.num_chunks
    S = nch * k
    W = (S + WORD - 1) // WORD
    sub_bytes = collective.chunk_bytes(size) / k
    has, want = _bitsets(collective, graph.n_ranks, k, W)
    bw = topology.link_bw.astype(np.float64)
    free = (
        np.zeros(graph.n_links)
        if link_free0 is None
        else np.array(link_free0, dtype=np.float64, copy=True)
    )
    links = Links(
        free=free, bw=bw, alpha=topology.link_alpha.astype(np.float64), delta=sub_bytes / bw
    )
    params = Params(
        n_chunks=nch,
        subchunks=k,
        n_subs=S,
        words=W,
        sub_bytes=float(sub_bytes),
        eps=EPS,
        noise=NOISE,
    )
    loop = compiled_run_loop() if compiled else run_loop
    counters, ops = loop(
        graph, params, links, has, want, max(1, min(graph.n_ranks * S, INITIAL_OPS))
    )
    if counters[STALLED]:
        raise CollsynthError(
            "scale: some ranks cannot be reached (the plan stalled with data still missing)"
        )
    result = Plan(
        topology,
        collective,
        k,
        float(size),
        op_src=ops.src,
        op_dst=ops.dst,
        op_sub=ops.sub,
        op_start=ops.start,
        op_finish=ops.finish,
        op_dep=ops.dep,
        route_ptr=ops.route_ptr,
        route_links=ops.route_links,
        engine="numba" if compiled and loop is not run_loop else "python",
    )
    result.events = {
        EVENT_NAMES[e]: int(counters[EVENTS + e]) for e in (TX_START, TX_END, RX_START, RX_END)
    }
    result.decisions = {
        "lwnf": int(counters[LWNF]),
        "lwnf_refused": int(counters[LWNF_REFUSED]),
        "ss_calls": int(counters[SS_CALLS]),
        "ss_duplicates": int(counters[SS_DUPLICATES]),
        "rounds": int(counters[ROUNDS]),
    }
    result.plan_s = float(ops.finish.max()) if len(ops.finish) else 0.0
    result.wall_s = _time.perf_counter() - wall0
    return result


_LOADED: dict = {}
#: the files the compiled loop is made from (their content keys the "compiled" marker)
_SOURCES = SOURCES


def _cached() -> bool:
    """Whether ``engine="auto"`` may load the compiled loop: it is in numba's on-disk cache,
    or the first-run policy says compile now (:mod:`collsynth.jit`). With the default policy a
    missing loop is compiled by a background process for later commands, and this one runs
    uncompiled (compiling takes about a minute; the plan is the same)."""
    if jit.ready("scale", _SOURCES):
        return True
    mode = jit.policy()
    if mode == "foreground":
        return True
    if mode == "background":
        jit.build_in_background(
            "scale", _SOURCES, "from collsynth.synth.scale import load_kernel; load_kernel()"
        )
    return False


def load_kernel() -> dict:
    """Make the compiled loop available in this process (numba: compile it, or load it from
    numba's on-disk cache, ``cache=True``) and warm it on a tiny instance. Idempotent; returns
    ``{"load_s", "load_cpu_s", "cache_hits", "cache_misses", "compiled"}`` of the first call
    (``compiled`` is False when numba is not importable: the loop then runs as plain Python).
    A re-planning service calls this once at start-up; afterwards ``engine="auto"`` uses the
    compiled loop."""
    if not _LOADED:
        w0, c0 = _time.perf_counter(), _time.process_time()
        loop = compiled_run_loop()
        _warm()
        stats = getattr(loop, "stats", None)
        _LOADED.update(
            load_s=_time.perf_counter() - w0,
            load_cpu_s=_time.process_time() - c0,
            cache_hits=sum(stats.cache_hits.values()) if stats else 0,
            cache_misses=sum(stats.cache_misses.values()) if stats else 0,
            compiled=loop is not run_loop,
        )
        if loop is not run_loop:
            jit.mark_ready("scale", _SOURCES)
    return dict(_LOADED)


def _warm() -> None:
    """Compile (or load from cache) the loop by planning a two-GPU instance with a router."""
    from ...topology.model import Link, Node, NodeKind

    t = Topology(
        "scale_warm",
        [Node("g0", NodeKind.COMPUTE), Node("g1", NodeKind.COMPUTE), Node("r", NodeKind.ROUTER)],
        [
            Link(0, 0, 1, 1e9, 1e-6, "x", 1),
            Link(1, 1, 0, 1e9, 1e-6, "x", 1),
            Link(2, 0, 2, 1e9, 1e-6, "x", 1),
            Link(3, 2, 1, 1e9, 1e-6, "x", 1),
        ],
    )
    p = _run(t, Collective.make("allgather", 2), 2, 1e6, None, True)
    if len(p.op_src) != 4:  # pragma: no cover - a broken build
        raise CollsynthError("scale: the compiled planner failed its warm-up")


def lower(p: Plan) -> Schedule:
    """The timed IR: one operation per GPU-to-GPU stream, byte range = its subchunk.

    Built column-wise (numpy) rather than op by op: re-planning time counts."""
    if p.collective.num_ranks != p.topology.num_ranks:
        raise CollsynthError("plan collective and topology disagree on the number of ranks")
    n_ops = len(p.op_src)
    k = p.subchunks
    nch = p.collective.num_chunks
    sub = np.asarray(p.op_sub, dtype=np.int64)
    dep = np.asarray(p.op_dep, dtype=np.int64)
    has_dep = dep >= 0
    dep_ptr = np.zeros(n_ops + 1, dtype=np.int64)
    np.cumsum(has_dep, out=dep_ptr[1:])
    j = sub // nch
    meta = {
        "scale": {
            "subchunks": k,
            "sub_bytes": p.collective.chunk_bytes(p.size) / k,
            "plan_time_s": p.plan_s,
            "plan_wall_s": p.wall_s,
            "engine": p.engine,
            "events": p.events,
            "decisions": p.decisions,
        }
    }
    return Schedule(
        topology=p.topology,
        collective=p.collective,
        src=np.asarray(p.op_src, dtype=np.int64),
        dst=np.asarray(p.op_dst, dtype=np.int64),
        chunk=sub % nch,
        kind=np.zeros(n_ops, dtype=np.int8),
        route_ptr=np.asarray(p.route_ptr, dtype=np.int64),
        route_links=np.asarray(p.route_links, dtype=np.int64),
        dep_ptr=dep_ptr,
        dep_ids=dep[has_dep],
        start=np.asarray(p.op_start, dtype=np.float64),
        duration=None,
        step=None,
        part_lo=j if k > 1 else None,
        part_hi=j + 1 if k > 1 else None,
        part_den=np.full(n_ops, k, dtype=np.int64) if k > 1 else None,
        size=p.size,
        meta=meta,
    )


def plan(
    topology: Topology,
    collective: Collective,
    subchunks: Any = None,
    size: Any = None,
    stats: LinkStats | None = None,
    engine: str = "auto",
) -> Plan:
    """Run the SCALE-CCL loop (no IR). ``stats`` replaces the topology's bandwidths and delays
    and delays each link by its queue. ``engine``: ``"numba"`` (the loop compiled; plain
    Python where numba is not importable), ``"python"`` (the same loop uncompiled) or
    ``"auto"`` (compiled once :func:`load_kernel` has run, or for instances of at least
    :data:`AUTO_SIZE`; else uncompiled); all give the same plan."""
    c = int_option(subchunks, "subchunks", "scale", minimum=1) or DEFAULT_SUBCHUNKS
    if c > 4096:
        raise CollsynthError(f"scale option subchunks={c} is above 4096")
    nbytes = size_option(size, "scale", DEFAULT_SIZE)
    if engine not in ("auto", "numba", "python"):
        raise CollsynthError(f"scale engine {engine!r} is not auto, numba or python")
    free0 = None
    if stats is not None:
        topology = stats.apply(topology)
        free0 = stats.queue_delay()
    if engine == "auto":
        pairs = topology.num_ranks * collective.num_chunks * c
        work = pairs * (graph_tables(topology).n_doms + 1)
        compiled = bool(_LOADED) or (work >= AUTO_SIZE and jit.numba_available() and _cached())
    else:
        compiled = engine == "numba"
    if compiled:
        load_kernel()
    return _run(topology, collective, c, nbytes, free0, compiled)


@register(
    "scale",
    collectives=SUPPORTED,
    summary="SCALE-CCL: event-driven WAN-aware heuristic, load-aware "
    "neighbour forwarding and subchunk scheduling; timed",
    options=(
        Option(
            "subchunks",
            "int",
            1,
            minimum=1,
            shorthand=True,
            help="subchunks per chunk c: each chunk moves as c byte ranges, pipelined through GPUs",
        ),
    ),
    size_aware=True,
    reference="Xiong, Zhang, Medagliani, Ferrero, Liu and Lian, 'SCALE-CCL: A Scalable "
    "Collective Communication Library for Wide-Area Distributed Training', "
    "ACM INET4AI 2025, doi:10.1145/3769695.3771677",
)
def synthesize(
    topology: Topology, collective: Collective, *, size: float | None = None, subchunks: Any = None
) -> Schedule:
    """SCALE-CCL: event-driven load-aware forwarding and subchunk scheduling."""
    return lower(plan(topology, collective, subchunks, size))


def replan(
    topology: Topology,
    stats: LinkStats | dict | str,
    collective: Collective | None = None,
    *,
    subchunks: Any = 8,
    size: Any = None,
    verify: bool = True,
    engine: str = "auto",
) -> Schedule:
    """Re-plan under new link statistics (a :class:`LinkStats`, its JSON dict, or a file path).

    The schedule belongs to the topology with the statistics' bandwidths and delays applied;
    links start busy for ``queue / bandwidth``. AllGather by default. ``engine`` as in
    :func:`plan` (call :func:`load_kernel` once first for millisecond re-plans).
    """
    if not isinstance(stats, LinkStats):
        if isinstance(stats, str):
            stats = LinkStats.load(stats, topology)
        else:
            stats = LinkStats.from_dict(stats, topology)
    if collective is None:
        collective = Collective.make("allgather", topology.num_ranks)
    sched = lower(plan(topology, collective, subchunks, size, stats, engine))
    sched = sched.with_meta(algorithm="scale", replanned=True)
    if verify:
        from ...verify import ensure_verified

        ensure_verified(sched)
    return sched
