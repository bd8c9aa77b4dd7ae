"""Independent cases, run in this process or on a Dask cluster (``distributed``).

``compare``, ``tune`` and the sweeps behind them are lists of independent cases (one
algorithm on one problem, ...). :func:`run_cases` runs ``fn(*case)`` for each and returns the
results in the cases' order, whichever way they ran:

* ``Pool(workers=1)`` (the default): one after another, in this process;
* ``Pool(workers=N)`` with N > 1: on a local Dask cluster of N single-threaded worker
  processes, started for the call and closed after it (``--jobs auto``: one per core);
* ``Pool(scheduler="tcp://HOST:PORT")``: on an existing Dask cluster (every worker needs the
  same collsynth installed).

The results are the serial run's: each case is a deterministic function of its arguments, and
they are gathered in order. Progress reports cases done / total. A worker that dies (killed,
out of memory) has its cases re-run on another worker by the scheduler (up to its
``allowed-failures``, 3 by default); an exception inside a case is the case's own and is raised
here as in a serial run. An interruption (Ctrl-C) or a time limit cancels every case not yet
finished and closes the cluster before it propagates. Under a time limit (``--time-limit``) the
cases run within the time left, so solvers on the workers cap their own budgets, and a case out
of time ends as it would in this process; the cluster's start-up (and the workers loading the
code) does not count against the limit (:func:`collsynth.deadline.paused`), so the results are
the serial run's. The local cluster's processes write nothing on stderr: a Ctrl-C, which a
terminal sends to the whole process group, is reported by this process alone, in one line,
and it closes the cluster.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import math
import os
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from . import deadline
from .errors import CollsynthError

#: how long to wait for an existing scheduler to answer, in seconds
#: (``COLLSYNTH_SCHEDULER_TIMEOUT`` overrides it)
CONNECT_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Pool:
    """Where cases run: ``workers`` processes of a local cluster (1: this process), or the
    Dask scheduler at ``scheduler``."""

    workers: int = 1
    scheduler: str | None = None
    #: a local cluster even of one worker (benchmarks compare it with this process)
    cluster: bool = False

    @property
    def distributed(self) -> bool:
        return self.scheduler is not None or self.workers > 1 or self.cluster

    def describe(self) -> str:
        if self.scheduler:
            return f"the Dask cluster at {self.scheduler}"
        if self.distributed:
            n = self.workers
            return f"a local Dask cluster of {n} worker{'s' if n > 1 else ''}"
        return "this process"


#: The most local worker processes ``--jobs`` starts.
MAX_JOBS = 1024


def make_pool(workers: str | int | None = None, scheduler: str | None = None) -> Pool:
    """The pool of ``--jobs`` (a count of workers, or ``auto``: one per core) and
    ``--scheduler`` (an address); unset, ``COLLSYNTH_JOBS`` and ``COLLSYNTH_SCHEDULER`` give
    them."""
    if workers is None:
        workers = os.environ.get("COLLSYNTH_JOBS") or 1
    if scheduler is None:
        scheduler = os.environ.get("COLLSYNTH_SCHEDULER") or None
    if isinstance(workers, str):
        text = workers.strip().lower()
        if text == "auto":
            workers = os.cpu_count() or 1
        elif text.isascii() and text.isdigit() and len(text) <= 6:
            workers = int(text)
        else:
            raise CollsynthError(
                f"--jobs {ascii(workers)[:40]} is not a number of workers (ASCII digits) or auto"
            )
    if workers < 1 or workers > MAX_JOBS:
        raise CollsynthError(f"--jobs must be from 1 to {MAX_JOBS}, got {workers}")
    if scheduler is not None:
        scheduler = scheduler_address(scheduler)
    return Pool(int(workers), scheduler)


#: the address schemes ``--scheduler`` accepts (Dask's others need configuration collsynth
#: does not pass: TLS certificates, UCX)
SCHEMES = ("tcp",)


def scheduler_address(text: str) -> str:
    """``--scheduler``: ``tcp://HOST:PORT`` or ``HOST:PORT`` (TCP), checked before any
    connection: a known scheme, a host and a port from 1 to 65535."""
    address = text.strip()
    scheme, sep, rest = address.partition("://")
    if not sep:
        scheme, rest = "tcp", address
    if sep and scheme.lower() not in SCHEMES:
        raise CollsynthError(
            f"--scheduler {text!r}: the {scheme}:// protocol is not supported (supported: "
            f"{', '.join(s + '://' for s in SCHEMES)}HOST:PORT, or HOST:PORT)"
        )
    host, colon, port = rest.rpartition(":")
    if not colon or not host.strip("[]") or not (port.isascii() and port.isdigit()):
        raise CollsynthError(
            f"--scheduler {text!r} is not a scheduler address (e.g. tcp://host:8786)"
        )
    if not 1 <= int(port) <= 65535:
        raise CollsynthError(f"--scheduler {text!r}: port {port} is not from 1 to 65535")
    return f"tcp://{rest}"


def connect_timeout() -> float:
    """Seconds to wait for a ``--scheduler`` to answer: ``COLLSYNTH_SCHEDULER_TIMEOUT`` or
    :data:`CONNECT_TIMEOUT_S`."""
    raw = os.environ.get("COLLSYNTH_SCHEDULER_TIMEOUT", "").strip()
    if not raw:
        return CONNECT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not 0 < value <= 3600:
        shown = ascii(raw) if len(raw) <= 40 else ascii(raw[:37]) + "..."
        raise CollsynthError(
            f"COLLSYNTH_SCHEDULER_TIMEOUT={shown} is not a number of seconds from 0 to 3600"
        )
    return value


def _probe(address: str, timeout: float) -> None:
    """Open one Dask connection to ``address`` and close it, within ``timeout`` seconds in
    all: Dask's own connect waits for the peer's handshake with no limit, so an address that
    accepts TCP connections but never speaks Dask would hang ``Client``."""
    import asyncio

    from distributed.comm import connect

    async def once() -> None:
        comm = await connect(address, timeout=timeout)
        await comm.close()

    try:
        # Dask's connect gives up on a refused address at ``timeout`` with its own message
        asyncio.run(asyncio.wait_for(once(), timeout + 1.0))
    except TimeoutError:
        raise CollsynthError(
            f"the Dask scheduler at {address} did not answer within {timeout + 1.0:g} s (set "
            f"COLLSYNTH_SCHEDULER_TIMEOUT to wait longer)"
        ) from None
    except Exception as e:  # refused, reset, not Dask's protocol: Dask's many exception types
        raise CollsynthError(
            f"cannot reach the Dask scheduler at {address}: {e or type(e).__name__}"
        ) from None


def run_cases(
    fn: Callable[..., Any],
    cases: Sequence[tuple],
    pool: Pool | None = None,
    *,
    on_done: Callable[[int, int, int], None] | None = None,
    on_start: Callable[[int], None] | None = None,
    warm: Callable[[], Any] | None = None,
) -> list[Any]:
    """``[fn(*case) for case in cases]``, run as ``pool`` says (see the module).

    ``on_start(i)`` hears case ``i`` start (serial runs only); ``on_done(i, done, total)``
    hears that case ``i`` finished, ``done`` of ``total`` being finished then. On a cluster,
    every worker first loads ``fn``'s module and runs ``warm()`` (loading what every case
    needs), outside the time limit as the cluster's start-up is."""
    total = len(cases)
    if pool is None or not pool.distributed or total == 0:
        out = []
        for i, case in enumerate(cases):
            if on_start:
                on_start(i)
            out.append(fn(*case))
            if on_done:
                on_done(i, i + 1, total)
        return out
    with _client(pool) as client:
        with deadline.paused():  # the workers load fn's code: start-up, not the cases' time
            client.run(_load, fn.__module__, warm)
        return _run_on(client, fn, cases, on_done)


def _run_on(client: Any, fn: Callable[..., Any], cases: Sequence[tuple],
            on_done: Callable[[int, int, int], None] | None) -> list[Any]:  # fmt: skip
    from distributed import as_completed

    left = deadline.remaining()
    end = time.time() + left if math.isfinite(left) else None  # wall clock: other machines
    each = deadline.each()
    run = uuid.uuid4().hex  # keys of this call only, whoever else uses the scheduler
    futures = [
        client.submit(_call, fn, case, end, each, pure=False, key=f"collsynth-case-{i}-{run}")
        for i, case in enumerate(cases)
    ]
    index = {f.key: i for i, f in enumerate(futures)}
    try:
        # no check of the time limit here: each case keeps it on its worker and ends as it
        # would in this process (a case out of time returns what the serial run returns)
        for done, fut in enumerate(as_completed(futures), 1):
            if fut.status == "error":  # as a serial run would: stop at the first failure
                fut.result()
            if on_done:
                on_done(index[fut.key], done, len(futures))
        return list(client.gather(futures))
    except BaseException:
        client.cancel(futures, force=True)
        raise


def _load(module: str, warm: Callable[[], Any] | None) -> None:
    """Import ``module`` and run ``warm`` on a worker ahead of its cases (a failure shows in
    the cases)."""
    with contextlib.suppress(Exception):
        importlib.import_module(module)
        if warm is not None:
            warm()


def _call(fn: Callable[..., Any], case: tuple, end: float | None, each: float | None) -> Any:
    """One case on a worker, within what is left of the caller's time limit (``end``, wall
    clock) and under its limit per synthesis (``each``)."""
    budget = None if end is None else max(0.0, end - time.time())
    # a case started after the end runs as the serial run's would: its first check of the
    # time limit stops it, and the case decides what that means (a skipped algorithm, ...)
    with deadline.time_limit(budget, "a case on a Dask worker"), deadline.each_synthesis(each):
        return fn(*case)


@contextlib.contextmanager
def _client(pool: Pool) -> Iterator[Any]:
    """A Dask client of ``pool``'s cluster (a local one is started here and closed after)."""
    try:
        with deadline.paused():  # loading Dask is start-up too
            from distributed import Client, LocalCluster
    except ImportError:  # pragma: no cover - distributed is a dependency
        raise CollsynthError(
            "running cases on Dask needs the 'distributed' package (pip install distributed)"
        ) from None
    quiet = _QuietDask()
    with quiet:
        if pool.scheduler:
            try:
                with deadline.paused():
                    wait = connect_timeout()
                    _probe(pool.scheduler, wait)
                    client = Client(pool.scheduler, timeout=wait)
            except (OSError, TimeoutError, ValueError, TypeError) as e:
                raise CollsynthError(
                    f"cannot reach the Dask scheduler at {pool.scheduler}: {e}"
                ) from None
            try:
                yield client
            finally:
                client.close()
            return
        # the cluster's start-up does not count against the time limit; its worker processes
        # print nothing (this process reports, and closes the cluster on an interruption)
        with deadline.paused(), _children_quiet(), _half_made_closed():
            cluster = LocalCluster(
                n_workers=pool.workers,
                host="127.0.0.1",
                threads_per_worker=1,
                processes=True,
                # its HTTP server (health, metrics) on a free port of localhost only
                dashboard_address="127.0.0.1:0",
                silence_logs=logging.CRITICAL,  # a failed case's log lines included
            )
        try:
            with deadline.paused():
                client = Client(cluster)
            try:
                yield client
            finally:
                with deadline.paused():
                    client.close()
        finally:
            with deadline.paused():
                cluster.close()


@contextlib.contextmanager
def _half_made_closed() -> Iterator[None]:
    """A cluster whose start is interrupted (or fails) is closed here, quietly, so that
    Dask's own clean-up at exit does not report it on stderr."""
    from distributed.deploy.spec import SpecCluster

    before = set(SpecCluster._instances)
    try:
        yield
    except BaseException:
        for c in set(SpecCluster._instances) - before:
            with contextlib.suppress(BaseException):
                c.close(timeout=5)
            SpecCluster._instances.discard(c)
        raise


@contextlib.contextmanager
def _children_quiet() -> Iterator[None]:
    """Processes started in the body get /dev/null as stderr: a worker's own report of a
    Ctrl-C (a terminal sends it to the whole process group) or of its shutdown never reaches
    the user; a case's errors come back through its result. This process's stderr is
    restored after (it writes nothing meanwhile)."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # pragma: no cover - no stderr to protect
        yield
        return
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)


class _QuietDask:
    """Keep Dask's own log lines (a worker lost, a task re-run) off stderr during a run:
    stderr carries collsynth's own messages only."""

    NAMES = ("distributed", "distributed.scheduler", "distributed.worker", "distributed.nanny",
             "distributed.core", "distributed.client")  # fmt: skip

    def __enter__(self) -> None:
        self.levels = {n: logging.getLogger(n).level for n in self.NAMES}
        for n in self.NAMES:
            logging.getLogger(n).setLevel(logging.CRITICAL)

    def __exit__(self, *exc: object) -> None:
        for n, level in self.levels.items():
            logging.getLogger(n).setLevel(level)


__all__ = ["Pool", "make_pool", "run_cases"]
