"""The one size parser and formatter (nodemap.units): conventions, errors, round trips."""

import pytest
from hypothesis import given, strategies as st

from nodemap.errors import NodemapError
from nodemap.units import MAX_BYTES, format_size, gbps, parse_size, parse_sizes


@pytest.mark.parametrize("text, n", [
    ("1G", 2**30), ("1g", 2**30), ("1GiB", 2**30), ("1GB", 10**9), ("1gb", 10**9), ("2MB", 2 * 10**6),
    ("512M", 512 << 20), ("512 MiB", 512 << 20), ("4.5k", 4608), ("1.5K", 1536), ("65536", 65536),
    ("4e9", 4 * 10**9), ("2 GB", 2 * 10**9), ("1T", 2**40), ("1TB", 10**12), ("3KB", 3000), ("8B", 8), ("0", 0),
])
def test_sizes_follow_the_one_convention(text, n):
    assert parse_size(text) == n


@pytest.mark.parametrize("text", ["", "GiB", "1 parsec", "-1GiB", "inf", "nan", "1.5", "0.1K", "1e100", "1X",
                                  "1" * 5000, "1 2", "²"])
def test_refusals_name_the_option(text):
    with pytest.raises(NodemapError, match=r"^--max-size ") as e:
        parse_size(text, "--max-size")
    assert "\n" not in str(e.value) and len(str(e.value)) < 300


def test_limits():
    with pytest.raises(NodemapError, match="too small, give at least 4 KiB"):
        parse_size("1K", "--size", minimum=4096)
    with pytest.raises(NodemapError, match="larger than"):
        parse_size(str(MAX_BYTES + 1))


def test_size_lists_and_ranges():
    assert parse_sizes("1:64MiB")[-1] == 64 << 20 and len(parse_sizes("1:64MiB")) == 27
    assert parse_sizes("8,1KiB,8") == [8, 1024]
    assert parse_sizes("1M,1MB") == [10**6, 2**20]
    for bad in ("64:1", "0:8", ",", "1:x"):
        with pytest.raises(NodemapError, match="^--sizes"):
            parse_sizes(bad)


@pytest.mark.parametrize("n, text", [(0, "0 B"), (100, "100 B"), (1536, "1.5 KiB"), (2**30, "1 GiB"),
                                     (3 << 29, "1.5 GiB"), (64 << 20, "64 MiB"), (2**40, "1 TiB")])
def test_format_is_iec(n, text):
    assert format_size(n) == text


@given(st.integers(min_value=0, max_value=MAX_BYTES))
def test_plain_bytes_round_trip(n):
    assert parse_size(str(n)) == n


@given(st.integers(min_value=0, max_value=2**20), st.sampled_from(["K", "M", "G", "T", "KiB", "MiB", "GiB", "TiB"]))
def test_binary_units(v, unit):
    p = "KMGT".index(unit[0]) + 1
    assert parse_size(f"{v}{unit}") == v * 1024**p == parse_size(f"{v} {unit.lower()}")


@given(st.integers(min_value=0, max_value=2**20), st.sampled_from(["KB", "MB", "GB", "TB"]))
def test_decimal_units(v, unit):
    assert parse_size(f"{v}{unit}") == v * 1000 ** ("KMGT".index(unit[0]) + 1)


@given(st.integers(min_value=1, max_value=MAX_BYTES))
def test_formatted_sizes_parse_back_close(n):
    text = format_size(n)
    back = None
    try:
        back = parse_size(text.replace(" ", ""))
    except NodemapError:  # "1.23 KiB" may not be whole bytes: the figure is within 0.5%
        num, unit = text.split()
        back = float(num) * {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}[unit]
    assert abs(back - n) <= 0.005 * n + 1


@given(st.text(max_size=30))
def test_any_text_parses_or_refuses_in_one_line(text):
    try:
        n = parse_size(text, "--size")
    except NodemapError as e:
        assert str(e).startswith("--size ") and "\n" not in str(e)
    else:
        assert 0 <= n <= MAX_BYTES


def test_bandwidth_is_decimal_gb():
    assert gbps(10**9, [0.5]) == [2.0]
