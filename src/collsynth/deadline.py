"""Wall-clock time limits for whole pieces of work (``--time-limit``).

A time limit bounds everything a command does to produce its result: model building, solver
calls, lowering and verification. Work runs inside :func:`time_limit`; code that can stop
early asks :func:`remaining` (solvers cap their own limits with :func:`solver_budget`) and
code with long loops calls :func:`check` between steps. As a last resort, on the main thread
an interval timer raises :class:`TimeLimitError` once the limit plus a grace period
(10% + 3 s) has passed, so even a step that never checks ends.

Limits nest: an inner limit never extends an outer one.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import threading
import time
from collections.abc import Iterator
from contextvars import ContextVar

from .errors import CollsynthError

#: Part of the remaining time a solver may use; the rest is kept for lowering and verifying.
SOLVER_SHARE = 0.8
#: The hard stop comes this long after the limit: ``GRACE_FACTOR * limit + GRACE_S``.
GRACE_FACTOR = 0.1
GRACE_S = 3.0
#: How long after the hard stop the command-line watchdog ends the process.
EXIT_GRACE_S = 2.0
#: Longer limits (about three years) get no hard-stop timer.
MAX_TIMER_S = 1e8

_END: ContextVar[float] = ContextVar("collsynth_deadline", default=math.inf)
_LIMIT: ContextVar[float] = ContextVar("collsynth_time_limit", default=math.inf)
_EACH: ContextVar[float | None] = ContextVar("collsynth_each_limit", default=None)


class TimeLimitError(CollsynthError):
    """The time limit ended before a result was found (CLI exit status 4)."""


def parse_limit(seconds: float | str | None, what: str = "--time-limit") -> float | None:
    """``None`` for no limit; else a positive finite number of seconds."""
    if seconds is None:
        return None
    try:
        s = float(seconds)
    except ValueError:
        raise CollsynthError(f"{what} {seconds!r} is not a number of seconds") from None
    if not (math.isfinite(s) and s > 0):
        raise CollsynthError(f"{what} must be a positive number of seconds, got {seconds!r}")
    return s


def remaining() -> float:
    """Seconds left before the innermost limit (``inf`` without one)."""
    return _END.get() - time.monotonic()


def limit() -> float:
    """The innermost limit in seconds (``inf`` without one), as the user gave it."""
    return _LIMIT.get()


def solver_budget(requested: float) -> float:
    """A solver's own time limit: ``requested``, capped by a share of the time left."""
    left = remaining()
    if math.isinf(left):
        return requested
    return max(0.01, min(requested, SOLVER_SHARE * left))


def nearly_out(share: float = 0.5) -> bool:
    """Whether less than ``share`` of the limit is left: optional extra work (more candidates,
    more improvement rounds) stops then and keeps its best result so far."""
    return remaining() < share * _LIMIT.get()


def check(what: str) -> None:
    """Raise :class:`TimeLimitError` if the limit has passed (``what`` names the step)."""
    if remaining() <= 0:
        raise TimeLimitError(f"out of time ({_LIMIT.get():g} s limit) at {what}")


def each() -> float | None:
    """The limit every single synthesis gets under :func:`each_synthesis` (else ``None``)."""
    return _EACH.get()


@contextlib.contextmanager
def each_synthesis(seconds: float | None) -> Iterator[None]:
    """Give every synthesis started in the body its own limit of ``seconds`` (``bench``)."""
    tok = _EACH.set(seconds)
    try:
        yield
    finally:
        _EACH.reset(tok)


@contextlib.contextmanager
def time_limit(
    seconds: float | None, what: str = "the work", exit_status: int | None = None
) -> Iterator[None]:
    """Run the body within ``seconds`` (``None``: no new limit).

    With ``exit_status`` (the command line), a watchdog thread also ends the process with that
    status and one line on stderr if the body is still running ``EXIT_GRACE_S`` after the
    hard stop: compiled loops (numba, ``nogil``) cannot be interrupted by the signal, but they
    let the watchdog run. Writes are atomic, so no file is left half written.
    """
    if seconds is None:
        yield
        return
    seconds = float(seconds)
    end = min(_END.get(), time.monotonic() + seconds)
    tok_end, tok_lim = _END.set(end), _LIMIT.set(min(seconds, _LIMIT.get()))
    after = seconds * (1 + GRACE_FACTOR) + GRACE_S
    dog = None
    if exit_status is not None and after + EXIT_GRACE_S <= MAX_TIMER_S:
        line = (
            f"collsynth: error: the time limit ({seconds:g} s) ended during {what} before a "
            f"result was found (ended {after + EXIT_GRACE_S:.3g} s in)\n"
        )
        dog = _Watchdog(after + EXIT_GRACE_S, line, exit_status)
        dog.start()
    try:
        with _hard_stop(after, seconds, what):
            yield
    finally:
        if dog is not None:
            dog.cancel()
        _END.reset(tok_end)
        _LIMIT.reset(tok_lim)


def _force_exit(line: str, status: int) -> None:  # pragma: no cover - ends the process
    os.write(2, line.encode())
    os._exit(status)


#: the watchdogs running now (:func:`paused` moves them on)
_DOGS: list[_Watchdog] = []


class _Watchdog(threading.Thread):
    """Ends the process ``after`` seconds from now (see :func:`time_limit`), later by the
    time spent in :func:`paused`."""

    def __init__(self, after: float, line: str, status: int):
        super().__init__(daemon=True, name="collsynth-time-limit")
        self.due = time.monotonic() + after
        self.line, self.status = line, status
        self.held = 0
        self.done = threading.Event()

    def start(self) -> None:
        _DOGS.append(self)
        super().start()

    def run(self) -> None:  # pragma: no cover - ends the process
        while not self.done.wait(
            0.2 if self.held else min(1.0, max(0.0, self.due - time.monotonic()))
        ):  # while paused the due time moves on: check now and then, never spin
            if not self.held and time.monotonic() >= self.due:
                _force_exit(self.line, self.status)

    def cancel(self) -> None:
        self.done.set()
        with contextlib.suppress(ValueError):
            _DOGS.remove(self)


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """Time spent in the body does not count against the time limits in force: setting up
    where the work runs (starting a Dask cluster), not the work itself. Every limit, its
    hard stop and its watchdog move on by the body's duration."""
    if math.isinf(remaining()):
        yield
        return
    t0 = time.monotonic()
    alarm = threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer")
    alarm_left = signal.setitimer(signal.ITIMER_REAL, 0)[0] if alarm else 0.0
    dogs = list(_DOGS)
    for d in dogs:
        d.held += 1
    try:
        yield
    finally:
        spent = time.monotonic() - t0
        _END.set(_END.get() + spent)
        for d in dogs:
            d.due += spent
            d.held -= 1
        if alarm_left > 0:
            signal.setitimer(signal.ITIMER_REAL, alarm_left)


@contextlib.contextmanager
def _hard_stop(after: float, seconds: float, what: str) -> Iterator[None]:
    """On the main thread, raise :class:`TimeLimitError` in it ``after`` seconds from now."""
    if (
        threading.current_thread() is not threading.main_thread()
        or not hasattr(signal, "setitimer")
        or after > MAX_TIMER_S  # beyond what a timer holds: the limit is never reached
    ):
        yield
        return
    prev_handler = signal.getsignal(signal.SIGALRM)
    prev_left, _ = signal.getitimer(signal.ITIMER_REAL)
    now = time.monotonic()
    if prev_left > 0 and prev_left <= after:  # an outer hard stop comes first: keep it
        yield
        return

    def _expired(signum: int, frame: object) -> None:
        raise TimeLimitError(
            f"the time limit ({seconds:g} s) ended during {what} before a result was found "
            f"(stopped {after:.3g} s in)"
        )

    signal.signal(signal.SIGALRM, _expired)
    signal.setitimer(signal.ITIMER_REAL, after)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, prev_handler)
        if prev_left > 0:  # give the outer timer back what is left of it
            left = prev_left - (time.monotonic() - now)
            signal.setitimer(signal.ITIMER_REAL, max(left, 1e-3))
