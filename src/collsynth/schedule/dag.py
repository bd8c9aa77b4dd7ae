"""Graph helpers over a schedule's operations (dependencies, link orders).

Operations are nodes ``0..n-1``; edges are given as two arrays ``a -> b``.
"""

from __future__ import annotations

import numpy as np


def is_acyclic(n: int, a: np.ndarray, b: np.ndarray) -> bool:
    """Whether the graph on ``n`` nodes with edges ``a[i] -> b[i]`` has no cycle: no self-loop
    and every strongly connected component a single node (scipy's linear-time components; a
    wave-by-wave Kahn in numpy pays per wave, and link orders make the waves as many as the
    longest chain)."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components

    if n == 0 or not len(a):
        return True
    if bool(np.any(a == b)):
        return False
    graph = csr_matrix((np.ones(len(a), dtype=np.int32), (a, b)), shape=(n, n))
    components, _ = connected_components(graph, directed=True, connection="strong")
    return int(components) == n
