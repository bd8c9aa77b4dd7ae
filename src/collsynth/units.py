"""Human units in, SI units inside.

Inside collsynth every quantity is in bytes, seconds or bytes/second (floats). The CLI and
the file formats also accept human strings:

* sizes: ``1KB`` (1e3 bytes), ``4MiB`` (4 * 2**20), ``1GB`` (1e9), ``512`` or ``512B`` (bytes);
* bandwidths: ``25GB/s`` (25e9 bytes/s), ``50GiB/s``, ``200Gb/s`` or ``200Gbps`` (bits: 25e9
  bytes/s), or a bare number of bytes/s;
* times: ``0.7us`` (also ``µs``), ``1.3ms``, ``5ns``, ``2s``, or a bare number of seconds.

Decimal prefixes (K, M, G, T) are powers of 1000; binary prefixes (Ki, Mi, Gi, Ti) powers of
1024. A lower-case ``b`` means bits. Every parser raises :class:`CollsynthError` with a message
that names the bad value.

Numbers are plain ASCII (no Unicode digits, ``nan``, ``inf`` or ``1_000``), and every value is
checked against the declared :class:`Range` of its quantity: :data:`SIZE` (1 B .. 2^50 B),
:data:`BANDWIDTH` (1 B/s .. 1e15 B/s), :data:`LATENCY` (0 .. 1000 s), :data:`DURATION`
(0 .. 1e7 s). Inside the ranges every computation stays finite.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from .errors import CollsynthError

_PREFIX = {
    "": 1.0,
    "K": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "k": 1e3,
    "Ki": 2.0**10,
    "Mi": 2.0**20,
    "Gi": 2.0**30,
    "Ti": 2.0**40,
    "Pi": 2.0**50,
    "ki": 2.0**10,
}

_NUM = r"([+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)"
# re.ASCII: ``\d`` is 0-9 only (no full-width or other Unicode digits).
_NUM_RE = re.compile(_NUM + r"$", re.ASCII)
_INT_RE = re.compile(r"[+-]?\d+$", re.ASCII)
_SIZE_RE = re.compile(_NUM + r"\s*([KMGTPk]i?)?([Bb])?$", re.ASCII)
_BW_RE = re.compile(_NUM + r"\s*(?:([KMGTPk]i?)?(B/s|b/s|bps|Bps))?$", re.ASCII)
_TIME_RE = re.compile(_NUM + r"\s*(s|ms|us|µs|μs|ns|ps)?$", re.ASCII)
_TIME_SCALE = {
    None: 1.0,
    "s": 1.0,
    "ms": 1e-3,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ns": 1e-9,
    "ps": 1e-12,
}
#: Longest number text read (a longer one is refused before it is converted).
_MAX_TEXT = 100


@dataclass(frozen=True)
class Range:
    """The declared range of one physical quantity, in SI units (closed: ``lo <= x <= hi``).

    Every value of the quantity that enters collsynth (a flag, a topology parameter, a file) is
    checked against its range by :meth:`check`; inside the ranges every computation collsynth
    makes (times = size / bandwidth + latencies, rates, sums over links) stays finite.
    """

    quantity: str
    lo: float
    hi: float
    unit: str
    hi_text: str = ""

    def describe(self) -> str:
        """``1 B .. 1125899906842624 B (2^50 B, 1 PiB)``."""
        short = f"{self.hi:g}"
        hi = f"{short if float(short) == self.hi else f'{self.hi:.16g}'} {self.unit}"
        if self.hi_text:
            hi += f" ({self.hi_text})"
        return f"{self.lo:g} {self.unit} .. {hi}"

    def check(self, value: float, what: str, text: object = None) -> float:
        """``value`` when finite and inside the range, else one line naming ``what``."""
        if self.lo <= value <= self.hi:
            return float(value)
        shown = _shown(value if text is None else text)
        if math.isnan(value):
            raise CollsynthError(f"{what} {shown} is not a number")
        if math.isinf(value):
            why = "is not finite"
        elif value < 0:
            why = "is negative" if self.lo == 0 else "is negative, must be positive"
        elif value == 0:
            why = "must be positive"
        else:
            why = "is too small" if value < self.lo else "is too large"
        raise CollsynthError(
            f"{what} {shown} {why}: the {self.quantity} range is {self.describe()}"
        )


#: Data sizes (message sizes, chunk sizes): 1 byte to 2^50 bytes (1 PiB).
SIZE = Range("size", 1.0, 2.0**50, "B", "2^50 B, 1 PiB")
#: Buffer sizes that may be zero (queues): 0 to 2^50 bytes.
BUFFER = Range("buffer size", 0.0, 2.0**50, "B", "2^50 B, 1 PiB")
#: Link bandwidths: 1 byte/s to 1e15 bytes/s (1 PB/s).
BANDWIDTH = Range("bandwidth", 1.0, 1e15, "B/s", "1 PB/s")
#: Latencies (a link's alpha, a per-operation cost, a slot): 0 to 1000 seconds.
LATENCY = Range("latency", 0.0, 1000.0, "s")
#: Durations (time limits, timeouts): 0 to 1e7 seconds (about 116 days).
DURATION = Range("duration", 0.0, 1e7, "s")


def _shown(text: object) -> str:
    """``text`` for an error message: repr, on one line, at most about 60 characters."""
    shown = ascii(text) if isinstance(text, str) else repr(text)
    return shown if len(shown) <= 60 else shown[:57] + "..."


def _ascii_text(text: object, what: str, kind: str) -> str:
    """``text`` stripped, when it is plain ASCII of a sane length (no Unicode digits)."""
    s = str(text).strip()
    if len(s) > _MAX_TEXT:
        raise CollsynthError(f"{what} {_shown(s)} is not {kind} (longer than {_MAX_TEXT} chars)")
    if not s.isascii() and kind != "a time":
        raise CollsynthError(f"{what} {_shown(s)} is not {kind} (use ASCII digits and units)")
    return s


def _finite(value: float, what: str, text: object) -> float:
    if not math.isfinite(value):
        raise CollsynthError(f"{what} {_shown(text)} is not a finite number")
    return value


def parse_number(text: str | int | float, what: str = "number") -> float:
    """A finite number written with ASCII digits (``12``, ``-0.5``, ``1e3``; no ``nan``,
    ``inf``, ``1_000`` or Unicode digits)."""
    if isinstance(text, bool):
        raise CollsynthError(f"{what} {text!r} is not a number")
    if isinstance(text, int):
        try:
            return _finite(float(text), what, text)
        except OverflowError:
            raise CollsynthError(f"{what} {_shown(text)} is not a finite number") from None
    if isinstance(text, float):
        return _finite(text, what, text)
    s = _ascii_text(text, what, "a number")
    if not _NUM_RE.match(s):
        raise CollsynthError(f"{what} {_shown(text)} is not a number")
    return _finite(float(s), what, text)


def parse_integer(text: str | int, what: str = "integer") -> int:
    """An integer written with ASCII digits (``12``, ``-3``; no ``1_000``, ``0x10``, ``1e3``
    or Unicode digits)."""
    if isinstance(text, bool):
        raise CollsynthError(f"{what} {text!r} is not an integer")
    if isinstance(text, int):
        return text
    s = _ascii_text(text, what, "an integer")
    if not _INT_RE.match(s):
        raise CollsynthError(f"{what} {_shown(text)} is not an integer")
    return int(s)


def _scaled_number(number: str, scale: float) -> float:
    """``float(number) * scale`` (a huge exponent gives infinity, which no range holds)."""
    return float(number) * scale


def parse_size(text: str | int | float, what: str = "size", limits: Range = SIZE) -> float:
    """Parse a data size into bytes (``1KB`` -> 1000.0, ``1KiB`` -> 1024.0), inside ``limits``
    (default :data:`SIZE`: 1 B .. 2^50 B)."""
    if isinstance(text, bool):
        raise CollsynthError(f"{what} {text!r} is not a size")
    if isinstance(text, (int, float)):
        value = parse_number(text, what)
    else:
        m = _SIZE_RE.match(_ascii_text(text, what, "a size"))
        if not m:
            raise CollsynthError(
                f"{what} {_shown(text)} is not a size (use e.g. 1KB, 4MiB, 1GB, 512B)"
            )
        number, prefix, unit = m.groups()
        value = _scaled_number(number, _PREFIX[prefix or ""])
        if unit == "b":
            value /= 8.0
    return limits.check(value, what, text)


def parse_bandwidth(
    text: str | int | float, what: str = "bandwidth", limits: Range = BANDWIDTH
) -> float:
    """Parse a bandwidth into bytes/second (``25GB/s`` -> 25e9, ``200Gb/s`` -> 25e9), inside
    ``limits`` (default :data:`BANDWIDTH`: 1 B/s .. 1e15 B/s)."""
    if isinstance(text, bool):
        raise CollsynthError(f"{what} {text!r} is not a bandwidth")
    if isinstance(text, (int, float)):
        value = parse_number(text, what)
    else:
        m = _BW_RE.match(_ascii_text(text, what, "a bandwidth"))
        if not m:
            raise CollsynthError(
                f"{what} {_shown(text)} is not a bandwidth (use e.g. 25GB/s, 50GiB/s, 200Gb/s)"
            )
        number, prefix, unit = m.groups()
        value = _scaled_number(number, _PREFIX[prefix or ""])
        if unit in ("b/s", "bps"):
            value /= 8.0
    return limits.check(value, what, text)


def parse_time(text: str | int | float, what: str = "time", limits: Range = DURATION) -> float:
    """Parse a duration into seconds (``0.7us`` -> 7e-7, a bare number is seconds), inside
    ``limits`` (default :data:`DURATION`; latencies use :data:`LATENCY`)."""
    if isinstance(text, bool):
        raise CollsynthError(f"{what} {text!r} is not a time")
    if isinstance(text, (int, float)):
        value = parse_number(text, what)
    else:
        s = _ascii_text(text, what, "a time")
        m = _TIME_RE.match(s)
        if not m:
            raise CollsynthError(f"{what} {_shown(text)} is not a time (use e.g. 0.7us, 1.3ms, 2s)")
        number, unit = m.groups()
        value = _scaled_number(number, _TIME_SCALE[unit])
    return limits.check(value, what, text)


#: The most sizes one list or sweep may expand to.
MAX_SIZES = 4096


def parse_size_list(text: str, what: str = "sizes") -> list[float]:
    """Parse a comma-separated list of sizes and sweeps.

    ``1KB,1MB,1GB``; a sweep ``START:STOP:xF`` multiplies by ``F`` (``1KB:1GB:x2``) and
    ``START:STOP:+STEP`` adds ``STEP`` (``1MB:8MB:+1MB``), both up to and including ``STOP``.
    Duplicates are dropped, order is kept; at most :data:`MAX_SIZES` sizes.
    """
    if not str(text).strip():
        raise CollsynthError(f"{what} {_shown(text)} is empty")
    parts = [p.strip() for p in str(text).split(",")]
    for i, part in enumerate(parts):
        if not part:
            raise CollsynthError(f"{what} {_shown(text)}: element {i + 1} is empty")
    out: list[float] = []
    for i, part in enumerate(parts):
        one = f"{what} element {i + 1}" if len(parts) > 1 else what
        values = _sweep(part, one, what) if ":" in part else [parse_size(part, what=one)]
        for v in values:
            if v not in out:
                out.append(v)
            if len(out) > MAX_SIZES:
                raise CollsynthError(f"{what} {_shown(text)} has more than {MAX_SIZES} sizes")
    return out


def _sweep(part: str, one: str, what: str) -> list[float]:
    """The sizes of one ``START:STOP:xF`` or ``START:STOP:+STEP`` sweep."""
    fields = part.split(":")
    if len(fields) != 3:
        raise CollsynthError(
            f"{what}: {_shown(part)} is not a sweep START:STOP:xFACTOR or START:STOP:+STEP"
        )
    start, stop = parse_size(fields[0], one), parse_size(fields[1], one)
    step = fields[2].strip()
    if not 0 < start <= stop:
        raise CollsynthError(f"{what}: sweep {_shown(part)} needs 0 < START <= STOP")
    if step[:1] in ("x", "*"):
        factor = _number(step[1:], part, what)
        if not factor > 1:
            raise CollsynthError(f"{what}: sweep {_shown(part)} needs a factor above 1")
        grow = lambda v: v * factor  # noqa: E731
    elif step[:1] == "+":
        inc = parse_size(step[1:], one)
        if not inc > 0:
            raise CollsynthError(f"{what}: sweep {_shown(part)} needs a positive step")
        grow = lambda v: v + inc  # noqa: E731
    else:
        raise CollsynthError(f"{what}: sweep {_shown(part)}: the step must be xFACTOR or +STEP")
    values = [start]
    while True:
        nxt = grow(values[-1])
        if nxt > stop * (1 + 1e-12):
            return values
        values.append(min(nxt, stop))
        if len(values) > MAX_SIZES:
            raise CollsynthError(f"{what}: sweep {_shown(part)} has more than {MAX_SIZES} sizes")


def _number(text: str, part: str, what: str) -> float:
    return parse_number(text, f"{what}: sweep {_shown(part)}: factor")


def _scaled(value: float, units: list[tuple[float, str]], digits: int) -> str:
    for scale, name in units:
        if abs(value) >= scale:
            return f"{value / scale:.{digits}g}{name}"
    scale, name = units[-1]
    return f"{value / scale:.{digits}g}{name}"


def fmt_size(nbytes: float, binary: bool = False, digits: int = 4) -> str:
    """Format bytes: ``fmt_size(1e9) == '1GB'``, ``fmt_size(2**30, binary=True) == '1GiB'``."""
    if binary:
        units = [(2.0**40, "TiB"), (2.0**30, "GiB"), (2.0**20, "MiB"), (2.0**10, "KiB"), (1.0, "B")]
    else:
        units = [(1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "KB"), (1.0, "B")]
    return _scaled(float(nbytes), units, digits)


def fmt_bandwidth(bps: float, digits: int = 4) -> str:
    """Format bytes/second: ``fmt_bandwidth(25e9) == '25GB/s'``."""
    units = [(1e12, "TB/s"), (1e9, "GB/s"), (1e6, "MB/s"), (1e3, "KB/s"), (1.0, "B/s")]
    return _scaled(float(bps), units, digits)


def fmt_time(seconds: float, digits: int = 4) -> str:
    """Format seconds: ``fmt_time(7e-7) == "700ns"``."""
    s = float(seconds)
    if s == 0:
        return "0s"
    units = [(1.0, "s"), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns"), (1e-12, "ps")]
    return _scaled(s, units, digits)
