"""Supervising a launched run: deadlines per step, the whole session ended on failure.

:func:`supervise` runs an ``mpiexec ... collsynth run`` command line, reads the ranks' progress
records (:mod:`.progress`) and their processes (``/proc``), and ends the run with one line naming
the rank and the step as soon as a rank dies, stops, reports an error or misses a deadline.
``docs/cli.md`` ("run --launch deadlines") states the promises.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .. import interrupt
from ..atomic import write_text_atomic
from ..errors import CollsynthError
from .progress import ENV_DIR, LAUNCH_STEP, LOAD_STEP, SETUP_STEP, read_record

#: the status of a failed run (``collsynth run`` exits with it)
RUN_FAILED = 3

#: how often the launcher looks at the ranks' records and processes (seconds)
POLL_S = 0.05
#: after a first sign of failure (a rank's error, a rank gone), how long mpiexec may take to end
#: the run by itself and the other ranks to report, before the launcher ends it (seconds)
GRACE_S = 1.0
#: what the launch step (mpiexec's start until a rank's first record) gets beyond ``--timeout``:
#: starting Python and importing collsynth on a loaded machine (seconds)
START_SLACK_S = 5.0
#: SIGTERM first; SIGKILL to whatever is left after this (seconds)
TERM_WAIT_S = 1.5
#: where the launcher writes the pids of mpiexec and of every rank (one a line), if set
PIDFILE_ENV = "COLLSYNTH_RUN_PIDFILE"

_HAVE_PROC = os.path.isdir("/proc/self")


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state, session) of a live process; None when it is gone (or a zombie)."""
    if not _HAVE_PROC:  # pragma: no cover - not Linux
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
        return ("?", -1)
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        fields = data[data.rindex(b")") + 2 :].split()
        state, sid = fields[0].decode(), int(fields[3])
    except (OSError, ValueError, IndexError):
        return None
    return None if state in ("Z", "X", "x") else (state, sid)


def _session_pids(sid: int) -> set[int]:
    """The live processes of session ``sid`` (mpiexec, started with a session of its own, and
    every rank: PRRTE gives each rank a process group of its own, but not a session)."""
    if not _HAVE_PROC:  # pragma: no cover - not Linux
        return set()
    out: set[int] = set()
    try:
        names = os.listdir("/proc")
    except OSError:  # pragma: no cover
        return out
    for name in names:
        if name.isdigit():
            st = _proc_stat(int(name))
            if st is not None and st[1] == sid:
                out.add(int(name))
    return out


def _signame(n: int) -> str:
    try:
        return signal.Signals(n).name
    except ValueError:
        return f"signal {n}"


def _banner_death(log: str) -> tuple[int, str] | None:
    """The rank whose end made mpiexec stop the job, and how it ended (Open MPI / PRRTE)."""
    m = re.search(r"process rank (\d+) with PID \d+ on node \S+ exited on\s+signal (\d+)", log)
    if m:
        n = int(m.group(2))
        return int(m.group(1)), f"was killed by signal {n} ({_signame(n)})"
    m = re.search(r"Process name: \[[^\],]*,(\d+)\]\s*Exit code:\s*(-?\d+)", log)
    if m:
        return int(m.group(1)), f"exited with status {m.group(2)}"
    m = re.search(r"due to process rank (\d+) with PID \d+ on node \S+ calling\s+\"abort\"", log)
    if m:
        return int(m.group(1)), "called MPI_Abort"
    m = re.search(r"due to process rank (\d+) with PID \d+ on node \S+ exiting improperly", log)
    if m:
        return int(m.group(1)), "exited without finishing MPI"
    return None


def _stuck_key(rank: int, error: str) -> tuple[int, int, int]:
    """Which rank's own error names the cause best: "stuck at op N" before other timeouts,
    the earliest op first (later ops wait on it), then the lowest rank."""
    m = re.search(r"stuck at op (\d+)", error)
    return (0, int(m.group(1)), rank) if m else (1, 0, rank)


@dataclass
class _Rank:
    """What the launcher knows of one rank."""

    rank: int
    rec: dict | None = None
    seq: int = -1
    seen_at: float = 0.0  # when the launcher first saw the current step
    pid: int | None = None
    gone_at: float | None = None  # first seen gone without a final record
    stopped_since: float | None = None  # seen stopped (SIGSTOP) since

    @property
    def final(self) -> bool:
        return self.rec is not None and self.rec.get("state") in ("done", "failed")

    @property
    def status(self) -> int:
        return int(self.rec.get("status", 0) or 0) if self.final and self.rec else 0

    @property
    def step(self) -> str:
        return str(self.rec.get("step") or LAUNCH_STEP) if self.rec else LAUNCH_STEP

    @property
    def error(self) -> str | None:
        err = self.rec.get("error") if self.final and self.rec else None
        return str(err) if err else None

    @property
    def limit(self) -> float | None:
        lim = self.rec.get("limit") if self.rec else None
        return float(lim) if isinstance(lim, (int, float)) else None


@dataclass
class Supervised:
    """How a supervised ``mpiexec`` run ended: ``status`` 0 (ok), 1 (a rank's internal error),
    2 (bad input found by the ranks) or 3 (the run failed), with its one-line ``error``."""

    status: int
    error: str | None
    run_dir: str
    log: str
    mpiexec_status: int | None
    stderr: str
    elapsed_s: float
    pids: list[int]

    @property
    def error_line(self) -> str | None:
        """The error naming the log, where mpiexec's own messages are."""
        if self.error is None:
            return None
        if self.status == 2:
            return self.error
        return f"{self.error} (mpiexec log: {self.log})"


class _Supervisor:
    def __init__(
        self,
        proc: subprocess.Popen,
        nprocs: int,
        timeout: float,
        run_dir: str,
        wall_limit: float | None,
    ) -> None:
        self.proc = proc
        self.timeout = float(timeout)
        self.run_dir = run_dir
        self.wall_limit = wall_limit
        self.ranks = [_Rank(r) for r in range(nprocs)]
        self.start = time.monotonic()
        self.pids: dict[int, None] = {proc.pid: None}  # in the order seen
        self.pidfile = os.environ.get(PIDFILE_ENV)
        self.exited: int | None = None
        self.reason: str | None = None
        self.first_fail: float | None = None
        self.first_gone: float | None = None
        self.all_final: float | None = None
        self.setup_seq: int | None = None  # the set-up step's number (the same on every rank)
        self.first_setup: float | None = None  # a first rank began the set-up
        self.all_setup: float | None = None  # every rank has reached the set-up
        self.polls = 0
        self._write_pids()

    # ------------------------------------------------------------------ watching
    def _learn(self, pids) -> None:
        new = [p for p in pids if p not in self.pids]
        if new:
            self.pids.update(dict.fromkeys(new))
            self._write_pids()

    def _write_pids(self) -> None:
        if not self.pidfile:
            return
        try:  # checked before the launch (collsynth.cli.run); written whole or not at all
            write_text_atomic(self.pidfile, "".join(f"{p}\n" for p in self.pids))
        except CollsynthError:  # pragma: no cover - best effort (a test hook)
            pass

    def refresh(self, now: float) -> None:
        self.polls += 1
        if self.polls % 10 == 1:
            self._learn(sorted(_session_pids(self.proc.pid)))
        for v in self.ranks:
            rec = read_record(self.run_dir, v.rank)
            if rec is not None:
                seq = int(rec.get("seq", 0))
                old = v.rec or {}
                if (seq, rec.get("state"), rec.get("step")) != (
                    v.seq,
                    old.get("state"),
                    old.get("step"),
                ):
                    v.seq, v.seen_at = seq, now
                    if rec.get("step") == SETUP_STEP and self.setup_seq is None:
                        self.setup_seq, self.first_setup = seq, now
                v.rec = rec
                if v.pid is None and isinstance(rec.get("pid"), int):
                    v.pid = rec["pid"]
                    self._learn([v.pid])
            if v.pid is None or v.final:
                continue
            st = _proc_stat(v.pid)
            if st is None or (st[1] != self.proc.pid and _HAVE_PROC):
                rec = read_record(self.run_dir, v.rank)  # it may have finished meanwhile
                if rec is not None and rec.get("state") in ("done", "failed"):
                    v.rec = rec
                elif v.gone_at is None:
                    v.gone_at = now
            elif st[0] in ("T", "t"):
                if v.stopped_since is None:
                    v.stopped_since = now
            else:
                v.stopped_since = None

    def check(self, now: float) -> str | None:
        """Why the launcher must end the run now, or None."""
        T = self.timeout
        ranks = self.ranks
        if self.wall_limit is not None and now - self.start > self.wall_limit:
            return "wall"
        if all(v.final for v in ranks):
            # every rank is done: mpiexec forwards the last output and ends MPI
            if self.all_final is None:
                self.all_final = now
            return "exit" if now - self.all_final > max(T, 5.0) else None
        if self.first_fail is None and any(v.final and v.status for v in ranks):
            self.first_fail = now
        if self.first_gone is None and any(v.gone_at is not None for v in ranks):
            self.first_gone = now
        for t in (self.first_fail, self.first_gone):
            if t is not None and now - t > GRACE_S:
                return "failed"
        start_limit = T + START_SLACK_S
        if self.all_setup is None and self.setup_seq is not None:
            if all(self._reached_setup(v) for v in ranks):
                self.all_setup = now
        for v in ranks:
            if v.final:
                continue
            if v.stopped_since is not None and now - v.stopped_since > T:
                return "stopped"
            if v.rec is None:
                if now - self.start > start_limit:
                    return "late"
            elif v.step == LOAD_STEP:
                if now - v.seen_at > start_limit:
                    return "late"
            elif v.step == SETUP_STEP:
                # the set-up waits for every rank: its deadline counts once all are in it
                if self.all_setup is not None and now - max(v.seen_at, self.all_setup) > T:
                    return "late"
            elif v.limit is not None and now - v.seen_at > v.limit:
                return "late"
            if (
                self.first_setup is not None
                and not self._reached_setup(v)
                and now - self.first_setup > start_limit
            ):
                return "late"
        return None

    def _reached_setup(self, v: _Rank) -> bool:
        return v.final or (
            v.rec is not None and self.setup_seq is not None and v.seq >= self.setup_seq
        )

    def watch(self) -> None:
        while True:
            now = time.monotonic()
            rc = self.proc.poll()
            self.refresh(now)
            if rc is not None:
                self.exited = rc
                return
            self.reason = self.check(now)
            if self.reason:
                return
            time.sleep(POLL_S)

    # ------------------------------------------------------------------ ending
    def terminate(self) -> None:
        """End mpiexec and every rank: SIGTERM (and SIGCONT, for stopped ranks), then SIGKILL."""
        sid = self.proc.pid
        known = {v.pid for v in self.ranks if v.pid}
        live = _session_pids(sid) | {p for p in known if (st := _proc_stat(p)) and st[1] == sid}
        if self.proc.poll() is None:
            live.add(sid)
        if not live:
            return
        self._learn(sorted(live))
        for sig in (signal.SIGTERM, signal.SIGCONT):
            for pid in sorted(live):
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass
        end = time.monotonic() + TERM_WAIT_S
        while time.monotonic() < end:
            self.proc.poll()
            live = {p for p in live if (st := _proc_stat(p)) and (st[1] == sid or not _HAVE_PROC)}
            if not live:
                break
            time.sleep(POLL_S)
        for pid in sorted(live | _session_pids(sid)):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL does not fail
            pass

    def diagnose(self, log: str) -> tuple[int, str | None]:
        """The run's status and its one line naming the rank and the step."""
        T = self.timeout
        ranks = self.ranks
        rc = self.exited
        if self.reason is None and rc == 0 and not any(v.final and v.status for v in ranks):
            return 0, None
        banner = _banner_death(log)
        # 1. a rank that died (before any rank reported an error: later deaths are mpiexec
        #    ending the job)
        dead = [
            v
            for v in ranks
            if not v.final
            and v.gone_at is not None
            and (self.first_fail is None or v.gone_at <= self.first_fail)
        ]
        if rc is not None and not dead and not any(v.final and v.status for v in ranks):
            # mpiexec ended the job before the launcher saw a rank go: mpiexec's report (or
            # else a rank that had started) names it
            dead = [
                v
                for v in ranks
                if not v.final
                and v.stopped_since is None
                and (v.pid is not None or (banner is not None and banner[0] == v.rank))
            ]
        if dead:
            named = [v for v in dead if banner and v.rank == banner[0]]
            v = named[0] if named else min(dead, key=lambda x: (x.gone_at or 0.0, x.rank))
            how = banner[1] if named and banner else "exited"
            return 3, f"rank {v.rank} {how} during {v.step}; the run was stopped"
        # 2. a rank stopped (SIGSTOP) for the whole of its deadline
        stopped = [v for v in ranks if not v.final and v.stopped_since is not None]
        if stopped:
            v = stopped[0]
            return 3, (
                f"rank {v.rank} was stopped (SIGSTOP) during {v.step} and did not resume "
                f"within {T:g} s"
            )
        # 3. the ranks' own errors
        said = [(v, v.error) for v in ranks if v.status and v.error]
        if said:
            bad = [e for v, e in said if v.status == 2]
            if bad:
                return 2, bad[0]
            v, e = min(said, key=lambda x: _stuck_key(x[0].rank, x[1] or ""))
            return (1 if v.status == 1 else 3), e
        if any(v.final and v.status == 2 for v in ranks):
            return 2, "the ranks refused the input (see the mpiexec log)"
        # 4. a step that ran out of time with nobody saying why
        late = [v for v in ranks if not v.final]
        if self.reason == "late" and late:
            v = min(late, key=lambda x: (x.seq, x.rank))
            start_limit = T + START_SLACK_S
            if v.rec is None:
                return 3, f"rank {v.rank} did not start within {start_limit:g} s"
            if self.setup_seq is not None and not self._reached_setup(v):
                return 3, (
                    f"rank {v.rank} did not reach {SETUP_STEP} within {start_limit:g} s "
                    f"(it is in {v.step})"
                )
            limit = start_limit if v.step == LOAD_STEP else T if v.step == SETUP_STEP else v.limit
            return 3, f"rank {v.rank} did not finish {v.step} within {limit or T:g} s"
        if self.reason == "wall":
            return 3, f"the run did not finish within {self.wall_limit:g} s"
        if self.reason == "exit":
            return 3, "mpiexec did not exit after every rank finished"
        if banner:
            return 3, f"rank {banner[0]} {banner[1]}; the run was stopped"
        first = _first_error(log)
        return 3, f"mpiexec exited with status {rc}" + (f": {first}" if first else "")


def _tee(src, log, echo) -> None:
    """Copy mpiexec's stderr to the log, and to the terminal with ``--verbose``."""
    while True:
        try:
            data = os.read(src.fileno(), 65536)
        except OSError:
            break
        if not data:
            break
        log.write(data)
        log.flush()
        if echo is not None:
            try:
                echo.write(data)
                echo.flush()
            except (OSError, ValueError):
                echo = None


def supervise(
    cmd: Sequence[str],
    nprocs: int,
    timeout: float,
    *,
    stdout: Any = None,
    verbose: bool = False,
    wall_limit: float | None = None,
) -> Supervised:
    """Run ``cmd`` (an ``mpiexec ... collsynth run`` command line) under deadlines.

    mpiexec starts in a session of its own with ``COLLSYNTH_RUN_PROGRESS`` naming a fresh
    folder (``collsynth-run-*`` in the temporary directory) where every rank keeps its
    progress record (:mod:`.progress`); mpiexec's stderr (its multi-line reports, and every
    rank's own lines) goes to ``mpiexec.log`` there, and also to this process's stderr with
    ``verbose``; stdout goes to ``stdout`` (None: this process's). Every ``POLL_S`` the
    launcher reads the records: a rank's step that outlives its limit (``--timeout`` where the
    rank has no deadline of its own, such as the communicator set-up), a rank stopped for
    ``timeout`` s, a rank that is gone or that reported an error (after ``GRACE_S`` for mpiexec
    to end the job itself), or ``wall_limit`` ends the run: SIGTERM (and SIGCONT) to mpiexec and
    every process of its session, then SIGKILL to whatever is left after ``TERM_WAIT_S``, so no
    rank outlives the launcher. The folder is removed after a successful run and kept (named
    in the error) after a failure.
    """
    try:
        run_dir = tempfile.mkdtemp(prefix="collsynth-run-")
    except OSError as e:
        raise CollsynthError(
            f"cannot make the run's folder in {tempfile.gettempdir()}: {e.strerror or e}"
        ) from None
    log_path = os.path.join(run_dir, "mpiexec.log")
    env = dict(os.environ)
    env[ENV_DIR] = run_dir
    # Open MPI gives the ranks a terminal for stdout; numba's coloured error messages would
    # then leave colorama's reset code after rank 0's result (stdout holds only the result)
    env.setdefault("NUMBA_DISABLE_ERROR_MESSAGE_HIGHLIGHTING", "1")
    log = open(log_path, "wb")
    echo = getattr(sys.stderr, "buffer", None) if verbose else None
    try:
        proc = subprocess.Popen(
            list(cmd),
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=subprocess.PIPE if verbose else log,
            env=env,
            start_new_session=True,
        )
    except OSError as e:
        log.close()
        shutil.rmtree(run_dir, ignore_errors=True)
        raise CollsynthError(f"cannot start {cmd[0]}: {e.strerror or e}") from None
    tee = None
    if verbose:
        tee = threading.Thread(target=_tee, args=(proc.stderr, log, echo), daemon=True)
        tee.start()
    sup = _Supervisor(proc, nprocs, timeout, run_dir, wall_limit)
    old = _catch_termination()
    try:
        sup.watch()
    finally:
        try:
            sup.terminate()
        finally:
            _restore_termination(old)
            if tee is not None:
                tee.join(timeout=5)
            if proc.stderr is not None:
                proc.stderr.close()
            log.close()
            sup._write_pids()
    with open(log_path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    status, error = sup.diagnose(text)
    if status in (0, 2):
        shutil.rmtree(run_dir, ignore_errors=True)
    return Supervised(
        status=status,
        error=error,
        run_dir=run_dir,
        log=log_path,
        mpiexec_status=sup.exited,
        stderr=text,
        elapsed_s=time.monotonic() - sup.start,
        pids=list(sup.pids),
    )


def _catch_termination() -> dict:
    """SIGTERM and SIGHUP end the launcher through its clean-up (a KeyboardInterrupt): the
    command line's one handler does that already (:mod:`collsynth.interrupt`); a library
    caller gets it for the launch."""
    return interrupt.catch_termination()


def _restore_termination(old: dict) -> None:
    interrupt.restore_termination(old)


def _first_error(stderr: str) -> str | None:
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    for ln in lines:
        if ln.startswith("collsynth: error:"):
            return ln[len("collsynth: error:") :].strip()
    # mpiexec's own report of a rank that died (Open MPI / PRRTE wording)
    m = re.search(r"Process name: \[[^\],]*,(\d+)\]", stderr) or re.search(
        r"process rank (\d+)", stderr
    )
    if m:
        code = re.search(r"Exit code: *(-?\d+)", stderr)
        sig = re.search(r"exited on\s+signal (\d+)", stderr)
        how = (
            f"with status {code.group(1)}"
            if code
            else f"on signal {sig.group(1)}"
            if sig
            else "early"
        )
        return f"rank {m.group(1)} exited {how}; mpiexec stopped the run"
    for ln in lines:
        if "error" in ln.lower() or "exited" in ln.lower():
            return ln
    return lines[-1] if lines else None
