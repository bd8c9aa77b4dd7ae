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
"""

from __future__ import annotations

import math
import re

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
_SIZE_RE = re.compile(_NUM + r"\s*([KMGTPk]i?)?([Bb])?$")
_BW_RE = re.compile(_NUM + r"\s*(?:([KMGTPk]i?)?(B/s|b/s|bps|Bps))?$")
_TIME_RE = re.compile(_NUM + r"\s*(s|ms|us|µs|μs|ns|ps)?$")
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


def _finite(value: float, what: str, text: object) -> float:
    if not math.isfinite(value):
        raise CollsynthError(f"{what} {text!r} is not a finite number")
    return value


def parse_size(text: str | int | float, what: str = "size") -> float:
    """Parse a data size into bytes (``1KB`` -> 1000.0, ``1KiB`` -> 1024.0)."""
    if isinstance(text, bool):
        raise CollsynthError(f"{what} {text!r} is not a size")
    if isinstance(text, (int, float)):
        value = _finite(float(text), what, text)
    else:
        m = _SIZE_RE.match(str(text).strip())
        if not m:
            raise CollsynthError(f"{what} {text!r} is not a size (use e.g. 1KB, 4MiB, 1GB, 512B)")
        number, prefix, unit = m.groups()
        value = float(number) * _PREFIX[prefix or ""]
        if unit == "b":
            value /= 8.0
        value = _finite(value, what, text)
    if value < 0:
        raise CollsynthError(f"{what} {text!r} is negative")
    return value


def parse_bandwidth(text: str | int | float, what: str = "bandwidth") -> float:
    """Parse a bandwidth into bytes/second (``25GB/s`` -> 25e9, ``200Gb/s`` -> 25e9)."""
    if isinstance(text, bool):
        raise CollsynthError(f"{what} {text!r} is not a bandwidth")
    if isinstance(text, (int, float)):
        value = _finite(float(text), what, text)
    else:
        m = _BW_RE.match(str(text).strip())
        if not m:
            raise CollsynthError(
                f"{what} {text!r} is not a bandwidth (use e.g. 25GB/s, 50GiB/s, 200Gb/s)"
            )
        number, prefix, unit = m.groups()
        value = float(number) * _PREFIX[prefix or ""]
        if unit in ("b/s", "bps"):
            value /= 8.0
        value = _finite(value, what, text)
    if value <= 0:
        raise CollsynthError(f"{what} {text!r} must be positive")
    return value


def parse_time(text: str | int | float, what: str = "time") -> float:
    """Parse a duration into seconds (``0.7us`` -> 7e-7, a bare number is seconds)."""
    if isinstance(text, bool):
        raise CollsynthError(f"{what} {text!r} is not a time")
    if isinstance(text, (int, float)):
        value = _finite(float(text), what, text)
    else:
        m = _TIME_RE.match(str(text).strip())
        if not m:
            raise CollsynthError(f"{what} {text!r} is not a time (use e.g. 0.7us, 1.3ms, 2s)")
        number, unit = m.groups()
        value = _finite(float(number) * _TIME_SCALE[unit], what, text)
    if value < 0:
        raise CollsynthError(f"{what} {text!r} is negative")
    return value


#: The most sizes one list or sweep may expand to.
MAX_SIZES = 4096


def parse_size_list(text: str, what: str = "sizes") -> list[float]:
    """Parse a comma-separated list of sizes and sweeps.

    ``1KB,1MB,1GB``; a sweep ``START:STOP:xF`` multiplies by ``F`` (``1KB:1GB:x2``) and
    ``START:STOP:+STEP`` adds ``STEP`` (``1MB:8MB:+1MB``), both up to and including ``STOP``.
    Duplicates are dropped, order is kept; at most :data:`MAX_SIZES` sizes.
    """
    one = what[:-1] if what.endswith("s") else what
    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    if not parts:
        raise CollsynthError(f"{what} {text!r} is empty")
    out: list[float] = []
    for part in parts:
        values = _sweep(part, one, what) if ":" in part else [parse_size(part, what=one)]
        for v in values:
            if v not in out:
                out.append(v)
            if len(out) > MAX_SIZES:
                raise CollsynthError(f"{what} {text!r} has more than {MAX_SIZES} sizes")
    return out


def _sweep(part: str, one: str, what: str) -> list[float]:
    """The sizes of one ``START:STOP:xF`` or ``START:STOP:+STEP`` sweep."""
    fields = part.split(":")
    if len(fields) != 3:
        raise CollsynthError(
            f"{what}: {part!r} is not a sweep START:STOP:xFACTOR or START:STOP:+STEP"
        )
    start, stop = parse_size(fields[0], one), parse_size(fields[1], one)
    step = fields[2].strip()
    if not 0 < start <= stop:
        raise CollsynthError(f"{what}: sweep {part!r} needs 0 < START <= STOP")
    if step[:1] in ("x", "*"):
        factor = _finite(_number(step[1:], part, what), what, part)
        if not factor > 1:
            raise CollsynthError(f"{what}: sweep {part!r} needs a factor above 1")
        grow = lambda v: v * factor  # noqa: E731
    elif step[:1] == "+":
        inc = parse_size(step[1:], one)
        if not inc > 0:
            raise CollsynthError(f"{what}: sweep {part!r} needs a positive step")
        grow = lambda v: v + inc  # noqa: E731
    else:
        raise CollsynthError(f"{what}: sweep {part!r}: the step must be xFACTOR or +STEP")
    values = [start]
    while True:
        nxt = grow(values[-1])
        if nxt > stop * (1 + 1e-12):
            return values
        values.append(nxt)
        if len(values) > MAX_SIZES:
            raise CollsynthError(f"{what}: sweep {part!r} has more than {MAX_SIZES} sizes")


def _number(text: str, part: str, what: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise CollsynthError(f"{what}: sweep {part!r}: {text!r} is not a number") from None


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
