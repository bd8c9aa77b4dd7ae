"""``collsynth bench SUITE``: run a benchmark suite."""

from __future__ import annotations

import argparse
import os
from typing import Any

from ..errors import CollsynthError
from .common import (
    add_command,
    add_json,
    add_output,
    add_pool,
    add_quiet,
    add_time_limit,
    default_output_dir,
    emit_json,
    pool_of,
)


def add_parser(sub: Any) -> None:
    """Register ``bench``."""
    from ..bench import SUITES

    names = ", ".join(SUITES)
    p = add_command(
        sub,
        "bench",
        "run a benchmark suite",
        f"Run a benchmark suite ({names}) and write OUT/SUITE.json and "
        f"OUT/SUITE.md. Timings are medians over --repeat runs. Without -o the "
        f"results go to {default_output_dir('bench')}; the repository's own "
        f"results live in bench/results (-o bench/results).",
        examples=(
            "collsynth bench quick",
            "collsynth bench quick -o bench/results",
            "collsynth bench quality --only mi250 -o bench/results",
        ),
    )
    p.add_argument("suite", metavar="SUITE", help=names)
    p.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="timing repeats (harness suites: median; mteg: best; teccl solves once)",
    )
    add_output(
        p,
        required=False,
        metavar="DIR",
        help="results folder (default: a per-user data folder, see above)",
    )
    add_json(p)
    add_time_limit(p, each=True)
    add_quiet(p)
    p.add_argument(
        "--only",
        metavar="TEXT",
        default=None,
        help="run only the cases whose 'algo collective topology' contains TEXT and "
        "merge their rows into the existing results",
    )
    add_pool(p)
    p.set_defaults(func=cmd_bench)


def cmd_bench(args: argparse.Namespace) -> int:
    """Run the suite, write its results, print its table."""
    from ..bench import run_suite

    if args.repeat < 1:
        raise CollsynthError(f"--repeat must be at least 1, got {args.repeat}")
    out = args.output or default_output_dir("bench")
    from ..atomic import check_output_dir

    # the suites write NAME.json and NAME.md there (creating the folder and its parents)
    check_output_dir(out, "-o", owned=lambda name: name.endswith((".json", ".md")), parents=True)
    from rich.console import Console

    err = Console(stderr=True, highlight=False)  # progress never reaches stdout
    res = run_suite(
        args.suite,
        out_dir=out,
        repeat=args.repeat,
        # progress lines on a terminal only: a redirected stderr stays empty on success
        progress=None
        if args.json or args.quiet or not err.is_terminal
        else (lambda m: err.print(f"[dim]{m}[/dim]")),
        only=args.only,
        pool=pool_of(args),
    )
    if args.json:
        emit_json(res)
        return 0
    name = res.get("files", args.suite)  # a suite may rewrite another suite's files
    with open(os.path.join(out, f"{name}.md"), encoding="utf-8") as f:
        print(f.read())
    summ = res["summary"]
    extra = ""
    if "median_sim_hops_per_s" in summ:
        extra = f", median simulator throughput {summ['median_sim_hops_per_s'] / 1e6:.3g} Mhops/s"
    print(f"wrote {out}/{name}.json and .md ({summ['rows']} rows{extra})")
    return 0
