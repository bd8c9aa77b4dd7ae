"""``docs/architecture.md`` matches the tree: its module table names every module and package of
``src/collsynth`` and nothing that does not exist.

The table's first column lists paths in backticks: ``errors`` (a top-level module), ``verify/``
(a package, standing for every module in it that is not listed on its own) or
``topology/spec.py``; a bare file name after a path in the same cell (``io.py``) is in the
same folder as that path.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "collsynth"
DOC = ROOT / "docs" / "architecture.md"


def _table_paths() -> list[str]:
    text = DOC.read_text(encoding="utf-8")
    start = text.index("## Modules, one sentence each")
    end = text.index("\n## ", start + 1)
    paths: list[str] = []
    for line in text[start:end].splitlines():
        if not line.startswith("| `"):
            continue
        cell = line.split("|")[1]
        folder = ""
        for name in re.findall(r"`([^`]+)`", cell):
            if "/" in name:
                folder = name.rsplit("/", 1)[0] if not name.endswith("/") else name.rstrip("/")
                paths.append(name)
            elif name.endswith(".py") and folder:
                paths.append(f"{folder}/{name}")
            else:
                paths.append(name.removesuffix(".py"))  # a top-level module
    return paths


def _tree() -> tuple[set[str], set[str]]:
    """(module files as ``pkg/mod.py`` or top-level names, package folders as ``pkg/``)."""
    files: set[str] = set()
    packages: set[str] = set()
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC)
        if rel.name in ("__init__.py", "__main__.py") or rel.name.startswith("_worker"):
            if rel.name == "__init__.py" and len(rel.parts) > 1:
                packages.add(rel.parent.as_posix() + "/")
            continue
        if len(rel.parts) == 1:
            files.add(rel.stem)
        else:
            files.add(rel.as_posix())
    return files, packages


def test_every_named_path_exists():
    files, packages = _tree()
    inits = {p + "__init__.py" for p in packages}
    missing = [p for p in _table_paths() if p not in files | packages | inits]
    assert not missing, f"docs/architecture.md names paths that do not exist: {missing}"


def test_every_module_and_package_is_named():
    files, packages = _tree()
    named = set(_table_paths())
    unnamed = []
    for f in sorted(files):
        if f in named:
            continue
        # a module is covered by its package's entry (``verify/``) or any enclosing one
        parts = f.split("/")[:-1]
        if any("/".join(parts[:i]) + "/" in named for i in range(1, len(parts) + 1)):
            continue
        unnamed.append(f)
    assert not unnamed, f"docs/architecture.md does not name: {unnamed}"
    top_packages = {p for p in packages if p.count("/") == 1}
    unlisted = sorted(
        p for p in top_packages if p not in named and not any(n.startswith(p) for n in named)
    )
    assert not unlisted, f"docs/architecture.md does not name the packages: {unlisted}"
