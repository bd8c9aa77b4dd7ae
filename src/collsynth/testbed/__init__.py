"""The emulated network testbed: one network namespace per rank, one shaped veth link per
topology link, so that schedules run over real (scaled) links.

:mod:`.wiring` plans the namespaces, links, addresses and rates from a topology (pure);
:mod:`.netns` makes and removes them with ``ip`` and ``tc``. Running schedules on it and the
simulator-versus-measurement study are still to come (see ``docs/testbed.md``).
"""

from __future__ import annotations

from .wiring import Veth, Wiring, plan_wiring

__all__ = ["Veth", "Wiring", "plan_wiring"]
