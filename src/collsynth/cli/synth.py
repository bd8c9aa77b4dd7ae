"""``collsynth synth``: synthesize a schedule, verify it and write it."""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from typing import Any

from ..atomic import write_text_atomic
from ..errors import CollsynthError
from ..units import fmt_size, fmt_time
from .common import (
    Request,
    add_command,
    add_json,
    add_options,
    add_output,
    add_problem,
    add_quiet,
    add_size,
    add_time_limit,
    add_timing,
    algo_options,
    build_request,
    emit_json,
    parse_positive_size,
    refuse_overwriting_inputs,
    stages,
)


def add_parser(sub: Any) -> None:
    """Register ``synth``."""
    p = add_command(
        sub,
        "synth",
        "synthesize a schedule, verify it and write it",
        "Synthesize a schedule with ALGO (or the best simulated one with "
        "--algo best), verify it with the independent verifier and write it as "
        "JSON. Size-aware algorithms plan for --size (1MiB when none is given).",
        examples=(
            "collsynth synth -t dgx1 -c allreduce --algo ring -o ar.json",
            "collsynth synth -t ndv2:chassis=2 -c allgather --algo forestcoll "
            "-s 1GB --k 2 -o ag.json",
            "collsynth synth -t dgx1 -c allgather --algo teccl "
            "--opt epoch=fast,time_limit=5 -o ag.json",
            "collsynth synth --teccl-input in.json --algo teccl -o s.json",
        ),
    )
    add_problem(p, required=False)
    p.add_argument(
        "-a",
        "--algo",
        default="spt",
        help="algorithm (see `collsynth list`), or best: the fastest simulated "
        "schedule at --size among every applicable algorithm",
    )
    add_options(p, targeted=False)
    add_size(
        p,
        help="data size, e.g. 1GB: size-aware algorithms plan for it, and it is "
        "recorded in the schedule",
    )
    add_output(p, help="schedule file to write (JSON; a name ending in .npz gets the binary form)")
    p.add_argument(
        "--compact",
        action="store_true",
        help="write the compact form (one operation per orbit of the fabric's symmetry group "
        "and the group; .npz only; docs/formats.md): verified without expanding it",
    )
    add_json(p)
    add_time_limit(p)
    add_timing(p)
    add_quiet(p)
    p.add_argument(
        "--teccl-input",
        metavar="FILE.json",
        help="a TE-CCL input file: topology, collective, size and solver parameters "
        "(implies --algo teccl; --opt overrides its values)",
    )
    p.add_argument(
        "--teccl-output",
        metavar="FILE.json",
        help="also write TE-CCL-style output keys (--algo teccl)",
    )
    p.set_defaults(func=cmd_synth)


def _request(args: argparse.Namespace) -> tuple[Request, dict[str, Any]]:
    """The request, from -t/-c or from a TE-CCL input file (and that file's options)."""
    if args.teccl_input:
        from ..export.teccl import read_teccl_input

        if args.topology or args.collective:
            raise CollsynthError(
                "--teccl-input gives the topology and collective; drop --topology/--collective"
            )
        if args.algo not in ("spt", "teccl"):  # spt is the default
            raise CollsynthError(f"--teccl-input needs --algo teccl, not {args.algo}")
        args.algo = "teccl"
        inp = read_teccl_input(args.teccl_input)
        req = Request(inp.topology, inp.collective, "teccl", algo_options(args, "teccl"))
        req.sizes = [parse_positive_size(args.size, "--size")] if args.size else [inp.size]
        return req, dict(inp.options)
    if not args.topology or not args.collective:
        missing = ", ".join(
            name
            for name, v in (("-t/--topology", args.topology), ("-c/--collective", args.collective))
            if not v
        )
        raise CollsynthError(
            f"synth: the following arguments are required: {missing} (or --teccl-input)"
        )
    return build_request(args, algorithm=None if args.algo == "best" else args.algo), {}


def cmd_synth(args: argparse.Namespace) -> int:
    """Synthesize, verify, write."""
    from ..schedule.io import save_schedule
    from ..verify import ensure_verified

    refuse_overwriting_inputs(
        {"-o": args.output, "--teccl-output": args.teccl_output},
        {"-t": args.topology, "--teccl-input": args.teccl_input, "--demand": args.demand},
    )
    req, file_opts = _request(args)
    if args.compact and not args.output.lower().endswith(".npz"):
        raise CollsynthError("--compact writes the compact form as .npz only (name the file "
                             "NAME.npz)")  # fmt: skip
    if args.compact and args.teccl_output:
        raise CollsynthError("--teccl-output needs the explicit schedule: drop --compact")
    if args.teccl_output and args.algo != "teccl":
        raise CollsynthError(f"--teccl-output needs --algo teccl, not {args.algo}")
    with stages(not args.quiet and not args.json) as stage:
        t0 = time.perf_counter()
        stage(f"synthesizing with {args.algo}")
        name, sched = _synthesize(args, req, file_opts)
        synth_s = time.perf_counter() - t0
        if req.size is not None and sched.size is None:
            compact = getattr(sched, "with_size", None)  # (a compact schedule)
            sched = compact(req.size) if compact else replace(sched, size=req.size)
        stage(f"verifying {sched.num_ops} operations")
        t1 = time.perf_counter()
        report = ensure_verified(sched)
        verify_s = time.perf_counter() - t1
        stage(f"writing {args.output}")
        te_text = None
        if args.teccl_output:  # made before anything is written: a failure leaves no file
            from ..export.teccl import teccl_output_text
            from ..schedule.timing import without_timing

            out = sched if args.timing else replace(sched, meta=without_timing(sched.meta))
            te_text = teccl_output_text(out)
        save_schedule(sched, args.output, timing=args.timing)
        if te_text is not None:
            write_text_atomic(args.teccl_output, te_text)
    info = {
        "output": args.output,
        "algorithm": name,
        "topology": req.topology.name,
        "collective": sched.collective.to_dict(),
        "ops": sched.num_ops,
        "verified": report.ok,
        "status": sched.meta.get("status", "complete"),
        **{k: v for k, v in sched.stats().items() if k != "ops"},
    }
    if args.timing:
        info["timing"] = {"synth_wall_s": synth_s, "verify_wall_s": verify_s}
    if args.json:
        emit_json(info)
    else:
        stopped = (
            " (stopped by the time limit: best found)" if info["status"] == "time_limit" else ""
        )
        print(
            f"{name}: {sched.collective.describe()} on {req.topology.name}: "
            f"{sched.num_ops} ops, verified, synthesized"
            + (f" in {fmt_time(synth_s)}" if args.timing else "")
            + f"{stopped}; wrote {args.output}"
        )
    return 0


def _synthesize(
    args: argparse.Namespace, req: Request, file_opts: dict[str, Any]
) -> tuple[str, Any]:
    """(algorithm name, schedule) for ``--algo`` (``best``: the fastest simulated)."""
    from ..synth import synthesize

    if args.algo == "best":
        name, best = _best(req)
        if args.compact:
            from ..synth.run import as_compact

            return name, as_compact(best, name)
        return name, best
    name = args.algo
    unknown = set(req.options) - {name}
    if unknown:
        raise CollsynthError(f"--opt for {sorted(unknown)[0]!r} does not apply to --algo {name}")
    opts = {**file_opts, **req.options.get(name, {})}
    if args.compact:
        return name, synthesize(name, req.topology, req.collective, size=req.size,
                                compact=True, **opts)  # fmt: skip
    return name, synthesize(name, req.topology, req.collective, size=req.size, **opts)


def _best(req: Request) -> tuple[str, Any]:
    """``--algo best``: the fastest simulated schedule at the request's size, in the realized
    model (what the executors and exporters run)."""
    from ..report.compare import compare, resolve_algos
    from ..synth import DEFAULT_SIZE

    size = req.size if req.size is not None else DEFAULT_SIZE
    req.sizes = [size]
    algos, _ = resolve_algos("all", req.collective)
    kept: dict[tuple[str, float], Any] = {}
    result = compare(req.topology, req.collective, [size], algos, options=req.options, keep=kept)
    if not result.rows:
        raise CollsynthError(
            "no algorithm could produce a schedule: "
            + "; ".join(f"{s['algo']}: {s['reason']}" for s in result.skipped)
        )
    best = min(result.rows, key=lambda r: (r.time_s, r.algo))
    sched = kept[(best.algo, best.size_bytes)]
    return best.algo, sched.with_meta(
        selected_by=f"fastest simulated at {fmt_size(size)} in the {result.model} (realized) "
        f"model among {', '.join(algos)}"
    )
