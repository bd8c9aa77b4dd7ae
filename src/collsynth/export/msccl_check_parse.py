"""The MSCCL XML checker's strict mini-parser: the element tree of a document, enforcing the
runtimes' formatting rules (the ``format`` rule of :mod:`collsynth.export.check`)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..files import structure_limits
from .msccl_check_model import fail


@dataclass
class XmlElement:
    tag: str
    attrs: dict
    line: int
    children: list = field(default_factory=list)


_TOKEN = re.compile(r"<!--.*?-->|<[^>]*>|[^<]+", re.S)
_ATTR = re.compile(r'([A-Za-z_][\w.-]*)="([^"<>]*)"')


def parse_xml(text: str) -> XmlElement:
    """The element tree of ``text``, enforcing MSCCL's formatting rules."""
    _check_preamble(text)
    max_depth, max_nodes = structure_limits()
    elements = 0
    root = None
    stack: list[XmlElement] = []
    line, counted = 1, 0  # line number of the token, counted incrementally (linear time)
    for m in _TOKEN.finditer(text):
        tok = m.group(0)
        line += text.count("\n", counted, m.start())
        counted = m.start()
        if tok.startswith("<!--"):
            continue
        if not tok.startswith("<"):
            if tok.strip(" \r\n"):
                fail("format", f"line {line}: unexpected text {tok.strip()[:30]!r}")
            continue
        if tok.startswith("<?") or tok.startswith("<!"):
            fail("format", f"line {line}: {tok[:20]!r} is not allowed")
        if "\n" in tok or "\r" in tok:
            fail(
                "format",
                f"line {line}: a tag spans several lines (attributes must be on the tag's line)",
            )
        if tok.startswith("</"):
            tag = tok[2:-1].strip()
            if not stack or stack[-1].tag != tag:
                fail("format", f"line {line}: unexpected closing tag </{tag}>")
            stack.pop()
            continue
        body = tok[1:-1]
        selfclose = body.endswith("/")
        if selfclose:
            body = body[:-1]
        mt = re.match(r"([A-Za-z_][\w-]*)", body)
        if not mt:
            fail("format", f"line {line}: malformed tag {tok[:30]!r}")
        tag = mt.group(1)
        elements += 1
        if elements > max_nodes:
            fail("format", f"line {line}: more than {max_nodes} elements (set "
                  "COLLSYNTH_MAX_NODES to raise the limit)")  # fmt: skip
        if len(stack) >= max_depth:
            fail("format", f"line {line}: <{tag}> is nested deeper than {max_depth} levels "
                  "(set COLLSYNTH_MAX_DEPTH to raise the limit)")  # fmt: skip
        el = XmlElement(tag, _parse_attrs(body[mt.end() :], tag, line), line)
        if stack:
            stack[-1].children.append(el)
            if len(stack[-1].children) > 1024:
                fail("format", f"line {line}: <{stack[-1].tag}> has more than 1024 children")
        elif root is None:
            root = el
        else:
            fail("format", f"line {line}: a second top-level element <{tag}>")
        if not selfclose:
            stack.append(el)
    if stack:
        fail("format", f"<{stack[-1].tag}> (line {stack[-1].line}) is never closed")
    if root is None or root.tag != "algo":
        fail("format", "the top-level element must be <algo>")
    return root


def _check_preamble(text: str) -> None:
    """No tab anywhere; the document starts with ``<algo>`` or a comment, no declaration."""
    if "\t" in text:
        line = text[: text.index("\t")].count("\n") + 1
        fail(
            "format",
            f"line {line}: tab character (MSCCL's parser allows only spaces and "
            f"newlines between elements)",
        )
    stripped = text.lstrip(" \r\n")
    if stripped.startswith("<?"):
        fail(
            "format",
            "XML declaration '<?xml ...?>' is not allowed (the first element must be <algo>)",
        )
    if not (stripped.startswith("<algo") or stripped.startswith("<!--")):
        fail("format", "the document must start with <algo> or a comment")


def _parse_attrs(rest: str, tag: str, line: int) -> dict:
    """The attributes after a tag's name: double-quoted, space-separated, at most 16 slots."""
    attrs: dict = {}
    i = 0
    nslots = 0
    while i < len(rest):
        if rest[i] == " ":
            j = i
            while j < len(rest) and rest[j] == " ":
                j += 1
            nslots += j - i - 1  # extra spaces create empty attribute slots
            i = j
            continue
        ma = _ATTR.match(rest, i)
        if not ma:
            fail(
                "format",
                f"line {line}: <{tag}> has a malformed attribute near "
                f"{rest[i : i + 20]!r} (values must be in double quotes)",
            )
        if ma.group(1) in attrs:
            fail("format", f"line {line}: <{tag}> repeats attribute {ma.group(1)!r}")
        attrs[ma.group(1)] = ma.group(2)
        nslots += 1
        i = ma.end()
        if i < len(rest) and rest[i] != " ":
            fail("format", f"line {line}: attributes of <{tag}> must be separated by spaces")
    if nslots > 16:
        fail("format", f"line {line}: <{tag}> has more than 16 attribute slots")
    return attrs


def xml_int(el: XmlElement, key: str, where: str, check: str = "structure") -> int:
    if key not in el.attrs:
        fail(check, f"{where} lacks attribute {key!r}")
    v = el.attrs[key]
    if not re.fullmatch(r"-?\d{1,19}", v):  # at most 64 bits, as the runtimes read them
        shown = v if len(v) <= 40 else v[:37] + "..."
        fail(check, f"{where}: {key}={shown!r} is not an integer of at most 19 digits")
    return int(v)
