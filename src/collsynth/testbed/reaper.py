"""``python -m collsynth.testbed.reaper PREFIX PID``: remove testbed PREFIX once PID is gone.

Started by :class:`~.session.Testbed` in a session of its own, so that a testbed outlives
neither a parent killed with SIGKILL nor a crashed interpreter. It polls twice a second; it
ends by itself when the testbed's state file is removed (the parent's own clean-up).
"""

from __future__ import annotations

import os
import sys
import time


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
            netns.down(prefix)
            return 0


if __name__ == "__main__":  # pragma: no cover - run as a process
    sys.exit(main(sys.argv[1:]))
