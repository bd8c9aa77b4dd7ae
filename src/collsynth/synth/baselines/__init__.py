"""Classic baselines: ring, double binary tree, hierarchical ring, recursive doubling/halving,
Bruck and direct AllToAll, and the shortest-path heuristic of SCALE-CCL §5 (Xiong, Zhang,
Medagliani, Ferrero, Liu and Lian, "SCALE-CCL: A Scalable Collective Communication Library for
Wide-Area Distributed Training", ACM 2025, doi:10.1145/3769695.3771677).

Importing this package registers every algorithm (see each module's docstring):

=============  ==================================================  =============================
algorithm      what                                                 module
=============  ==================================================  =============================
``ring``       NCCL rings (channels); AG, RS, AR, Broadcast, Reduce  :mod:`.ring`
``tree``       NCCL double binary tree; AR, Broadcast, Reduce       :mod:`.tree`
``hier_ring``  intra-node rings + inter-node rings; AR, AG          :mod:`.hier_ring`
``rd``         recursive doubling / halving (Rabenseifner); AG, RS, AR  :mod:`.rd`
``direct``     direct sends; AllToAll, AllGather, Gather, Scatter   :mod:`.alltoall`
``bruck``      Bruck's log n AllToAll                               :mod:`.alltoall`
``sph``        SCALE-CCL's shortest-path heuristic                  :mod:`.sph`
``nvls``       in-switch reduction + multicast (NVLink SHARP); AR, RS, AG  :mod:`.nvls`
=============  ==================================================  =============================
"""

from . import (
    alltoall,  # noqa: F401
    hier_ring,  # noqa: F401
    nvls,  # noqa: F401
    rd,  # noqa: F401
    ring,  # noqa: F401
    sph,  # noqa: F401
    tree,  # noqa: F401
)
