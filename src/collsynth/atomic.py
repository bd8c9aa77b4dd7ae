"""Atomic file writes: a file is either the old one or the whole new one, never half written."""

from __future__ import annotations

import os
import tempfile

from .errors import CollsynthError


def write_text_atomic(path: str, text: str, encoding: str = "utf-8") -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder and a rename."""
    write_bytes_atomic(path, text.encode(encoding))


def write_bytes_atomic(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (one line naming the path on failure)."""
    folder = os.path.dirname(os.path.abspath(path))
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=".collsynth-", suffix=".tmp", dir=folder)
        os.fchmod(fd, _mode_for(path))
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        tmp = None
    except OSError as e:
        raise CollsynthError(f"cannot write {path}: {e.strerror or e}") from None
    except ValueError:  # a NUL byte in the name
        raise CollsynthError(f"{path!r} is not a usable file name") from None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def check_writable(path: str, what: str) -> None:
    """One line naming why ``path`` cannot be written (checked before the work starts);
    ``what`` names the path in the message (a flag such as ``-o``)."""
    if not path:
        raise CollsynthError(f"{what} needs a file name")
    try:
        if os.path.isdir(path):
            raise CollsynthError(f"{what} {path} is a directory; name a file")
        folder = os.path.dirname(os.path.abspath(path))
    except ValueError:  # a NUL byte
        raise CollsynthError(f"{what} {path!r} is not a usable file name") from None
    if not os.path.isdir(folder):
        raise CollsynthError(f"cannot write {path}: no directory {folder}")
    if not os.access(folder, os.W_OK):
        raise CollsynthError(f"cannot write {path}: {folder} is not writable")


def _mode_for(path: str) -> int:
    """The mode the file would get from a plain ``open``: the old file's, else 0666 less umask."""
    try:
        return os.stat(path).st_mode & 0o7777
    except OSError:
        mask = os.umask(0)
        os.umask(mask)
        return 0o666 & ~mask
