"""One testbed for the length of a command: made, used, and removed whatever happens.

:class:`Testbed` makes the wiring on entry and removes it on exit, on an error, on Ctrl-C and
on SIGTERM/SIGHUP (they become KeyboardInterrupt while it is up). A kill of the parent itself
(SIGKILL) cannot run any clean-up in the parent, so ``up`` also starts a *reaper*
(``python -m collsynth.testbed.reaper``): a small process in a session of its own that watches
the parent and, once it is gone, kills every process left in the testbed's namespaces and
removes the testbed. The reaper ends by itself once the testbed is removed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from typing import Any

from ..topology.model import Topology
from . import netns
from .wiring import Wiring, plan_wiring

#: Open MPI's settings for a run across the testbed's namespaces (see docs/testbed.md):
#: start-up traffic on the management bridge, data over TCP on the shaped links only, eager
#: sends up to 4 MiB (a rendezvous handshake would queue behind the reverse direction's data
#: on the same TCP connection), and ranks that yield the CPU when idle.
EAGER_BYTES = 4 << 20


class Testbed:
    """``with Testbed(topology, scale) as tb:`` a live testbed (``tb.wiring``) for the block."""

    def __init__(self, topology: Topology, scale: float, *, shaped: bool = True) -> None:
        netns.require_tools()
        self.topology = topology
        self.wiring: Wiring = plan_wiring(topology, scale, netns.new_prefix())
        self.shaped = shaped
        self._reaper: subprocess.Popen | None = None
        self._old: dict = {}

    @property
    def prefix(self) -> str:
        return self.wiring.prefix

    def __enter__(self) -> Testbed:
        self._catch_signals()
        try:
            self._start_reaper()
            netns.up(self.wiring, shaped=self.shaped)
        except BaseException:
            self._stop()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop()

    def _stop(self) -> None:
        try:
            netns.down(self.prefix)
        finally:
            if self._reaper is not None:
                self._reaper.kill()
                self._reaper.wait()
            self._restore_signals()

    def _start_reaper(self) -> None:
        self._reaper = subprocess.Popen(
            [sys.executable, "-m", "collsynth.testbed.reaper", self.prefix, str(os.getpid())],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def _catch_signals(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return

        def stop(signum, frame):
            raise KeyboardInterrupt

        for sig in (signal.SIGTERM, signal.SIGHUP):
            try:
                self._old[sig] = signal.signal(sig, stop)
            except (ValueError, OSError):  # pragma: no cover
                pass

    def _restore_signals(self) -> None:
        for sig, handler in self._old.items():
            try:
                signal.signal(sig, handler)
            except (ValueError, OSError, TypeError):  # pragma: no cover
                pass
        self._old = {}

    # ------------------------------------------------------------------ running MPI on it
    def mpi_options(self) -> list[str]:
        """mpiexec options for a run across this testbed."""
        w = self.wiring
        return [
            "--prtemca", "oob_tcp_if_include", w.mgmt_bridge,
            "--pmixmca", "ptl_tcp_if_include", w.mgmt_bridge,
            "--mca", "pml", "ob1",
            "--mca", "btl", "tcp,self",
            "--mca", "btl_tcp_if_include", "198.18.0.0/16",
            "--mca", "btl_tcp_eager_limit", str(EAGER_BYTES),
            "--mca", "btl_tcp_max_send_size", str(EAGER_BYTES),
            "--mca", "mpi_yield_when_idle", "1",
        ]  # fmt: skip

    def wrapper(self) -> list[str]:
        """The command that starts each rank inside its namespace."""
        return ["/bin/sh", "-c", f'exec ip netns exec {self.prefix}-r"$OMPI_COMM_WORLD_RANK" "$@"',
                "collsynth-testbed"]  # fmt: skip
