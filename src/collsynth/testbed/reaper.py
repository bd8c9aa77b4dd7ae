"""``python -m collsynth.testbed.reaper PREFIX PID [SCRATCH]``: remove testbed PREFIX (and the
scratch folder SCRATCH its runs write to) once PID is gone.

Started by :class:`~.session.Testbed` in a session of its own, so that a testbed outlives
neither a parent killed with SIGKILL nor a crashed interpreter. It polls twice a second; it
ends by itself when the testbed's state file is removed (the parent's own clean-up, which also
keeps the scratch folder: it belongs to the parent, which may run more testbeds in it). Only a
folder named like :data:`SCRATCH_PREFIX` directly in the temporary directory is removed.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time

#: the scratch folders a testbed's runs use (``tempfile.mkdtemp(prefix=SCRATCH_PREFIX)``)
SCRATCH_PREFIX = "collsynth-testbed-"


def is_scratch(path: str) -> bool:
    """Whether ``path`` is a scratch folder the reaper may remove: directly in the temporary
    directory, named ``SCRATCH_PREFIX...``, not a link."""
    real = os.path.realpath(path)
    return (
        os.path.dirname(real) == os.path.realpath(tempfile.gettempdir())
        and os.path.basename(real).startswith(SCRATCH_PREFIX)
        and not os.path.islink(path)
    )


def _alive(pid: int, start: bytes | None) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except OSError:
        return False
    return fields[0] not in (b"Z", b"X") and (start is None or fields[19] == start)


def _start_time(pid: int) -> bytes | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def main(argv: list[str]) -> int:
    from . import netns
    from .wiring import check_prefix

    prefix, pid = check_prefix(argv[0]), int(argv[1])
    scratch = argv[2] if len(argv) > 2 and is_scratch(argv[2]) else None
    start = _start_time(pid)  # a reused pid is not the parent
    state = os.path.join(netns.STATE_DIR, f"{prefix}.json")
    seen = False
    while True:
        time.sleep(0.5)
        exists = os.path.exists(state)
        seen = seen or exists
        if seen and not exists:
            return 0  # the parent removed its testbed
        if not _alive(pid, start):
            try:
                netns.down(prefix)
            finally:
                if scratch is not None:
                    shutil.rmtree(scratch, ignore_errors=True)
            return 0


if __name__ == "__main__":  # pragma: no cover - run as a process
    sys.exit(main(sys.argv[1:]))
