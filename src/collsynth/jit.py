"""numba in one place: how a loop is compiled (:func:`compiled`) and when to pay for it.

Every compiled loop in collsynth is written once as plain Python over numpy arrays and goes
through :func:`compiled` (or :func:`compiled_group` for a module of helpers that call each
other): with numba importable it returns the function compiled (``cache=True``: once per
machine, then loaded from numba's on-disk cache; ``nogil=True``: a time limit's watchdog thread
keeps running), memoized per process; without numba it returns the function itself, which
computes the same results more slowly. Which engine a caller runs is always an argument of
that caller (``compiled=`` or ``engine=``), never a module constant to patch.

numba checks a cached function against its own source file only, so a compiled loop whose
helpers live in other files would keep running stale helpers after those files change (a
``git pull`` that edits only a helper's module). Every function compiled here is therefore
cached under a folder of numba's cache named by a hash of the contents of every source file it
was built from (its own, its helpers', the group's) and of its compile options: a change to any
of them compiles afresh (numba's own index would load a function compiled with reference
counting for a caller that now asks for it without, and the other way round).

The first-run policy of collsynth's compiled loops:

numba compiles a loop the first time a process uses it and keeps the machine code in its
on-disk cache (``$NUMBA_CACHE_DIR``, under collsynth's cache directory), so later processes
load it in a fraction of a second. Most loops compile in a few seconds; one (the SCALE-CCL
planner) takes about a minute, which no command should make a user wait for. Such a loop
follows :func:`policy`:

* ``background`` (default): while the compiled loop is not known to be in the cache, the
  command runs the same loop uncompiled (same results, slower) and starts one detached,
  low-priority process that compiles it into the cache (:func:`build_in_background`); once
  that finishes, later commands load the compiled loop.
* ``foreground``: compile in the command itself (the wait is paid once per machine).
* ``off``: never compile on the command's own choice (an explicit ``engine="numba"`` still
  does).

``$COLLSYNTH_JIT`` sets the policy. "Known to be in the cache" is a marker file per loop and
per (Python, numba, loop source) that :func:`mark_ready` writes once a process has compiled or
loaded the loop (:func:`ready` checks it).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
import types
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from .errors import CollsynthError

POLICIES = ("background", "foreground", "off")
#: a build that has not finished after this long is taken for dead (a new one may start)
STALE_BUILD_S = 900.0
_STARTED: set[str] = set()  # builds this process started


_MEMO: dict[tuple, Any] = {}
#: the source files each compiled object was built from (by id; kept alive by _MEMO)
_FILES: dict[int, frozenset[str]] = {}


def numba_available() -> bool:
    """Whether numba can be imported."""
    try:
        import numba  # noqa: F401
    except ImportError:  # pragma: no cover - numba is a dependency
        return False
    return True


def rebind(func: Callable, extra_globals: Mapping[str, Any]) -> types.FunctionType:
    """A copy of ``func`` whose globals resolve ``extra_globals`` first: how a compiled loop
    calls compiled helpers (numba compiles a call to a global that is itself compiled)."""
    assert isinstance(func, types.FunctionType)
    g = dict(func.__globals__)
    g.update(extra_globals)
    return types.FunctionType(func.__code__, g, func.__name__, func.__defaults__, func.__closure__)


def _options(inline: bool, refcount: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"cache": True, "nogil": True}
    if inline:
        out["inline"] = "always"
    if not refcount:
        from numba.core.cpu import CPUTargetOptions

        if hasattr(CPUTargetOptions, "_nrt"):
            out["_nrt"] = False
    return out


def _sources_digest(files: Iterable[str], options: str = "") -> str:
    h = hashlib.sha256(options.encode())
    for path in sorted(files):
        h.update(path.encode())
        try:
            with open(path, "rb") as f:
                h.update(f.read())
        except OSError:  # pragma: no cover - a function without a readable file
            h.update(b"?")
    return h.hexdigest()[:16]


@contextmanager
def _cache_folder(files: frozenset[str], options: str = "") -> Iterator[None]:
    """numba's cache folder for functions decorated inside: one per content of ``files`` and
    compile ``options`` (numba picks the folder when a function is decorated, from
    ``config.CACHE_DIR``; its own cache index does not tell a function compiled without
    reference counting from the same source compiled with it, and would load either)."""
    from numba.core import config

    settings: Any = config  # numba's settings module (its names are set at run time)
    old = settings.CACHE_DIR
    base = (
        old
        or os.environ.get("NUMBA_CACHE_DIR")
        or os.path.join(os.path.expanduser("~"), ".cache", "collsynth", "numba")
    )
    settings.CACHE_DIR = os.path.join(base, "sources-" + _sources_digest(files, options))
    try:
        yield
    finally:
        settings.CACHE_DIR = old


def compiled(
    func: Callable,
    *,
    helpers: Mapping[str, Any] | None = None,
    inline: bool = False,
    refcount: bool = True,
) -> Callable:
    """``func`` compiled with numba, or ``func`` itself where numba is not importable.

    ``helpers``: names in ``func``'s globals to resolve to these objects instead (compiled
    helpers it calls). ``inline``: inline the function into its compiled callers.
    ``refcount=False``: compile without numba's reference counting, for a function that only
    reads and writes arrays its caller owns (each call would otherwise update the count of
    every array it is passed). Memoized per process on the function and its helpers' identity,
    so every caller that asks for the same thing gets the same compiled object."""
    key = (func, tuple(sorted((k, id(v)) for k, v in (helpers or {}).items())), inline, refcount)
    hit = _MEMO.get(key)
    if hit is not None:
        return hit
    if not numba_available():  # pragma: no cover - numba is a dependency
        out: Callable = func
    else:
        from numba import njit

        target = rebind(func, helpers) if helpers else func
        files = frozenset([func.__code__.co_filename]).union(
            *(_FILES.get(id(h), frozenset()) for h in (helpers or {}).values())
        )
        options = _options(inline, refcount)
        with _cache_folder(files, repr(sorted(options.items()))):
            out = njit(**options)(target)
        _FILES[id(out)] = files
    # the key holds the helpers by identity: keep them alive as long as the memo entry
    _MEMO[key] = out
    _MEMO[(key, "helpers")] = tuple((helpers or {}).values())
    return out


def compiled_group(
    namespace: Mapping[str, Any],
    names: Iterable[str],
    *,
    refcount: Callable[[str], bool] = lambda name: True,
) -> dict[str, Callable]:
    """The functions ``names`` of ``namespace`` (a module's globals) compiled so that they
    call each other compiled: one shared globals dict in which each name is replaced by its
    compiled form (numba resolves a global call when it compiles the caller, after every name
    is in place). Without numba, the plain functions. ``refcount(name)``: see
    :func:`compiled`. Memoized per process on the namespace and the names. A namespace that
    is no module's (no ``__name__``) is compiled without numba's disk cache: numba could not
    rebuild its globals when loading."""
    chosen = tuple(names)
    key = (id(namespace), chosen, tuple(refcount(n) for n in chosen))
    hit = _MEMO.get(key)
    if hit is not None:
        return dict(hit)
    if not numba_available():  # pragma: no cover - numba is a dependency
        out = {name: namespace[name] for name in chosen}
    else:
        from numba import njit

        space = dict(namespace)
        files = frozenset(namespace[name].__code__.co_filename for name in chosen)
        # numba rebuilds a cached function's globals by importing the module they are named
        # after: a namespace that is no module's (no ``__name__``) compiles every time
        cache = "__name__" in namespace
        with _cache_folder(files, repr(key[2])):
            for name in chosen:
                f = namespace[name]
                space[name] = njit(**dict(_options(False, refcount(name)), cache=cache))(
                    types.FunctionType(f.__code__, space, f.__name__, f.__defaults__, f.__closure__)
                )
        out = {name: space[name] for name in chosen}
        for compiled_function in out.values():
            _FILES[id(compiled_function)] = files
    _MEMO[key] = out
    return dict(out)


def policy() -> str:
    """The first-run policy (``$COLLSYNTH_JIT``; default ``background``)."""
    value = (os.environ.get("COLLSYNTH_JIT") or "background").strip().lower()
    if value not in POLICIES:
        raise CollsynthError(f"COLLSYNTH_JIT={value!r} is not one of {', '.join(POLICIES)}")
    return value


def _directory() -> str:
    base = os.environ.get("NUMBA_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "collsynth", "numba"
    )
    return os.path.join(base, "collsynth-ready")


def _key(name: str, sources: Sequence[str]) -> str:
    h = hashlib.sha256(name.encode())
    h.update(sys.version.encode())
    try:
        import numba

        h.update(numba.__version__.encode())
    except ImportError:  # pragma: no cover - numba is a dependency
        h.update(b"no numba")
    for path in sources:
        with open(path, "rb") as f:
            h.update(f.read())
    return f"{name}-{h.hexdigest()[:16]}"


def ready(name: str, sources: Sequence[str]) -> bool:
    """Whether loop ``name`` (compiled from the files ``sources``) is in numba's cache."""
    return os.path.exists(os.path.join(_directory(), _key(name, sources)))


def mark_ready(name: str, sources: Sequence[str]) -> None:
    """Record that loop ``name`` is in numba's cache (best effort: a read-only cache directory
    only means the next process checks again)."""
    try:
        os.makedirs(_directory(), exist_ok=True)
        with open(os.path.join(_directory(), _key(name, sources)), "w", encoding="utf-8") as f:
            f.write(f"{time.time():.0f}\n")
    except OSError:
        pass


def build_in_background(name: str, sources: Sequence[str], code: str) -> bool:
    """Start one detached, low-priority ``python -c code`` that compiles loop ``name`` into
    the cache, unless one is already running (here or in another process) or the loop is
    ready; whether one was started. The build is a separate session: it survives the command
    (a later command profits from it) and never writes to the command's output."""
    key = _key(name, sources)
    if key in _STARTED or ready(name, sources):
        return False
    lock = os.path.join(_directory(), key + ".building")
    try:
        os.makedirs(_directory(), exist_ok=True)
        if os.path.exists(lock) and time.time() - os.path.getmtime(lock) < STALE_BUILD_S:
            return False
        fd = os.open(lock + f".{os.getpid()}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.close(fd)
        os.replace(lock + f".{os.getpid()}", lock)
    except OSError:
        return False
    script = (
        "import os\n"
        "try:\n"
        "    os.nice(10)\n"
        "except OSError:\n"
        "    pass\n"
        "try:\n"
        f"    {code}\n"
        "finally:\n"
        "    try:\n"
        f"        os.remove({lock!r})\n"
        "    except OSError:\n"
        "        pass\n"
    )
    env = dict(os.environ, COLLSYNTH_JIT="foreground")
    try:
        subprocess.Popen(
            [sys.executable, "-c", script],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
            env=env,
        )
    except OSError:
        try:
            os.remove(lock)
        except OSError:
            pass
        return False
    _STARTED.add(key)
    return True


__all__ = [
    "POLICIES",
    "build_in_background",
    "compiled",
    "compiled_group",
    "mark_ready",
    "numba_available",
    "policy",
    "ready",
    "rebind",
]
