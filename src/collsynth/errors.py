"""User-facing error type.

Every problem caused by bad input (a malformed file, an unknown topology name, a schedule
that breaks its collective) is raised as :class:`CollsynthError` with a one-line message
that names what is wrong. The CLI prints that line on stderr and exits with status 2.
"""

from __future__ import annotations


class CollsynthError(Exception):
    """An error caused by the user's input; its message is one line."""

    def __init__(self, message: str):
        # Collapse to one line: the CLI contract promises a single line on stderr.
        one_line = " ".join(str(message).split())
        super().__init__(one_line)

    def __reduce__(self) -> tuple:
        """Pickle any subclass (keyword-only arguments included): an error raised in a Dask
        worker comes back as itself, with its exit status and fields."""
        return (_rebuild, (type(self), self.args, dict(self.__dict__)))


def _rebuild(cls: type[CollsynthError], args: tuple, state: dict) -> CollsynthError:
    err = cls.__new__(cls)
    Exception.__init__(err, *args)
    err.__dict__.update(state)
    return err


class VerificationError(CollsynthError):
    """A schedule does not implement its collective (raised by the verifier).

    ``op`` is the index of the first offending operation (or ``None`` when the problem is
    global, such as a missing delivery) and ``check`` names the rule that failed.
    """

    def __init__(self, message: str, *, check: str, op: int | None = None):
        super().__init__(message)
        self.check = check
        self.op = op


class RunFailedError(CollsynthError):
    """A launched run failed: a rank died, stopped or timed out, or a check failed (exit
    status 3, like ``collsynth run``)."""

    exit_status = 3
