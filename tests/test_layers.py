"""Imports run downward only: a collsynth module imports its own package or lower layers.

Every module under ``src/collsynth`` is parsed with :mod:`ast`; every import counts, at any depth
(module level, inside functions, under ``if TYPE_CHECKING``), relative imports resolved to
absolute names, plus ``importlib.import_module`` calls with a literal name.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "collsynth"

# THE layer map of collsynth, lowest layer first: the only place the order is written.
# docs/architecture.md draws it (``test_architecture_draws_the_layer_map`` checks the drawing
# against this list) and CONTRIBUTING.md points here. A top-level module (or package) of
# collsynth may import from its own package and from lower layers only; names in one inner list
# share a layer and must not import each other. ``collsynth``'s own ``__init__`` and
# ``__main__`` are exempt.
LAYERS = [
    ["errors", "interrupt"],
    ["units", "arrays", "atomic", "files", "plugins", "deadline", "jit"],
    ["parallel", "params"],
    ["topology"],
    ["collective"],
    ["schedule"],
    ["flow"],
    ["verify", "sim", "bound"],
    ["synth"],
    ["export", "runtime"],
    ["report", "testbed"],
    ["bench"],
    ["cli"],
]

# Known violations, to be fixed and then removed from this list (it should end up empty):
# (importing module, imported module), both as absolute dotted names.
ALLOWED: set[tuple[str, str]] = set()

LAYER_OF = {name: i for i, names in enumerate(LAYERS) for name in names}
EXEMPT = {"collsynth", "collsynth.__main__"}


def _module_name(path: Path) -> tuple[str, bool]:
    """(dotted module name, is a package ``__init__``) of a file under ``SRC``."""
    parts = ["collsynth", *path.relative_to(SRC).with_suffix("").parts]
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), True
    return ".".join(parts), False


def _resolve(module: str, is_pkg: bool, level: int, name: str | None) -> str:
    """Absolute name of ``from <level dots><name> import ...`` written in ``module``."""
    if level == 0:
        return name or ""
    base = module.split(".") if is_pkg else module.split(".")[:-1]
    if level > 1:
        base = base[: -(level - 1)]
    return ".".join(base + (name.split(".") if name else []))


def _is_module(dotted: str) -> bool:
    rel = Path(*dotted.split(".")[1:])
    return (SRC / rel).is_dir() or (SRC / rel).with_suffix(".py").is_file()


def imports_of(path: Path) -> list[tuple[int, str, str]]:
    """``[(line, imported collsynth module, source text), ...]`` of one file."""
    module, is_pkg = _module_name(path)
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text, filename=str(path))
    out: list[tuple[int, str, str]] = []

    def add(node: ast.AST, target: str) -> None:
        if target == "collsynth" or target.startswith("collsynth."):
            out.append((node.lineno, target, ast.get_source_segment(text, node) or ""))

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(node, alias.name)
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, is_pkg, node.level, node.module)
            if target == "collsynth":
                # ``from collsynth import x``: x is a top-level module, or an attribute of
                # collsynth/__init__ (``__version__``), which is exempt
                for alias in node.names:
                    if _is_module(f"collsynth.{alias.name}"):
                        add(node, f"collsynth.{alias.name}")
            else:
                add(node, target)
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            first = node.args[0]
            if (
                called != "import_module"
                or not isinstance(first, ast.Constant)
                or not isinstance(first.value, str)
            ):
                continue
            name = first.value
            if name.startswith("."):
                level = len(name) - len(name.lstrip("."))
                name = _resolve(module, is_pkg, level, name[level:] or None)
            add(node, name)
    return out


def _sources() -> list[Path]:
    return sorted(p for p in SRC.rglob("*.py") if "__pycache__" not in p.parts)


def _top(dotted: str) -> str:
    parts = dotted.split(".")
    return parts[1] if len(parts) > 1 else ""


def find_violations() -> tuple[list[str], set[tuple[str, str]], list[str]]:
    """(violation messages not allow-listed, allow-listed pairs seen, unknown top-level names)."""
    bad: list[str] = []
    allowed_seen: set[tuple[str, str]] = set()
    unknown: list[str] = []
    for path in _sources():
        module, _ = _module_name(path)
        if module in EXEMPT:
            continue
        top = _top(module)
        if top not in LAYER_OF:
            unknown.append(f"{path.relative_to(SRC.parents[1])}: top-level module {top!r}")
            continue
        for line, target, source in imports_of(path):
            ttop = _top(target)
            if target in EXEMPT or ttop == top:
                continue
            if ttop not in LAYER_OF:
                unknown.append(
                    f"{path.relative_to(SRC.parents[1])}:{line}: imports {target} "
                    f"(top-level module {ttop!r})"
                )
                continue
            if LAYER_OF[ttop] < LAYER_OF[top]:
                continue
            if (module, target) in ALLOWED:
                allowed_seen.add((module, target))
                continue
            why = (
                "a higher layer"
                if LAYER_OF[ttop] > LAYER_OF[top]
                else "a sibling in the same layer"
            )
            bad.append(
                f"{path.relative_to(SRC.parents[1])}:{line}: {module} ({top}) imports "
                f"{target} ({ttop}, {why}): {source.strip().splitlines()[0]}"
            )
    return bad, allowed_seen, unknown


def test_every_module_imports_downward_only():
    bad, _, unknown = find_violations()
    assert not unknown, (
        "collsynth modules missing from LAYERS in tests/test_layers.py:\n" + "\n".join(unknown)
    )
    assert not bad, (
        "imports against the layer order (LAYERS in tests/test_layers.py):\n" + "\n".join(bad)
    )


def test_allow_list_has_no_stale_entries():
    _, seen, _ = find_violations()
    stale = sorted(ALLOWED - seen)
    assert not stale, f"fixed, remove from ALLOWED in tests/test_layers.py: {stale}"


def test_layers_name_each_module_once():
    names = [n for layer in LAYERS for n in layer]
    assert len(names) == len(set(names))


ARCHITECTURE = SRC.parents[1] / "docs" / "architecture.md"
CONTRIBUTING = SRC.parents[1] / "CONTRIBUTING.md"


def drawn_layers(markdown: str) -> list[list[str]]:
    """The layers drawn in the first code block under ``## Layers``, lowest first.

    The drawing lists the layers top down, one block per layer, blocks separated by a line
    ``  v``. A block's names are at the left, indented at most two spaces (a layer of several in
    braces, possibly over several lines); a run of two or more spaces starts its description,
    and lines indented further hold only description.
    """
    section = markdown.split("\n## Layers", 1)[1]
    block = section.split("```", 2)[1]
    layers: list[list[str]] = []
    names = ""
    for line in block.splitlines()[1:]:
        if line.strip() == "v":
            layers.append(_layer_names(names))
            names = ""
        elif line.strip() and len(line) - len(line.lstrip(" ")) <= 2:
            names += " " + re.split(r"\s{2,}", line.strip(), maxsplit=1)[0]
    layers.append(_layer_names(names))
    return layers[::-1]


def _layer_names(text: str) -> list[str]:
    return [n.strip() for n in text.strip().strip("{}").split(",") if n.strip()]


def test_architecture_draws_the_layer_map():
    drawn = drawn_layers(ARCHITECTURE.read_text(encoding="utf-8"))
    assert [sorted(layer) for layer in drawn] == [sorted(layer) for layer in LAYERS], (
        "the layer drawing in docs/architecture.md differs from LAYERS in tests/test_layers.py "
        f"(lowest first):\n drawn: {drawn}\n LAYERS: {LAYERS}"
    )


def test_drawn_layers_reads_braces_continuations_and_descriptions():
    markdown = (
        "# t\n\n## Layers\n\ntext\n\n```\n"
        "cli                 the command line\n"
        "  v\n"
        "{ a, b,             first line of a description\n"
        "  c }               more of it\n"
        "                    only description\n"
        "  v\n"
        "d, e,               a layer without braces\n"
        "  f\n"
        "```\n\n## Next\n\n```\nx\n```\n"
    )
    assert drawn_layers(markdown) == [["d", "e", "f"], ["a", "b", "c"], ["cli"]]


def test_contributing_points_at_the_layer_map():
    text = CONTRIBUTING.read_text(encoding="utf-8")
    section = text.split("\n## The layer map", 1)[1].split("\n## ", 1)[0]
    assert "`LAYERS` in `tests/test_layers.py`" in " ".join(section.split())
    assert "```" not in section, "CONTRIBUTING.md points at LAYERS; it holds no copy of the map"


@pytest.mark.parametrize(
    "source, expect",
    [
        ("from ..synth.forestcoll import optimal_allgather", ["collsynth.synth.forestcoll"]),
        ("def f():\n    from .. import cli, __version__\n", ["collsynth.cli"]),
        ("import collsynth.sim.engine as e", ["collsynth.sim.engine"]),
        ("from . import Bound", ["collsynth.bound"]),
        ("import importlib\nimportlib.import_module('collsynth.report')", ["collsynth.report"]),
        ("import numpy\nfrom fractions import Fraction", []),
    ],
)
def test_imports_are_resolved(tmp_path, monkeypatch, source, expect):
    # pretend the snippet is src/collsynth/bound/probe.py
    pkg = tmp_path / "collsynth" / "bound"
    pkg.mkdir(parents=True)
    (tmp_path / "collsynth" / "cli.py").write_text("")
    (tmp_path / "collsynth" / "report").mkdir()
    probe = pkg / "probe.py"
    probe.write_text(source)
    monkeypatch.setattr(sys.modules[__name__], "SRC", tmp_path / "collsynth")
    assert [t for _, t, _ in imports_of(probe)] == expect
