"""The one compile helper (`collsynth.jit.compiled`): compiled results equal plain ones, helpers
are resolved compiled, and each thing is compiled once per process."""

from __future__ import annotations

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
