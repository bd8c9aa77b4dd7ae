"""SyCCL (seed 001): symmetry-based decomposition. See ``docs/syccl.md``."""

from . import algo
from .symmetry import Fabric, detect

__all__ = ["algo", "Fabric", "detect"]
