"""``example`` bound: a rank must receive its bytes over all its in-links together."""

from collsynth.bound import Bound, demands, register


@register("example")
def example_bound(topology, collective, size):
    b_in, _, _ = demands(collective, size)
    times = [
        (b_in[r] / topology.in_bw(topology.node_of_rank(r)), r)
        for r in range(topology.num_ranks)
        if topology.in_bw(topology.node_of_rank(r)) > 0
    ]
    if not times:
        return []
    t, rank = max(times)
    return [Bound("example", float(t), f"rank {rank}")]
