"""``mteg`` — MTEGCCA: multicast time-expanded graph + Takahashi–Matsuyama Steiner trees.

Implements MTEGCCA (Liu Fei, Wang Peng, Ma Han, Li Ye and Li Hongyan, "Collective communication
scheduling algorithm based on multicast time-expanded graph", Journal on Communications 2026,
doi:10.11959/j.issn.1000-436x.2026062):

* §1.2 notions: slot length ``tau`` = one chunk on the fastest link (option ``slot``), link
  length ``L(u,v) = ceil(alpha/tau) + ceil(chunk/(bw tau))`` slots, one chunk per link per slot;
* §2.1 Algorithm 1, the MTEG (node-slot vertices, storage edges, transmission edges, virtual
  terminals per (destination, source, chunk)) — built *implicitly* (:mod:`.model`);
* §2.2 steps 1–5: decomposition (Broadcast / Multicast = one task; AllGather = one broadcast per
  (source, chunk)), largest data first, a Takahashi–Matsuyama tree per task from the root's
  slot-0 vertex on the residual graph, then the used (link, slot) resources are taken
  (:mod:`.tasks`, :mod:`.steiner`);
* §3.2's observation that the plan bounds TE-CCL's epoch count: :func:`mteg_horizon`.

Where it departs from the paper (see ``docs/mteg.md``):

1. The graph is never materialised: vertices are search states, storage edges are "a GPU that
   holds a chunk from slot h may send it at any t >= h", virtual terminals are the set of ranks
   still missing the chunk, and the residual graph is a per-link list of busy slot intervals.
   The horizon ``H`` is a search cut-off, doubled when a task cannot finish inside it; because
   the search is exact earliest-arrival, growing and continuing equals rebuilding and re-routing.
2. Transmission edges are per direct GPU-to-GPU *route*: every physical link between two GPUs,
   and the collsynth routing rule's route through switches/routers (which are cut-through and
   store nothing, so they are not vertices of the time-expanded graph). ``L`` of a route uses its
   total alpha and bottleneck bandwidth. A transfer occupies, on each link of its route, only the
   slots in which it transmits there (propagation occupies no link), offset by the alpha before
   that hop; the paper removes the single edge ``(u_t, v_{t+L})``, which does not stop a slow link
   (L > 1) from starting a second transfer while the first still transmits.
3. Resources are taken as soon as a path joins its tree, not after the whole tree.
4. TM's distance is the earliest arrival by default (a rank holding the chunk may wait for free);
   ``nearest=cost`` uses the paper's own edge costs (storage edges 1 per slot, transmission ``L``)
   of the edges a path adds to the tree. ``trees=concurrent`` grows all broadcast trees in one
   heap instead of one after another.
5. Besides Broadcast, AllGather and multicast (custom collectives), it plans the other copy-only
   collectives (Gather, Scatter, AllToAll) as one task per chunk; it plans no reductions.
6. ``negotiate`` (default ``auto``): negotiated re-planning. The paper plans each tree once,
   greedily; here, after a plan, the transfers of other trees that stood in the way of the
   last arrivals -- anywhere on their chunk's path from its source, not only at the last
   hop -- get a penalty (one chunk time) on their edge in their own tree, and every tree is
   planned again; penalties accumulate, the earliest plan is kept (ties: the paper's plan).
   ``auto`` runs up to 32 rounds within a work budget shared by all candidate plans (none on
   10-chassis NDv2 or 2-chassis DGX-2). On DGX-1 at 1 GB it turns the greedy's 4 chunk times
   into the TE-CCL MILP's optimal 3; on MI250 at 1 MB 8.9 us into 7.875 us (MILP 7.725 us).
   Two penalty rules run one after the other, each from the first plan: the last hop of the
   last arrivals (the first version), then their whole path.
7. ``slot=auto`` also tries a 4x finer slot when the paper's slot rounds the transfers up by
   more than 10 % (a 0.7 us alpha costs a whole 2.5 ms slot at 1 GB) and the problem is small.
   With ``trees``/``nearest`` also ``auto`` (the default), ``synthesize`` keeps the earliest of
   all these plans.
8. Candidate plans (variants, slots, negotiation rounds) are compared by their
   as-soon-as-possible completion (:func:`asap_seconds`: the plan executed at exact durations,
   each hop as soon as its chunk and link allow, the simulator's model), not by their slots,
   which round every transfer up; the paper's own plan of every variant is a candidate, so the
   default is never later than any of them.
9. ``price`` (default ``auto``): a link-time price. TM by earliest arrival is blind to what a
   path costs the trees planned after it: on 2-chassis DGX-2 a chunk reaches the other
   chassis a little earlier over all eight IB links than over one, so the first trees take
   every IB link (8x slower than a switch port) and the rest queue behind them (22.8 ms at
   1 GB; the paper's cost metric avoids that but relays chunks in 16-hop chains, 11.8 ms;
   TE-CCL 10 ms). With a price ``p`` a full broadcast's edge is keyed ``arrival + p x`` the
   link time (slots) it holds, a Lagrangian trade of arrival against the shared resource:
   9.5 ms at 1 GB and 12.3 us at 1 MB (TE-CCL 18.55 us). ``auto`` adds the arrival +
   concurrent variants at prices 1, 2 and 4 to the candidates on small problems.

Modules: :mod:`.model` (the implicit graph and the residual occupancy), :mod:`.tasks`
(decomposition and order), :mod:`.steiner` (the trees), :mod:`.plans` (a plan, one planning
pass, the as-soon-as-possible estimate), :mod:`.negotiation`, :mod:`.search` (variants, slots,
prices: the best plan), :mod:`.lowering` (plan to IR) and :mod:`.algo` (registration).

Output: a timed IR (``start = slot * tau``, ``step = slot``, dependency on the op that delivered
the chunk to the sender, a planned order on every used link), verified by the independent
verifier. The simulator with ``release=True`` replays the plan exactly at unrounded durations;
the slot plan exceeds it by at most the last transfer's rounding (< one slot for ``chunk/bw``
plus one for ``alpha``).
"""

from __future__ import annotations

from .algo import synthesize
from .lowering import lower
from .model import Occupancy, SlotGraph
from .plans import Plan, asap_seconds
from .search import DEFAULT_SIZE, best_plan, mteg_horizon, plan
from .steiner import Planner
from .tasks import Task, decompose

__all__ = [
    "DEFAULT_SIZE",
    "Occupancy",
    "Plan",
    "Planner",
    "SlotGraph",
    "Task",
    "asap_seconds",
    "best_plan",
    "decompose",
    "lower",
    "mteg_horizon",
    "plan",
    "synthesize",
]
