"""Where each rank stands, for the process that launched it (``collsynth run --launch``).

A launched rank finds the run's folder in the environment variable ``COLLSYNTH_RUN_PROGRESS``
and keeps one small JSON file there, ``rank-R.json``, rewritten (atomically) at the start of
every step: its pid, the step's name, a step counter, the wall-clock time ``t`` (for people and
tests; the launcher times steps by its own clock) and the longest the step may take before the
launcher gives up on it (``limit`` in seconds; ``None`` for local work with no deadline, such
as reading or verifying schedules; the communicator set-up's limit counts from the moment
every rank has reached it). When the rank ends it records its exit status and, for a failure,
its one-line error. The launcher (:mod:`.launcher`) reads these files to apply the deadlines
and to name the rank and the step of a failure. Without the variable (a plain
``mpiexec -n N collsynth run ...``) nothing is written.
"""

from __future__ import annotations

import json
import os
import time

#: the environment variable naming the run's folder
ENV_DIR = "COLLSYNTH_RUN_PROGRESS"

#: the start-up steps: mpiexec's start until the rank's first record (the launcher's name for
#: it), loading collsynth's command line, reading the schedules, the communicator set-up
LAUNCH_STEP = "start-up (process launch)"
LOAD_STEP = "start-up (loading collsynth)"
READ_STEP = "start-up (reading the schedules)"
SETUP_STEP = "start-up (communicator set-up)"


def record_path(directory: str, rank: int) -> str:
    return os.path.join(directory, f"rank-{int(rank)}.json")


class Progress:
    """One rank's progress record; every method is a no-op when the rank was not launched."""

    def __init__(self, directory: str | None, rank: int) -> None:
        self.rank = int(rank)
        self.path = record_path(directory, rank) if directory else None
        self.seq = 0
        self.step_name = LAUNCH_STEP
        self.limit: float | None = None
        self.finished = False

    @classmethod
    def from_env(cls, rank: int) -> Progress:
        d = os.environ.get(ENV_DIR)
        return cls(d if d and os.path.isdir(d) else None, rank)

    @property
    def active(self) -> bool:
        return self.path is not None

    def step(self, name: str, limit: float | None = None) -> None:
        """This rank starts ``name``; the launcher allows it ``limit`` seconds (None: no limit)."""
        self.seq += 1
        self.step_name = name
        self.limit = limit
        self._write({"state": "running"})

    def finish(self, status: int, error: str | None = None) -> None:
        """This rank ends with ``status`` (0 ok, 2 bad input, 3 failed run) and its error."""
        if self.finished:
            return
        self.finished = True
        self._write(
            {"state": "done" if status == 0 else "failed", "status": int(status), "error": error}
        )

    def _write(self, rec: dict) -> None:
        if self.path is None:
            return
        rec.update(
            rank=self.rank,
            pid=os.getpid(),
            seq=self.seq,
            step=self.step_name,
            limit=self.limit,
            t=time.time(),
        )
        tmp = f"{self.path}.{os.getpid()}.tmp"
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(json.dumps(rec))
            os.replace(tmp, self.path)
        except OSError:  # pragma: no cover - best effort: the launcher still has mpiexec's word
            pass


def read_record(directory: str, rank: int) -> dict | None:
    """Rank ``rank``'s latest record, or None (not written yet, or unreadable)."""
    try:
        with open(record_path(directory, rank), encoding="utf-8") as f:
            rec = json.loads(f.read())
    except (OSError, ValueError):
        return None
    return rec if isinstance(rec, dict) else None
