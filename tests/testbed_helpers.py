"""Shared by the testbed's tests: whether real namespaces can be made here, and what exists."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest


def root_problem() -> str | None:
    """Why the root-only testbed tests cannot run here (None: they can)."""
    if os.geteuid() != 0:
        return "needs root"
    if shutil.which("ip") is None or shutil.which("tc") is None:
        return "needs iproute2"
    if subprocess.run(["ip", "netns", "list"], capture_output=True).returncode != 0:
        return "network namespaces not permitted"
    return None


root = pytest.mark.skipif(root_problem() is not None, reason=str(root_problem()))


def namespaces(prefix: str = "cs") -> list[str]:
    """The network namespaces whose names start with ``prefix``."""
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [ln.split()[0] for ln in out.splitlines() if ln.startswith(prefix)]
