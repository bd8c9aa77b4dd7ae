"""Lower bounds on the completion time of any schedule (optimality certificates).

Every provider returns a time that *no* schedule on the topology can beat, under the simulator's
model (links carry at most their bandwidth, data cannot arrive before the alpha of its path).
``bound(topology, collective, size)`` reports the largest one and which kind binds.

Simple certified bounds (:mod:`.simple`):

* ``ingress`` — rank ``t`` must receive ``B_in(t)`` bytes at no more than its total in-bandwidth,
  and nothing arrives before the alpha-closest source can reach it:
  ``T >= min_s d_alpha(s, t) + B_in(t) / in_bw(t)``.
* ``egress`` — rank ``s`` must send ``B_out(s)`` bytes at no more than its out-bandwidth, and the
  last byte still has to reach the alpha-closest rank that needs it:
  ``T >= B_out(s) / out_bw(s) + min_t d_alpha(s, t)``.
* ``latency`` — for every (source, destination) pair that must exchange ``B(s, t)`` bytes, the
  last of those bytes leaves ``s`` no earlier than ``B(s, t) / min(out_bw(s), in_bw(t))`` and then
  travels at least the alpha-shortest path:
  ``T >= B(s, t) / min(out_bw(s), in_bw(t)) + d_alpha(s, t)``.

* ``transmissions`` (AllReduce, :mod:`.transmissions`) — every byte of the result must be
  transmitted rank to rank at least ``2(N-1)`` times: once the first rank holds the complete
  sum, each of the other ``N-1`` ranks has sent (its contribution had to leave it before) and
  each still has to receive after (nobody held the complete value before), two disjoint sets of
  ``N-1`` transmissions. This is the directed gossip bound (Harary and Schwenk, "The
  communication problem on graphs and digraphs", J. Franklin Inst. 1974), which gives Patarasuk
  and Yuan's bandwidth bound for AllReduce ("Bandwidth optimal all-reduce algorithms for
  clusters of workstations", JPDC 2009) when every rank has the same bandwidth ``b``:
  ``2(N-1) M / (N b)``. In general, all ranks together send (and receive) ``2(N-1) M`` bytes, so
  ``T`` is at least the larger of ``2(N-1) M / Σ_r out_bw(r)`` and ``2(N-1) M / Σ_r in_bw(r)``,
  plus the smallest alpha between two ranks (the last byte still travels). The same holds
  between groups (chassis, servers, datacenters): a group merges its members' partial sums for
  free, so every byte crosses between ``m`` groups ``2(m-1)`` times, over the groups' outside
  links; the groups come from node attributes or from a searched partition
  (:func:`.transmissions.searched_partition`). It holds because switches only forward: a
  switch that reduces or multicasts (SHARP, NVLS) would need its own bound. On symmetric
  fabrics it equals the ReduceScatter bound plus the AllGather bound, so there ReduceScatter
  followed by AllGather is optimal.

``B_in``/``B_out``/``B`` per collective (``M`` = size, ``n`` ranks) are in :func:`demands`.
More providers register with :func:`register` (:mod:`.model`) from modules named by
``collsynth.bounds`` entry points (:mod:`collsynth.plugins`): collsynth's own exact cut bounds
(:mod:`.cut`) and any plugin's. :func:`bound` (:mod:`.combine`) runs them all.

Importing this package registers ``simple`` and then ``transmissions`` (the import order of
:mod:`.simple` and :mod:`.transmissions` below); the providers run in registration order.
"""

from __future__ import annotations

from .combine import MAX_BOUND_RANKS, bound
from .model import PROVIDERS, Bound, BoundResult, Provider, register
from .simple import alpha_distances, demands, simple_bounds
from .transmissions import groupings, transmission_bounds

__all__ = [
    "MAX_BOUND_RANKS",
    "PROVIDERS",
    "Bound",
    "BoundResult",
    "Provider",
    "alpha_distances",
    "bound",
    "demands",
    "groupings",
    "register",
    "simple_bounds",
    "transmission_bounds",
]
