"""``collsynth compare`` and ``collsynth tune``: every algorithm at every size."""

from __future__ import annotations

import argparse
import os
from typing import Any

from ..errors import CollsynthError
from ..units import fmt_bandwidth, fmt_size, fmt_time
from .common import (
    add_command,
    add_json,
    add_options,
    add_output,
    add_problem,
    add_quiet,
    add_sizes,
    add_time_limit,
    add_timing,
    build_request,
    check_plot,
    console,
    emit_json,
    with_progress,
)


def add_parser(sub: Any) -> None:
    """Register ``compare`` and ``tune``."""
    cmp_ = add_command(
        sub,
        "compare",
        "compare algorithms across sizes",
        "Synthesize, verify and simulate each algorithm at each size; table, "
        "optional plot of algbw against size.",
        examples=(
            "collsynth compare -t ndv2:chassis=2 -c allgather "
            "--sizes 1KB,1MB,1GB --algos all --plot ag.png",
            "collsynth compare -t dgx1 -c allreduce --sizes 1KB:1GB:x4 --algos best --json",
        ),
    )
    add_problem(cmp_)
    add_sizes(cmp_)
    cmp_.add_argument(
        "--algos",
        default="all",
        help="comma-separated algorithms, all (every applicable one) or best (the best per size)",
    )
    add_options(cmp_, targeted=True)
    cmp_.add_argument("--plot", metavar="FILE.png", help="plot algbw against size")
    add_quiet(cmp_)
    add_timing(cmp_)
    add_json(cmp_)
    add_time_limit(cmp_)
    cmp_.set_defaults(func=cmd_compare)

    tun = add_command(
        sub,
        "tune",
        "pick the best exportable schedule per size and export MSCCL XML",
        "Simulate every applicable algorithm (or --algos) at every size, and "
        "write one checked MSCCL XML per winning schedule with its "
        "minBytes/maxBytes window, the schedules and a summary (tune.json) to "
        "DIR.",
        examples=(
            "collsynth tune -t dgx_a100:nodes=2 -c allgather --sizes 1KB:1GB:x8 -o tuned/",
            "collsynth tune -t dgx1 -c allreduce --algos ring,tree "
            "--dialect executor --protocol LL -o tuned/",
        ),
    )
    add_problem(tun)
    add_sizes(tun)
    tun.add_argument(
        "--algos",
        default="all",
        help="comma-separated algorithms, all or best (both: every applicable "
        "one; the best exportable schedule per size wins)",
    )
    add_options(tun, targeted=True)
    add_output(tun, metavar="DIR", help="output directory")
    tun.add_argument(
        "--dialect", choices=("msccl", "executor"), default="msccl", help="MSCCL XML dialect"
    )
    tun.add_argument(
        "--protocol",
        choices=("Simple", "LL", "LL128"),
        default="Simple",
        help="NCCL protocol, as msccl-tools names it",
    )
    tun.add_argument(
        "--proto", dest="protocol", choices=("Simple", "LL", "LL128"), help=argparse.SUPPRESS
    )  # the old spelling
    tun.add_argument("--instances", type=int, default=1, help="MSCCL instances (channels)")
    add_quiet(tun)
    add_timing(tun)
    add_json(tun)
    add_time_limit(tun)
    tun.set_defaults(func=cmd_tune)


def run_compare(req, algo_spec: str, show_progress: bool, run: Any = None):
    """Resolve ``algo_spec`` and run ``run`` (default: compare) with a progress bar."""
    from ..report.compare import compare, resolve_algos

    algos, best_only = resolve_algos(algo_spec, req.collective)
    run = run or compare
    result = with_progress(
        algos,
        show_progress,
        lambda step: run(
            req.topology, req.collective, req.sizes, algos, on_step=step, options=req.options
        ),
    )
    return result, best_only


def cmd_compare(args: argparse.Namespace) -> int:
    """Compare algorithms."""
    check_plot(args.plot)
    req = build_request(args, sizes=True)
    result, best_only = run_compare(req, args.algos, show_progress=not args.json and not args.quiet)
    if not result.rows:
        raise CollsynthError(
            "no algorithm could produce a schedule: "
            + "; ".join(f"{s['algo']}: {s['reason']}" for s in result.skipped)
        )
    if args.plot:
        from ..report.plots import plot_algbw

        plot_algbw(result, args.plot)
    if args.json:
        emit_json(result.to_dict(best_only=best_only, timing=args.timing))
        return 0
    print_comparison(result, best_only)
    if args.plot:
        console().print(f"wrote {args.plot}")
    return 0


def print_comparison(result: Any, best_only: bool) -> None:
    """The comparison table."""
    from rich.table import Table

    rows = result.best_rows() if best_only else result.rows
    table = Table(
        title=f"{result.collective} on {result.topology}"
        + ("  (best algorithm per size)" if best_only else "")
    )
    for col in ("algo", "size", "time", "algbw", "busbw", "x bound", "bound kind", "synth", "ops"):
        table.add_column(col, justify="left" if col in ("algo", "bound kind") else "right")
    for r in sorted(rows, key=lambda r: (r.size_bytes, r.time_s)):
        table.add_row(
            r.algo,
            fmt_size(r.size_bytes),
            fmt_time(r.time_s),
            fmt_bandwidth(r.algbw_Bps),
            fmt_bandwidth(r.busbw_Bps),
            f"{r.ratio_to_bound:.3g}",
            r.bound_kind,
            fmt_time(r.synth_wall_s),
            str(r.ops),
        )
    con = console()
    con.print(table)
    for sk in result.skipped:
        con.print(f"skipped {sk['algo']}: {sk['reason']}")


def cmd_tune(args: argparse.Namespace) -> int:
    """Tune: the best exportable schedule per size window, as checked MSCCL XML."""
    from functools import partial

    from ..report.tune import tune

    req = build_request(args, sizes=True)
    if args.instances < 1:
        raise CollsynthError(f"--instances must be at least 1, got {args.instances}")
    run = partial(
        tune,
        out_dir=args.output,
        dialect=args.dialect,
        proto=args.protocol,
        instances=args.instances,
        timing=args.timing,
    )
    spec = "all" if args.algos.strip() == "best" else args.algos
    result, _ = run_compare(req, spec, show_progress=not args.json and not args.quiet, run=run)
    if args.json:
        emit_json(result.to_dict(timing=args.timing))
        return 0
    print_windows(result, args.output)
    return 0


def print_windows(result: Any, out_dir: str) -> None:
    """The tune table: one row per size window."""
    from rich.table import Table

    table = Table(
        title=f"{result.collective} on {result.topology}: one MSCCL XML per window "
        f"({result.dialect} dialect)"
    )
    for col in ("window", "algo", "sizes", "x bound", "file", "note"):
        table.add_column(col, justify="right" if col == "x bound" else "left")
    for w in result.windows:
        hi = "..." if w.max_bytes is None else fmt_size(w.max_bytes)
        table.add_row(
            f"[{fmt_size(w.min_bytes)}, {hi})",
            w.algo,
            ", ".join(fmt_size(x) for x in w.sizes),
            ", ".join(f"{r:.3g}" for r in w.ratio_to_bound),
            w.xml,
            w.note,
        )
    con = console()
    con.print(table)
    con.print(
        f"wrote {len(result.windows)} XML file(s) (each checked by the independent XML "
        f"checker), their schedules and {os.path.join(out_dir, 'tune.json')}"
    )
