"""``mteg`` — the registered MTEGCCA synthesizer: its declared options and
:func:`synthesize` (the best plan of :func:`~.search.best_plan`, lowered by
:func:`~.lowering.lower`). The method and its departures from the paper are described in
:mod:`collsynth.synth.mteg`."""

from __future__ import annotations

from typing import Any

from ...collective import Collective
from ...schedule.ir import Schedule
from ...topology.model import Topology
from .. import register
from ..options import Option
from .lowering import lower
from .search import best_plan
from .tasks import SUPPORTED


@register(
    "mteg",
    collectives=SUPPORTED,
    summary="MTEGCCA: Takahashi–Matsuyama Steiner trees per broadcast on an implicit "
    "multicast time-expanded graph; timed, conflict-free slots",
    options=(
        Option(
            "slot",
            "time",
            "auto",
            words=("auto",),
            minimum=0.0,
            exclusive_minimum=True,
            shorthand=True,
            help="slot length tau (e.g. 0.5us); auto: one chunk on the fastest link "
            "(the paper's), and on small problems where whole slots round "
            "transfers up a lot also a 4x finer slot; the plan that finishes "
            "first",
        ),
        Option(
            "horizon",
            "int",
            "auto",
            words=("auto",),
            minimum=1,
            unit="slots",
            help="initial horizon H; doubled automatically while a broadcast cannot be routed",
        ),
        Option(
            "occupancy",
            "choice",
            "exact",
            choices=("exact", "slot"),
            help="exact (a link is busy exactly while it transmits) or slot (whole "
            "slots: the paper's one transfer per (link, slot))",
        ),
        Option(
            "trees",
            "choice",
            "auto",
            choices=("sequential", "concurrent", "auto"),
            help="sequential (the paper: one broadcast tree after another), "
            "concurrent (all grown together, nearest first) or auto (both, the "
            "plan that finishes first)",
        ),
        Option(
            "nearest",
            "choice",
            "auto",
            choices=("arrival", "cost", "auto"),
            help="arrival (TM attaches the earliest-arriving terminal), cost (the "
            "paper's edge cost: transmission plus storage slots added to the "
            "tree) or auto (both, the plan that finishes first)",
        ),
        Option(
            "negotiate",
            "int",
            "auto",
            words=("off", "auto"),
            minimum=0,
            unit="rounds",
            help="re-planning rounds with penalties on contended edges (not in the "
            "paper): an integer, 0/off, or auto (up to 16, fewer on large "
            "problems); the earliest plan is kept",
        ),
        Option(
            "price",
            "float",
            "auto",
            words=("off", "auto"),
            minimum=0.0,
            help="link-time price of broadcast tree edges (not in the paper): slots "
            "of key per slot of link time a transfer holds, off, or auto (0, and "
            "on small problems also 1, 2 and 4 with nearest=arrival; the plan "
            "that finishes first)",
        ),
        Option(
            "switch_copy",
            "bool",
            False,
            help="switches with the multicast capability copy a stream to several "
            "out-links (a multicast group in the IR: one stream up to where the routes part); "
            "full broadcasts only",
        ),
    ),
    size_aware=True,
    reference="Liu Fei, Wang Peng, Ma Han, Li Ye, Li Hongyan, 'Collective communication "
    "scheduling algorithm based on multicast time-expanded graph' (MTEGCCA), "
    "Journal on Communications, 2026, doi:10.11959/j.issn.1000-436x.2026062",
)
def synthesize(
    topology: Topology,
    collective: Collective,
    *,
    size: float | None = None,
    slot: Any = None,
    horizon: Any = None,
    occupancy: Any = None,
    trees: Any = None,
    nearest: Any = None,
    negotiate: Any = None,
    price: Any = None,
    switch_copy: bool = False,
) -> Schedule:
    """MTEGCCA: Steiner trees on a multicast time-expanded graph (Liu Fei et al., Journal on
    Communications 2026).

    With ``trees``/``nearest`` left to ``auto`` every combination is planned and the plan with
    the earliest completion (in slots; ties keep the paper's own variant, sequential + arrival)
    is lowered: a departure from the paper, which has one variant; planning is cheap next to
    lowering and verification, and no variant wins everywhere (concurrent trees on NDv2,
    cost-based attachment on DGX-2 and MI250 at large sizes, the paper's elsewhere).
    Each variant is improved by negotiated re-planning (``negotiate``, default ``auto``);
    on small problems link-time priced variants join (``price``, default ``auto``).
    """
    return lower(
        best_plan(
            topology,
            collective,
            size,
            slot,
            horizon,
            occupancy,
            trees,
            nearest,
            negotiate,
            price,
            bool(switch_copy),
        )
    )
