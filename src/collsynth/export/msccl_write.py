"""MSCCL XML text of a lowered program: the ``<algo>`` line, then every GPU's thread blocks
and steps, each program instance after the other (chunk ``x`` of instance ``t`` is
``x*N + t``, channel ``ch`` is ``ch + t*K``)."""

from __future__ import annotations

from ..collective import CollKind
from ..errors import CollsynthError
from ..schedule.ir import Schedule
from .lowering import BufferLayout, Slot
from .msccl_options import MAX_CHANNELS, MscclOptions
from .msccl_passes import LoweredProgram

#: the collective's name in the old fork's and in the executor's dialect
COLLECTIVE_NAMES = {
    CollKind.ALLGATHER: ("allgather", "allgather"),
    CollKind.REDUCESCATTER: ("reduce_scatter", "reducescatter"),
    CollKind.ALLREDUCE: ("allreduce", "allreduce"),
    CollKind.ALLTOALL: ("alltoall", "alltoall"),
    CollKind.BROADCAST: ("broadcast", "broadcast"),
    CollKind.REDUCE: ("reduce", "reduce"),
}


def write_xml(
    schedule: Schedule, layout: BufferLayout, program: LoweredProgram, options: MscclOptions
) -> str:
    """The XML document of ``program``."""
    coll = schedule.collective
    channels, instances = program.num_channels, options.instances
    if channels * instances > MAX_CHANNELS:
        raise CollsynthError(
            f"cannot export: {channels} channel(s) x {instances} instance(s) exceed "
            f"the {MAX_CHANNELS}-channel limit of MSCCL"
        )
    lines = ["<algo " + _attrs(algo_attributes(schedule, layout, channels, options)) + ">"]
    for g in range(coll.num_ranks):
        gpu = [
            ("id", g),
            ("i_chunks", layout.input_chunks * instances),
            ("o_chunks", layout.output_chunks * instances),
            ("s_chunks", program.scratch[g] * instances),
        ]
        lines.append("  <gpu " + _attrs(gpu) + ">")
        ordered = program.numbering.gpu_order[g]
        for t in range(instances):
            for b in ordered:
                lines.extend(_block_lines(program, b, t, len(ordered), channels, instances))
        lines.append("  </gpu>")
    lines.append("</algo>")
    return "\n".join(lines) + "\n"


def algo_attributes(
    schedule: Schedule, layout: BufferLayout, channels: int, options: MscclOptions
) -> list:
    """The ``<algo>`` attributes: name, protocol, sizes, collective and dialect extras."""
    coll = schedule.collective
    instances = options.instances
    cname = COLLECTIVE_NAMES[coll.kind][0 if options.dialect == "msccl" else 1]
    name = options.name
    if name is None:
        algo = schedule.meta.get("algorithm")
        name = "-".join(
            ["collsynth"] + ([str(algo)] if algo else []) + [coll.kind.value, f"n{coll.num_ranks}"]
        )
    name = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in str(name))[:63]
    attrs = [
        ("name", name),
        ("proto", options.proto),
        ("nchannels", channels * instances),
        ("nchunksperloop", layout.chunks_per_loop * instances),
        ("ngpus", coll.num_ranks),
        ("coll", cname),
        ("inplace", int(options.inplace)),
    ]
    min_bytes, max_bytes = options.min_bytes, options.max_bytes
    if options.dialect == "executor":
        attrs += [
            ("outofplace", int(not options.inplace)),
            ("minBytes", 0 if min_bytes is None else int(min_bytes)),
            ("maxBytes", 0 if max_bytes is None else int(max_bytes)),
        ]
    else:
        if min_bytes is not None:
            attrs.append(("minBytes", int(min_bytes)))
        if max_bytes is not None:
            attrs.append(("maxBytes", int(max_bytes)))
    return attrs


def _attrs(pairs) -> str:
    """``key="value"`` pairs, space-separated."""
    return " ".join(f'{k}="{v}"' for k, v in pairs)


def _block_lines(
    program: LoweredProgram, block: int, t: int, num_blocks: int, channels: int, instances: int
) -> list[str]:
    """The lines of thread block ``block`` in instance ``t``: its steps, each after its nops."""

    def offset(slot: Slot) -> int:
        return slot[1] * instances + t

    tb = program.blocks[block]
    block_id = program.numbering.block_id
    positions = program.positions
    header = [
        ("id", block_id[block] + t * num_blocks),
        ("send", tb.send),
        ("recv", tb.recv),
        ("chan", tb.chan + t * channels),
    ]
    lines = ["    <tb " + _attrs(header) + ">"]
    for i in program.block_steps[block]:
        st = program.steps[i]
        deps = [
            (block_id[program.block_of[w]] + t * num_blocks, positions.position[w])
            for w in positions.waits[i]
        ]
        first = positions.position[i] - max(0, len(deps) - 1)
        for k, (dep_block, dep_step) in enumerate(deps[1:]):
            nop = [
                ("s", first + k),
                ("type", "nop"),
                ("srcbuf", "i"),
                ("srcoff", -1),
                ("dstbuf", "o"),
                ("dstoff", -1),
                ("cnt", 0),
                ("depid", dep_block),
                ("deps", dep_step),
                ("hasdep", 0),
            ]
            lines.append("      <step " + _attrs(nop) + "/>")
        dep_block, dep_step = deps[0] if deps else (-1, -1)
        step = [
            ("s", positions.position[i]),
            ("type", st.type),
            ("srcbuf", st.src[0]),
            ("srcoff", offset(st.src)),
            ("dstbuf", st.dst[0]),
            ("dstoff", offset(st.dst)),
            ("cnt", 1),
            ("depid", dep_block),
            ("deps", dep_step),
            ("hasdep", int(i in positions.waited_on)),
        ]
        lines.append("      <step " + _attrs(step) + "/>")
    lines.append("    </tb>")
    return lines
