"""``collsynth compare`` and ``collsynth tune``: every algorithm at every size."""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from typing import Any

from ..errors import CollsynthError
from ..interrupt import deferred
from ..units import fmt_bandwidth, fmt_size, fmt_time
from .common import (
    add_command,
    add_json,
    add_model,
    add_options,
    add_output,
    add_pool,
    add_problem,
    add_quiet,
    add_sizes,
    add_time_limit,
    add_timing,
    build_request,
    check_plot,
    console,
    emit_json,
    pool_of,
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
            "collsynth compare -t dgx1 -c allgather --baseline all_gather_perf.log --plot ag.png",
        ),
    )
    add_problem(cmp_)
    add_sizes(cmp_)
    cmp_.add_argument(
        "--baseline",
        metavar="LOG",
        help="an nccl-tests output log (all_gather_perf, all_reduce_perf, ...): its measured "
        "busbw beside each schedule's predicted busbw at the same sizes, with the predicted "
        "speed-up; its sizes are used unless --sizes is given",
    )
    cmp_.add_argument(
        "--algos",
        default="all",
        help="comma-separated algorithms, all (every applicable one) or best (the best per size)",
    )
    add_options(cmp_, targeted=True)
    add_model(cmp_)
    cmp_.add_argument(
        "--planned",
        action="store_true",
        help="also simulate each schedule in the planned order (planned_time_s, a column)",
    )
    cmp_.add_argument("--plot", metavar="FILE.png", help="plot algbw against size")
    cmp_.add_argument("--log-y", action="store_true", help="with --plot: algbw on a log axis")
    add_quiet(cmp_)
    add_timing(cmp_)
    add_json(cmp_)
    cmp_.add_argument(
        "--csv", action="store_true", help="print the rows as CSV on stdout (bytes, seconds, B/s)"
    )
    cmp_.add_argument(
        "--nccl-tests",
        action="store_true",
        help="print each algorithm's rows as nccl-tests prints its results (us, GB/s)",
    )
    add_time_limit(cmp_)
    add_pool(cmp_)
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
    add_model(tun)
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
    tun.add_argument(
        "--format",
        choices=("msccl", "mscclpp"),
        default="msccl",
        help="msccl: MSCCL XML (in --dialect); mscclpp: MSCCL++ execution plans (JSON)",
    )
    add_quiet(tun)
    add_timing(tun)
    add_json(tun)
    add_time_limit(tun)
    add_pool(tun)
    tun.set_defaults(func=cmd_tune)


def run_compare(
    req, algo_spec: str, show_progress: bool, run: Any = None, pool: Any = None, **how: Any
):
    """Resolve ``algo_spec`` and run ``run`` (default: compare) with a progress bar, its
    cases where ``pool`` says; ``how``: more keyword arguments of ``run`` (the model)."""
    from ..report.compare import compare, resolve_algos

    algos, best_only = resolve_algos(algo_spec, req.collective)
    run = run or compare
    result = with_progress(
        algos,
        show_progress,
        lambda step: run(
            req.topology, req.collective, req.sizes, algos, on_step=step, options=req.options,
            pool=pool, **how,
        ),
    )  # fmt: skip
    return result, best_only


#: the CSV columns of ``compare --csv`` (one unit per column)
CSV_COLUMNS = ("algo", "size_bytes", "time_s", "algbw_Bps", "busbw_Bps", "bound_time_s",
               "bound_kind", "ratio_to_bound", "ops", "chunks_per_rank", "model")  # fmt: skip
BASELINE_COLUMNS = ("baseline_time_s", "baseline_busbw_Bps", "predicted_speedup")


def cmd_compare(args: argparse.Namespace) -> int:
    """Compare algorithms."""
    from ..report import nccl_tests
    from .common import DEFAULT_SIZES, sizes_text

    formats = [f for f in ("json", "csv", "nccl_tests") if getattr(args, f)]
    if len(formats) > 1:
        raise CollsynthError("choose one of --json, --csv and --nccl-tests")
    check_plot(
        args.plot,
        {"-t": args.topology, "--baseline": args.baseline, "--demand": args.demand},
    )
    log = nccl_tests.read_log(args.baseline) if args.baseline else None
    req = build_request(args, sizes=True)
    # without --sizes (argparse keeps the default object itself) the log's sizes are compared
    if log is not None and sizes_text(args) is DEFAULT_SIZES:
        req.sizes = sorted({float(r.size_bytes) for r in log.rows})
    if log is not None:
        nccl_tests.check_ranks(log, req.topology.num_ranks)
    quiet = bool(formats) or args.quiet
    pool = pool_of(args)
    result, best_only = run_compare(
        req, args.algos, show_progress=not quiet, pool=pool, order=args.order,
        also_planned=args.planned,
    )  # fmt: skip
    if not result.rows:
        raise CollsynthError(
            "no algorithm could produce a schedule: "
            + "; ".join(f"{s['algo']}: {s['reason']}" for s in result.skipped)
        )
    if args.plot:
        from ..report.plots import plot_algbw

        plot_algbw(result, args.plot, baseline=log, log_y=args.log_y)
    data = result.to_dict(best_only=best_only, timing=args.timing)
    if log is not None:
        data["rows"] = nccl_tests.with_baseline(data["rows"], log)
        data["baseline"] = log.to_dict()
    if args.json:
        emit_json(data)
        return 0
    with deferred():  # the result is printed whole or not at all
        if args.csv:
            cols = CSV_COLUMNS + (BASELINE_COLUMNS if log is not None else ())
            sys.stdout.write(nccl_tests.to_csv(data["rows"], cols))
        elif args.nccl_tests:
            sys.stdout.write(nccl_tests.comparison_table(result, req.collective))
        else:
            print_comparison(
                result, best_only, data["rows"] if log is not None else None, timing=args.timing
            )
            if args.plot:
                console().print(f"wrote {args.plot}")
        sys.stdout.flush()
    return 0


def print_comparison(
    result: Any, best_only: bool, baseline: list[dict] | None = None, timing: bool = True
) -> None:
    """The comparison table (with ``baseline``: rows carrying an nccl-tests log's figures, see
    :func:`~collsynth.report.nccl_tests.with_baseline`; ``timing=False``: no wall-clock
    column)."""
    from rich.table import Table

    from ..sim import MODEL_NAMES

    rows = result.best_rows() if best_only else result.rows
    table = Table(
        title=f"{result.collective} on {result.topology}"
        + ("  (best algorithm per size)" if best_only else ""),
        caption=f"times in the {MODEL_NAMES.get(result.model, result.model)} model",
    )
    planned = any(r.planned_time_s is not None for r in rows)
    cols = ["algo", "size", "time", "algbw", "busbw", "x bound", "bound kind", "synth", "ops"]
    if not timing:
        cols.remove("synth")
    if planned:
        cols[6:6] = ["planned", "planned x bound"]
    if baseline is not None:
        cols += ["nccl-tests busbw", "speed-up"]
    for col in cols:
        table.add_column(col, justify="left" if col in ("algo", "bound kind") else "right")
    extra = {(b["algo"], b["size_bytes"]): b for b in baseline or []}
    for r in sorted(rows, key=lambda r: (r.size_bytes, r.time_s)):
        more = []
        if baseline is not None:
            b = extra.get((r.algo, r.size_bytes), {})
            got = b.get("baseline_busbw_Bps")
            more = ["-", "-"] if got is None else [
                fmt_bandwidth(got), f"{b['predicted_speedup']:.2f}x"
            ]  # fmt: skip
        plan = []
        if planned:
            p = r.planned_time_s
            plan = ["-", "-"] if p is None else [
                fmt_time(p), f"{p / r.bound_time_s:.3g}" if r.bound_time_s > 0 else "-"
            ]  # fmt: skip
        table.add_row(
            r.algo,
            fmt_size(r.size_bytes),
            fmt_time(r.time_s),
            fmt_bandwidth(r.algbw_Bps),
            fmt_bandwidth(r.busbw_Bps),
            f"{r.ratio_to_bound:.3g}",
            *plan,
            r.bound_kind,
            *([fmt_time(r.synth_wall_s)] if timing else []),
            str(r.ops),
            *more,
        )
    con = console()
    con.print(table)
    for sk in result.skipped:
        con.print(f"skipped {sk['algo']}: {sk['reason']}")


def cmd_tune(args: argparse.Namespace) -> int:
    """Tune: the best exportable schedule per size window, as checked MSCCL XML or MSCCL++
    plans."""
    from functools import partial

    from ..report.tune import check_out_dir, tune, writes_name

    check_out_dir(args.output, "-o", {"-t": args.topology, "--demand": args.demand})
    req = build_request(args, sizes=True)
    pool = pool_of(args)
    if args.instances < 1:
        raise CollsynthError(f"--instances must be at least 1, got {args.instances}")
    run = partial(
        tune,
        out_dir=args.output,
        dialect="mscclpp" if args.format == "mscclpp" else args.dialect,
        proto=args.protocol,
        instances=args.instances,
        timing=args.timing,
    )
    spec = "all" if args.algos.strip() == "best" else args.algos
    with removed_on_failure(args.output, writes_name):
        result, _ = run_compare(
            req, spec, show_progress=not args.json and not args.quiet, run=run, pool=pool,
            order=args.order,
        )  # fmt: skip
    # the files are complete: an interruption from here on leaves them (the result is printed
    # whole or not at all)
    if args.json:
        emit_json(result.to_dict(timing=args.timing))
        return 0
    with deferred():
        print_windows(result, args.output)
    return 0


@contextlib.contextmanager
def removed_on_failure(out_dir: str, owned: Callable[[str], bool]) -> Iterator[None]:
    """If the body fails or is interrupted (SIGINT, SIGTERM, SIGHUP), remove what it made in
    ``out_dir``: the folder itself if it did not exist before, else the files that are new
    in it under a name the body writes (``owned(name)``; a file that was there before was
    replaced whole, or not at all; anything else that appeared meanwhile is not ours)."""
    existed = os.path.isdir(out_dir)
    before = set(os.listdir(out_dir)) if existed else set()
    try:
        yield
    except BaseException:
        if not existed:
            shutil.rmtree(out_dir, ignore_errors=True)
        elif os.path.isdir(out_dir):
            for name in sorted(set(os.listdir(out_dir)) - before):
                if owned(name):
                    with contextlib.suppress(OSError):
                        os.unlink(os.path.join(out_dir, name))
        raise


def print_windows(result: Any, out_dir: str) -> None:
    """The tune table: one row per size window."""
    from rich.table import Table

    what = (
        "one MSCCL++ plan per window"
        if result.dialect == "mscclpp"
        else f"one MSCCL XML per window ({result.dialect} dialect)"
    )
    from ..sim import MODEL_NAMES

    table = Table(
        title=f"{result.collective} on {result.topology}: {what}",
        caption=f"ranked by time in the {MODEL_NAMES.get(result.model, result.model)} model",
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
    kind = "MSCCL++ plan" if result.dialect == "mscclpp" else "XML"
    con.print(
        f"wrote {len(result.windows)} {kind} file(s) (each checked by the independent {kind} "
        f"checker), their schedules and {os.path.join(out_dir, 'tune.json')}"
    )
