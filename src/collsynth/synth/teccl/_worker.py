"""HiGHS helper process: reads pickled solve requests on stdin, answers on stdout.

Started by :func:`collsynth.synth.teccl.common.solve` when highspy cannot load next to
OR-Tools' own HiGHS library in the calling process. It imports highspy before anything else.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys


def main() -> int:
    # a Ctrl-C reaches the whole process group: the parent handles it and stops this helper
    # (its stdin closes, or it is killed), so the helper neither prints a traceback nor dies
    # with half an answer written
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    import highspy  # noqa: F401  (first, before any other HiGHS copy)

    from collsynth.errors import CollsynthError
    from collsynth.synth.teccl.common import _solve_local

    proto_out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything printed goes to stderr, not into the protocol
    proto_in = sys.stdin.buffer
    while True:
        try:
            req = pickle.load(proto_in)
        except EOFError:
            return 0
        res: tuple[str, object]
        try:
            res = ("ok", _solve_local(**req))
        except CollsynthError as e:
            res = ("err", str(e))
        except Exception as e:  # report, keep serving
            res = ("err", f"HiGHS helper: {type(e).__name__}: {e}")
        pickle.dump(res, proto_out, protocol=pickle.HIGHEST_PROTOCOL)
        proto_out.flush()


if __name__ == "__main__":
    sys.exit(main())
