"""The ``collsynth`` command line.

Contract (later commands follow it): every command has ``--help``; ``--json`` prints exactly one
JSON object on stdout; sizes, bandwidths and times accept human units; a bad input prints one
line on stderr naming the problem and exits with status 2. Internal failures print one line and
exit with status 1 (``COLLSYNTH_DEBUG=1`` shows the traceback).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any, Sequence

from . import __version__
from .errors import CollsynthError
from .units import fmt_bandwidth, fmt_size, fmt_time, parse_size


class _Parser(argparse.ArgumentParser):
    """argparse that reports errors as one-line CollsynthErrors (exit status 2)."""

    def error(self, message: str):  # type: ignore[override]
        raise CollsynthError(f"{self.prog}: {message}")


def _emit_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, default=_json_default) + "\n")


def _json_default(o: Any) -> Any:
    import numpy as np

    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)


def _console():
    from rich.console import Console

    con = Console(highlight=False)
    if not con.is_terminal:  # pipes and CI logs: do not squeeze tables into 80 columns
        con = Console(highlight=False, width=max(con.width, 140))
    return con


# ---------------------------------------------------------------------------------- topo
def _cmd_topo_show(args: argparse.Namespace) -> int:
    from .topology import load_topology

    topo = load_topology(args.spec)
    info = topo.summary()
    if args.json:
        _emit_json(info)
        return 0
    from rich.markup import escape
    from rich.table import Table

    con = _console()
    con.print(f"[bold]{escape(topo.name)}[/bold]  ({escape(args.spec)})  "
              f"fingerprint {info['fingerprint']}")
    con.print(f"compute nodes {info['compute_nodes']}, switches {info['switches']}, routers "
              f"{info['routers']}, links {info['links']}, hop diameter {info['hop_diameter']}")
    classes = ", ".join(f"{k}: {v}" for k, v in info["links_by_class"].items())
    con.print(f"links by class: {escape(classes)}")
    for key in ("source", "notes"):
        if key in topo.meta:
            con.print(f"{key}: {escape(str(topo.meta[key]))}")
    table = Table(title="per compute node")
    for col in ("rank", "name", "out links", "out bw", "in links", "in bw"):
        table.add_column(col, justify="right" if col != "name" else "left")
    rows = info["per_node"]
    shown = rows if len(rows) <= args.max_rows else rows[: args.max_rows]
    for r in shown:
        table.add_row(str(r["rank"]), escape(r["name"]), str(r["out_links"]),
                      fmt_bandwidth(r["out_bw"]),
                      str(r["in_links"]), fmt_bandwidth(r["in_bw"]))
    con.print(table)
    if len(rows) > len(shown):
        con.print(f"... {len(rows) - len(shown)} more (use --max-rows or --json)")
    return 0


def _cmd_topo_export(args: argparse.Namespace) -> int:
    from .topology import load_topology
    from .topology.io import save_topology

    topo = load_topology(args.spec)
    save_topology(topo, args.output, args.format)
    if args.json:
        _emit_json({"output": args.output, "name": topo.name, "fingerprint": topo.fingerprint,
                    "compute_nodes": topo.num_ranks, "links": len(topo.links)})
    else:
        print(f"wrote {args.output} ({topo.name}: {topo.num_ranks} compute nodes, "
              f"{len(topo.links)} links)")
    return 0


# ---------------------------------------------------------------------------------- list
def _cmd_list(args: argparse.Namespace) -> int:
    from .collective import CollKind
    from .synth import load_all
    from .topology import zoo as _zoo  # noqa: F401
    from .topology.registry import ZOO

    algos = load_all()
    data = {
        "topologies": {name: {"summary": e.summary,
                              "params": {k: {"kind": p.kind, "default": _show_default(p),
                                             "doc": p.doc} for k, p in e.params.items()}}
                       for name, e in sorted(ZOO.items())},
        "algorithms": {name: {"summary": a.summary,
                              "collectives": sorted(k.value for k in a.collectives),
                              "options": dict(a.options), "size_aware": a.size_aware}
                       for name, a in sorted(algos.items())},
        "collectives": [k.value for k in CollKind],
    }
    if args.json:
        _emit_json(data)
        return 0
    from rich.table import Table

    con = _console()
    t = Table(title="topologies (spec: NAME:key=value,...)")
    t.add_column("name")
    t.add_column("parameters (defaults)")
    t.add_column("summary")
    for name, e in data["topologies"].items():
        t.add_row(name, ", ".join(f"{k}={v['default']}" for k, v in e["params"].items()),
                  e["summary"])
    con.print(t)
    t = Table(title="algorithms (options: --opt KEY=VALUE)")
    t.add_column("name")
    t.add_column("collectives")
    t.add_column("summary")
    t.add_column("options")
    for name, a in data["algorithms"].items():
        t.add_row(name, ", ".join(a["collectives"]), a["summary"],
                  "; ".join(f"{k}: {v}" for k, v in a["options"].items()))
    con.print(t)
    con.print("collectives: " + ", ".join(data["collectives"]))
    return 0


def _show_default(p) -> Any:
    if p.default is None:
        return None
    if p.kind == "bw":
        return fmt_bandwidth(p.default)
    if p.kind == "time":
        return fmt_time(p.default)
    if p.kind == "size":
        return fmt_size(p.default)
    return p.default


# ---------------------------------------------------------------------------------- synth
def _make_collective(args: argparse.Namespace, topo) -> Any:
    from .collective import Collective, parse_kind

    kind = parse_kind(args.collective)
    if kind.value == "custom":
        if not args.demand:
            raise CollsynthError("--collective custom needs --demand FILE.json")
        from .topology.io import read_structured

        data = read_structured(args.demand)
        if isinstance(data, dict):
            coll = Collective.from_dict({"kind": "custom", "ranks": topo.num_ranks, **data},
                                        source=args.demand)
        else:
            coll = Collective.from_demand_matrix(data)
        if coll.num_ranks != topo.num_ranks:
            raise CollsynthError(f"{args.demand}: demand is for {coll.num_ranks} ranks but the "
                                 f"topology has {topo.num_ranks}")
        return coll
    if args.chunks < 1:
        raise CollsynthError(f"--chunks must be at least 1, got {args.chunks}")
    root = args.root
    if root is not None and not 0 <= root < topo.num_ranks:
        raise CollsynthError(f"--root {root} is not a rank of {topo.name} "
                             f"(0..{topo.num_ranks - 1})")
    if root is not None and kind.value not in ("broadcast", "reduce", "gather", "scatter"):
        raise CollsynthError(f"--root does not apply to {kind.value}")
    return Collective.make(kind, topo.num_ranks, args.chunks, root)


def _cmd_synth(args: argparse.Namespace) -> int:
    from .schedule.io import save_schedule
    from .synth import synthesize
    from .topology import load_topology
    from .verify import ensure_verified

    teccl_in = None
    if args.teccl_input:
        from .synth.teccl.io import read_teccl_input

        if args.topology or args.collective:
            raise CollsynthError("--teccl-input gives the topology and collective; drop "
                                 "--topology/--collective")
        if args.algo not in ("spt", "teccl"):  # spt is the default
            raise CollsynthError(f"--teccl-input needs --algo teccl, not {args.algo}")
        args.algo = "teccl"
        teccl_in = read_teccl_input(args.teccl_input)
        topo, coll = teccl_in.topology, teccl_in.collective
    else:
        if not args.topology or not args.collective:
            missing = ", ".join(name for name, v in (("--topology/-t", args.topology),
                                                     ("--collective/-c", args.collective))
                                if not v)
            raise CollsynthError(f"collsynth synth: the following arguments are required: "
                                 f"{missing} (or --teccl-input)")
        topo = load_topology(args.topology)
        coll = _make_collective(args, topo)
    if args.teccl_output and args.algo != "teccl":
        raise CollsynthError(f"--teccl-output needs --algo teccl, not {args.algo}")
    from .synth import parse_options

    shorthands = [f"{name}={getattr(args, name)}" for name in _SYNTH_SHORTHANDS
                  if getattr(args, name) is not None]
    opts = parse_options((args.opt or []) + shorthands, args.algo)
    unknown_targets = set(opts) - {args.algo}
    if unknown_targets:
        raise CollsynthError(f"--opt for {sorted(unknown_targets)[0]!r} does not apply to "
                             f"--algo {args.algo}")
    size = parse_size(args.size, "--size") if args.size is not None else None
    if size is not None and size <= 0:
        raise CollsynthError(f"--size {args.size!r} must be positive")
    algo_opts = opts.get(args.algo, {})
    if teccl_in is not None:
        size = teccl_in.size if size is None else size
        algo_opts = {**teccl_in.options, **algo_opts}
    t0 = time.perf_counter()
    sched = synthesize(args.algo, topo, coll, size=size, **algo_opts)
    synth_s = time.perf_counter() - t0
    if size is not None and sched.size is None:
        from dataclasses import replace

        sched = replace(sched, size=size)
    t1 = time.perf_counter()
    report = ensure_verified(sched)
    verify_s = time.perf_counter() - t1
    save_schedule(sched, args.output)
    if args.teccl_output:
        from .synth.teccl.io import write_teccl_output

        write_teccl_output(sched, args.teccl_output)
    info = {"output": args.output, "algorithm": args.algo, "topology": topo.name,
            "collective": sched.collective.to_dict(), "ops": sched.num_ops,
            "synth_time_s": synth_s, "verify_time_s": verify_s, "verified": report.ok,
            **{k: v for k, v in sched.stats().items() if k != "ops"}}
    if args.json:
        _emit_json(info)
    else:
        print(f"{args.algo}: {sched.collective.describe()} on {topo.name}: {sched.num_ops} ops, "
              f"verified, synthesized in {fmt_time(synth_s)}; wrote {args.output}")
    return 0


# ---------------------------------------------------------------------------------- verify
def _cmd_verify(args: argparse.Namespace) -> int:
    from .schedule.io import load_schedule
    from .topology import load_topology
    from .verify import check_schedule

    topo = load_topology(args.topology) if args.topology else None
    sched = load_schedule(args.schedule, topology=topo)
    t0 = time.perf_counter()
    report = check_schedule(sched)
    elapsed = time.perf_counter() - t0
    if args.json:
        _emit_json({"schedule": args.schedule, "topology": sched.topology.name,
                    "collective": sched.collective.to_dict(), "verify_time_s": elapsed,
                    **report.to_dict()})
        if not report.ok:
            print(f"collsynth: error: {args.schedule}: {report.error}", file=sys.stderr)
        return 0 if report.ok else 2
    if report.ok:
        extra = ""
        if report.planned_finish_s is not None:
            extra = f", planned finish {fmt_time(report.planned_finish_s)}"
        if report.redundant_deliveries:
            extra += f", {report.redundant_deliveries} redundant deliveries"
        print(f"OK: {sched.collective.describe()} on {sched.topology.name}: {report.ops} ops, "
              f"{report.link_hops} link hops; checks: {', '.join(report.checks)}{extra}")
        return 0
    raise CollsynthError(f"{args.schedule}: {report.error}")



# ---------------------------------------------------------------------------------- simulate
def _cmd_simulate(args: argparse.Namespace) -> int:
    from .schedule.io import load_schedule
    from .sim import simulate
    from .topology import load_topology
    from .units import parse_bandwidth
    from .verify import check_schedule

    topo = load_topology(args.topology) if args.topology else None
    sched = load_schedule(args.schedule, topology=topo)
    if args.size is not None:
        size = parse_size(args.size, "--size")
    elif sched.size is not None:
        size = sched.size
    else:
        raise CollsynthError("--size is required (the schedule records no size)")
    if size <= 0:
        raise CollsynthError(f"--size {args.size!r} must be positive")
    report = check_schedule(sched)
    if not report.ok:
        raise CollsynthError(f"{args.schedule} does not verify: {report.error}")
    reduce_bw = parse_bandwidth(args.reduce_bw, "--reduce-bw") if args.reduce_bw else None
    res = simulate(sched, size, reduce_bw=reduce_bw, order=args.order, release=args.release)
    if args.gantt:
        from .report.plots import plot_gantt

        plot_gantt(res, args.gantt)
    if args.json:
        _emit_json({"schedule": args.schedule, "algorithm": sched.meta.get("algorithm"),
                    "topology": sched.topology.name, "collective": sched.collective.to_dict(),
                    **res.to_dict()})
        return 0
    con = _console()
    con.print(f"{sched.meta.get('algorithm', 'schedule')}: {sched.collective.describe()} on "
              f"{sched.topology.name}, {fmt_size(size)}")
    con.print(f"time {fmt_time(res.time_s)}, algbw {fmt_bandwidth(res.algbw)}, busbw "
              f"{fmt_bandwidth(res.busbw)}  ({res.hops} hops simulated in "
              f"{fmt_time(res.wall_s)}; order: {res.order_policy})")
    d = res.to_dict(links=5)
    for l in d["busiest_links"]:
        con.print(f"  busiest: {l['src']}->{l['dst']} busy {fmt_time(l['busy_s'])} "
                  f"({100 * l['utilisation']:.1f}%)")
    if args.gantt:
        con.print(f"wrote {args.gantt}")
    return 0


# ---------------------------------------------------------------------------------- bound
def _cmd_bound(args: argparse.Namespace) -> int:
    from .bound import bound
    from .topology import load_topology

    topo = load_topology(args.topology)
    coll = _make_collective(args, topo)
    size = parse_size(args.size, "--size")
    if size <= 0:
        raise CollsynthError(f"--size {args.size!r} must be positive")
    res = bound(topo, coll, size)
    if args.json:
        _emit_json({"topology": topo.name, "collective": coll.to_dict(), **res.to_dict()})
        return 0
    best = res.best
    print(f"{coll.describe()} of {fmt_size(size)} on {topo.name}: no schedule beats "
          f"{fmt_time(best.time_s)} (algbw <= {fmt_bandwidth(res.algbw())}); binding bound: "
          f"{best.kind} at {best.witness}")
    for b in sorted(res.bounds, key=lambda x: -x.time_s):
        print(f"  {b.kind:<10} {fmt_time(b.time_s):>12}  {b.witness}")
    return 0


# ---------------------------------------------------------------------------------- compare
def _progress(total: int, enabled: bool):
    """A rich progress bar on stderr (a no-op context when disabled)."""
    from contextlib import nullcontext

    if not enabled:
        return nullcontext(None)
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    prog = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/"
                    "{task.total}"), TimeElapsedColumn(), console=Console(stderr=True),
                    transient=True)
    return prog


def _run_compare(topo, coll, sizes, algo_spec, show_progress: bool, options=None, run=None):
    """Resolve ``algo_spec`` and run ``run`` (default: compare) with a progress bar."""
    from .report.compare import compare, resolve_algos

    algos, best_only = resolve_algos(algo_spec, coll)
    run = run or compare
    bar = _progress(len(algos), show_progress)
    with bar as prog:
        if prog is not None:
            task = prog.add_task("synthesize, verify, simulate", total=len(algos))

            def step(name):
                prog.update(task, advance=1, description=f"done: {name}")
        else:
            step = None
        result = run(topo, coll, sizes, algos, on_step=step, options=options)
    return result, best_only


# ---------------------------------------------------------------------------------- tune
def _cmd_tune(args: argparse.Namespace) -> int:
    from functools import partial

    from .report.tune import tune
    from .synth import parse_options

    topo, coll, sizes = _problem_and_sizes(args)
    if args.instances < 1:
        raise CollsynthError(f"--instances must be at least 1, got {args.instances}")
    run = partial(tune, out_dir=args.output, dialect=args.dialect, proto=args.proto,
                  instances=args.instances)
    result, _ = _run_compare(topo, coll, sizes, args.algos,
                             show_progress=not args.json and not args.no_progress,
                             options=parse_options(args.opt), run=run)
    if args.json:
        _emit_json(result.to_dict())
        return 0
    from rich.table import Table

    table = Table(title=f"{result.collective} on {result.topology}: one MSCCL XML per window "
                        f"({result.dialect} dialect)")
    for col in ("window", "algo", "sizes", "x bound", "file", "note"):
        table.add_column(col, justify="right" if col == "x bound" else "left")
    for w in result.windows:
        hi = "..." if w.max_bytes is None else fmt_size(w.max_bytes)
        table.add_row(f"[{fmt_size(w.min_bytes)}, {hi})", w.algo,
                      ", ".join(fmt_size(x) for x in w.sizes),
                      ", ".join(f"{r:.3g}" for r in w.ratio_to_bound), w.xml, w.note)
    con = _console()
    con.print(table)
    con.print(f"wrote {len(result.windows)} XML file(s) (each checked by the independent XML "
              f"checker), their schedules and {os.path.join(args.output, 'tune.json')}")
    return 0


def _print_comparison(result, best_only: bool) -> None:
    from rich.table import Table

    con = _console()
    rows = result.best_rows() if best_only else result.rows
    table = Table(title=f"{result.collective} on {result.topology}"
                        + ("  (best algorithm per size)" if best_only else ""))
    for col in ("algo", "size", "time", "algbw", "busbw", "x bound", "bound kind", "synth",
                "ops"):
        table.add_column(col, justify="left" if col in ("algo", "bound kind") else "right")
    for r in sorted(rows, key=lambda r: (r.size_bytes, r.time_s)):
        table.add_row(r.algo, fmt_size(r.size_bytes), fmt_time(r.time_s),
                      fmt_bandwidth(r.algbw_GBps * 1e9), fmt_bandwidth(r.busbw_GBps * 1e9),
                      f"{r.ratio_to_bound:.3g}", r.bound_kind, fmt_time(r.synth_time_s),
                      str(r.ops))
    con.print(table)
    for sk in result.skipped:
        con.print(f"skipped {sk['algo']}: {sk['reason']}")


def _problem_and_sizes(args: argparse.Namespace):
    """Topology, collective and ``--sizes`` (all positive) of compare and tune."""
    from .topology import load_topology
    from .units import parse_size_list

    topo = load_topology(args.topology)
    coll = _make_collective(args, topo)
    sizes = parse_size_list(args.sizes, "--sizes")
    if any(x <= 0 for x in sizes):
        raise CollsynthError("--sizes must all be positive")
    return topo, coll, sizes


def _cmd_compare(args: argparse.Namespace) -> int:
    topo, coll, sizes = _problem_and_sizes(args)
    from .synth import parse_options

    result, best_only = _run_compare(topo, coll, sizes, args.algos,
                                     show_progress=not args.json and not args.no_progress,
                                     options=parse_options(args.opt))
    if not result.rows:
        raise CollsynthError("no algorithm could produce a schedule: "
                             + "; ".join(f"{s['algo']}: {s['reason']}" for s in result.skipped))
    if args.plot:
        from .report.plots import plot_algbw

        plot_algbw(result, args.plot)
    if args.json:
        _emit_json(result.to_dict(best_only=best_only))
        return 0
    _print_comparison(result, best_only)
    if args.plot:
        _console().print(f"wrote {args.plot}")
    return 0


# ---------------------------------------------------------------------------------- bench
def _cmd_bench(args: argparse.Namespace) -> int:
    from .benchmark import run_suite

    if args.repeat < 1:
        raise CollsynthError(f"--repeat must be at least 1, got {args.repeat}")
    con = _console()
    quiet = args.json
    res = run_suite(args.suite, out_dir=args.out, repeat=args.repeat,
                    progress=None if quiet else (lambda msg: con.print(f"[dim]{msg}[/dim]")),
                    only=args.only)
    if args.json:
        _emit_json(res)
        return 0
    with open(f"{args.out}/{args.suite}.md") as f:
        print(f.read())
    summ = res["summary"]
    extra = ""
    if "median_sim_hops_per_s" in summ:
        extra = f", median simulator throughput {summ['median_sim_hops_per_s'] / 1e6:.3g} Mhops/s"
    print(f"wrote {args.out}/{args.suite}.json and .md ({summ['rows']} rows{extra})")
    return 0


# ---------------------------------------------------------------------------------- export
def _cmd_export_msccl(args: argparse.Namespace) -> int:
    from .export import check_msccl_xml, to_msccl_xml
    from .schedule.io import load_schedule

    sched = load_schedule(args.schedule)
    min_b = int(parse_size(args.min_bytes, "--min-bytes")) if args.min_bytes else None
    max_b = int(parse_size(args.max_bytes, "--max-bytes")) if args.max_bytes else None
    if args.instances < 1:
        raise CollsynthError(f"--instances must be at least 1, got {args.instances}")
    xml = to_msccl_xml(sched, dialect=args.dialect, proto=args.proto, instances=args.instances,
                       min_bytes=min_b, max_bytes=max_b, inplace=args.inplace)
    root = sched.collective.root if sched.collective.rooted else 0
    report = check_msccl_xml(xml, sched.topology, dialect=args.dialect, root=root or 0)
    try:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(xml)
    except OSError as e:
        raise CollsynthError(f"cannot write {args.output}: {e.strerror or e}") from None
    info = {"output": args.output, "dialect": args.dialect, "checked": report.ok,
            **{k: v for k, v in report.to_dict().items() if k not in ("ok",)}}
    if args.json:
        _emit_json(info)
    else:
        print(f"wrote {args.output} ({args.dialect} dialect, {report.ngpus} GPUs, "
              f"{report.nchannels} channel(s), {report.threadblocks} thread blocks, "
              f"{report.steps} steps); the independent XML checker passed")
    return 0


def _cmd_check_xml(args: argparse.Namespace) -> int:
    from .export import check_msccl_xml
    from .topology import load_topology

    from .topology.io import read_text

    topo = load_topology(args.topology) if args.topology else None
    text = read_text(args.xml)
    report = check_msccl_xml(text, topo, dialect=args.dialect, root=args.root)
    if args.json:
        _emit_json({"xml": args.xml, **report.to_dict()})
    else:
        print(f"OK: {args.xml}: {report.coll} on {report.ngpus} GPUs ({report.dialect} dialect), "
              f"{report.threadblocks} thread blocks, {report.steps} steps, {report.transfers} "
              f"transfers; checks: {', '.join(report.checks)}")
    return 0

# ---------------------------------------------------------------------------------- demo
DEMO_TOPOLOGIES = ("dgx1", "ndv2:chassis=2", "dgx2:chassis=2", "mi250:chassis=2",
                   "dgx_a100:nodes=2", "wan:dcs=3,gpus=8")


DEMO_COMPARE = ("dgx_a100:nodes=2", "allgather", (1e3, 1e6, 1e9))
#: The demo's comparison: the baselines and the fast synthesizers (the MILP is left to compare).
DEMO_ALGOS = ("ring", "tree", "hier_ring", "rd", "direct", "bruck", "sph", "spt", "forestcoll",
              "mteg")
#: The size whose winner the demo runs under MPI.
DEMO_RUN_SIZE = 1e6


def _cmd_demo(args: argparse.Namespace) -> int:
    from .collective import Collective
    from .synth import synthesize
    from .topology import load_topology
    from .verify import ensure_verified

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
            rows.append({"topology": spec, "compute_nodes": topo.num_ranks,
                         "switches": topo.num_switches, "routers": topo.num_routers,
                         "links": len(topo.links), "hop_diameter": topo.hop_diameter,
                         "collective": kind, "algorithm": "spt", "ops": sched.num_ops,
                         "link_hops": report.link_hops, "verified": report.ok,
                         "synth_time_s": synth_s,
                         "verify_time_s": time.perf_counter() - t1})
    spec, kind, sizes = DEMO_COMPARE
    topo = load_topology(spec)
    coll = Collective.make(kind, topo.num_ranks, 1)
    from functools import partial

    from .report.tune import tune

    tuned, _ = _run_compare(topo, coll, sizes, ",".join(DEMO_ALGOS), show_progress=not args.json,
                            run=partial(tune, out_dir=args.out))
    result = tuned.comparison
    if args.plot:
        from .report.plots import plot_algbw

        plot_algbw(result, args.plot)
    run_info = None
    if not args.no_run:
        from .runtime import launch
        from .runtime.plan import size_quantum
        from .schedule.io import load_schedule

        win = next(w for w in tuned.windows if DEMO_RUN_SIZE in w.sizes)
        q = size_quantum(load_schedule(win.schedule), 1)
        run_size = max(q, int(round(DEMO_RUN_SIZE / q)) * q)
        rep = launch(win.schedule, run_size, topo.num_ranks, check=True, iters=3)
        run_info = {"schedule": win.schedule, "xml": win.xml, "algorithm": win.algo,
                    "size_bytes": run_size, "ranks": topo.num_ranks, **rep.runs[0]}
    if args.json:
        _emit_json({"demo": "zoo topologies with spt schedules verified independently, then "
                            f"compare on {spec} {kind}, export the winners to MSCCL XML and "
                            f"run the {fmt_size(DEMO_RUN_SIZE)} winner under MPI",
                    "rows": rows, "compare": result.to_dict(), "tune": tuned.to_dict(),
                    "run": run_info})
        return 0
    from rich.table import Table

    con = _console()
    con.print("[bold]collsynth demo[/bold] 1/2: build zoo topologies, synthesize "
              "shortest-path-tree schedules, verify them independently")
    table = Table()
    for col in ("topology", "GPUs", "switches", "routers", "links", "diameter", "collective",
                "ops", "link hops", "verified", "synth", "verify"):
        table.add_column(col, justify="left" if col in ("topology", "collective") else "right")
    for r in rows:
        table.add_row(r["topology"], str(r["compute_nodes"]), str(r["switches"]),
                      str(r["routers"]), str(r["links"]), str(r["hop_diameter"]),
                      r["collective"], str(r["ops"]), str(r["link_hops"]),
                      "yes" if r["verified"] else "NO", fmt_time(r["synth_time_s"]),
                      fmt_time(r["verify_time_s"]))
    con.print(table)
    con.print(f"{len(rows)} schedules synthesized and verified.\n")
    con.print(f"[bold]collsynth demo[/bold] 2/3: compare algorithms on {spec} {kind} "
              f"(simulated; 'x bound' = time / best lower bound)")
    _print_comparison(result, best_only=False)
    if args.plot:
        con.print(f"wrote {args.plot}")
    con.print(f"\n[bold]collsynth demo[/bold] 3/3: the fastest exportable schedule per size as "
              f"MSCCL XML (checked independently), in {args.out}/")
    for w in tuned.windows:
        hi = "..." if w.max_bytes is None else fmt_size(w.max_bytes)
        con.print(f"  [{fmt_size(w.min_bytes)}, {hi}): {w.algo:10s} -> {w.xml}"
                  + (f"  ({w.note})" if w.note else ""))
    if run_info is not None:
        con.print(f"Ran {run_info['algorithm']} ({fmt_size(run_info['size_bytes'])}, "
                  f"{run_info['ranks']} ranks) under mpiexec with --check: the result matches "
                  f"MPI's own {kind} ({run_info.get('check')}); "
                  f"{fmt_time(run_info['time_s'])} per iteration, MPI's own "
                  f"{fmt_time(run_info['reference_time_s'])} (processes on this machine, not "
                  f"GPUs)")
    return 0


# ---------------------------------------------------------------------------------- parser
#: ``synth`` flags that are shorthands for ``--opt NAME=VALUE`` of the algorithm.
_SYNTH_SHORTHANDS = ("k", "slot", "subchunks", "workers")


def _cmd_wan_replan(args: argparse.Namespace) -> int:
    """SCALE-CCL re-planning under measured link statistics (issue 8)."""
    from .collective import Collective
    from .schedule.io import save_schedule
    from .synth.scale import LinkStats, replan
    from .topology import load_topology

    topo = load_topology(args.topology)
    stats = LinkStats.load(args.stats, topo)
    if args.subchunks < 1:
        raise CollsynthError(f"--subchunks {args.subchunks} must be at least 1")
    size = parse_size(args.size, "--size") if args.size is not None else None
    root = args.root
    if root is not None and not 0 <= root < topo.num_ranks:
        raise CollsynthError(f"--root {root} is not a rank of {topo.name!r}")
    coll = Collective.make(args.collective, topo.num_ranks, 1, root)
    t0 = time.perf_counter()
    if args.engine == "numba":
        from .synth.scale import load_kernel

        load_kernel()               # compile or load from cache: not part of the re-plan time
        t0 = time.perf_counter()
    sched = replan(topo, stats, coll, subchunks=args.subchunks, size=size, verify=False,
                   engine=args.engine)
    replan_s = time.perf_counter() - t0
    from .verify import ensure_verified

    report = ensure_verified(sched)
    save_schedule(sched, args.output)
    info = {"output": args.output, "algorithm": "scale", "topology": topo.name,
            "collective": sched.collective.to_dict(), "ops": sched.num_ops,
            "subchunks": args.subchunks, "size": sched.size, "replan_time_s": replan_s,
            "planned_time_s": sched.meta["scale"]["plan_time_s"], "verified": report.ok,
            "engine": sched.meta["scale"].get("engine")}
    if args.json:
        _emit_json(info)
    else:
        print(f"wrote {args.output}: {sched.num_ops} ops, planned completion "
              f"{fmt_time(info['planned_time_s'])}, re-planned in {fmt_time(replan_s)} (verified)")
    return 0


def _cmd_wan_stats(args: argparse.Namespace) -> int:
    """Write the link statistics of a topology (its own values, empty queues) as a template."""
    from .synth.scale import LinkStats
    from .topology import load_topology

    topo = load_topology(args.topology)
    stats = LinkStats.from_topology(topo)
    if args.perturb is not None:
        stats = stats.perturbed(args.perturb, args.spread, args.spread)
    stats.save(args.output, topo)
    print(f"wrote {args.output}: statistics of {len(topo.links)} links of {topo.name}")
    return 0


def _add_problem_args(p: argparse.ArgumentParser, chunks: bool = True) -> None:
    """--topology, --collective, --root, --chunks and --demand (synth, bound, compare)."""
    p.add_argument("--topology", "-t", required=True, metavar="SPEC",
                   help="zoo NAME[:key=value,...] or a topology file")
    p.add_argument("--collective", "-c", required=True, metavar="NAME",
                   help="allgather, reducescatter, allreduce, broadcast, reduce, alltoall, "
                        "gather, scatter or custom")
    p.add_argument("--root", type=int, default=None, help="root rank of rooted collectives")
    p.add_argument("--chunks", type=int, default=1,
                   help="chunks per rank (default 1)" if chunks else argparse.SUPPRESS)
    p.add_argument("--demand", metavar="FILE",
                   help="custom collective: a JSON demand matrix (list of rows) or "
                        "{\"chunks\": [[src, [dsts]], ...]}")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="collsynth",
                description="Design, bound, verify, simulate and export collective-communication "
                            "schedules for accelerator networks.")
    p.add_argument("--version", action="version", version=f"collsynth {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    topo = sub.add_parser("topo", help="show or export a topology",
                          description="Inspect and export topologies. SPEC is NAME, "
                                      "NAME:key=value,... (see `collsynth list`) or a file path "
                                      "(collsynth JSON/YAML, or a TE-CCL input JSON).")
    tsub = topo.add_subparsers(dest="topo_command", metavar="ACTION", parser_class=_Parser)
    tsub.required = True
    show = tsub.add_parser("show", help="summarize a topology")
    show.add_argument("spec", metavar="SPEC")
    show.add_argument("--json", action="store_true", help="print one JSON object")
    show.add_argument("--max-rows", type=int, default=64, help="per-node rows to print")
    show.set_defaults(func=_cmd_topo_show)
    exp = tsub.add_parser("export", help="write a topology file")
    exp.add_argument("spec", metavar="SPEC")
    exp.add_argument("-o", "--output", required=True, help="output file (.json, .yaml or .yml)")
    exp.add_argument("--format", choices=("json", "yaml"), help="override the extension")
    exp.add_argument("--json", action="store_true", help="print one JSON object")
    exp.set_defaults(func=_cmd_topo_export)

    lst = sub.add_parser("list", help="list zoo topologies, algorithms and collectives")
    lst.add_argument("--json", action="store_true", help="print one JSON object")
    lst.set_defaults(func=_cmd_list)

    syn = sub.add_parser("synth", help="synthesize a schedule, verify it and write it",
                         description="Synthesize a schedule with ALGO, verify it with the "
                                     "independent verifier and write it as JSON.")
    _add_problem_args(syn)
    syn.add_argument("--algo", "-a", default="spt", help="algorithm (see `collsynth list`)")
    syn.add_argument("--k", metavar="K", help="trees per root (forestcoll; same as --opt k=K)")
    syn.add_argument("--slot", metavar="DURATION",
                     help="time-slot length (mteg; same as --opt slot=DURATION)")
    syn.add_argument("--subchunks", metavar="C",
                     help="subchunks per chunk (scale; same as --opt subchunks=C)")
    syn.add_argument("--workers", metavar="N",
                     help="worker processes (syccl; same as --opt workers=N)")
    syn.add_argument("--opt", action="append", metavar="KEY=VALUE",
                     help="algorithm option (repeatable), e.g. --opt rings=4; see `collsynth list`")
    syn.add_argument("--size", help="data size (e.g. 1GB): size-aware algorithms tune the "
                     "schedule for it, and it is recorded in the schedule")
    syn.add_argument("-o", "--output", required=True, help="schedule file to write (JSON)")
    syn.add_argument("--json", action="store_true", help="print one JSON object")
    syn.add_argument("--teccl-input", metavar="FILE.json",
                     help="a TE-CCL input file: topology, collective, size and solver "
                          "parameters (implies --algo teccl; --opt overrides its values)")
    syn.add_argument("--teccl-output", metavar="FILE.json",
                     help="also write TE-CCL-style output keys (--algo teccl)")
    for action in syn._actions:  # --teccl-input supplies the topology and collective
        if action.dest in ("topology", "collective"):
            action.required = False
    syn.set_defaults(func=_cmd_synth)

    ver = sub.add_parser("verify", help="check that a schedule implements its collective",
                         description="Symbolically execute a schedule file on its topology and "
                                     "report the first violation in one line (exit status 2).")
    ver.add_argument("schedule", metavar="SCHEDULE.json")
    ver.add_argument("--topology", "-t", metavar="SPEC",
                     help="check against this topology (must match the embedded one)")
    ver.add_argument("--json", action="store_true", help="print one JSON object")
    ver.set_defaults(func=_cmd_verify)

    sim = sub.add_parser("simulate", help="simulate a schedule file",
                         description="Simulate a schedule (alpha-beta, store-and-forward at "
                                     "GPUs, cut-through at switches/routers, link contention; "
                                     "see docs/simulator.md).")
    sim.add_argument("schedule", metavar="SCHEDULE.json")
    sim.add_argument("--size", help="collective size, e.g. 1GB (default: the schedule's size)")
    sim.add_argument("--topology", "-t", metavar="SPEC",
                     help="simulate on this topology (must match the embedded one)")
    sim.add_argument("--order", choices=("auto", "plan", "fcfs"), default="auto",
                     help="link service order: the schedule's plan where it has one (auto, "
                          "plan) or first-ready-first-served everywhere (fcfs)")
    sim.add_argument("--release", action="store_true",
                     help="hold each operation until its planned start time")
    sim.add_argument("--reduce-bw", metavar="BW", help="reduction speed, e.g. 500GB/s "
                     "(default: free)")
    sim.add_argument("--gantt", metavar="FILE.png", help="draw the per-link timeline")
    sim.add_argument("--json", action="store_true", help="print one JSON object")
    sim.set_defaults(func=_cmd_simulate)

    bnd = sub.add_parser("bound", help="lower bound on the time of any schedule",
                         description="Certified lower bounds (ingress, egress, latency, exact cuts, "
                                     "demand cuts); the largest binds.")
    _add_problem_args(bnd, chunks=False)
    bnd.add_argument("--size", "-s", required=True, help="collective size, e.g. 1GB")
    bnd.add_argument("--json", action="store_true", help="print one JSON object")
    bnd.set_defaults(func=_cmd_bound)

    cmp_ = sub.add_parser("compare", help="compare algorithms across sizes",
                          description="Synthesize, verify and simulate each algorithm at each "
                                      "size; table, optional plot of algbw against size.")
    _add_problem_args(cmp_)
    cmp_.add_argument("--sizes", default="1KB,32KB,1MB,32MB,1GB",
                      help="comma-separated sizes (default 1KB,32KB,1MB,32MB,1GB)")
    cmp_.add_argument("--algos", default="all",
                      help="comma-separated algorithms, 'all' (every applicable one) or 'best' "
                           "(the best per size)")
    cmp_.add_argument("--opt", action="append", metavar="[ALGO.]KEY=VALUE",
                      help="algorithm option (repeatable): ALGO.KEY=VALUE for one algorithm, "
                           "KEY=VALUE for every algorithm that has that option")
    cmp_.add_argument("--plot", metavar="FILE.png", help="plot algbw against size")
    cmp_.add_argument("--no-progress", action="store_true", help="no progress bar")
    cmp_.add_argument("--json", action="store_true", help="print one JSON object")
    cmp_.set_defaults(func=_cmd_compare)

    tun = sub.add_parser("tune", help="pick the best schedule per size and export MSCCL XML",
                         description="Simulate every applicable algorithm (or --algos) at every "
                                     "size, and write one checked MSCCL XML per winning "
                                     "schedule with its minBytes/maxBytes window, the schedules "
                                     "and a summary (tune.json) to DIR.")
    _add_problem_args(tun)
    tun.add_argument("--sizes", default="1KB,32KB,1MB,32MB,1GB",
                     help="comma-separated sizes (default 1KB,32KB,1MB,32MB,1GB)")
    tun.add_argument("--algos", default="all",
                     help="comma-separated algorithms or 'all' (every applicable one)")
    tun.add_argument("--opt", action="append", metavar="[ALGO.]KEY=VALUE",
                     help="algorithm option (repeatable), as for compare")
    tun.add_argument("-o", "--output", required=True, metavar="DIR", help="output directory")
    tun.add_argument("--dialect", choices=("msccl", "executor"), default="msccl")
    tun.add_argument("--proto", choices=("Simple", "LL", "LL128"), default="Simple")
    tun.add_argument("--instances", type=int, default=1, help="MSCCL instances (default 1)")
    tun.add_argument("--no-progress", action="store_true", help="no progress bar")
    tun.add_argument("--json", action="store_true", help="print one JSON object")
    tun.set_defaults(func=_cmd_tune)

    ben = sub.add_parser("bench", help="run a benchmark suite",
                         description="Run a benchmark suite (quick, paper, scale, quality, sim) and write "
                                     "OUT/SUITE.json and OUT/SUITE.md.")
    ben.add_argument("suite", help="quick, paper, scale, quality or sim")
    ben.add_argument("--repeat", type=int, default=3, help="timing repeats (median)")
    ben.add_argument("--out", default="bench/results", help="results folder")
    ben.add_argument("--json", action="store_true", help="print one JSON object")
    ben.add_argument("--only", metavar="TEXT", default=None,
                     help="run only the cases whose 'algo collective topology' contains TEXT "
                          "and merge their rows into the existing results")
    ben.set_defaults(func=_cmd_bench)

    exp_ = sub.add_parser("export", help="export a schedule to a runtime format",
                          description="Export a schedule file; the output is checked by the "
                                      "independent XML checker before it is written.")
    esub = exp_.add_subparsers(dest="export_format", metavar="FORMAT", parser_class=_Parser)
    esub.required = True
    ms = esub.add_parser("msccl", help="MSCCL XML (old fork or executor dialect)")
    ms.add_argument("schedule", metavar="SCHEDULE.json")
    ms.add_argument("--dialect", choices=("msccl", "executor"), default="msccl")
    ms.add_argument("--proto", choices=("Simple", "LL", "LL128"), default="Simple")
    ms.add_argument("--instances", type=int, default=1, help="copies of the program (channels)")
    ms.add_argument("--inplace", action="store_true", help="in-place buffers")
    ms.add_argument("--min-bytes", metavar="SIZE", help="executor: smallest size this XML serves")
    ms.add_argument("--max-bytes", metavar="SIZE", help="executor: largest size this XML serves")
    ms.add_argument("-o", "--output", required=True, help="XML file to write")
    ms.add_argument("--json", action="store_true", help="print one JSON object")
    ms.set_defaults(func=_cmd_export_msccl)

    chk = sub.add_parser("check-xml", help="check an MSCCL XML file independently",
                         description="Parse an MSCCL XML file, enforce the structural rules, pair "
                                     "sends and receives, detect cycles and deadlocks, execute it "
                                     "symbolically and confirm the collective's postcondition.")
    chk.add_argument("xml", metavar="FILE.xml")
    chk.add_argument("--topology", "-t", metavar="SPEC",
                     help="check GPU count and that every sending pair has a route")
    chk.add_argument("--dialect", choices=("msccl", "executor"), default=None,
                     help="default: detected from the attributes")
    chk.add_argument("--root", type=int, default=0, help="root of broadcast/reduce programs")
    chk.add_argument("--json", action="store_true", help="print one JSON object")
    chk.set_defaults(func=_cmd_check_xml)

    from .runtime.cli_run import add_run_parser

    add_run_parser(sub)

    wan = sub.add_parser("wan", help="WAN tools: SCALE-CCL re-planning from link statistics",
                         description="Multi-datacenter tools (SCALE-CCL, seed 000).")
    wsub = wan.add_subparsers(dest="wan_command", metavar="ACTION", parser_class=_Parser)
    wsub.required = True
    rep = wsub.add_parser("replan", help="re-plan a schedule under link statistics",
                          description="Re-plan with SCALE-CCL under measured link statistics "
                                      "(bandwidth, delay, queue per link), verify, write JSON.")
    rep.add_argument("--topology", "-t", required=True, metavar="SPEC",
                     help="zoo NAME[:key=value,...] or a topology file")
    rep.add_argument("--stats", required=True, metavar="STATS.json",
                     help="link statistics (see docs/scale.md; `collsynth wan stats` writes one)")
    rep.add_argument("--collective", "-c", default="allgather",
                     help="allgather (default) or broadcast")
    rep.add_argument("--root", type=int, default=None, help="root rank for broadcast")
    rep.add_argument("--subchunks", type=int, default=8, help="subchunks per chunk (default 8)")
    rep.add_argument("--size", help="data size (default 1MiB)")
    rep.add_argument("--engine", choices=("auto", "numba", "python"), default="auto",
                     help="event loop: numba (compiled; loading it takes about a second in a "
                          "fresh process, the first compile on a machine about 30 s), python, "
                          "or auto (numba when already loaded)")
    rep.add_argument("-o", "--output", required=True, help="schedule file to write (JSON)")
    rep.add_argument("--json", action="store_true", help="print one JSON object")
    rep.set_defaults(func=_cmd_wan_replan)
    wst = wsub.add_parser("stats", help="write a topology's link statistics (a template)")
    wst.add_argument("--topology", "-t", required=True, metavar="SPEC")
    wst.add_argument("--perturb", type=int, metavar="SEED",
                     help="multiply bandwidths and delays by seeded random factors")
    wst.add_argument("--spread", type=float, default=0.3,
                     help="perturbation: factors uniform in [1-spread, 1+spread] (default 0.3)")
    wst.add_argument("-o", "--output", required=True, help="statistics file to write (JSON)")
    wst.set_defaults(func=_cmd_wan_stats)

    demo = sub.add_parser("demo", help="run the built-in example end to end")
    demo.add_argument("--plot", metavar="FILE.png", help="also plot the comparison")
    demo.add_argument("--out", default="collsynth-demo", metavar="DIR",
                      help="where the exported XML and schedules go (default collsynth-demo)")
    demo.add_argument("--no-run", action="store_true",
                      help="skip the MPI run at the end")
    demo.add_argument("--json", action="store_true", help="print one JSON object")
    demo.set_defaults(func=_cmd_demo)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        return int(args.func(args) or 0)
    except CollsynthError as e:
        print(f"collsynth: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("collsynth: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as e:  # a bug: still one line, unless debugging
        if os.environ.get("COLLSYNTH_DEBUG"):
            raise
        msg = " ".join(str(e).split())[:300]
        print(f"collsynth: internal error: {type(e).__name__}: {msg} "
              f"(set COLLSYNTH_DEBUG=1 for a traceback)", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
