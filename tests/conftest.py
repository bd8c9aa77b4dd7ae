"""Settings for the whole test run."""

import os

# Tests compile numba loops in the process that needs them, as before the first-run policy
# (collsynth.jit): no detached background builds competing with the tests for the cores.
os.environ.setdefault("COLLSYNTH_JIT", "foreground")
