"""``collsynth demo``: the built-in example, end to end."""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from ..errors import CollsynthError
from ..units import fmt_size, fmt_time
from .common import (
    Request,
    add_command,
    add_json,
    add_output,
    add_timing,
    check_plot,
    console,
    default_output_dir,
    emit_json,
)

DEMO_TOPOLOGIES = (
    "dgx1",
    "ndv2:chassis=2",
    "dgx2:chassis=2",
    "mi250:chassis=2",
    "dgx_a100:nodes=2",
    "wan:dcs=3,gpus=8",
)
DEMO_COMPARE = ("dgx_a100:nodes=2", "allgather", (1e3, 1e6, 1e9))
#: The demo's comparison: the baselines and the fast synthesizers (the MILP is left to compare).
DEMO_ALGOS = (
    "ring",
    "tree",
    "hier_ring",
    "rd",
    "direct",
    "bruck",
    "sph",
    "spt",
    "forestcoll",
    "mteg",
)
#: The size whose winner the demo runs under MPI.
DEMO_RUN_SIZE = 1e6


def add_parser(sub: Any) -> None:
    """Register ``demo``."""
    p = add_command(
        sub,
        "demo",
        "run the built-in example end to end",
        "Build zoo topologies and verify shortest-path-tree schedules on them; "
        f"compare algorithms on {DEMO_COMPARE[0]} {DEMO_COMPARE[1]}; export the "
        "winners to checked MSCCL XML; run the 1MB winner under MPI with --check. "
        f"Without -o the files go to {default_output_dir('demo')}.",
        examples=("collsynth demo", "collsynth demo -o demo-out --no-run --json"),
    )
    p.add_argument("--plot", metavar="FILE.png", help="also plot the comparison")
    add_output(
        p,
        required=False,
        metavar="DIR",
        help="where the exported XML and schedules go (default: a per-user data folder, see above)",
    )
    p.add_argument("--no-run", action="store_true", help="skip the MPI run at the end")
    add_timing(p)
    add_json(p)
    p.set_defaults(func=cmd_demo)


def _zoo_rows() -> list[dict]:
    """Step 1: spt AllGather and AllReduce on each demo topology, verified."""
    from ..collective import Collective
    from ..synth import synthesize
    from ..topology import load_topology
    from ..verify import ensure_verified

    rows = []
    for spec in DEMO_TOPOLOGIES:
        topo = load_topology(spec)
        for kind in ("allgather", "allreduce"):
            coll = Collective.make(kind, topo.num_ranks, 1)
            t0 = time.perf_counter()
            sched = synthesize("spt", topo, coll)
            synth_s = time.perf_counter() - t0
            t1 = time.perf_counter()
            report = ensure_verified(sched)
            rows.append(
                {
                    "topology": spec,
                    "compute_nodes": topo.num_ranks,
                    "switches": topo.num_switches,
                    "routers": topo.num_routers,
                    "links": len(topo.links),
                    "hop_diameter": topo.hop_diameter,
                    "collective": kind,
                    "algorithm": "spt",
                    "ops": sched.num_ops,
                    "link_hops": report.link_hops,
                    "verified": report.ok,
                    "timing": {
                        "synth_wall_s": synth_s,
                        "verify_wall_s": time.perf_counter() - t1,
                    },
                }
            )
    return rows


def _tune(out_dir: str, show_progress: bool, timing: bool = True):
    """Steps 2 and 3: compare the demo algorithms and export the winners."""
    from functools import partial

    from ..collective import Collective
    from ..report.tune import tune
    from ..topology import load_topology
    from .compare import run_compare

    spec, kind, sizes = DEMO_COMPARE
    topo = load_topology(spec)
    req = Request(topo, Collective.make(kind, topo.num_ranks, 1), sizes=list(sizes))
    tuned, _ = run_compare(
        req,
        ",".join(DEMO_ALGOS),
        show_progress=show_progress,
        run=partial(tune, out_dir=out_dir, timing=timing),
    )
    return topo, tuned


def _run_winner(tuned: Any, ranks: int) -> dict:
    """Step 4: run the 1 MB winner under MPI with --check."""
    from ..runtime import launch
    from ..runtime.plan import size_quantum
    from ..schedule.io import load_schedule

    win = next(w for w in tuned.windows if DEMO_RUN_SIZE in w.sizes)
    q = size_quantum(load_schedule(win.schedule), 1)
    run_size = max(q, int(round(DEMO_RUN_SIZE / q)) * q)
    rep = launch(win.schedule, run_size, ranks, check=True, iters=3)
    return {
        "schedule": win.schedule,
        "xml": win.xml,
        "algorithm": win.algo,
        "size_bytes": run_size,
        "ranks": ranks,
        **rep.runs[0],
    }


def cmd_demo(args: argparse.Namespace) -> int:
    """Run the demo."""
    from ..report.tune import check_out_dir

    check_plot(args.plot)
    out = args.output or default_output_dir("demo")
    check_out_dir(out, "-o", {"--plot": args.plot}, parents=args.output is None)
    if args.output is None:  # the per-user data folder: its parents are collsynth's own
        try:
            os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        except OSError as e:
            raise CollsynthError(f"cannot create {out}: {e.strerror or e}") from None
    rows = _zoo_rows()
    topo, tuned = _tune(out, show_progress=not args.json, timing=args.timing)
    result = tuned.comparison
    if args.plot:
        from ..report.plots import plot_algbw

        plot_algbw(result, args.plot)
    run_info = None if args.no_run else _run_winner(tuned, topo.num_ranks)
    spec, kind, _ = DEMO_COMPARE
    if args.json:
        emit_json(
            {
                "demo": "zoo topologies with spt schedules verified independently, then "
                f"compare on {spec} {kind}, export the winners to MSCCL XML and "
                f"run the {fmt_size(DEMO_RUN_SIZE)} winner under MPI",
                "output": out,
                "rows": rows if args.timing else [_untimed(r) for r in rows],
                "compare": result.to_dict(timing=args.timing),
                "tune": tuned.to_dict(timing=args.timing),
                "run": run_info,
            }
        )
        return 0
    _print(args, out, rows, result, tuned, run_info)
    return 0


def _untimed(row: dict) -> dict:
    """A zoo row without its wall-clock figures (``--no-timing``)."""
    return {k: v for k, v in row.items() if k != "timing"}


def _print(
    args: argparse.Namespace,
    out: str,
    rows: list[dict],
    result: Any,
    tuned: Any,
    run_info: dict | None,
) -> None:
    """The demo's human-readable report."""
    from rich.table import Table

    from .compare import print_comparison

    spec, kind, _ = DEMO_COMPARE
    con = console()
    con.print(
        "[bold]collsynth demo[/bold] 1/3: build zoo topologies, synthesize "
        "shortest-path-tree schedules, verify them independently"
    )
    table = Table()
    cols = ["topology", "GPUs", "switches", "routers", "links", "diameter", "collective", "ops",
            "link hops", "verified"] + (["synth", "verify"] if args.timing else [])  # fmt: skip
    for col in cols:
        table.add_column(col, justify="left" if col in ("topology", "collective") else "right")
    for r in rows:
        table.add_row(
            r["topology"],
            str(r["compute_nodes"]),
            str(r["switches"]),
            str(r["routers"]),
            str(r["links"]),
            str(r["hop_diameter"]),
            r["collective"],
            str(r["ops"]),
            str(r["link_hops"]),
            "yes" if r["verified"] else "NO",
            *(
                [fmt_time(r["timing"]["synth_wall_s"]), fmt_time(r["timing"]["verify_wall_s"])]
                if args.timing
                else []
            ),
        )
    con.print(table)
    con.print(f"{len(rows)} schedules synthesized and verified.\n")
    con.print(
        f"[bold]collsynth demo[/bold] 2/3: compare algorithms on {spec} {kind} "
        f"(simulated in the realized model, as the executors and exporters run the "
        f"schedules; 'x bound' = time / best lower bound)"
    )
    print_comparison(result, best_only=False, timing=args.timing)
    if args.plot:
        con.print(f"wrote {args.plot}")
    con.print(
        f"\n[bold]collsynth demo[/bold] 3/3: the fastest exportable schedule per size as "
        f"MSCCL XML (checked independently), in {out}/"
    )
    for w in tuned.windows:
        hi = "..." if w.max_bytes is None else fmt_size(w.max_bytes)
        con.print(
            f"  [{fmt_size(w.min_bytes)}, {hi}): {w.algo:10s} -> {w.xml}"
            + (f"  ({w.note})" if w.note else "")
        )
    if run_info is not None:
        con.print(
            f"Ran {run_info['algorithm']} ({fmt_size(run_info['size_bytes'])}, "
            f"{run_info['ranks']} ranks) under mpiexec with --check: the result matches "
            f"MPI's own {kind} ({run_info.get('check')}); "
            f"{fmt_time(run_info['time_s'])} per iteration, MPI's own "
            f"{fmt_time(run_info['reference_time_s'])} (processes on this machine, not "
            f"GPUs)"
        )
