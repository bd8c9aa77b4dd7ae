"""The SCALE-CCL loop compiled with numba: every function of its modules, as one group.

numba compiles a call to a global function when it compiles the caller, looking the name up
in the caller's globals; so the loop's functions, spread over :data:`MODULES`, are compiled
into ONE namespace in which each name is the compiled function
(:func:`collsynth.jit.compiled_group`). That namespace (:func:`namespace`) is the union of the
modules' globals: the modules import each other's functions and constants under their own
names, so a name means one object in every module (checked when the namespace is built: a
clash is an error). Every function the modules define is compiled (:func:`kernel_names`);
those that allocate arrays (:data:`ALLOCATING`) with numba's reference counting, every other
one without it (numba's ``_nrt=False``): they only read and write arrays their callers own,
and with it each call would update the count of every array in the named tuples it is passed
(a hundred atomic updates per call, several times the loop's own work).

Adding a module to the loop: define its functions there (names unique across the loop), add
it to :data:`MODULES`; its file then also keys the "compiled" marker (:data:`SOURCES`).

numba's on-disk cache checks each function against its own file only (a documented limit of
``cache=True``), so a compiled caller would keep stale callees from another file;
:func:`collsynth.jit.compiled_group` caches the group under a folder named by the contents of
all its files, so an edit to any loop module compiles the whole group afresh.
"""

from __future__ import annotations

import builtins
import functools
import types
from collections.abc import Callable
from typing import Any

from ... import jit
from . import bits, commit, decisions, events, loop, search, state, tables
from .loop import run_loop

#: The modules whose functions make up the loop (the compiled group).
MODULES: tuple[types.ModuleType, ...] = (bits, events, state, search, decisions, commit, loop)
#: The files the compiled loop is made from (their content keys the "compiled" marker of
#: :mod:`collsynth.jit`): the modules above and the topology tables they read.
SOURCES: tuple[str, ...] = tuple(str(m.__file__) for m in (*MODULES, tables))
#: The functions that allocate arrays (compiled with reference counting).
ALLOCATING = frozenset(
    ("run_loop", "initial_memory", "initial_state", "_grow", "make_room", "final_ops")
)


@functools.cache
def kernel_names() -> tuple[str, ...]:
    """The names of the loop's functions: every function :data:`MODULES` define."""
    return tuple(
        name
        for module in MODULES
        for name, value in vars(module).items()
        if isinstance(value, types.FunctionType) and value.__module__ == module.__name__
    )


@functools.cache
def namespace() -> dict[str, Any]:
    """The union of :data:`MODULES`' globals, one namespace for the compiled group (built
    once per process: :func:`collsynth.jit.compiled_group` memoizes on its identity)."""
    space: dict[str, Any] = {"__builtins__": builtins.__dict__, "__name__": __name__}
    for module in MODULES:
        for name, value in vars(module).items():
            if name.startswith("__"):
                continue
            if name in space and space[name] is not value:
                raise RuntimeError(
                    f"scale loop: {name!r} means different things in {module.__name__} "
                    "and another loop module"
                )
            space[name] = value
    return space


def compiled_run_loop() -> Callable:
    """:func:`.loop.run_loop` compiled with numba, or :func:`.loop.run_loop` itself where
    numba cannot be imported.

    ``cache=True``: compiled once per machine, then loaded from numba's on-disk cache."""
    if not jit.numba_available():
        return run_loop
    group = jit.compiled_group(
        namespace(), kernel_names(), refcount=lambda name: name in ALLOCATING
    )
    return group["run_loop"]
