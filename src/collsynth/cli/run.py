"""``collsynth run``: execute schedule files on a real distributed engine.

``mpiexec -n N collsynth run S.json [S2.json ...] --size SIZE [--backend mpi|torch] [--iters I]
[--warmup W] [--check] [--seed S] [--timeout T] [--dtype float32|float64|int32] [--json]``, or
``collsynth run ... --launch N`` to start itself under ``mpiexec`` with the right flags.

Exit status: 0 ok; 2 bad input (one line, printed by rank 0 only); 3 the run failed (a timeout
names the rank and the stuck operation; a failed ``--check`` names the rank and chunk).

With ``--launch`` this process supervises mpiexec (:func:`~collsynth.runtime.supervise.supervise`):
the ranks record each step, every step has a deadline (``--timeout``, the communicator set-up
included), a rank that dies or stops ends the run within about ``--timeout``, no rank outlives
it, and a failure is exactly one line naming the rank and the step plus mpiexec's log file
(mpiexec's own reports reach the terminal only with ``--verbose``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

import numpy as np

from ..errors import CollsynthError
from ..units import fmt_bandwidth, fmt_size, fmt_time, parse_size, parse_time
from .common import add_command, add_size, add_sizes, emit_json, parse_sizes, sizes_text

RUN_FAILED = 3


INJECT_HELP = (
    "drop:OP (the sender skips OP's send), corrupt:RANK (RANK's output is damaged after the "
    "run), exit:RANK, kill:RANK or stop:RANK (RANK exits with status 1, is killed with SIGKILL "
    "or stops itself with SIGSTOP), each optionally @startup (before the communicator set-up) "
    "or @iter:N (in iteration N, counting warm-up iterations from 0); without @, after the "
    "barrier before the run"
)

#: extra untimed iterations of a command's first schedule (where ``--warmup`` is not 0): the
#: first timed iteration after one warm-up still paid the processes' cold start (on the
#: testbed the first schedule of a launch measured 1.2x in its first timed iteration, every
#: later one 1.0x)
COLD_START_WARMUP = 1


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Register ``run``."""
    p = add_command(
        sub,
        "run",
        "execute schedules with MPI or torch.distributed",
        "Every rank interprets its part of the schedule with non-blocking point-to-point "
        "messages (numpy buffers, reductions in numpy), honouring dependencies and per-link "
        "order; reports the time per iteration next to the engine's own collective. Start "
        "with `mpiexec -n N collsynth run ...` or add `--launch N`.",
        examples=(
            "collsynth run ar.json -s 3MiB --check --iters 5 --launch 8",
            "mpiexec -n 8 collsynth run ar.json ag.json -s 1MB --json",
            "collsynth run ar.json -b 1K -e 16M -f 4 --check --nccl-tests --launch 8",
        ),
    )
    p.add_argument(
        "schedules",
        nargs="+",
        metavar="SCHEDULE.json",
        help="schedule file(s); several run one after another in one launch",
    )
    add_size(p, help="collective size, e.g. 1MB (nccl-tests convention); or a sweep:")
    add_sizes(p, default=None)
    p.add_argument(
        "--backend",
        choices=("mpi", "torch"),
        default="mpi",
        help="mpi (mpi4py) or torch (torch.distributed: gloo on CPU, NCCL on GPUs)",
    )
    p.add_argument("--iters", type=int, default=5, help="timed iterations (median reported)")
    p.add_argument(
        "--warmup",
        type=int,
        default=1,
        help="untimed iterations first (the command's first schedule gets one more where this "
        "is not 0: it also pays the processes' cold start)",
    )
    p.add_argument(
        "--check",
        action="store_true",
        help="compare the result with the engine's own collective on seeded data",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the input data")
    p.add_argument(
        "--timeout",
        default="30s",
        help="fail (never hang) when one iteration, barrier or, with --launch, start-up step "
        "takes longer (default 30s)",
    )
    p.add_argument(
        "--dtype", default="float32", help="element type of reductions: float32, float64 or int32"
    )
    p.add_argument(
        "--no-reference",
        action="store_true",
        help="do not run the engine's own collective (--check then compares with a computed "
        "reference)",
    )
    p.add_argument(
        "--reference-once",
        action="store_true",
        help="time the engine's own collective with the first schedule only",
    )
    p.add_argument(
        "--alpha-delay",
        type=float,
        default=0.0,
        metavar="F",
        help="emulate link latency: each send waits F x its route's alpha before it is "
        "posted (the testbed passes 1/scale; default 0: none)",
    )
    p.add_argument(
        "--launch",
        "--np",
        type=int,
        metavar="N",
        dest="launch",
        help="re-run this command under mpiexec with N ranks",
    )
    p.add_argument(
        "--verbose",
        action="store_true",
        help="with --launch: also show mpiexec's own messages (otherwise kept in a log file, "
        "named in the error of a failed run)",
    )
    p.add_argument(
        "--inject",
        action="append",
        metavar="FAULT",
        help=f"for tests, repeatable: make the run fail on purpose: {INJECT_HELP}",
    )
    p.add_argument(
        "--trace",
        metavar="FILE.json",
        help="rank 0 writes the last timed iteration of every run in the Trace Event Format "
        "(Perfetto, chrome://tracing): a track per rank and per busy link, raw seconds; with "
        "--json each run also carries its per-operation times of every timed iteration "
        "(traces)",
    )
    p.add_argument("--json", action="store_true", help="rank 0 prints one JSON object on stdout")
    p.add_argument(
        "--nccl-tests",
        action="store_true",
        help="rank 0 prints each schedule's sizes as nccl-tests prints its results (time in "
        "us, GB/s, #wrong with --check)",
    )
    p.add_argument(
        "--csv", action="store_true", help="rank 0 prints one CSV row per (size, schedule)"
    )
    p.set_defaults(func=cmd_run)
    return p


def _env_rank() -> int:
    for name in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "RANK"):
        v = os.environ.get(name)
        if v is not None and v.strip().isdigit():
            return int(v)
    return 0


def _env_local_ranks() -> int:
    """How many ranks the launcher started on this machine (1 when it does not say)."""
    for name in ("OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "LOCAL_WORLD_SIZE"):
        v = os.environ.get(name, "").strip()
        if v.isascii() and v.isdigit() and 0 < int(v) < 1 << 20:
            return int(v)
    return 1


def _announce() -> Any:
    """A rank started by ``--launch`` says that it is alive as early as it can (when this
    module is imported): the launcher allows a rank's start only ``--timeout`` plus a few s."""
    from ..runtime.progress import ENV_DIR, LOAD_STEP, Progress

    if not os.environ.get(ENV_DIR):
        return None
    prog = Progress.from_env(_env_rank())
    prog.step(LOAD_STEP, None)
    return prog


#: this rank's progress record when --launch started it (see _announce)
_RANK_PROGRESS = _announce()


def _launch(args: argparse.Namespace) -> int:
    from ..atomic import check_outputs
    from ..runtime.launcher import mpiexec_command, run_argv
    from ..runtime.supervise import PIDFILE_ENV, supervise

    pidfile = os.environ.get(PIDFILE_ENV)
    if pidfile:  # the launcher's pid list (a test hook) is an output like any other
        check_outputs({PIDFILE_ENV: pidfile}, {"the schedule": list(args.schedules)})
    scheds = _validate(args)[0]  # bad input: one line here, before starting mpiexec
    need = scheds[0][1].collective.num_ranks
    if args.launch != need:
        raise CollsynthError(f"--launch {args.launch}: the schedule needs {need} ranks")
    import importlib.util

    module = {"mpi": "mpi4py", "torch": "torch"}[args.backend]
    if importlib.util.find_spec(module) is None:
        _make_backend(args.backend, 1.0)  # raises the backend's one-line "needs ..." error

    sizes = _validate(args)[1]
    argv = run_argv(
        args.schedules,
        ",".join(str(int(x)) if float(x).is_integer() else repr(float(x)) for x in sizes),
        sweep=True,
        backend=args.backend,
        iters=args.iters,
        warmup=args.warmup,
        check=args.check,
        seed=args.seed,
        timeout=parse_time(args.timeout, "--timeout"),
        dtype=args.dtype,
        reference=not args.no_reference,
        reference_once=args.reference_once,
        json_out=args.json,
        nccl_tests=args.nccl_tests,
        csv_out=args.csv,
        inject=args.inject or (),
        alpha_delay=args.alpha_delay,
        trace=args.trace,
    )
    cmd = mpiexec_command(args.launch, argv)
    res = supervise(cmd, args.launch, parse_time(args.timeout, "--timeout"), verbose=args.verbose)
    if res.error_line:
        sys.stdout.flush()
        print(f"collsynth: error: {res.error_line}", file=sys.stderr, flush=True)
    return res.status


def _validate(args: argparse.Namespace):
    from ..runtime.check import parse_dtype
    from ..runtime.driver import Inject
    from ..schedule.io import load_any

    if args.iters < 1:
        raise CollsynthError(f"--iters must be at least 1, got {args.iters}")
    if args.warmup < 0:
        raise CollsynthError(f"--warmup must be at least 0, got {args.warmup}")
    if sum(map(bool, (args.json, args.nccl_tests, args.csv))) > 1:
        raise CollsynthError("choose one of --json, --csv and --nccl-tests")
    sweep = sizes_text(args)
    if args.size is not None and sweep is not None:
        raise CollsynthError("give -s/--size or a sweep (--sizes, -b/-e/-f/-i), not both")
    if args.size is None and sweep is None:
        raise CollsynthError("give the size: -s/--size SIZE, or --sizes / -b -e -f for a sweep")
    sizes = [parse_size(args.size, "--size")] if args.size is not None else parse_sizes(sweep)
    timeout = parse_time(args.timeout, "--timeout")
    if not timeout > 0:
        raise CollsynthError(f"--timeout {args.timeout!r} must be positive")
    dtype = parse_dtype(args.dtype)
    if not (args.alpha_delay >= 0 and args.alpha_delay < 1e12):
        raise CollsynthError(f"--alpha-delay {args.alpha_delay!r} must be between 0 and 1e12")
    inject = Inject.parse(args.inject)
    if args.trace is not None:
        from ..atomic import check_outputs

        check_outputs({"--trace": args.trace}, {"the schedule": list(args.schedules)})
    # a compact file stays compact: each rank plans its own part from it (runtime.compact_plan)
    scheds = [(path, _loaded(load_any(path), args)) for path in args.schedules]
    ranks = {s.collective.num_ranks for _, s in scheds}
    if len(ranks) > 1:
        raise CollsynthError(
            f"the schedules need different numbers of ranks "
            f"({', '.join(map(str, sorted(ranks)))}); run them separately"
        )
    from ..runtime.check import element_dtype
    from ..runtime.plan import check_memory, chunk_bytes_for, rank_buffer_bytes

    # the ranks sharing this machine: all of them with --launch, else what mpiexec says
    local = args.launch if args.launch is not None else _env_local_ranks()
    per_chunk = [rank_buffer_bytes(s.collective, 1) for _, s in scheds]  # once per schedule
    for size in sizes:
        for (path, s), unit in zip(scheds, per_chunk):
            try:
                cb = chunk_bytes_for(s, size, element_dtype(s.collective, dtype).itemsize)
                check_memory(s.collective, cb, local, unit)
            except CollsynthError as e:
                what = f"--size {args.size}" if args.size is not None else f"size {size:g} B"
                raise CollsynthError(f"{what}: {path}: {e}") from None
    return scheds, sizes, timeout, dtype, inject


def _loaded(sched: Any, args: argparse.Namespace) -> Any:
    """A loaded schedule as the run needs it: a compact one expanded for ``--trace`` and
    ``--alpha-delay``, which read every operation (within the expansion's size limit)."""
    from ..schedule.compact import CompactSchedule

    if isinstance(sched, CompactSchedule) and (args.trace is not None or args.alpha_delay > 0):
        from ..schedule.compact_io import expansion_fits

        expansion_fits(sched, "the schedule")
        return sched.expand()
    return sched


def _verify_all(scheds) -> str | None:
    from ..verify import check_schedule

    for path, sched in scheds:
        rep = check_schedule(sched)
        if not rep.ok:
            return f"{path} does not verify: {rep.error}"
    return None


def _make_backend(name: str, timeout: float):
    if name == "mpi":
        from ..runtime.mpi_backend import MPIBackend

        return MPIBackend()
    if name == "torch":
        from ..runtime.torch_backend import TorchBackend

        return TorchBackend(timeout=timeout)
    raise CollsynthError(f"unknown --backend {name!r} (known: mpi, torch)")


#: the columns of ``run --csv`` (one unit per column)
RUN_CSV = ("schedule", "algorithm", "size_bytes", "time_s", "algbw_Bps", "busbw_Bps",
           "reference_time_s", "check", "wrong")  # fmt: skip
#: nccl-tests' names of the element types
NCCL_TYPE = {"float32": "float", "float64": "double", "int32": "int32"}


def _nccl_tests_tables(info: dict, scheds: list, dtype: Any) -> str:
    """One nccl-tests table per schedule: its measured rows (out-of-place; the executor's
    in-place variant is not measured, so those columns are N/A)."""
    from ..report.nccl_tests import table, table_rows

    parts = []
    for path, sched in scheds:
        rows = [dict(r, size_bytes=r["size"]) for r in info["runs"] if r["schedule"] == path]
        trows = table_rows(sched.collective, rows, NCCL_TYPE.get(str(dtype), str(dtype)),
                           np.dtype(dtype).itemsize)  # fmt: skip
        title = (
            f"collsynth run {path}: {info['ranks']} ranks ({info['backend']}), "
            f"{info['iters']} iteration(s) after {info['warmup']} warm-up (median)"
        )
        parts.append(table(trows, title))
    return "".join(parts)


def _print_report(info: dict) -> None:
    sizes = ", ".join(fmt_size(z) for z in info["sizes"])
    print(
        f"collsynth run: {info['ranks']} ranks ({info['backend']}), size"
        f"{'s' if len(info['sizes']) > 1 else ''} {sizes}, {info['iters']} iteration(s) after "
        f"{info['warmup']} warm-up"
    )
    for r in info["runs"]:
        at = f" at {fmt_size(r['size'])}" if len(info["sizes"]) > 1 else ""
        line = (
            f"  {r['algorithm'] or 'schedule'} {r['collective']['kind']}{at} on "
            f"{r['topology']} ({r['ops']} ops, {r['schedule']}): "
            f"{fmt_time(r['time_s'])} per iteration"
        )
        if r.get("algbw_Bps"):
            alg, bus = fmt_bandwidth(r["algbw_Bps"]), fmt_bandwidth(r["busbw_Bps"])
            line += f", algbw {alg}, busbw {bus}"
        if r.get("reference_time_s") is not None:
            line += f"; {r['reference']}: {fmt_time(r['reference_time_s'])}"
        if r["check"] == "passed":
            line += f"; check passed (against {r['reference']})"
        elif r["check"] == "failed":
            line += f"; CHECK FAILED: {r['check_error']}"
        print(line)


def cmd_run(args: argparse.Namespace) -> int:
    if args.launch is not None:
        return _launch(args)
    from ..runtime.progress import READ_STEP, Progress

    # a rank started by --launch keeps its progress where the launcher reads it
    prog = _RANK_PROGRESS if _RANK_PROGRESS is not None else Progress.from_env(_env_rank())
    prog.step(READ_STEP, None)
    try:
        status = _run_rank(args, prog)
    except CollsynthError as e:
        prog.finish(2, str(e))
        raise
    except KeyboardInterrupt as e:  # SIGINT, SIGTERM or SIGHUP: 128 + the signal's number
        from ..interrupt import status_of

        prog.finish(status_of(e), f"rank {prog.rank}: interrupted")
        raise
    except Exception as e:
        prog.finish(1, f"rank {prog.rank}: internal error: {type(e).__name__}: {e}")
        raise
    prog.finish(status)  # a failure was recorded with its line where it happened
    return status


def _run_rank(args: argparse.Namespace, prog: Any) -> int:
    """One rank's ``collsynth run`` (under mpiexec, or alone to say how to start it)."""
    from ..runtime.progress import SETUP_STEP

    quiet = _env_rank() != 0
    try:
        scheds, sizes, timeout, dtype, inject = _validate(args)
        # the communicator set-up waits for every rank with no deadline of its own: the
        # launcher allows it --timeout
        prog.step(SETUP_STEP, timeout)
        inject.strike(_env_rank(), "startup")
        backend = _make_backend(args.backend, timeout)
        need = scheds[0][1].collective.num_ranks
        if backend.size != need:
            hint = (
                f" (start it with `mpiexec -n {need} collsynth run ...` or add `--launch {need}`)"
                if backend.size == 1
                else ""
            )
            raise CollsynthError(
                f"the schedule needs {need} ranks but {backend.size} "
                f"{'is' if backend.size == 1 else 'are'} running{hint}"
            )
    except CollsynthError:
        if quiet:
            prog.finish(2)
            return 2  # every rank found the same problem; rank 0 prints it
        raise
    quiet = backend.rank != 0
    # the verifier runs on rank 0 only (it is the slow part of starting); all ranks learn
    # its verdict, so a schedule that does not verify stops every rank with status 2
    problem = None
    if not quiet:
        prog.step("verifying the schedules", None)
        problem = _verify_all(scheds)
    else:
        prog.step("waiting for rank 0 to verify the schedules", None)
    from ..runtime.interp import RunTimeout

    try:
        verdicts = backend.allgather_obj(problem, time.monotonic() + timeout + 600.0)
    except RunTimeout as e:
        _fail(backend, prog, e, 0.0)
        return RUN_FAILED
    if verdicts[0] is not None:
        if quiet:
            prog.finish(2)
            return 2
        raise CollsynthError(verdicts[0])
    runs: list[dict] = []
    traces: list[dict | None] = []
    try:
        _run_all(args, backend, prog, scheds, sizes, timeout, dtype, inject, runs, traces)
    except RunTimeout as e:
        # let the other ranks say where they stand
        _fail(backend, prog, e, min(2.0, max(1.0, timeout / 4)))
        return RUN_FAILED
    failed = [r for r in runs if r["check"] == "failed"]
    info = {
        "backend": backend.name,
        "ranks": backend.size,
        "sizes": [int(z) for z in sizes],
        **({"size": int(sizes[0])} if len(sizes) == 1 else {}),  # as before sweeps existed
        "iters": args.iters,
        "warmup": args.warmup,
        "warmup_first": args.warmup + (COLD_START_WARMUP if args.warmup > 0 else 0),
        "seed": args.seed,
        "dtype": str(dtype),
        "ok": not failed,
        "runs": runs,
    }
    if not quiet:
        if args.trace:
            _write_trace(args.trace, runs, traces, scheds)
        if args.json:
            emit_json(info)  # strict JSON, like every --json output
        elif args.nccl_tests:
            sys.stdout.write(_nccl_tests_tables(info, scheds, dtype))
        elif args.csv:
            from ..report.nccl_tests import to_csv

            rows = [dict(r, size_bytes=r["size"]) for r in info["runs"]]
            sys.stdout.write(to_csv(rows, RUN_CSV))
        else:
            _print_report(info)
        sys.stdout.flush()
        if failed:
            msg = f"check failed: {failed[0]['schedule']}: {failed[0]['check_error']}"
            print(f"collsynth: error: {msg}", file=sys.stderr, flush=True)
            prog.finish(RUN_FAILED, msg)
    prog.finish(RUN_FAILED if failed else 0)
    if hasattr(backend, "close"):
        backend.close()
    return RUN_FAILED if failed else 0


def _run_all(args, backend, prog, scheds, sizes, timeout, dtype, inject, runs, traces) -> None:
    """Every schedule at every size on this rank, appended to ``runs`` (and, with
    ``--trace``, each run's last timed iteration to ``traces``)."""
    from ..runtime.driver import run_on_backend

    for k, (size, (i, (path, sched))) in enumerate(
        (z, ps) for z in sizes for ps in enumerate(scheds)
    ):
        warmup = args.warmup + (COLD_START_WARMUP if k == 0 and args.warmup > 0 else 0)
        summ = run_on_backend(
            sched,
            backend,
            size,
            name=path,
            iters=args.iters,
            warmup=warmup,
            check=args.check,
            seed=args.seed,
            timeout=timeout,
            dtype=dtype,
            reference=not args.no_reference and (i == 0 or not args.reference_once),
            inject=inject,
            progress=prog,
            alpha_delay=args.alpha_delay,
            trace=bool(args.trace),
        )
        run = {**summ.to_dict(), "warmup": warmup}
        # the per-operation times go to the trace file (the last timed iteration), and to
        # --json's runs (every timed iteration)
        got = run.get("traces") if args.json else run.pop("traces", None)
        traces.append(got[-1] if got else None)
        runs.append(run)


def _write_trace(path: str, runs: list[dict], traces: list, scheds: list) -> None:
    """Rank 0 writes the runs' timelines (raw seconds) to one Trace Event file: one set of
    tracks per run, named by the schedule and the size."""
    from ..report.trace import measured_trace, merge_traces
    from .common import write_json_file

    parts = []
    for k, (run, times) in enumerate(zip(runs, traces)):
        name, sched = scheds[k % len(scheds)]
        about = {"schedule_file": name, "size_bytes": run["size"]}
        trace = measured_trace(sched.expand_joins().expand_groups(), times, about=about)
        parts.append((f"{name} {fmt_size(run['size'])}", trace))
    write_json_file(path, merge_traces(parts))


def _fail(backend: Any, prog: Any, e: Exception, wait: float) -> None:
    """A rank's deadline passed: say where it is stuck, then end the whole run."""
    print(f"collsynth: error: {e}", file=sys.stderr, flush=True)
    sys.stdout.flush()
    prog.finish(RUN_FAILED, str(e))
    time.sleep(wait)
    backend.abort(RUN_FAILED)
