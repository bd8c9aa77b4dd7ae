"""The topology zoo: named, parameterised constructors for real and generic fabrics.

Importing this package registers every constructor with :func:`collsynth.topology.registry.zoo`.
One module per family:

* :mod:`.nvidia` — ``dgx1``, ``ndv2``, ``dgx2``, ``dgx_a100``, ``dgx_h100``
* :mod:`.amd` — ``mi250``
* :mod:`.syccl_fabrics` — ``a800_clos``, ``h800_rails`` (SyCCL's evaluation fabrics)
* :mod:`.wide_area` — ``wan`` (SCALE-CCL's multi-datacenter model)
* :mod:`.generic` — ``ring``, ``line``, ``full``, ``star``, ``mesh2d``, ``torus2d``,
  ``torus3d``, ``hypercube``, ``fat_tree``, ``dragonfly``, ``random_regular``
* :mod:`.common` — what they share (``GB``, ``US``, the ``lanes`` parameter, wiring helpers)

Each constructor documents its source (the paper or public tool whose wiring it follows; see
``docs/references.md``) and every default. Bandwidths are bytes/s per direction, alphas seconds.
Spec strings on the command line look like ``mi250:chassis=2,inter=forestcoll``.
"""

from __future__ import annotations

from .amd import MI250_XGMI, mi250
from .common import GB, US
from .generic import (
    dragonfly,
    dragonfly_global_pairs,
    fat_tree,
    full,
    hypercube,
    line,
    mesh2d,
    random_regular,
    ring,
    star,
    torus2d,
    torus3d,
)
from .nvidia import DGX1_NVLINKS, dgx1, dgx2, dgx2_ib_target, dgx_a100, dgx_h100, ndv2
from .syccl_fabrics import a800_clos, h800_rails
from .wide_area import wan, wan_intra_links

__all__ = [
    "DGX1_NVLINKS",
    "GB",
    "MI250_XGMI",
    "US",
    "a800_clos",
    "dgx1",
    "dgx2",
    "dgx2_ib_target",
    "dgx_a100",
    "dgx_h100",
    "dragonfly",
    "dragonfly_global_pairs",
    "fat_tree",
    "full",
    "h800_rails",
    "hypercube",
    "line",
    "mesh2d",
    "mi250",
    "ndv2",
    "random_regular",
    "ring",
    "star",
    "torus2d",
    "torus3d",
    "wan",
    "wan_intra_links",
]
