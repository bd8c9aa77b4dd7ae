"""collsynth: design, bound, verify, simulate and export collective-communication schedules."""

import os as _os

__version__ = "0.1.0"


def _cache_dir() -> str:
    """Where compiled code is cached: the user's cache folder, never the installed source
    tree (``$XDG_CACHE_HOME/collsynth``, else ``~/.cache/collsynth``)."""
    base = _os.environ.get("XDG_CACHE_HOME") or _os.path.join(_os.path.expanduser("~"), ".cache")
    return _os.path.join(base, "collsynth")


# numba caches compiled functions beside their source unless told otherwise; set before any
# collsynth module imports numba (a value the user set wins)
_os.environ.setdefault("NUMBA_CACHE_DIR", _os.path.join(_cache_dir(), "numba"))
