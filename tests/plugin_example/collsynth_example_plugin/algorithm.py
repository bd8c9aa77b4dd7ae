"""``relay``: every chunk travels from its owner around the rank-order ring."""

from collsynth.collective import CollKind
from collsynth.schedule.ir import ScheduleBuilder
from collsynth.synth import register
from collsynth.synth.options import Option


@register(
    "relay",
    collectives={CollKind.ALLGATHER},
    summary="example plugin: each chunk relayed around the rank-order ring",
    options=(
        Option(
            "direction",
            "choice",
            "forward",
            choices=("forward", "backward"),
            help="which way round the ring",
        ),
    ),
    reference="an example of a third-party plugin",
)
def relay(topology, collective, direction="forward"):
    n = collective.num_ranks
    step = 1 if direction == "forward" else -1
    b = ScheduleBuilder(topology, collective)
    for chunk in range(collective.num_chunks):
        src = int(collective.chunk_source[chunk])
        prev = None
        for hop in range(n - 1):
            a, c = (src + step * hop) % n, (src + step * (hop + 1)) % n
            prev = b.add(a, c, chunk, deps=() if prev is None else (prev,), step=hop)
    return b.build()
