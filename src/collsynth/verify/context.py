"""What every check of the verifier works on: the schedule and its parts, the list of checks
passed so far, the report a verification returns, and how a check fails."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NoReturn

import numpy as np

from ..collective import Collective
from ..errors import VerificationError
from ..schedule.ir import Schedule
from ..topology.model import Topology


@dataclass
class VerifyReport:
    ok: bool
    ops: int
    link_hops: int
    checks: list[str] = field(default_factory=list)
    redundant_deliveries: int = 0
    planned_finish_s: float | None = None
    error: str | None = None
    error_check: str | None = None
    error_op: int | None = None

    def to_dict(self) -> dict:
        return {
            "ok": self.ok,
            "ops": self.ops,
            "link_hops": self.link_hops,
            "checks": self.checks,
            "redundant_deliveries": self.redundant_deliveries,
            "planned_finish_s": self.planned_finish_s,
            "error": self.error,
            "error_check": self.error_check,
            "error_op": self.error_op,
        }


@dataclass
class Context:
    """One verification: the schedule, its topology and collective, and the names of the
    checks it has passed (in the order they ran; the report lists them)."""

    schedule: Schedule
    topology: Topology
    collective: Collective
    num_ops: int
    checks: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, schedule: Schedule) -> Context:
        return cls(schedule, schedule.topology, schedule.collective, schedule.num_ops)


def fail(check: str, message: str, op: int | None = None) -> NoReturn:
    """Stop the verification: rule ``check`` is violated (at operation ``op``)."""
    raise VerificationError(f"{check}: {message}", check=check, op=op)


def first_true(mask: np.ndarray) -> int | None:
    """The index of the first true entry of ``mask``, or ``None``."""
    idx = np.flatnonzero(mask)
    return int(idx[0]) if len(idx) else None
