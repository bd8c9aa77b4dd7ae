"""HiGHS helper process: reads pickled solve requests on stdin, answers on stdout.

Started once, and reused, by :func:`collsynth.synth.teccl.highs.solve` (which says why every
solve runs here: highspy cannot load next to OR-Tools' own HiGHS library in the calling
process, and a solve that overruns its limit can be killed). It imports highspy before
anything else.
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
    from collsynth.synth.teccl.highs import solve_locally

    proto_out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything printed goes to stderr, not into the protocol
    proto_in = sys.stdin.buffer
    while True:
        try:
            request = pickle.load(proto_in)
        except EOFError:
            return 0
        reply: tuple[str, object]
        try:
            reply = ("ok", solve_locally(**request))
        except CollsynthError as e:
            reply = ("err", str(e))
        except Exception as e:  # report, keep serving
            reply = ("err", f"HiGHS helper: {type(e).__name__}: {e}")
        pickle.dump(reply, proto_out, protocol=pickle.HIGHEST_PROTOCOL)
        proto_out.flush()


if __name__ == "__main__":
    sys.exit(main())
