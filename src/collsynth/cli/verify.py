"""``collsynth verify`` and ``collsynth simulate``: check and time a schedule file."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from ..errors import CollsynthError
from ..units import fmt_bandwidth, fmt_size, fmt_time, parse_bandwidth, parse_time
from .common import (
    add_command,
    add_json,
    add_model,
    add_quiet,
    add_size,
    add_sizes,
    add_timing,
    check_plot,
    console,
    emit_json,
    parse_positive_size,
    parse_sizes,
    refuse_overwriting_inputs,
    sizes_text,
    write_json_file,
)


def add_parser(sub: Any) -> None:
    """Register ``verify`` and ``simulate``."""
    ver = add_command(
        sub,
        "verify",
        "check that a schedule implements its collective",
        "Symbolically execute a schedule file on its topology and report the "
        "first violation in one line (exit status 2).",
        examples=("collsynth verify ar.json", "collsynth verify ar.json -t dgx1 --json"),
    )
    ver.add_argument("schedule", metavar="SCHEDULE.json")
    ver.add_argument(
        "-t",
        "--topology",
        metavar="SPEC",
        help="check against this topology (must match the embedded one)",
    )
    add_quiet(ver)
    add_timing(ver)
    add_json(ver)
    ver.set_defaults(func=cmd_verify)

    sim = add_command(
        sub,
        "simulate",
        "simulate a schedule file",
        "Simulate a schedule (alpha-beta, store-and-forward at GPUs, cut-through "
        "at switches/routers, link contention; see docs/simulator.md).",
        examples=(
            "collsynth simulate ar.json -s 256MB --gantt ar.png",
            "collsynth simulate ar.json -s 1GB --json",
            "collsynth simulate ar.json -b 8 -e 1G -f 4 --nccl-tests",
        ),
    )
    sim.add_argument("schedule", metavar="SCHEDULE.json")
    add_size(sim, help="collective size, e.g. 1GB (default: the size the schedule records)")
    add_sizes(sim, default=None)
    sim.add_argument(
        "-t",
        "--topology",
        metavar="SPEC",
        help="simulate on this topology (must match the embedded one)",
    )
    add_model(sim)
    sim.add_argument(
        "--release", action="store_true", help="hold each operation until its planned start time"
    )
    sim.add_argument(
        "--reduce-bw", metavar="BW", help="reduction speed, e.g. 500GB/s (default: free)"
    )
    sim.add_argument(
        "--op-cost",
        metavar="TIME",
        help="what issuing one operation costs its sender, e.g. 2us: a rank issues its "
        "operations one at a time (default 0: the pure alpha-beta model)",
    )
    sim.add_argument(
        "--explicit",
        action="store_true",
        help="simulate every hop, also where the schedule's verified symmetry lets the "
        "simulator run one operation per orbit (same results; docs/simulator.md)",
    )
    sim.add_argument("--gantt", metavar="FILE.png", help="draw the per-link timeline")
    sim.add_argument(
        "--trace",
        metavar="FILE.json",
        help="write the timeline in the Trace Event Format (Perfetto, chrome://tracing): a "
        "track per rank and per busy link, an arrow from each send to its receive",
    )
    add_quiet(sim)
    add_timing(sim)
    add_json(sim)
    sim.add_argument("--csv", action="store_true", help="print one CSV row per size")
    sim.add_argument(
        "--nccl-tests", action="store_true", help="print the sizes as nccl-tests prints results"
    )
    sim.set_defaults(func=cmd_simulate)


def _load(args: argparse.Namespace):
    """The schedule file, on ``-t`` when given (a compact file as it is)."""
    from ..schedule.io import load_any
    from ..topology import load_topology

    topo = load_topology(args.topology) if args.topology else None
    return load_any(args.schedule, topology=topo)


def _compact_of(sched: Any) -> dict:
    """A compact schedule's sizes (``{}`` for an explicit one), for the outputs."""
    from ..schedule.compact import CompactSchedule

    if not isinstance(sched, CompactSchedule):
        return {}
    return {"representatives": sched.num_reps, "group_order": sched.action.order}


def cmd_verify(args: argparse.Namespace) -> int:
    """Verify a schedule file."""
    from ..verify import check_schedule

    sched = _load(args)
    t0 = time.perf_counter()
    report = check_schedule(sched)
    elapsed = time.perf_counter() - t0
    if args.json:
        emit_json(
            {
                "schedule": args.schedule,
                "topology": sched.topology.name,
                "collective": sched.collective.to_dict(),
                **report.to_dict(),
                **({"compact": _compact_of(sched)} if _compact_of(sched) else {}),
                **({"timing": {"verify_wall_s": elapsed}} if args.timing else {}),
            }
        )
        if not report.ok:
            print(f"collsynth: error: {args.schedule}: {report.error}", file=sys.stderr)
        return 0 if report.ok else 2
    if not report.ok:
        raise CollsynthError(f"{args.schedule}: {report.error}")
    extra = ""
    if report.planned_finish_s is not None:
        extra = f", planned finish {fmt_time(report.planned_finish_s)}"
    if report.redundant_deliveries:
        extra += f", {report.redundant_deliveries} redundant deliveries"
    if compact := _compact_of(sched):
        reps, order = compact["representatives"], compact["group_order"]
        extra += (f"; compact form: {reps} representatives x {order} group elements, "
                  "verified without expanding")  # fmt: skip
    print(
        f"OK: {sched.collective.describe()} on {sched.topology.name}: {report.ops} ops, "
        f"{report.link_hops} link hops; checks: {', '.join(report.checks)}{extra}"
    )
    return 0


def cmd_simulate(args: argparse.Namespace) -> int:
    """Simulate a verified schedule file."""
    from ..sim import simulate
    from ..verify import check_schedule

    inputs = {"the schedule": args.schedule, "-t": args.topology}
    check_plot(args.gantt, inputs, "--gantt")
    if args.trace is not None:
        refuse_overwriting_inputs({"--trace": args.trace, "--gantt": args.gantt}, inputs)
    if sum(map(bool, (args.json, args.csv, args.nccl_tests))) > 1:
        raise CollsynthError("choose one of --json, --csv and --nccl-tests")
    sweep = sizes_text(args)
    if sweep is not None and args.size is not None:
        raise CollsynthError("give -s/--size or a sweep (--sizes, -b/-e/-f/-i), not both")
    if sweep is not None and args.gantt:
        raise CollsynthError("--gantt draws one size: give -s/--size")
    if args.trace is not None and (sweep is not None or args.csv or args.nccl_tests):
        raise CollsynthError("--trace writes one size's timeline: give -s/--size")
    sched = _load(args)
    if _compact_of(sched) and (args.gantt or args.trace or args.explicit or args.op_cost
                               or args.order == "fcfs"):  # fmt: skip
        from ..schedule.compact_io import expansion_fits

        expansion_fits(sched, args.schedule)  # these need every hop: the expansion
        sched = sched.expand()
    if sweep is not None:
        sizes = parse_sizes(sweep)
    elif args.size is not None:
        sizes = [parse_positive_size(args.size, "--size")]
    elif sched.size is not None:
        sizes = [sched.size]
    else:
        raise CollsynthError("--size is required (the schedule records no size)")
    report = check_schedule(sched)
    if not report.ok:
        raise CollsynthError(f"{args.schedule} does not verify: {report.error}")
    how = _sim_options(args)
    if sweep is not None or args.csv or args.nccl_tests:
        return _simulate_sizes(args, sched, sizes, how)
    size = sizes[0]
    res = simulate(sched, size, **how)
    if args.gantt:
        from ..report.plots import plot_gantt

        plot_gantt(res, args.gantt)
    if args.trace:
        from ..report.trace import simulated_trace

        write_json_file(args.trace, simulated_trace(res))
    if args.json:
        info = res.to_dict()
        wall = info.pop("sim_wall_s")  # wall clock: in the timing block
        emit_json(
            {
                "schedule": args.schedule,
                "algorithm": sched.meta.get("algorithm"),
                "topology": sched.topology.name,
                "collective": sched.collective.to_dict(),
                "model": args.order,
                **info,
                **({"timing": {"sim_wall_s": wall}} if args.timing else {}),
            }
        )
        return 0
    con = console()
    con.print(
        f"{sched.meta.get('algorithm', 'schedule')}: {sched.collective.describe()} on "
        f"{sched.topology.name}, {fmt_size(size)}"
    )
    con.print(
        f"time {fmt_time(res.time_s)}, algbw {fmt_bandwidth(res.algbw)}, busbw "
        f"{fmt_bandwidth(res.busbw)}  ({res.hops} hops simulated"
        + (f" in {fmt_time(res.wall_s)}" if args.timing else "")
        + f"; model: {args.order}, {res.order_policy})"
    )
    for link in res.to_dict(links=5)["busiest_links"]:
        con.print(
            f"  busiest: {link['src']}->{link['dst']} busy {fmt_time(link['busy_s'])} "
            f"({100 * link['utilisation']:.1f}%)"
        )
    for path in (args.gantt, args.trace):
        if path:
            con.print(f"wrote {path}")
    return 0


def _sim_options(args: argparse.Namespace) -> dict[str, Any]:
    """``simulate``'s keyword arguments from the command line."""
    reduce_bw = parse_bandwidth(args.reduce_bw, "--reduce-bw") if args.reduce_bw else None
    op_cost = parse_time(args.op_cost, "--op-cost") if args.op_cost else 0.0
    return {"reduce_bw": reduce_bw, "order": args.order, "release": args.release,
            "op_cost_s": op_cost, "symmetric": not args.explicit}  # fmt: skip


def _simulate_sizes(args: argparse.Namespace, sched: Any, sizes: list[float],
                    how: dict[str, Any]) -> int:  # fmt: skip
    """``simulate`` at several sizes: JSON rows, CSV, nccl-tests' layout or a table."""
    import sys

    from ..report.nccl_tests import table, table_rows, to_csv
    from ..sim import simulate

    rows = []
    for size in sizes:
        res = simulate(sched, size, **how)
        rows.append({"size_bytes": size, "time_s": res.time_s, "algbw_Bps": res.algbw,
                     "busbw_Bps": res.busbw})  # fmt: skip
    coll = sched.collective
    if args.json:
        emit_json({"schedule": args.schedule, "algorithm": sched.meta.get("algorithm"),
                   "topology": sched.topology.name, "collective": coll.to_dict(),
                   "model": args.order, "rows": rows})  # fmt: skip
    elif args.csv:
        sys.stdout.write(to_csv(rows, ("size_bytes", "time_s", "algbw_Bps", "busbw_Bps")))
    elif args.nccl_tests:
        title = (f"collsynth {sched.meta.get('algorithm', 'schedule')}: {coll.describe()} on "
                 f"{sched.topology.name} (simulated)")  # fmt: skip
        sys.stdout.write(table(table_rows(coll, rows), title))
    else:
        con = console()
        con.print(f"{sched.meta.get('algorithm', 'schedule')}: {coll.describe()} on "
                  f"{sched.topology.name}")  # fmt: skip
        for r in rows:
            con.print(
                f"  {fmt_size(r['size_bytes']):>9}: time {fmt_time(r['time_s'])}, algbw "
                f"{fmt_bandwidth(r['algbw_Bps'])}, busbw {fmt_bandwidth(r['busbw_Bps'])}"
            )
    return 0
