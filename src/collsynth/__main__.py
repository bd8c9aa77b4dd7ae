"""``python -m collsynth`` and the installed ``collsynth`` command (:func:`entry`) run the
command line.

The interrupt handler (:mod:`collsynth.interrupt`) is installed before the command line is
imported, so a signal that comes while it loads also ends with one line and ``128 + signal``;
once the command is over (its result written, or its one line printed), a signal that comes
while the interpreter shuts down changes nothing.
"""

import sys

from . import interrupt


def entry() -> int:
    try:
        with interrupt.handled(final=True):
            from .cli import main

            return main()
    except KeyboardInterrupt as e:  # arrived before main took over
        name = interrupt.signal_name(getattr(e, "signum", 2))
        sys.stderr.write(f"collsynth: interrupted ({name})\n")
        return interrupt.status_of(e)


if __name__ == "__main__":
    sys.exit(entry())
