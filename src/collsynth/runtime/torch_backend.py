"""The torch.distributed backend (optional extra ``collsynth[torch]``): gloo on CPU, NCCL on GPUs.

torch is imported lazily. The process group is set up from the environment: ``RANK`` /
``WORLD_SIZE`` (torchrun) or Open MPI's ``OMPI_COMM_WORLD_RANK`` / ``OMPI_COMM_WORLD_SIZE``
(mpiexec), with ``MASTER_ADDR`` (default 127.0.0.1) and ``MASTER_PORT`` (default 29517).

gloo: ``isend``/``irecv`` on CPU tensors that wrap the interpreter's numpy buffers (no copy);
tags are honoured. NCCL: each message is staged through a CUDA tensor (copied in before a send,
copied out when a receive completes) and NCCL matches by order only, so the tag limit is 1 and
the interpreter posts every pair's messages in the same order on both sides.
"""

from __future__ import annotations

import datetime
import os
import time
from typing import Any

import numpy as np

from ..collective import Collective, CollKind
from ..errors import CollsynthError
from .interp import RunTimeout, idle_wait


def _import_torch():
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        raise CollsynthError(
            "the torch backend needs PyTorch (python -m pip install 'collsynth[torch]')"
        ) from None
    return torch, dist


def _env_int(*names: str) -> int | None:
    for n in names:
        v = os.environ.get(n)
        if v is not None and v.strip().isdigit():
            return int(v)
    return None


class _Work:
    __slots__ = ("work", "host", "dev")

    def __init__(self, work, host=None, dev=None):
        self.work = work
        self.host = host  # numpy buffer to copy a staged receive into
        self.dev = dev  # the staged CUDA tensor


class TorchBackend:
    name = "torch"

    def __init__(self, engine: str | None = None, timeout: float = 30.0) -> None:
        torch, dist = _import_torch()
        self.torch, self.dist = torch, dist
        rank = _env_int("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK")
        size = _env_int("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")
        if rank is None or size is None:
            rank, size = 0, 1
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29517")
        engine = engine or ("nccl" if torch.cuda.is_available() else "gloo")
        self.engine = engine
        self.cuda = engine == "nccl"
        if self.cuda:
            local = _env_int("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK") or 0
            torch.cuda.set_device(local % torch.cuda.device_count())
        if not dist.is_initialized():
            dist.init_process_group(
                engine,
                rank=rank,
                world_size=size,
                timeout=datetime.timedelta(seconds=max(timeout, 1.0)),
            )
        self.rank = dist.get_rank()
        self.size = dist.get_world_size()
        self.tag_limit = 1 if self.cuda else (1 << 30)
        self.name = f"torch/{engine}"

    def _tensor(self, buf: np.ndarray):
        t = self.torch.from_numpy(buf)
        return t.cuda() if self.cuda else t

    def isend(self, buf: np.ndarray, dst: int, tag: int) -> Any:
        t = self._tensor(buf)  # gloo: shares buf's memory; NCCL: a staged copy kept alive
        if not self.cuda:
            return _Work(self.dist.isend(t, dst, tag=tag))
        return _Work(self.dist.isend(t, dst), dev=t)

    def irecv(self, buf: np.ndarray, src: int, tag: int) -> Any:
        if not self.cuda:
            return _Work(self.dist.irecv(self.torch.from_numpy(buf), src, tag=tag))
        dev = self.torch.empty(buf.size, dtype=self.torch.uint8, device="cuda")
        return _Work(self.dist.irecv(dev, src), host=buf, dev=dev)

    null_request = None

    def test(self, requests: list) -> list[int]:
        hits = []
        for i, w in enumerate(requests):
            if w is not None and w.work.is_completed():
                if w.host is not None:
                    w.work.wait()
                    w.host[...] = w.dev.cpu().numpy()
                hits.append(i)
        return hits

    def now(self) -> float:
        if self.cuda:
            self.torch.cuda.synchronize()
        return time.perf_counter()

    def barrier(self, deadline: float, what: str = "a barrier") -> None:
        work = self.dist.barrier(async_op=True)
        idle = 0
        while not work.is_completed():
            if time.monotonic() > deadline:
                raise RunTimeout(
                    f"rank {self.rank}: timed out in {what} (a rank exited or is stuck)"
                )
            idle += 1
            idle_wait(idle)

    def allgather_obj(self, obj: Any, deadline: float) -> list:
        self.barrier(deadline, "gathering results")
        out: list = [None] * self.size
        self.dist.all_gather_object(out, obj)
        return out

    def gather_obj(self, obj: Any, deadline: float) -> list | None:
        """Every rank's ``obj`` at rank 0 (None elsewhere): for what only rank 0 reports."""
        self.barrier(deadline, "gathering traces")
        out: list | None = [None] * self.size if self.rank == 0 else None
        self.dist.gather_object(obj, out, dst=0)
        return out

    def reference(
        self, coll: Collective, send: np.ndarray, recv: np.ndarray, elem: np.dtype, deadline: float
    ) -> bool:
        """torch.distributed's own collective where it has one; False otherwise."""
        dist, k = self.dist, coll.kind
        view = (lambda b: self._tensor(b.view(elem))) if coll.reduces else self._tensor
        s = view(send)
        r = view(recv)
        try:
            if k is CollKind.ALLGATHER:
                dist.all_gather_into_tensor(r, s)
            elif k is CollKind.ALLREDUCE:
                r.copy_(s)
                dist.all_reduce(r)
            elif k is CollKind.REDUCESCATTER:
                dist.reduce_scatter_tensor(r, s)
            elif k is CollKind.ALLTOALL:
                dist.all_to_all_single(r, s)
            elif k is CollKind.BROADCAST:
                if self.rank == coll.root:
                    r.copy_(s)
                dist.broadcast(r, coll.root)
            else:
                return False
        except (RuntimeError, NotImplementedError, ValueError):
            return False  # e.g. gloo has no reduce_scatter: fall back to a computed reference
        if self.cuda:
            recv[...] = r.cpu().numpy().view(np.uint8)
        return True

    def abort(self, code: int) -> None:
        os._exit(code)

    def close(self) -> None:
        try:
            self.dist.destroy_process_group()
        except Exception:  # pragma: no cover
            pass
