"""Stage 2 alternative: TE-CCL's epoch MILP per distinct sub-demand (``--opt stage2=milp``).

The AllGather inside one group of a dimension is a small demand on a small sub-topology: the
group's GPUs plus the switches and links on the detected routes between them (rail: NIC, leaf,
...; island: the NVSwitch). Every group of a dimension is isomorphic to the first (the detector
verified that), so a solution is replicated to every group by mapping positions to ranks.
Links shared by several groups of the dimension (a NIC shared by two GPUs on ``a800_clos``)
get their bandwidth divided by the number of groups using them, so the sub-problem sees its
share of the capacity.

A sub-demand (one item per member, of a stage's item size) is identified by
:func:`subdemand_key`: its dimension and the integer epoch grid TE-CCL's MILP is built from;
equal keys are the same MILP, solved once for every candidate and stage that needs it. The
caller (:mod:`.algo`) solves them in two steps: every candidate's at the coarse epoch
(``COARSE_MULT`` x TE-CCL's fast epoch) to filter, the survivors' at the fine (fast) epoch to
select. :func:`solve_many` runs the distinct sub-demands of a step in a process pool of
``workers`` processes (``workers=1``: in this process); results come back in job order, and
each solve is HiGHS with one thread and a fixed seed, so the output is the same with any number
of workers (as long as no solve stops at its time limit).

A solved schedule becomes a template (:class:`.build.Template` rows): each operation is a
transfer of the origin position's data (``chunk``) from ``src`` to ``dst``, after the transfer
that delivered it to ``src`` (relays through GPUs are chains), with its planned epoch order as
the hop depth (the simulator serves earlier epochs first on a shared link).
"""

from __future__ import annotations

import numpy as np

from ...collective import Collective, CollKind
from ...errors import CollsynthError
from ...topology.model import Topology, TopologyBuilder
from ..teccl.epochs import make_grid
from .symmetry import Fabric

#: groups larger than this are not given to the MILP (the template is used)
MILP_MAX_GROUP = 16
MILP_TIME_LIMIT = 20.0
MILP_GAP = 1e-4
#: coarse epoch = COARSE_MULT x TE-CCL's fast epoch (filter); fine = the fast epoch (select)
COARSE_MULT = 4.0
FINE_MULT = 1.0


def sub_topology(topology: Topology, fab: Fabric, dim: str) -> Topology:
    """The first group of ``dim`` with the nodes and links of its routes (shared links get
    their per-group share of the bandwidth)."""
    t = topology
    groups = fab.rails if dim == "rail" else fab.islands
    routes = fab.net_routes if dim == "rail" else fab.island_routes
    users: dict[int, set[int]] = {}
    for gi, grp in enumerate(groups):
        for a in grp:
            for b in grp:
                if a != b:
                    for lid in routes[(a, b)]:
                        users.setdefault(lid, set()).add(gi)
    grp = groups[0]
    links = sorted({lid for a in grp for b in grp if a != b for lid in routes[(a, b)]})
    gpus = [t.node_of_rank(r) for r in grp]
    others = sorted({x for lid in links for x in (t.links[lid].src, t.links[lid].dst)} - set(gpus))
    tb = TopologyBuilder(f"{t.name}.{dim}0")
    idx = {}
    for x in gpus:
        idx[x] = tb.compute(t.nodes[x].name)
    for x in others:
        nd = t.nodes[x]
        idx[x] = tb.compute(nd.name) if t.is_compute(x) else tb.switch(nd.name)
    for lid in links:
        lk = t.links[lid]
        tb.link(idx[lk.src], idx[lk.dst], lk.bw / len(users[lid]), lk.alpha)
    return tb.build()


def subdemand_key(sub: Topology, dim: str, chunk_bytes: float, mult: float) -> tuple:
    """Identity of a sub-demand's MILP: the dimension (its sub-topology) and the integer epoch
    grid the MILP is built from (capacities, alpha/beta epochs, windows, delays) at epoch
    ``mult`` x TE-CCL's fast epoch for chunks of ``chunk_bytes``. Two sub-demands with equal
    keys are the same MILP (the chunk size enters the MILP only through the grid), so one
    solution serves both."""
    gr = make_grid(sub, chunk_bytes, "fast", mult)
    return (
        dim,
        float(mult),
        np.round(gr.cap, 9).tobytes(),
        gr.alpha_ep.tobytes(),
        gr.beta_ep.tobytes(),
        gr.window.tobytes(),
        gr.per_window.tobytes(),
        gr.delay.tobytes(),
    )


def _solve(args: tuple) -> tuple[list | None, dict]:
    """Solve one sub-demand (runs in a pool worker or in process); returns template rows."""
    dim, sub, chunk_bytes, mult = args
    from .. import synthesize

    g = sub.num_ranks
    c = Collective(CollKind.ALLGATHER, g)
    base = {"dim": dim, "epoch_multiplier": mult, "chunk_bytes": chunk_bytes}
    try:
        s = synthesize(
            "teccl",
            sub,
            c,
            size=chunk_bytes * g,
            link_order=False,
            time_limit=MILP_TIME_LIMIT,
            gap=MILP_GAP,
            epoch_multiplier=mult,
        )
    except CollsynthError as e:
        return None, {**base, "error": str(e)}
    tm = s.meta.get("teccl", {})
    info = {
        **base,
        **{k: tm.get(k) for k in ("status", "epochs_required", "tau_s")},
        "solver_wall_s": s.meta.get("timing", {}).get("teccl.solver_wall_s"),
    }
    start = s.start if s.start is not None else np.zeros(s.num_ops)
    order = sorted(range(s.num_ops), key=lambda i: (float(start[i]), i))
    epochs = {v: k for k, v in enumerate(sorted({float(start[i]) for i in order}))}
    row_of: dict[int, int] = {}
    rows: list[tuple[int, int, int, int, int]] = []
    for i in order:
        if s.has_parts:
            assert s.part_lo is not None and s.part_hi is not None and s.part_den is not None
            if not (s.part_lo[i] == 0 and s.part_hi[i] == s.part_den[i]):
                return None, {**info, "error": "the MILP split a chunk"}
        a, bb, o = int(s.src[i]), int(s.dst[i]), int(s.chunk[i])
        prev = -1
        if a != o:
            cands = [
                row_of[int(d)]
                for d in s.deps(i).tolist()
                if int(d) in row_of and int(s.chunk[int(d)]) == o and int(s.dst[int(d)]) == a
            ]
            if not cands:
                return None, {**info, "error": "a relay without its delivery"}
            prev = cands[0]
        row_of[i] = len(rows)
        rows.append((a, bb, o, prev, epochs[float(start[i])]))
    return rows, info


def solve_many(jobs: list[tuple], workers: int) -> list[tuple[list | None, dict]]:
    """Solve the distinct sub-demands ``jobs`` ((dim, sub-topology, chunk bytes, epoch
    multiplier) each) in a pool of ``workers`` processes (1: in this process); results in the
    order of ``jobs`` whatever the number of workers."""
    if workers > 1 and len(jobs) > 1:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        # fork (where available): workers need not re-import the caller's main module
        ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
        with ProcessPoolExecutor(max_workers=min(workers, len(jobs)), mp_context=ctx) as pool:
            return list(pool.map(_solve, jobs))
    return [_solve(j) for j in jobs]
