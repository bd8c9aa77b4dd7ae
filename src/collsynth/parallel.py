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
cases run within the time left, so solvers on the workers cap their own budgets.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from . import deadline
from .errors import CollsynthError

#: how long to wait for an existing scheduler to answer
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
        else:
            try:
                workers = int(text)
            except ValueError:
                raise CollsynthError(
                    f"--jobs {workers!r} is not a number of workers or auto"
                ) from None
    if workers < 1:
        raise CollsynthError(f"--jobs must be at least 1, got {workers}")
    if scheduler is not None:
        scheduler = scheduler.strip()
        if "://" not in scheduler and ":" not in scheduler:
            raise CollsynthError(
                f"--scheduler {scheduler!r} is not a scheduler address (e.g. tcp://host:8786)"
            )
    return Pool(int(workers), scheduler)


def run_cases(
    fn: Callable[..., Any],
    cases: Sequence[tuple],
    pool: Pool | None = None,
    *,
    on_done: Callable[[int, int, int], None] | None = None,
    on_start: Callable[[int], None] | None = None,
) -> list[Any]:
    """``[fn(*case) for case in cases]``, run as ``pool`` says (see the module).

    ``on_start(i)`` hears case ``i`` start (serial runs only); ``on_done(i, done, total)``
    hears that case ``i`` finished, ``done`` of ``total`` being finished then."""
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
        for done, fut in enumerate(as_completed(futures), 1):
            deadline.check("the cases on Dask")
            if fut.status == "error":  # as a serial run would: stop at the first failure
                fut.result()
            if on_done:
                on_done(index[fut.key], done, len(futures))
        return list(client.gather(futures))
    except BaseException:
        client.cancel(futures, force=True)
        raise


def _call(fn: Callable[..., Any], case: tuple, end: float | None, each: float | None) -> Any:
    """One case on a worker, within what is left of the caller's time limit (``end``, wall
    clock) and under its limit per synthesis (``each``)."""
    budget = None if end is None else max(0.0, end - time.time())
    if budget == 0.0:
        raise deadline.TimeLimitError("the time limit ended before this case started")
    with deadline.time_limit(budget, "a case on a Dask worker"), deadline.each_synthesis(each):
        return fn(*case)


@contextlib.contextmanager
def _client(pool: Pool) -> Iterator[Any]:
    """A Dask client of ``pool``'s cluster (a local one is started here and closed after)."""
    try:
        from distributed import Client, LocalCluster
    except ImportError:  # pragma: no cover - distributed is a dependency
        raise CollsynthError(
            "running cases on Dask needs the 'distributed' package (pip install distributed)"
        ) from None
    quiet = _QuietDask()
    with quiet:
        if pool.scheduler:
            try:
                client = Client(pool.scheduler, timeout=CONNECT_TIMEOUT_S)
            except (OSError, TimeoutError, ValueError) as e:
                raise CollsynthError(
                    f"cannot reach the Dask scheduler at {pool.scheduler}: {e}"
                ) from None
            try:
                yield client
            finally:
                client.close()
            return
        cluster = LocalCluster(
            n_workers=pool.workers,
            host="127.0.0.1",
            threads_per_worker=1,
            processes=True,
            # its HTTP server (health, metrics) on a free port of localhost only
            dashboard_address="127.0.0.1:0",
            silence_logs=logging.ERROR,
        )
        try:
            client = Client(cluster)
            try:
                yield client
            finally:
                client.close()
        finally:
            cluster.close()


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
