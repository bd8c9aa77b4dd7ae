"""``lines`` exporter: one text line per operation."""

from collsynth.export import register
from collsynth.synth.options import Option


@register(
    "lines",
    summary="example plugin: one line per operation",
    suffix=".txt",
    options=(Option("header", "bool", True, help="write a header line"),),
)
def lines(schedule, header=True):
    out = [f"# {schedule.collective.describe()} on {schedule.topology.name}"] if header else []
    for op in range(schedule.num_ops):
        out.append(
            f"chunk {int(schedule.chunk[op])} {int(schedule.src[op])}->{int(schedule.dst[op])}"
        )
    return "\n".join(out) + "\n"
