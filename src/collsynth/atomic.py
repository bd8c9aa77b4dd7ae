"""Atomic file writes: a file is either the old one or the whole new one, never half written."""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence

from .errors import CollsynthError
from .interrupt import deferred

#: What a command names as an input: one path, several, or none.
Inputs = Mapping[str, str | Sequence[str] | None]


def write_text_atomic(path: str, text: str, encoding: str = "utf-8") -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder and a rename."""
    write_bytes_atomic(path, text.encode(encoding))


def write_bytes_atomic(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (one line naming the path on failure)."""
    folder = os.path.dirname(os.path.abspath(path))
    tmp = None
    try:
        kind = _special_kind(path)  # checked again here: never rename over a device or FIFO
        if kind:
            raise CollsynthError(f"cannot write {path}: it is a {kind}, not a regular file")
        with deferred():  # an interruption never finds the temporary file unnamed
            fd, tmp = tempfile.mkstemp(prefix=".collsynth-", suffix=".tmp", dir=folder)
        os.fchmod(fd, _mode_for(path))
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        with deferred():  # renamed and forgotten together
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
    """One line naming why ``path`` cannot be written as a file (checked before the work
    starts); ``what`` names the path in the message (a flag such as ``-o``).

    Refused: an empty name; a path that exists and is not a regular file (a directory, FIFO,
    device or socket; a symbolic link is judged by what it points to); a missing or
    read-only folder."""
    if not path:
        raise CollsynthError(f"{what} needs a file name")
    if path.endswith(("/", os.sep)) or os.path.basename(path) in ("", ".", ".."):
        raise CollsynthError(f"{what} {path} names a folder; name a file")
    try:
        kind = _special_kind(path)
        folder = os.path.dirname(os.path.abspath(path))
    except ValueError:  # a NUL byte
        raise CollsynthError(f"{what} {path!r} is not a usable file name") from None
    except OSError as e:
        raise CollsynthError(f"cannot write {path}: {e.strerror or e}") from None
    if kind == "directory":
        raise CollsynthError(f"{what} {path} is a directory; name a file")
    if kind:
        raise CollsynthError(f"{what} {path} is a {kind}, not a regular file; name a file")
    if not os.path.isdir(folder):
        raise CollsynthError(f"cannot write {path}: no directory {folder}")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise CollsynthError(f"cannot write {path}: {folder} is not writable")


def check_outputs(outputs: Mapping[str, str | None], inputs: Inputs | None = None) -> None:
    """Refuse, before any work, an output that cannot be written (:func:`check_writable`) or
    that names an input of the command, or another output: ``{flag: path}`` each (an input
    may be a list of paths). The same file is found however it is spelled: by its real path
    (symbolic links and ``..`` resolved) and by its device and inode (hard links)."""
    seen = _identities(inputs or {}, existing=True)
    for flag, path in outputs.items():
        if path is None:
            continue
        check_writable(path, flag)
        other = _match(path, seen)
        if other is not None:
            raise CollsynthError(f"{flag} {path} would overwrite {other}; write elsewhere")
        seen.extend(_identities({flag: path}))


def check_output_dir(
    path: str,
    what: str,
    inputs: Inputs | None = None,
    owned: Callable[[str], bool] = lambda name: True,
    parents: bool = False,
) -> None:
    """Refuse, before any work, a folder a command writes its files into: a path that exists
    and is not a directory (a symbolic link is judged by what it points to), a folder that
    cannot be written or (unless ``parents``) whose parent does not exist, an input of the
    command that lies in it under a name the command writes there (``owned(name)``), and an
    entry of such a name that is not a regular file."""
    if not path:
        raise CollsynthError(f"{what} needs a folder name")
    try:
        kind = _special_kind(path)
        real = os.path.realpath(path)
    except ValueError:
        raise CollsynthError(f"{what} {path!r} is not a usable folder name") from None
    except OSError as e:
        raise CollsynthError(f"cannot write into {path}: {e.strerror or e}") from None
    if kind is None:
        raise CollsynthError(f"{what} {path} is a file, not a folder; name a folder")
    if kind == "" and os.path.islink(path):
        raise CollsynthError(f"{what} {path} is a link to nothing; name a folder")
    if kind != "directory" and kind != "":
        raise CollsynthError(f"{what} {path} is a {kind}, not a folder; name a folder")
    if kind == "directory":
        if not os.access(path, os.W_OK | os.X_OK):
            raise CollsynthError(f"cannot write into {path}: it is not writable")
    else:
        parent = os.path.dirname(os.path.abspath(path))
        while parents and not os.path.lexists(parent) and os.path.dirname(parent) != parent:
            parent = os.path.dirname(parent)
        if not os.path.isdir(parent):
            raise CollsynthError(f"cannot create {path}: its parent directory does not exist")
        if not os.access(parent, os.W_OK | os.X_OK):
            raise CollsynthError(f"cannot create {path}: {parent} is not writable")
        return  # a new folder holds nothing yet
    for flag, inp in _paths(inputs or {}):
        try:
            inside = os.path.dirname(os.path.realpath(inp)) == real
        except (OSError, ValueError):
            continue
        if inside and os.path.exists(inp) and owned(os.path.basename(os.path.realpath(inp))):
            raise CollsynthError(
                f"{what} {path} would overwrite {flag} {inp} (a name written there); "
                f"write elsewhere"
            )
    seen = _identities(inputs or {}, existing=True)
    try:
        names = sorted(os.listdir(path))
    except OSError as e:
        raise CollsynthError(f"cannot write into {path}: {e.strerror or e}") from None
    for name in names:
        if not owned(name):
            continue
        entry = os.path.join(path, name)
        other = _match(entry, seen)
        if other is not None:
            raise CollsynthError(f"{what} {path}: {entry} would overwrite {other}; write elsewhere")
        try:
            kind = _special_kind(entry)
        except OSError:
            continue
        if kind:
            raise CollsynthError(
                f"cannot write {entry}: it is a {kind}, not a regular file; remove it or "
                f"write elsewhere"
            )


def same_file(a: str, b: str) -> bool:
    """Whether paths ``a`` and ``b`` name the same file (real path, or device and inode)."""
    return _match(a, _identities({"": b}, existing=True)) is not None


def _paths(inputs: Inputs) -> Iterable[tuple[str, str]]:
    for flag, value in inputs.items():
        if not value:
            continue
        for p in [value] if isinstance(value, str) else value:
            if p:
                yield flag, p


def _identities(
    inputs: Inputs, existing: bool = False
) -> list[tuple[str, tuple[int, int] | None, str]]:
    """(real path, (device, inode) or None, name for messages) of every named path (with
    ``existing``: of those that exist; an input such as ``ring:n=4`` names no file)."""
    out: list[tuple[str, tuple[int, int] | None, str]] = []
    for flag, p in _paths(inputs):
        try:
            if existing and not os.path.lexists(p):
                continue
            real = os.path.realpath(p)
        except (OSError, ValueError):
            continue
        out.append((real, _inode(p), f"{flag} {p}" if flag else p))
    return out


def _match(path: str, seen: list[tuple[str, tuple[int, int] | None, str]]) -> str | None:
    """The name of the entry of ``seen`` that ``path`` is the same file as (None: none)."""
    try:
        real = os.path.realpath(path)
    except (OSError, ValueError):
        return None
    ino = _inode(path)
    for other_real, other_ino, name in seen:
        if real == other_real or (ino is not None and ino == other_ino):
            return name
    return None


def _inode(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return (st.st_dev, st.st_ino)


def _special_kind(path: str) -> str | None:
    """What ``path`` is when it exists and is not a regular file ("directory", "FIFO", ...);
    None for a regular file, "" when nothing is there (a dangling link counts as nothing:
    the link itself is replaced)."""
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return ""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISFIFO(mode):
        return "named pipe (FIFO)"
    if stat.S_ISCHR(mode):
        return "character device"
    if stat.S_ISBLK(mode):
        return "block device"
    if stat.S_ISSOCK(mode):
        return "socket"
    return "special file"


def _mode_for(path: str) -> int:
    """The mode the file would get from a plain ``open``: the old file's, else 0666 less umask."""
    try:
        return os.stat(path).st_mode & 0o7777
    except OSError:
        mask = os.umask(0)
        os.umask(mask)
        return 0o666 & ~mask
