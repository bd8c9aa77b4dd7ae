"""Run a benchmark suite: ``python -m bench SUITE [--repeat N] [--out DIR]``."""

import sys

from collsynth.cli import main

sys.exit(main(["bench", *sys.argv[1:]]))
