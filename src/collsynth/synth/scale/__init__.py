"""``scale`` — SCALE-CCL: event-driven, WAN-aware collective synthesis.

Implements the planner of Xiong, Zhang, Medagliani, Ferrero, Liu and Lian, "SCALE-CCL: A
Scalable Collective Communication Library for Wide-Area Distributed Training" (ACM, 2025),
§3–§4 and its Algorithm 1:

* §3 model: GPUs store-and-forward, switches/routers cut-through with no buffer, each chunk in
  ``c`` subchunks (option ``subchunks``; IR byte ranges ``part k/c..k+1/c``);
* §4.1 the time- and event-driven loop with the four event types (transmission start and
  completion, reception start and completion); co-timed events are processed together, then
  the GPU links they touched take their decisions (:func:`.loop.run_loop`);
* §4.2 Load-Aware Neighbor Forwarding: a neighbour memory table (what every GPU holds or is
  already receiving; per datacenter, what it holds) so nobody is sent what it has; at routers
  the next hop minimises ``f = transmission + propagation + remaining delay + buffer
  occupancy + delivery progress`` (a Dijkstra over router/switch nodes on that cost); relaxed
  to broadcast for intra-DC GPU->GPU (every idle link to a neighbour lacking a subchunk may
  carry it);
* §4.3 Subchunk Scheduling, Algorithm 1: per destination the predecessor set P (GPUs with a
  queue towards it) and destination set D, the queues J over PxD, duplicates across queues
  resolved to the lowest ``T + delta`` queue, the first of the resulting queue sent, uniquely;
* link statistics input and re-planning (:mod:`.stats`, :func:`replan`,
  ``collsynth wan replan``).

The loop is written once, as plain Python over numpy arrays (:mod:`.loop` and the modules
it lists: state, bit sets, event heaps, router search, decisions, commit; reading the
topology tables of :mod:`.tables`), and runs compiled with numba when numba is importable
(:mod:`.kernel` compiles its functions as one group; :func:`load_kernel` loads it once per
process; re-plans of a 3-DC x 8-GPU instance with 8 subchunks then take about 15 ms of CPU)
or uncompiled (``engine="python"``), with the same plan bit for bit.

Where it departs from the paper (see ``docs/scale.md``):

1. Routers hold no data and the IR has no in-network replication, so a router-level decision
   maps to IR as follows: an IR operation is one stream from a GPU through routers/switches to
   a GPU. The router's LWNF choice, nominally taken at the reception-start event, is taken when
   the upstream transmission starts, for the (known) instant the head will arrive, and reserves
   the chosen out-link from then on: a bufferless router must have a free output when the
   stream arrives, else it refuses (the GPU then sends something else or waits). The router->GPU
   "broadcast" relaxation becomes: the router delivers to one GPU of the datacenter (the best by
   f), and the intra-DC GPU broadcast spreads it — each WAN link carries a subchunk into a
   datacenter once.
2. Algorithm 1's queues live at GPUs only (routers have none); for a router destination, D (the
   concurrent receivers) is represented by the datacenters the router reaches that still lack
   the subchunk.
3. Queue order is pipeline order (subchunk index, then chunk id); the lowest-delay choice is
   made across queues (Algorithm 1's duplicates) and across next hops (LWNF).
4. Collectives: AllGather, Broadcast and multicast (custom collectives; relays inside a
   datacenter only while some rank there still needs the subchunk). No reductions.
"""

from __future__ import annotations

from .algo import (
    DEFAULT_SIZE,
    DEFAULT_SUBCHUNKS,
    EVENT_NAMES,
    Plan,
    load_kernel,
    lower,
    plan,
    replan,
    synthesize,
)
from .stats import LinkStats

__all__ = [
    "DEFAULT_SIZE",
    "DEFAULT_SUBCHUNKS",
    "EVENT_NAMES",
    "LinkStats",
    "Plan",
    "load_kernel",
    "lower",
    "plan",
    "replan",
    "synthesize",
]
