"""Tests of human-unit parsing and formatting (collsynth.units)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collsynth.errors import CollsynthError
from collsynth.units import (
    fmt_bandwidth,
    fmt_size,
    fmt_time,
    parse_bandwidth,
    parse_size,
    parse_size_list,
    parse_time,
)


# ------------------------------------------------------------------------------ sizes
@pytest.mark.parametrize(
    "text, expected",
    [
        ("1KB", 1000.0),
        ("1kB", 1000.0),
        ("1KiB", 1024.0),
        ("4MiB", 4 * 2**20),
        ("1MB", 1e6),
        ("1GB", 1e9),
        ("1GiB", 2**30),
        ("2TB", 2e12),
        ("1TiB", 2**40),
        ("512", 512.0),
        ("512B", 512.0),
        ("1.5KB", 1500.0),
        (".5KiB", 512.0),
        ("1e3", 1000.0),
        ("2e-3KB", 2.0),
        (" 3 MB ", 3e6),
        ("8b", 1.0),  # lower-case b is bits
        ("8Kb", 1000.0),
        ("1Gb", 1.25e8),
        (1024, 1024.0),
        (2.5, 2.5),
    ],
)
def test_parse_size_values(text, expected):
    assert parse_size(text) == pytest.approx(expected, rel=1e-12)


def test_decimal_and_binary_prefixes_differ():
    assert parse_size("1KiB") - parse_size("1KB") == 24
    assert parse_size("1MiB") == 1024 * parse_size("1KiB")
    assert parse_size("1GiB") > parse_size("1GB")


@pytest.mark.parametrize(
    "text",
    [
        "",
        "abc",
        "1XB",
        "KB",
        "1 K B",
        "1KBB",
        "1.2.3MB",
        "1/sGB",
        "1KB/s",
        "nan",
        "inf",
        "NaN B",
        "1e",
        "--1KB",
        "1iB",
        "0x10",
    ],
)
def test_parse_size_rejects_garbage(text):
    with pytest.raises(CollsynthError) as exc:
        parse_size(text)
    msg = str(exc.value)
    assert "\n" not in msg and msg
    assert repr(text) in msg  # the message names the bad value


@pytest.mark.parametrize("bad", [-1, -0.5, "-1KB", "-4MiB"])
def test_parse_size_rejects_negative(bad):
    with pytest.raises(CollsynthError, match="negative"):
        parse_size(bad)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf"), "1e400", "1e400KB"])
def test_parse_size_rejects_non_finite(bad):
    with pytest.raises(CollsynthError, match="finite"):
        parse_size(bad)


@pytest.mark.parametrize("bad", [True, False])
def test_parse_size_rejects_booleans(bad):
    with pytest.raises(CollsynthError):
        parse_size(bad)


def test_parse_size_what_names_the_field():
    with pytest.raises(CollsynthError, match=r"^--size 'x1' is not a size"):
        parse_size("x1", "--size")


def test_parse_size_list():
    assert parse_size_list("1KB,1MiB, 2GB") == [1e3, 2.0**20, 2e9]
    with pytest.raises(CollsynthError, match="element 2 is empty"):
        parse_size_list("1KB,,2KB")
    with pytest.raises(CollsynthError, match="empty"):
        parse_size_list(" , ")
    with pytest.raises(CollsynthError, match="'zz'"):
        parse_size_list("1KB,zz")


# ------------------------------------------------------------------------------ bandwidths
@pytest.mark.parametrize(
    "text, expected",
    [
        ("25GB/s", 25e9),
        ("25 GB/s", 25e9),
        ("50GiB/s", 50 * 2**30),
        ("200Gb/s", 25e9),
        ("200Gbps", 25e9),
        ("100Gbps", 12.5e9),
        ("400Gb/s", 50e9),
        ("12.5GBps", 12.5e9),
        ("1KB/s", 1e3),
        ("1KiB/s", 1024.0),
        ("8b/s", 1.0),
        ("1B/s", 1.0),
        ("1TB/s", 1e12),
        (25e9, 25e9),
        (7, 7.0),
    ],
)
def test_parse_bandwidth_values(text, expected):
    assert parse_bandwidth(text) == pytest.approx(expected, rel=1e-12)


def test_bits_are_an_eighth_of_bytes():
    for prefix in ("", "K", "M", "G", "T", "Ki", "Gi"):
        assert parse_bandwidth(f"8{prefix}b/s") == pytest.approx(parse_bandwidth(f"1{prefix}B/s"))
        assert parse_bandwidth(f"8{prefix}bps") == pytest.approx(parse_bandwidth(f"1{prefix}B/s"))


@pytest.mark.parametrize(
    "text",
    ["", "fast", "25GB", "25G", "25GB/h", "GB/s", "25 GB / s", "nan GB/s", "inf", "25gB/s", "1e"],
)
def test_parse_bandwidth_rejects_garbage(text):
    with pytest.raises(CollsynthError) as exc:
        parse_bandwidth(text)
    msg = str(exc.value)
    assert "\n" not in msg
    assert "is not a bandwidth" in msg and repr(text) in msg


@pytest.mark.parametrize("bad", [0, 0.0, -1, "0GB/s", "-25GB/s", "-1Gbps"])
def test_parse_bandwidth_must_be_positive(bad):
    with pytest.raises(CollsynthError, match="positive"):
        parse_bandwidth(bad)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf"), "1e400GB/s"])
def test_parse_bandwidth_rejects_non_finite(bad):
    with pytest.raises(CollsynthError, match="finite"):
        parse_bandwidth(bad)


def test_parse_bandwidth_rejects_booleans():
    with pytest.raises(CollsynthError):
        parse_bandwidth(True)


# ------------------------------------------------------------------------------ times
@pytest.mark.parametrize(
    "text, expected",
    [
        ("0.7us", 7e-7),
        ("0.7µs", 7e-7),  # micro sign U+00B5
        ("0.7μs", 7e-7),  # Greek small letter mu U+03BC
        ("1.3ms", 1.3e-3),
        ("5ns", 5e-9),
        ("2s", 2.0),
        ("2", 2.0),
        ("3ps", 3e-12),
        ("0", 0.0),
        (" 10 us ", 1e-5),
        ("1e3ns", 1e-6),
        (0.25, 0.25),
        (0, 0.0),
    ],
)
def test_parse_time_values(text, expected):
    assert parse_time(text) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    "text", ["", "soon", "1h", "1min", "1 m s", "us", "1usec", "nan", "inf s", "1.3.2ms"]
)
def test_parse_time_rejects_garbage(text):
    with pytest.raises(CollsynthError) as exc:
        parse_time(text)
    msg = str(exc.value)
    assert "\n" not in msg
    assert "is not a time" in msg and repr(text) in msg


@pytest.mark.parametrize("bad", [-1, -1e-9, "-0.7us", "-2s"])
def test_parse_time_rejects_negative(bad):
    with pytest.raises(CollsynthError, match="negative"):
        parse_time(bad)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), "1e400s", "1e400"])
def test_parse_time_rejects_non_finite(bad):
    with pytest.raises(CollsynthError, match="finite"):
        parse_time(bad)


def test_parse_time_rejects_booleans():
    with pytest.raises(CollsynthError):
        parse_time(False)


def test_error_messages_are_one_line_even_with_newlines_in_input():
    for fn in (parse_size, parse_bandwidth, parse_time):
        with pytest.raises(CollsynthError) as exc:
            fn("1\nKB\n\nx")
        assert "\n" not in str(exc.value)


# ------------------------------------------------------------------------------ formatting
def test_fmt_examples():
    assert fmt_size(1e9) == "1GB"
    assert fmt_size(2**30, binary=True) == "1GiB"
    assert fmt_size(4 * 2**20, binary=True) == "4MiB"
    assert fmt_size(1500) == "1.5KB"
    assert fmt_size(512) == "512B"
    assert fmt_size(0) == "0B"
    assert fmt_bandwidth(25e9) == "25GB/s"
    assert fmt_bandwidth(12.5e9) == "12.5GB/s"
    assert fmt_bandwidth(1e3) == "1KB/s"
    assert fmt_time(7e-7) == "700ns"
    assert fmt_time(1.3e-3) == "1.3ms"
    assert fmt_time(2.0) == "2s"
    assert fmt_time(5e-6) == "5us"
    assert fmt_time(0) == "0s"
    assert fmt_time(3e-12) == "3ps"


def test_fmt_digits():
    assert fmt_size(123456789, digits=2) == "1.2e+02MB"
    assert fmt_time(1.23456e-3, digits=3) == "1.23ms"


# inside the declared ranges (sizes 1 B .. 2^50 B, bandwidths 1 B/s .. 1e15 B/s)
_finite_nonneg = st.floats(
    min_value=1.0, max_value=1e15, allow_nan=False, allow_infinity=False, allow_subnormal=False
)
_positive = st.floats(min_value=1.0, max_value=1e15, allow_nan=False, allow_infinity=False)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(x=_finite_nonneg, binary=st.booleans())
def test_size_round_trip(x, binary):
    back = parse_size(fmt_size(x, binary=binary))
    assert back == pytest.approx(x, rel=1e-3, abs=1e-300)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(x=_positive)
def test_bandwidth_round_trip(x):
    back = parse_bandwidth(fmt_bandwidth(x))
    assert back == pytest.approx(x, rel=1e-3)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(x=st.floats(min_value=0.0, max_value=1e6, allow_nan=False, allow_subnormal=False))
def test_time_round_trip(x):
    back = parse_time(fmt_time(x))
    assert back == pytest.approx(x, rel=1e-3, abs=1e-300)


@settings(max_examples=100, deadline=None, derandomize=True)
@given(x=_positive, digits=st.integers(min_value=1, max_value=12))
def test_round_trip_precision_grows_with_digits(x, digits):
    back = parse_size(fmt_size(x, digits=digits))
    # .{digits}g keeps `digits` significant digits: relative error at most half a unit in
    # the last place
    assert math.isclose(back, x, rel_tol=0.5 * 10.0 ** (1 - digits) * (1 + 1e-9))


@settings(max_examples=150, deadline=None, derandomize=True)
@given(st.text(max_size=12))
def test_parsers_never_crash_on_random_text(text):
    for fn in (parse_size, parse_bandwidth, parse_time):
        try:
            value = fn(text)
        except CollsynthError as e:
            assert "\n" not in str(e) and str(e)
        else:
            assert math.isfinite(value) and value >= 0
