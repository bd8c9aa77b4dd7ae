"""The one compile helper (`collsynth.jit.compiled`): compiled results equal plain ones, helpers
are resolved compiled, and each thing is compiled once per process."""

from __future__ import annotations

import os

import numpy as np

from collsynth import jit


def _double(x):
    return 2 * x


def _sum_doubled(a):
    total = 0
    for v in a:
        total += _double(v)
    return total


def test_compiled_with_helpers_equals_plain():
    a = np.arange(10, dtype=np.int64)
    helper = jit.compiled(_double, inline=True)
    fast = jit.compiled(_sum_doubled, helpers={"_double": helper})
    assert fast(a) == _sum_doubled(a) == 90
    if jit.numba_available():
        assert fast is not _sum_doubled and hasattr(fast, "py_func")
    # memoized: the same request gives the same object
    assert jit.compiled(_sum_doubled, helpers={"_double": helper}) is fast
    assert jit.compiled(_double, inline=True) is helper


def test_compiled_group_resolves_each_other():
    space = {"_double": _double, "_sum_doubled": _sum_doubled, "np": np}
    group = jit.compiled_group(space, ["_double", "_sum_doubled"])
    assert group["_sum_doubled"](np.arange(4, dtype=np.int64)) == 12
    assert jit.compiled_group(space, ["_double", "_sum_doubled"]) == group


def test_rebind_changes_only_the_named_globals():
    f = jit.rebind(_sum_doubled, {"_double": lambda x: 3 * x})
    assert f(np.arange(3)) == 9 and _sum_doubled(np.arange(3)) == 6


def test_a_helper_edit_in_another_file_compiles_afresh(tmp_path, monkeypatch):
    """numba checks a cached function against its own file only; a compiled caller is cached
    under a folder named by the contents of every file it was built from, so editing only the
    helper's file cannot leave the caller running the stale helper."""
    import importlib

    if not jit.numba_available():  # pragma: no cover - numba is a dependency
        return
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "cache"))
    helper = tmp_path / "jit_helper_mod.py"
    caller = tmp_path / "jit_caller_mod.py"
    caller.write_text(
        "def twice_sum(a):\n    t = 0\n    for v in a:\n        t += helper(v)\n    return t\n"
    )

    def build():
        h = importlib.import_module("jit_helper_mod")
        c = importlib.import_module("jit_caller_mod")
        h, c = importlib.reload(h), importlib.reload(c)
        fast = jit.compiled(c.twice_sum, helpers={"helper": jit.compiled(h.helper)})
        return fast(np.arange(3, dtype=np.int64)), fast._cache._cache_path

    helper.write_text("def helper(x):\n    return 2 * x\n")
    first, folder1 = build()
    helper.write_text("def helper(x):\n    return 3 * x\n")
    second, folder2 = build()
    assert (first, second) == (6, 9)
    parent1, parent2 = (
        os.path.basename(os.path.dirname(folder1)),
        os.path.basename(os.path.dirname(folder2)),
    )
    assert parent1 != parent2 and parent1.startswith("sources-") and parent2.startswith("sources-")
