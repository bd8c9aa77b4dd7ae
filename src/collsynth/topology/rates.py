"""Link figures the topology importers use: NVLink per generation, PCIe per lane, xGMI, alphas.

Every figure is nominal, bytes/s per direction, and documented with its source in
``docs/formats.md`` (section "Importing topology files"):

* NVLink, per link and direction: NVIDIA's published per-GPU NVLink totals (both directions
  added) divided by the GPU's link count and by 2. P100 (NVLink 1, sm 60): 160 GB/s over 4
  links = 20 GB/s; V100 (NVLink 2, sm 70): 300 GB/s over 6 = 25 GB/s; A100 (NVLink 3, sm 80):
  600 GB/s over 12 = 25 GB/s; H100 (NVLink 4, sm 90): 900 GB/s over 18 = 25 GB/s; B200
  (NVLink 5, sm 100): 1.8 TB/s over 18 = 50 GB/s. NCCL plans with lower, measured figures
  (``src/graph/topo.h``); give ``nvlink=`` to use those or any other.
* PCIe, per lane and direction: the transfer rate times the line-code efficiency over 8 bits:
  8b/10b for 2.5 and 5 GT/s (Gen1/2), 128b/130b for 8, 16 and 32 GT/s (Gen3/4/5), and the
  236/256 TLP bytes of a 256-byte FLIT for 64 GT/s (Gen6), times the width, rounded to
  0.25 GB/s. Gen3 x16 is 15.75 GB/s, Gen4 x16 31.5 GB/s, Gen5 x16 63 GB/s.
* xGMI (AMD Infinity Fabric, MI250): 50 GB/s per link and direction (ROCm's MI250
  microarchitecture guide: 25 GT/s, 16 lanes; the same figure as the ``mi250`` zoo entry).
* Latencies (assumptions, as in the zoo): 0.7 us per GPU-GPU NVLink or xGMI hop, 0.35 us per
  GPU-NVSwitch, PCIe or inter-socket hop, 0.65 us per network hop.
"""

from __future__ import annotations

import re

from ..errors import CollsynthError

GB = 1e9
US = 1e-6

#: NVLink generations: (name, smallest sm, bytes/s per link and direction, most links per GPU).
NVLINK_GENS: tuple[tuple[str, int, float, int], ...] = (
    ("nvlink1", 60, 20 * GB, 4),
    ("nvlink2", 70, 25 * GB, 6),
    ("nvlink3", 80, 25 * GB, 12),
    ("nvlink4", 90, 25 * GB, 18),
    ("nvlink5", 100, 50 * GB, 18),
)
#: PCIe x16 of the GPU generation a ``gen=`` names (nvidia-smi importer's default ``pcie``).
PCIE_GT_OF_GEN = {"nvlink1": 8.0, "nvlink2": 8.0, "nvlink3": 16.0, "nvlink4": 32.0, "nvlink5": 32.0}

XGMI_BW = 50 * GB
NVLINK_ALPHA = 0.7 * US
XGMI_ALPHA = 0.7 * US
NVSWITCH_ALPHA = 0.35 * US
PCIE_ALPHA = 0.35 * US
SYS_ALPHA = 0.35 * US
NET_ALPHA = 0.65 * US
#: PCIe link bandwidths are rounded to multiples of this (bytes/s).
PCIE_STEP = 0.25 * GB
#: Fallback when a file gives no PCIe speed (NCCL falls back to Gen3 too).
DEFAULT_PCIE_GT = 8.0

_GT_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*GT/s", re.IGNORECASE)


def nvlink_gen_of_sm(sm: int, what: str) -> tuple[str, float]:
    """(generation name, bytes/s per link and direction) of a GPU of compute capability ``sm``."""
    best: tuple[str, float] | None = None
    for name, smallest, bw, _ in NVLINK_GENS:
        if sm >= smallest:
            best = (name, bw)
    if best is None:
        raise CollsynthError(f"{what}: sm {sm} predates NVLink (sm 60); give nvlink=BW")
    return best


def nvlink_gen(name: str) -> tuple[float, int]:
    """(bytes/s per link and direction, most links per GPU) of generation ``name``."""
    for gen, _, bw, links in NVLINK_GENS:
        if gen == name:
            return bw, links
    raise CollsynthError(f"unknown NVLink generation {name!r}")


def pcie_lane_bw(gt_per_s: float) -> float:
    """Bytes/s per lane and direction at ``gt_per_s`` GT/s, line code included."""
    if gt_per_s <= 5.0:
        efficiency = 8 / 10
    elif gt_per_s <= 32.0:
        efficiency = 128 / 130
    else:
        efficiency = 236 / 256
    return gt_per_s * 1e9 * efficiency / 8


def pcie_bw(gt_per_s: float, width: int) -> float:
    """Bytes/s per direction of a ``width``-lane link at ``gt_per_s`` GT/s, rounded to 0.25 GB/s.

    The rounding (Gen3 x16 15.75 GB/s, Gen4 x16 31.5, Gen5 x16 63) keeps the bandwidth ratios
    simple: ForestColl works in exact rationals, and 128/130 in every PCIe figure makes its
    numbers (and its memory) grow.
    """
    step = PCIE_STEP
    return max(step, round(pcie_lane_bw(gt_per_s) * width / step) * step)


def parse_gt(text: str) -> float | None:
    """The GT/s of a sysfs/NCCL link speed such as ``16.0 GT/s PCIe``; None when not given."""
    m = _GT_RE.match(text or "")
    if not m:
        return None
    value = float(m.group(1))
    return value if value > 0 else None
