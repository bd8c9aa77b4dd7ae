"""SyCCL: symmetry-based decomposition (Cao et al., "SyCCL: Exploiting Symmetry for Efficient
Collective Communication Scheduling", ACM SIGCOMM 2025). See ``docs/syccl.md``."""

from . import algo
from .symmetry import Fabric, detect

__all__ = ["algo", "Fabric", "detect"]
