"""A small, guarded XML reader for the topology importers: elements with their line numbers.

:func:`parse_xml` builds a tree of :class:`XElem` (tag, attributes, line, children) with the
standard library's expat parser. What it refuses, each with one line naming the place:

* any DOCTYPE (so no DTD, no entity declarations, no external entities: only the five
  predefined entities and character references can appear; defusedxml's policy, applied here
  because defusedxml is not a dependency of collsynth);
* nesting deeper than ``COLLSYNTH_MAX_DEPTH`` and more elements than ``COLLSYNTH_MAX_NODES``
  (the limits of :mod:`collsynth.files`; the file size limit applies when it is read);
* anything that is not well-formed (expat's message, with line and column).

Text content is ignored: the formats read here keep everything in attributes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NoReturn
from xml.parsers import expat

from ..errors import CollsynthError
from ..files import read_text, structure_limits

#: Attributes that identify an element in error messages, most telling first.
_ID_ATTRS = ("busid", "dev", "numaid", "name", "target")


@dataclass(eq=False)
class XElem:
    """One element: ``tag``, ``attrs``, the ``line`` its start tag is on, ``children``."""

    tag: str
    attrs: dict[str, str]
    line: int
    children: list[XElem] = field(default_factory=list)
    parent: XElem | None = field(default=None, repr=False)

    def where(self) -> str:
        """``<gpu dev="3"> at line 12``: the tag, one identifying attribute, the line."""
        for key in _ID_ATTRS:
            if key in self.attrs:
                value = self.attrs[key]
                if not value.isprintable() or len(value) > 40:  # keep errors on one line
                    value = ascii(value[:40])[1:-1]
                return f'<{self.tag} {key}="{value}"> at line {self.line}'
        return f"<{self.tag}> at line {self.line}"

    def subs(self, tag: str) -> list[XElem]:
        """The children named ``tag``, in document order."""
        return [c for c in self.children if c.tag == tag]

    def ancestor(self, tag: str) -> XElem | None:
        """The nearest enclosing element named ``tag``."""
        node = self.parent
        while node is not None and node.tag != tag:
            node = node.parent
        return node


def read_xml(path: str) -> XElem:
    """Read and parse an XML file within the input limits (see the module docstring)."""
    return parse_xml(read_text(path), path)


def parse_xml(text: str, source: str = "input") -> XElem:
    """Parse XML text into an :class:`XElem` tree; one-line errors naming the line."""
    max_depth, max_nodes = structure_limits()
    parser = expat.ParserCreate(encoding="utf-8")
    stack: list[XElem] = []
    found: list[XElem] = []
    count = [0]

    def fail(what: str) -> NoReturn:
        raise CollsynthError(f"{source}: line {parser.CurrentLineNumber}: {what}")

    def start(tag: str, attrs: dict[str, str]) -> None:
        if len(stack) >= max_depth:
            fail(
                f"<{tag}> is nested deeper than {max_depth} levels (set COLLSYNTH_MAX_DEPTH "
                f"to raise the limit)"
            )
        count[0] += 1
        if count[0] > max_nodes:
            fail(f"more than {max_nodes} elements (set COLLSYNTH_MAX_NODES to raise the limit)")
        parent = stack[-1] if stack else None
        elem = XElem(tag, dict(attrs), parser.CurrentLineNumber, parent=parent)
        if parent is None:
            found.append(elem)
        else:
            parent.children.append(elem)
        stack.append(elem)

    def end(tag: str) -> None:
        stack.pop()

    def no_doctype(*_: Any) -> None:
        fail("a DOCTYPE is not allowed (no DTDs or entity declarations in topology files)")

    parser.StartElementHandler = start
    parser.EndElementHandler = end
    parser.StartDoctypeDeclHandler = no_doctype
    parser.EntityDeclHandler = no_doctype
    try:
        parser.Parse(text, True)
    except expat.ExpatError as e:
        raise CollsynthError(
            f"{source}: not well-formed XML (line {e.lineno}, column {e.offset + 1}: "
            f"{expat.ErrorString(e.code)})"
        ) from None
    if not found:  # expat reports an empty document itself; kept for safety
        raise CollsynthError(f"{source}: no XML element found")
    return found[0]
