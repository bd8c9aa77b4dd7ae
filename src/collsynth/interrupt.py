"""Interrupting signals: SIGINT, SIGTERM and SIGHUP end a command the same way.

The command line installs ONE handler for the three (:func:`handled`, in ``cli.main``): the
first signal raises :class:`Interrupted` (a :class:`KeyboardInterrupt`, so every clean-up that
handles Ctrl-C handles the others too) in the main thread; ``finally`` blocks then remove what
the command was making (temporary files, a folder it created, a Dask cluster) and the command
line prints one line and exits with ``128 + signal number`` (130 SIGINT, 143 SIGTERM, 129
SIGHUP, the shell's convention). While that clean-up runs, further signals are ignored for
:data:`FORCE_AFTER_S`; one after that ends the process at once.

A signal that arrives inside :func:`deferred` (a file's rename into place, a result being
written to stdout) waits until the block ends, so an output is written whole or not at all.
Sessions that start their own processes (``runtime.supervise``, ``testbed.session``) call
:func:`catch_termination`: outside the command line (library use) it turns SIGTERM and SIGHUP
into :class:`Interrupted` for the session's lifetime; under :func:`handled` it has nothing
to do. A signal the parent process ignores (``nohup`` ignores SIGHUP) stays ignored.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

#: The signals that interrupt a command.
SIGNALS: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
#: After the first signal, further ones are ignored this long (clean-up runs); later, one
#: ends the process at once.
FORCE_AFTER_S = 2.0


class Interrupted(KeyboardInterrupt):
    """A command was stopped by ``signum`` (exit status ``128 + signum``)."""

    def __init__(self, signum: int = signal.SIGINT):
        super().__init__(signum)
        self.signum = int(signum)

    @property
    def name(self) -> str:
        return signal_name(self.signum)

    @property
    def status(self) -> int:
        return 128 + self.signum


def signal_name(signum: int) -> str:
    """``SIGTERM`` for 15, ..."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def status_of(exc: BaseException) -> int:
    """The exit status of an interruption: ``128 + signal`` (a plain KeyboardInterrupt: 130)."""
    return 128 + int(getattr(exc, "signum", signal.SIGINT))


class _State:
    """What the handler knows: whether it is installed, deferring, or already stopping."""

    def __init__(self) -> None:
        self.installed = 0
        self.deferring = 0
        self.pending: int | None = None
        self.pending_since = 0.0  # when the pending signal came
        self.stopping_since: float | None = None
        self.pid = os.getpid()  # the process whose handler this is (a fork inherits it)


_STATE = _State()


def _on_signal(signum: int, frame: Any) -> None:
    st = _STATE
    if os.getpid() != st.pid:  # a forked helper process: its parent cleans up and reports
        os._exit(128 + signum)
    if st.stopping_since is not None:  # clean-up is running: let it, unless asked again later
        if time.monotonic() - st.stopping_since >= FORCE_AFTER_S:
            os.write(2, f"collsynth: interrupted ({signal_name(signum)})\n".encode())
            os._exit(128 + signum)
        return
    if st.deferring:
        if st.pending is None:
            st.pending = signum
            st.pending_since = time.monotonic()
        elif time.monotonic() - st.pending_since >= FORCE_AFTER_S:  # the block is stuck
            os.write(2, f"collsynth: interrupted ({signal_name(signum)})\n".encode())
            os._exit(128 + signum)
        return
    st.stopping_since = time.monotonic()
    raise Interrupted(signum)


def installed() -> bool:
    """Whether :func:`handled` is active (the command line's handler)."""
    return _STATE.installed > 0


@contextlib.contextmanager
def handled(final: bool = False) -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP raise :class:`Interrupted` in the body (main thread only;
    elsewhere a no-op). Signals ignored on entry stay ignored; the old handlers come back,
    unless ``final`` (the process ends after the body): then the three are ignored from then
    on, as the command is over."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = _install(SIGNALS)
    _STATE.pid = os.getpid()
    _STATE.installed += 1
    _STATE.stopping_since = None
    _STATE.pending = None
    try:
        yield
    finally:
        _STATE.installed -= 1
        _restore({sig: signal.SIG_IGN for sig in old} if final else old)


def _install(signals: tuple[signal.Signals, ...]) -> dict[int, Any]:
    old: dict[int, Any] = {}
    for sig in signals:
        try:
            prev = signal.getsignal(sig)
            if prev == signal.SIG_IGN:
                continue
            signal.signal(sig, _on_signal)
            old[sig] = prev
        except (ValueError, OSError):  # pragma: no cover - not the main thread / no such signal
            pass
    return old


def _restore(old: dict[int, Any]) -> None:
    for sig, handler in old.items():
        try:
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        except (ValueError, OSError, TypeError):  # pragma: no cover
            pass


def catch_termination() -> dict[int, Any]:
    """For a session with processes of its own: SIGTERM and SIGHUP raise
    :class:`Interrupted` until :func:`restore_termination` (nothing to do under
    :func:`handled`, which already does; a no-op off the main thread)."""
    if installed() or threading.current_thread() is not threading.main_thread():
        return {}
    _STATE.stopping_since = None
    _STATE.pid = os.getpid()
    return _install((signal.SIGTERM, signal.SIGHUP))


def restore_termination(old: dict[int, Any]) -> None:
    """Undo :func:`catch_termination`."""
    _restore(old)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Hold an interrupting signal that arrives in the body until it ends (then raise it):
    for short steps that must not stop half-way (a rename, writing a result). A further
    signal :data:`FORCE_AFTER_S` or more after the held one ends the process at once (a
    write stuck on a stalled pipe)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    st = _STATE
    st.deferring += 1
    try:
        yield
    finally:
        st.deferring -= 1
        if not st.deferring and st.pending is not None:
            signum, st.pending = st.pending, None
            st.stopping_since = time.monotonic()
            raise Interrupted(signum)
