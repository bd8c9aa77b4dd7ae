"""The benchmark harness: suites over topology x collective x size x algorithm.

``collsynth bench SUITE -o DIR`` runs a suite and writes ``DIR/SUITE.json`` (machine-readable,
for run-to-run comparison) and ``DIR/SUITE.md`` (a table). Timings are medians over
``--repeat`` runs: these machines are shared and noisy.

Suites:

* ``quick`` — small zoo topologies, every applicable algorithm, three sizes (smoke test).
* ``paper`` — the papers' platforms (NDv2 x2, DGX-A100 x2, MI250 x2), AllGather and AllReduce,
  1KB..1GB.
* ``fabrics`` — 64 to 1024 GPUs (ring on rail-optimised and torus fabrics; ForestColl on DGX A100
  to 1024 GPUs, on MI250 to 8 chassis (ForestColl's wiring) and to 32 chassis (TE-CCL's), on
  8x8 and 16x16 tori, the 4x4x4 torus and a k=8 fat tree): synthesis,
  verification and simulation time and quality.
* ``quality`` — ForestColl on every zoo fabric (defaults, plus mi250:chassis=2), AllGather,
  ReduceScatter and AllReduce at 1KB, 1MB, 1GB: time against the bound, the chosen k and
  pipeline depth, tree height; and NVLS AllReduce on a DGX H100 beside ForestColl on the same
  machine without NVLink SHARP, MTEG on 10 NDv2 chassis with 1 and 4 chunks per rank, and
  MTEG on DGX-2 x2 with copying NVSwitches, with and without switch multicast
  (``switch_copy=1``), and TE-CCL's MILP with a 45 s limit on DGX-2 x2, NDv2 x4 and an 8x5
  mesh.

The simulator's own speed is ``bench sim`` (:mod:`collsynth.bench.sim`).
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..bound import bound
from ..collective import Collective
from ..errors import CollsynthError
from ..parallel import Pool, run_cases
from ..sim import MODEL_NAMES, REALIZED, simulate
from ..synth import load_all, synthesize_alternatives
from ..synth.options import parse_assignments
from ..synth.order import fastest, without_chosen_order
from ..topology import load_topology
from ..verify import verify
from .common import legacy_units

KB, MB, GB = 1e3, 1e6, 1e9


def _median_time(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    times = []
    out = None
    for _ in range(max(1, repeat)):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


@dataclass
class Case:
    topology: str
    collective: str
    algo: str
    sizes: tuple[float, ...]
    chunks: int = 1
    opts: str = ""  # algorithm options, key=value,key=value

    def kwargs(self) -> dict:
        items = [self.opts] if self.opts.strip() else []  # no options: nothing to parse
        return parse_assignments(items, self.algo).get(self.algo, {})


def _cases_quick() -> list[Case]:
    algos = sorted(load_all())
    cases = []
    for topo in ("ring:n=8", "dgx1", "star:n=8", "dgx_a100:nodes=2", "torus2d:w=4,h=4"):
        for coll in ("allgather", "reducescatter", "allreduce", "alltoall"):
            for algo in algos:
                cases.append(Case(topo, coll, algo, (1 * KB, 1 * MB, 1 * GB)))
    return cases


def _cases_paper() -> list[Case]:
    algos = sorted(load_all())
    sizes = (1 * KB, 32 * KB, 1 * MB, 32 * MB, 1 * GB)
    cases = []
    for topo in ("ndv2:chassis=2", "dgx_a100:nodes=2", "mi250:chassis=2", "dgx2:chassis=2"):
        for coll in ("allgather", "allreduce"):
            for algo in algos:
                cases.append(Case(topo, coll, algo, sizes))
    return cases


def _cases_scale() -> list[Case]:
    cases = []
    for servers in (8, 16, 32, 64, 128):  # 64 .. 1024 GPUs
        cases.append(Case(f"h800_rails:servers={servers}", "allgather", "ring", (1 * GB,)))
    for side in (8, 16, 32):  # 64 .. 1024 GPUs
        cases.append(Case(f"torus2d:w={side},h={side}", "allgather", "ring", (1 * GB,)))
    for nodes in (2, 8, 32, 128):  # 16 .. 1024 GPUs
        cases.append(Case(f"dgx_a100:nodes={nodes}", "allgather", "forestcoll", (1 * GB,)))
    for chassis in (2, 4, 8):  # 32 .. 128 GCDs (16 and 32 chassis: see the notes)
        cases.append(Case(f"mi250:chassis={chassis}", "allgather", "forestcoll", (1 * GB,)))
    for chassis in (8, 16, 32):  # TE-CCL's MI250 model: 128 .. 512 GCDs
        cases.append(
            Case(f"mi250:chassis={chassis},inter=teccl", "allgather", "forestcoll", (1 * GB,))
        )
    for spec in ("torus2d:w=8,h=8", "torus2d:w=16,h=16", "torus3d", "fat_tree:k=8"):
        cases.append(Case(spec, "allgather", "forestcoll", (1 * GB,)))
    return cases


#: Every zoo fabric at its defaults, plus the two-chassis MI250 (the hardest case found).
QUALITY_TOPOLOGIES = (
    "a800_clos",
    "dgx1",
    "dgx2",
    "dgx_a100",
    "dragonfly",
    "fat_tree",
    "full",
    "h800_rails",
    "hypercube",
    "line",
    "mesh2d",
    "mi250",
    "mi250:chassis=2",
    "ndv2",
    "random_regular",
    "ring",
    "star",
    "torus2d",
    "torus3d",
    "wan",
)


def _cases_quality() -> list[Case]:
    forest = [
        Case(topo, coll, "forestcoll", (1 * KB, 1 * MB, 1 * GB))
        for coll in ("allgather", "reducescatter", "allreduce")
        for topo in QUALITY_TOPOLOGIES
    ]
    # in-switch reduction against the best without it, MTEG on 10 NDv2 chassis
    return forest + [
        Case("dgx_h100", "allreduce", "nvls", (1 * MB, 1 * GB)),
        Case("dgx_h100:nvls=0", "allreduce", "forestcoll", (1 * MB, 1 * GB)),
        Case("ndv2:chassis=10", "allgather", "mteg", (2**20,)),
        Case("ndv2:chassis=10", "allgather", "mteg", (2**20,), chunks=4),
        # TE-CCL's MILP at real sizes (symmetric model, 45 s; bench teccl has the full table)
        Case("dgx2:chassis=2", "allgather", "teccl", (1 * MB, 1 * GB), opts="time_limit=45"),
        Case("ndv2:chassis=4", "allgather", "teccl", (1 * GB,), opts="time_limit=45,epoch=slow"),
        Case(
            "ndv2:chassis=4",
            "allgather",
            "teccl",
            (1 * GB,),
            chunks=4,
            opts="time_limit=45,epoch=slow",
        ),
        Case("ndv2:chassis=4", "allgather", "teccl", (1 * MB,), chunks=4, opts="time_limit=45"),
        Case("mesh2d:w=8,h=5", "allgather", "teccl", (1 * GB,), chunks=2, opts="time_limit=45"),
        # switch multicast in MTEG (TE-CCL's copying NVSwitch), against copies one by one
        Case("dgx2:chassis=2,switch_copy=1", "allgather", "mteg", (1 * MB, 1 * GB)),
        Case(
            "dgx2:chassis=2,switch_copy=1",
            "allgather",
            "mteg",
            (1 * MB, 1 * GB),
            opts="switch_copy=1",
        ),
    ]


SUITES: dict[str, Callable[[], list[Case]]] = {
    "quick": _cases_quick,
    "paper": _cases_paper,
    "fabrics": _cases_scale,
    "quality": _cases_quality,
}


def run_case(case: Case, repeat: int) -> list[dict]:
    topo = load_topology(case.topology)
    algos = load_all()
    if case.algo not in algos:
        return [{**case.__dict__, "status": "skipped", "reason": f"algorithm {case.algo} missing"}]
    coll = Collective.make(case.collective, topo.num_ranks, case.chunks)
    if coll.kind not in algos[case.algo].collectives:
        return []
    per_size = algos[case.algo].size_aware
    rows: list[dict] = []
    cache: dict = {}
    for size in case.sizes:
        key = size if per_size else None
        if key not in cache:
            try:
                synth_s, base = _median_time(
                    lambda: synthesize_alternatives(
                        case.algo, topo, coll, size=key, **case.kwargs()
                    ),
                    repeat,
                )
            except CollsynthError as e:
                return rows + [
                    {
                        "topology": case.topology,
                        "collective": case.collective,
                        "algo": case.algo,
                        "chunks": case.chunks,
                        "status": "skipped",
                        "reason": str(e),
                    }
                ]
            cache[key] = (base, synth_s)
        base, synth_s = cache[key]
        sched = fastest(base, size)  # what executes: the order and alternative kept at this size
        verify_s, _ = _median_time(lambda: verify(sched), 1)
        sim_s, sim = _median_time(lambda: simulate(sched, size, order=REALIZED), repeat)
        planned = simulate(without_chosen_order(sched), size, order="plan").time_s
        b = bound(topo, sched.collective, size)
        rows.append(
            {
                "topology": case.topology,
                "gpus": topo.num_ranks,
                "collective": case.collective,
                "algo": case.algo,
                "chunks": case.chunks,
                **({"opts": case.opts} if case.opts else {}),
                "status": "ok",
                "size_bytes": size,
                "chunks_per_rank": sched.collective.chunks_per_rank,
                "ops": sched.num_ops,
                "hops": sim.hops,
                "synth_time_s": synth_s,
                "verify_time_s": verify_s,
                "sim_wall_s": sim_s,
                "sim_hops_per_s": sim.hops / sim_s if sim_s > 0 else None,
                "time_s": sim.time_s,
                "algbw_Bps": sim.algbw,
                "busbw_Bps": sim.busbw,
                "bound_time_s": b.time_s,
                "bound_kind": b.kind,
                "ratio_to_bound": sim.time_s / b.time_s,
                "model": REALIZED,
                "planned_time_s": planned,
                "planned_ratio_to_bound": planned / b.time_s,
                **_algo_info(sched),
            }
        )
    if case.algo == "forestcoll" and case.collective == "allreduce":
        _add_tree_lp(topo, rows)
    return rows


def run_rows(cases: list[Case], repeat: int, progress: Callable[[str], None] | None = None,
             pool: Pool | None = None) -> list[dict]:  # fmt: skip
    """The rows of ``cases`` in their order, each case run where ``pool`` says."""

    def label(i: int) -> str:
        return f"{cases[i].algo} {cases[i].collective} on {cases[i].topology}"

    per_case = run_cases(
        run_case,
        [(c, repeat) for c in cases],
        pool,
        on_start=(lambda i: progress(label(i))) if progress else None,
        on_done=(lambda i, done, total: progress(f"{done}/{total} done: {label(i)}"))
        if progress and pool is not None and pool.distributed
        else None,
    )
    return [r for rows in per_case for r in rows]


def _add_tree_lp(topo, rows: list[dict]) -> None:
    """ForestColl's Appendix E LP: the best in-tree + out-tree AllReduce time (exact without
    switches, a relaxation with them), next to the simulated time; skipped when too big."""
    from ..synth.forestcoll import allreduce_lp

    try:
        lp = allreduce_lp(topo)
    except CollsynthError:
        return
    for r in rows:
        if r.get("status") == "ok":
            t = r["size_bytes"] * lp["inv_X"]
            r["tree_lp_time_s"] = t
            r["tree_lp_exact"] = lp["exact"]
            r["ratio_to_tree_lp"] = r["time_s"] / t


def _algo_info(sched) -> dict:
    """Per-size choices a size-aware algorithm recorded (ForestColl: k, pipeline, height)."""
    fc = sched.meta.get("forestcoll")
    if not fc:
        return {}
    out = {"k": fc.get("k"), "pipeline": fc.get("pipeline"), "tree_height": fc.get("tree_height")}
    if fc.get("allreduce"):
        out["allreduce"] = fc["allreduce"]  # "lp": the Appendix E trees, k = trees per rank
    return out


def _algo_label(row: dict) -> str:
    """The algorithm, with the chunks per rank the case asked for where not one."""
    chunks = row.get("chunks") or 1
    opts = f" {row['opts']}" if row.get("opts") else ""
    return row["algo"] + opts + (f" ({chunks} chunks/rank)" if chunks != 1 else "")


def _markdown(suite: str, rows: list[dict]) -> str:
    ok = [r for r in rows if r.get("status") == "ok"]
    lines = [
        f"# bench suite `{suite}`",
        "",
        "| topology | GPUs | collective | algo | size | time | algbw GB/s | x bound | "
        "synth s | verify s | sim s | Mhops/s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    from ..units import fmt_size, fmt_time

    planned = any("planned_ratio_to_bound" in r for r in ok)
    if planned:
        lines[2] = lines[2].replace("| x bound |", "| x bound | planned x bound |")
        lines[3] += "---|"
    choices = any("k" in r for r in ok)
    if choices:
        lines[2] = lines[2][:-1] + " k | P | height |"
        lines[3] += "---|---|---|"
    tree_lp = any("ratio_to_tree_lp" in r for r in ok)
    if tree_lp:
        lines[2] = lines[2][:-1] + " x tree LP |"
        lines[3] += "---|"
    for r in ok:
        mh = r["sim_hops_per_s"] / 1e6 if r["sim_hops_per_s"] else float("nan")
        line = (
            f"| {r['topology']} | {r['gpus']} | {r['collective']} | {_algo_label(r)} | "
            f"{fmt_size(r['size_bytes'])} | {fmt_time(r['time_s'])} | "
            f"{r['algbw_Bps'] / 1e9:.4g} | {r['ratio_to_bound']:.4g} | "
            + (f"{r['planned_ratio_to_bound']:.4g} | " if planned else "")
            + f"{r['synth_time_s']:.3g} | {r['verify_time_s']:.3g} | "
            f"{r['sim_wall_s']:.3g} | {mh:.3g} |"
        )
        if choices:
            k = f"{r.get('k', '')}{' (LP)' if r.get('allreduce') == 'lp' else ''}"
            line += f" {k} | {r.get('pipeline', '')} | {r.get('tree_height', '')} |"
        if tree_lp:
            x = r.get("ratio_to_tree_lp")
            line += f" {x:.4g}{'' if r.get('tree_lp_exact') else '*'} |" if x is not None else "  |"
        lines.append(line)
    models = sorted({r.get("model", "plan") for r in ok})
    lines += [
        "",
        "`time`, `algbw` and `x bound` are simulated in the "
        + " / ".join(MODEL_NAMES.get(m, m) for m in models)
        + " model"
        + (
            "; `planned x bound`: the same schedule in the planned order (one transfer at a "
            "time per link, the plan's priorities first), which no executor enforces."
            if planned
            else "."
        ),
    ]
    if tree_lp:
        lines += [
            "",
            "`x tree LP`: simulated time over ForestColl's Appendix E AllReduce LP "
            "(best in-tree + out-tree scheme, bandwidth only); `*`: topology with "
            "switches, where the LP is relaxed through them (a lower bound for tree "
            "schemes, not always reachable). Empty: LP too big.",
        ]
    if any(r.get("allreduce") == "lp" for r in ok):
        lines += [
            "",
            "`k (LP)`: ForestColl's AllReduce trees shaped by that LP (unequal shares per "
            "rank, reductions and broadcasts sharing the links), `k` trees per rank on "
            "average; `height`: an in-tree's plus an out-tree's.",
        ]
    skipped = [r for r in rows if r.get("status") == "skipped"]
    if skipped:
        lines += ["", "Skipped:", ""]
        lines += [
            f"- {r['algo']} on {r['topology']} {r['collective']}: {r['reason']}" for r in skipped
        ]
    return "\n".join(lines) + "\n"


def _case_key(row_or_case) -> tuple:
    get = row_or_case.get if isinstance(row_or_case, dict) else (lambda k: getattr(row_or_case, k))
    return (get("topology"), get("collective"), get("algo"), get("chunks") or 1, get("opts") or "")


def _merge(
    path: str, suite: str, cases: list[Case], all_cases: list[Case], rows: list[dict]
) -> list[dict]:
    """Rows of the cases just run replace theirs in the results file at ``path``; the other
    cases' rows are kept; rows come out in the suite's case order."""
    from .common import read_json

    old = read_json(path)
    if old.get("suite") != suite:
        return rows
    ran = {_case_key(c) for c in cases}
    kept = [legacy_units(r) for r in old.get("rows", []) if _case_key(r) not in ran]
    order = {_case_key(c): i for i, c in enumerate(all_cases)}
    merged = kept + rows
    merged.sort(key=lambda r: order.get(_case_key(r), len(order)))  # stable within a case
    return merged


def run_suite(
    suite: str,
    out_dir: str,
    repeat: int = 3,
    progress: Callable[[str], None] | None = None,
    only: str | None = None,
    pool: Pool | None = None,
) -> dict:
    """Run ``suite`` and write ``OUT/SUITE.json`` and ``.md``. ``only``: run just the cases
    whose ``"algo collective topology"`` contains this text, and merge their rows into the
    existing results file (the other cases' rows are kept). ``pool``: where the cases run
    (:mod:`collsynth.parallel`; the same rows, but timings then measure cases that ran side
    by side)."""
    if suite not in SUITES:
        raise CollsynthError(f"unknown bench suite {suite!r} (known: {', '.join(SUITES)})")
    all_cases = SUITES[suite]()
    cases = all_cases
    if only is not None:
        cases = [c for c in all_cases if only in f"{c.algo} {c.opts} {c.collective} {c.topology}"]
        if not cases:
            raise CollsynthError(f"no case of bench suite {suite!r} matches --only {only!r}")
    t0 = time.perf_counter()
    rows = run_rows(cases, repeat, progress, pool)
    if only is not None:
        rows = _merge(os.path.join(out_dir, f"{suite}.json"), suite, cases, all_cases, rows)
    ok = [r for r in rows if r.get("status") == "ok"]
    summary: dict[str, Any] = {
        "cases": len(all_cases),
        "rows": len(ok),
        "skipped": len(rows) - len(ok),
        "wall_s": time.perf_counter() - t0,
    }
    if only is not None:
        summary["only"] = {"pattern": only, "cases_run": len(cases)}
    rates = [r["sim_hops_per_s"] for r in ok if r.get("sim_hops_per_s")]
    if rates:
        summary["median_sim_hops_per_s"] = statistics.median(rates)
    ratios = [r["ratio_to_bound"] for r in ok]
    if ratios:
        summary["median_ratio_to_bound"] = statistics.median(ratios)
    result = {
        "suite": suite,
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
        },
        "repeat": repeat,
        "summary": summary,
        "rows": rows,
    }
    from .common import write_files

    write_files(
        out_dir,
        {f"{suite}.json": json.dumps(result, indent=1), f"{suite}.md": _markdown(suite, rows)},
    )
    return result
