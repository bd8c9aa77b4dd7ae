"""The compact form against the explicit one, on every symmetric schedule the zoo gives.

Issue 36 asks that on every schedule of up to 1,024 GPUs that both can handle (every zoo
fabric where a group exists, every collective), the compact verifier and the explicit verifier
agree, on correct schedules and on planted defects, and that the simulation on the quotient
equals the explicit simulation within ``1e-9`` relative. This suite does that: every zoo
fabric at its default parameters (and ``dgx_a100:nodes=128``, 1,024 GPUs, with ForestColl),
every collective a free group can keep (AllGather, ReduceScatter, AllReduce, AllToAll: a rooted
collective's root is fixed by every element), every algorithm that makes it, at 1 MB. For each
schedule that has a compact form (:func:`~collsynth.schedule.compact.compact_or_reason`):

* both verifiers on the schedule, and on :data:`PLANTS` defects planted in its representatives
  (:func:`plants`: a dependency on the wrong member of its orbit, a dependency dropped, a hop
  moved to another link of its orbit, a representative carrying another chunk): each verdict
  and the rule it names must agree (the explicit verifier runs on the expansion; a planted
  dependency change may leave a valid schedule where the dependency was redundant, and both
  must then accept it);
* the simulation of the compact form against the explicit one (every hop), planned and
  realized: the largest relative difference of the makespan, of any link's busy time and of
  any rank's finish.

``collsynth bench compact -o bench/results`` writes ``compact.json`` and ``compact.md``;
``--only TEXT`` runs the fabrics whose spec contains the text.
"""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Callable, Iterator
from dataclasses import replace

import numpy as np

from ..collective import Collective
from ..errors import CollsynthError
from ..schedule.compact import CompactSchedule, compact_or_reason
from ..schedule.dag import owners
from .common import read_json, select, summary, write_files

Progress = Callable[[str], None] | None

#: every zoo fabric at its default parameters, then the 1,024-GPU one (ForestColl only)
FABRICS = ("a800_clos", "dgx1", "dgx2", "dgx_a100", "dgx_h100", "dragonfly", "fat_tree", "full",
           "h800_rails", "hypercube", "line", "mesh2d", "mi250", "ndv2", "random_regular", "ring",
           "star", "torus2d", "torus3d", "wan", "dgx_a100:nodes=128")  # fmt: skip
#: the collectives a group acting freely on the ranks can keep
COLLECTIVES = ("allgather", "reducescatter", "allreduce", "alltoall")
#: the algorithms tried (each on the collectives it makes); the large fabric: ForestColl
ALGORITHMS = ("ring", "rd", "direct", "bruck", "spt", "sph", "hier_ring", "tree", "forestcoll",
              "nvls", "syccl", "mteg", "teccl", "scale")  # fmt: skip
LARGE = {"dgx_a100:nodes=128": ("forestcoll",)}
#: a synthesis taking longer is skipped (said in the row); the large fabric's may take longer
SYNTH_LIMIT_S = 20.0
LARGE_LIMIT_S = 300.0
#: defects planted per schedule, each kind once (see :func:`plants`)
PLANTS = 4
SIZE = 1e6


def plants(c: CompactSchedule, rng: np.random.Generator) -> Iterator[tuple[str, CompactSchedule]]:
    """Defects planted in the representatives: a dependency on the wrong member of its orbit,
    a dependency dropped, a hop moved to another link of its orbit (its image then breaks the
    route), a representative carrying another chunk."""
    order, r = c.action.order, c.reps
    with_deps = np.flatnonzero(np.diff(c.dep_ptr) > 0)
    if len(with_deps):  # (a schedule of direct transfers has none)
        j = int(c.dep_ptr[with_deps[rng.integers(len(with_deps))]])
        elem = c.dep_elem.copy()
        elem[j] = (elem[j] + 1 + int(rng.integers(order - 1))) % order
        yield "wrong element", replace(c, dep_elem=elem)
        keep = np.ones(len(c.dep_orbit), dtype=bool)
        keep[j] = False
        n = c.num_reps
        ptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(owners(c.dep_ptr)[keep], minlength=n), out=ptr[1:])
        yield "dependency dropped", replace(c, dep_ptr=ptr, dep_orbit=c.dep_orbit[keep],
                                            dep_elem=c.dep_elem[keep])  # fmt: skip
    if len(r.route_links):
        links = r.route_links.copy()
        h = int(rng.integers(len(links)))
        links[h] = c.action.link_perms[1 + int(rng.integers(order - 1)), links[h]]
        yield "image breaks a link", replace(c, reps=replace(r, route_links=links))
    movers = np.flatnonzero(r.kind != 2)
    if len(movers):
        chunk = r.chunk.copy()
        i = int(movers[rng.integers(len(movers))])
        chunk[i] = (chunk[i] + 1) % c.collective.num_chunks
        yield "chunk moved", replace(c, reps=replace(r, chunk=chunk))


def _cases(only: str | None) -> list[str]:
    return select("compact", list(FABRICS), lambda f: f, only)


def _verdicts(c: CompactSchedule) -> tuple[tuple, tuple]:
    """(compact verdict, explicit verdict): each ``(ok, rule)``."""
    from ..verify import check_schedule
    from ..verify.compact import check_compact

    mine = check_compact(c)
    theirs = check_schedule(c.expand())
    return (mine.ok, mine.error_check), (theirs.ok, theirs.error_check)


def _sim_diff(c: CompactSchedule, s) -> float:
    """Largest relative difference of the makespan, link busy times and rank finishes between
    the compact simulation and the explicit one, planned and realized."""
    from ..sim import simulate

    worst = 0.0
    for order in ("plan", "fair"):
        fast = simulate(c, SIZE, order=order)
        full = simulate(s, SIZE, order=order, symmetric=False)
        scale = full.time_s
        for a, b in ((fast.time_s, full.time_s), (fast.link_busy_s, full.link_busy_s),
                     (fast.per_rank_time_s, full.per_rank_time_s)):  # fmt: skip
            worst = max(worst, float(np.max(np.abs(np.asarray(a) - np.asarray(b)))) / scale)
    return worst


def run_fabric(spec: str, progress: Progress = None) -> list[dict]:
    """The rows of one fabric: one per (collective, algorithm) that makes a schedule."""
    from ..deadline import time_limit
    from ..synth import synthesize
    from ..synth.registry import load_all
    from ..topology import load_topology

    topo = load_topology(spec)
    algos = load_all()
    rows = []
    rng = np.random.default_rng(36)
    for kind in COLLECTIVES:
        coll = Collective.make(kind, topo.num_ranks)
        for name in LARGE.get(spec, ALGORITHMS):
            if name not in algos or coll.kind not in algos[name].collectives:
                continue
            row: dict = {"fabric": spec, "collective": kind, "algorithm": name,
                         "gpus": topo.num_ranks}  # fmt: skip
            t0 = time.perf_counter()
            try:
                with time_limit(LARGE_LIMIT_S if spec in LARGE else SYNTH_LIMIT_S):
                    s = synthesize(name, topo, coll, size=SIZE)
            except CollsynthError as e:
                rows.append({**row, "skipped": str(e).splitlines()[0][:120]})
                continue
            row["synth_s"] = time.perf_counter() - t0
            c = compact_or_reason(s)
            if not isinstance(c, CompactSchedule):
                rows.append({**row, "no_compact_form": c})
                continue
            mine, theirs = _verdicts(c)
            planted = []
            for what, p in plants(c, rng):
                a, b = _verdicts(p)
                planted.append({"defect": what, "compact": a[1], "explicit": b[1],
                                "caught": not a[0] and not b[0], "agree": a == b})  # fmt: skip
            row.update(
                group=c.action.order,
                representatives=c.num_reps,
                ops=s.num_ops,
                verified=bool(mine[0] and theirs[0]),
                agree=mine == theirs,
                planted=planted,
                sim_rel_diff=_sim_diff(c, s),
            )
            rows.append(row)
            if progress:
                progress(f"  {spec} {kind} {name}: G={c.action.order}, agree {row['agree']}, "
                         f"defects {sum(p['agree'] and p['caught'] for p in planted)}/"
                         f"{len(planted)}, sim {row['sim_rel_diff']:.1e}")  # fmt: skip
    return rows


def holds(row: dict) -> bool:
    """A compact row's verdict: both verifiers accept the schedule, give the same verdict and
    rule on every planted change (a dependency planted wrong or dropped may have been
    redundant: both then accept it, which is agreement, not a caught defect), and the
    simulations agree within 1e-9."""
    return bool(row.get("verified") and row.get("agree")
                and all(p["agree"] for p in row.get("planted", []))
                and row.get("sim_rel_diff", 1.0) <= 1e-9)  # fmt: skip


def run_suite(out_dir: str, repeat: int = 1, progress: Progress = None,
              only: str | None = None) -> dict:  # fmt: skip
    """Run the fabrics (``only``: those whose spec contains the text) and write
    ``compact.json`` and ``compact.md`` (the other fabrics' rows kept from the existing
    file)."""
    todo = _cases(only)
    t0 = time.perf_counter()
    rows: list[dict] = []
    for spec in todo:
        if progress:
            progress(f"compact: {spec}")
        rows.extend(run_fabric(spec, progress))
    path = os.path.join(out_dir, "compact.json")
    merged = [r for r in read_json(path).get("rows", []) if r.get("fabric") not in todo] + rows
    merged.sort(key=lambda r: (FABRICS.index(r["fabric"]) if r["fabric"] in FABRICS else 99,
                               COLLECTIVES.index(r["collective"]), r["algorithm"]))  # fmt: skip
    data = {"suite": "compact",
            "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
            "size_bytes": SIZE, "rows": merged}  # fmt: skip
    write_files(out_dir, {"compact.json": json.dumps(data, indent=1),
                          "compact.md": to_markdown(data)})  # fmt: skip
    return {"summary": summary(len(FABRICS), len(todo), len(merged), time.perf_counter() - t0,
                               only)}  # fmt: skip


def to_markdown(data: dict) -> str:
    rows = data["rows"]
    compact = [r for r in rows if "group" in r]
    fabrics = sorted({r["fabric"] for r in compact})
    ok = sum(holds(r) for r in compact)
    planted = [p for r in compact for p in r["planted"]]
    caught = sum(p["agree"] and p["caught"] for p in planted)
    accepted = sum(p["agree"] and not p["caught"] for p in planted)
    lines = [
        "# bench suite `compact`",
        "",
        f"The compact form against the explicit one (issue 36, items 3 and 4), at "
        f"{data['size_bytes'] / 1e6:g} MB on {data['machine']['cpus']} cores: every zoo fabric "
        "at its default parameters and `dgx_a100:nodes=128` (ForestColl), every collective a "
        "group acting freely on the ranks keeps, every algorithm that makes it. "
        f"**{len(compact)} schedules have a compact form, on {len(fabrics)} fabrics; "
        f"{ok} of {len(compact)} hold**: both verifiers accept the schedule and give the "
        f"same verdict and rule on every one of the {len(planted)} planted changes "
        f"({caught} caught by both; {accepted} accepted by both: a dependency planted on "
        "another member of its orbit, or dropped, that was redundant), and the simulation on "
        "the quotient equals the explicit one within 1e-9 relative, in the planned and the "
        "realized models. Rows without a compact form say why; `skipped`: the algorithm "
        f"refused or took more than {SYNTH_LIMIT_S:.0f} s ({LARGE_LIMIT_S:.0f} s on the large "
        "fabric).",
        "",
        "| fabric | collective | algorithm | group | representatives / ops | verifiers | "
        "planted: caught by both / accepted by both / of (rules) | sim rel. diff | holds |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in compact:
        both = sum(p["agree"] and p["caught"] for p in r["planted"])
        neither = sum(p["agree"] and not p["caught"] for p in r["planted"])
        kinds = ", ".join(sorted({p["compact"] for p in r["planted"] if p["compact"]}))
        lines.append(
            f"| {r['fabric']} | {r['collective']} | {r['algorithm']} | {r['group']} | "
            f"{r['representatives']:,} / {r['ops']:,} | "
            f"{'both accept' if r['verified'] and r['agree'] else 'DIFFER'} | "
            f"{both} / {neither} / {len(r['planted'])} ({kinds}) | {r['sim_rel_diff']:.1e} | "
            f"{'yes' if holds(r) else 'no'} |"
        )
    rest = [r for r in rows if "group" not in r]
    if rest:
        lines += ["", "Without a compact form:", "", "| fabric | collective | algorithm | why |",
                  "|---|---|---|---|"]  # fmt: skip
        for r in rest:
            why = r.get("no_compact_form") or f"skipped: {r.get('skipped')}"
            lines.append(f"| {r['fabric']} | {r['collective']} | {r['algorithm']} | {why} |")
    return "\n".join(lines) + "\n"


__all__ = ["FABRICS", "holds", "plants", "run_fabric", "run_suite", "to_markdown"]
