"""The ``collsynth`` command line: one module per command group, assembled by :mod:`.app`.

Contract: every command has ``--help`` (with every default and an example); ``--json`` prints
exactly one JSON document on stdout; sizes, bandwidths and times accept human units; a bad
input prints one line on stderr naming the problem and exits with status 2; a ``--time-limit``
that ends before any result exits with status 4. Internal failures
print one line and exit with status 1 (``COLLSYNTH_DEBUG=1`` shows the traceback). SIGINT,
SIGTERM and SIGHUP stop any command with one line and status 128 + the signal's number, leaving
nothing half made (:mod:`collsynth.interrupt`).

Modules: :mod:`.app` (the parser's assembly, :func:`main` and its exit statuses),
:mod:`.common` (parser, help layout, typed requests, output), :mod:`.topology`
(``topo``, ``list``), :mod:`.synth`, :mod:`.verify` (``verify``, ``simulate``), :mod:`.bound`,
:mod:`.compare` (``compare``, ``tune``), :mod:`.export` (``export``, ``check-xml``,
``check-mscclpp``), :mod:`.run`, :mod:`.testbed`, :mod:`.wan`, :mod:`.bench`, :mod:`.demo`.
"""

from .app import GROUPS, build_parser, debugging, main

__all__ = ["GROUPS", "build_parser", "debugging", "main"]
