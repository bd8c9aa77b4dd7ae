"""One testbed for the length of a command: made, used, and removed whatever happens.

:class:`Testbed` makes the wiring on entry and removes it on exit, on an error, on Ctrl-C and
on SIGTERM/SIGHUP (they become KeyboardInterrupt while it is up). A kill of the parent itself
(SIGKILL) cannot run any clean-up in the parent, so ``up`` also starts a *reaper*
(``python -m collsynth.testbed.reaper``): a small process in a session of its own that watches
the parent and, once it is gone, kills every process left in the testbed's namespaces and
removes the testbed, and the caller's scratch folder if it named one (``scratch=``). The reaper
ends by itself once the testbed is removed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

from .. import interrupt
from ..topology.model import Topology
from . import netns
from .wiring import Wiring, plan_wiring

#: Open MPI's settings for a run across the testbed's namespaces (see docs/testbed.md):
#: start-up traffic on the management bridge, data over TCP on the shaped links only, eager
#: sends up to 4 MiB (a rendezvous handshake would queue behind the reverse direction's data
#: on the same TCP connection), and ranks that yield the CPU when idle.
EAGER_BYTES = 4 << 20

NETEM_NOTE = (
    "link latency emulated with netem: each link delays its packets by its alpha / scale, "
    "for Open MPI's own collective too"
)
EXECUTOR_NOTE = (
    "link latency emulated in the executor (netem is not available): each send waits its "
    "route's alpha / scale; Open MPI's own collective runs without it"
)


class Testbed:
    """``with Testbed(topology, scale) as tb:`` a live testbed (``tb.wiring``) for the block."""

    def __init__(
        self,
        topology: Topology,
        scale: float,
        *,
        shaped: bool = True,
        latency: str = "auto",
        scratch: str | None = None,
    ) -> None:
        netns.require_tools()
        if latency not in ("auto", "executor"):
            raise ValueError(f"latency must be 'auto' or 'executor', not {latency!r}")
        self.topology = topology
        self.wiring: Wiring = plan_wiring(topology, scale, netns.new_prefix())
        self.shaped = shaped
        #: how link latency is emulated: "netem" (on the links) or "executor" (before sends)
        self.latency = "executor"
        self._want_netem = shaped and latency == "auto"
        self._reaper: subprocess.Popen | None = None
        self._old: dict = {}
        #: the caller's scratch folder, removed with the testbed if the caller dies
        self.scratch = scratch

    @property
    def prefix(self) -> str:
        return self.wiring.prefix

    def __enter__(self) -> Testbed:
        self._catch_signals()
        try:
            self._start_reaper()
            if self._want_netem and netns.netem_available(self.prefix):
                self.latency = "netem"
            netns.up(self.wiring, shaped=self.shaped, netem=self.latency == "netem")
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
        argv = [sys.executable, "-m", "collsynth.testbed.reaper", self.prefix, str(os.getpid())]
        self._reaper = subprocess.Popen(
            argv + ([self.scratch] if self.scratch else []),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def _catch_signals(self) -> None:
        """SIGTERM and SIGHUP tear the testbed down through its clean-up (a KeyboardInterrupt):
        the command line's one handler does that already (:mod:`collsynth.interrupt`); a
        library caller gets it while the testbed is up."""
        self._old = interrupt.catch_termination()

    def _restore_signals(self) -> None:
        interrupt.restore_termination(self._old)
        self._old = {}

    @property
    def alpha_delay(self) -> float:
        """``collsynth run --alpha-delay`` for runs here: 1/scale, or 0 where netem delays."""
        return 0.0 if self.latency == "netem" else 1.0 / self.wiring.scale

    @property
    def latency_note(self) -> str:
        """How latency is emulated, for the output."""
        if self.latency == "netem":
            return NETEM_NOTE
        return EXECUTOR_NOTE

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
