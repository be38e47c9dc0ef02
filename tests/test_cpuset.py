"""CpuSet: list syntax and hex masks round-trip, algebra agrees with Python sets."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from nodemap.topology.cpuset import CpuSet, CpuSetError

ints = st.frozensets(st.integers(0, 1200), max_size=80)
# Runs of neighbours exercise range formatting far more than scattered ints.
runs = st.lists(st.tuples(st.integers(0, 600), st.integers(0, 70)), max_size=8).map(
    lambda rs: frozenset(i for a, n in rs for i in range(a, a + n)))
sets = st.one_of(ints, runs)


@given(sets)
def test_list_syntax_round_trip(s):
    c = CpuSet(s)
    assert CpuSet.parse(c.format()) == c
    assert c.to_list() == sorted(s)


@given(sets)
def test_format_is_canonical(s):
    ranges = CpuSet(s).ranges()
    for (a, b), (c, _) in zip(ranges, ranges[1:]):
        assert a <= b and c > b + 1  # sorted, disjoint, never adjacent
    assert sum(b - a + 1 for a, b in ranges) == len(s)


@given(sets)
def test_mask_round_trip_and_hwloc_prefixes(s):
    c = CpuSet(s)
    assert CpuSet.parse_mask(c.format_mask()) == c
    hwloc = ",".join("0x" + w for w in c.format_mask().split(","))
    assert CpuSet.parse_mask(hwloc) == c
    assert c.mask == sum(1 << i for i in s)


@given(sets, sets)
def test_algebra_matches_python_sets(a, b):
    x, y = CpuSet(a), CpuSet(b)
    assert set(x | y) == a | b
    assert set(x & y) == a & b
    assert set(x - y) == a - b
    assert set(x ^ y) == a ^ b
    assert x.issubset(y) == (a <= b)
    assert x.isdisjoint(y) == a.isdisjoint(b)
    assert (x == y) == (a == b) and (hash(x) == hash(y)) >= (a == b)
    assert CpuSet.union_all([x, y]) == x | y


@given(sets)
def test_views(s):
    c = CpuSet(s)
    assert len(c) == len(s) and bool(c) == bool(s)
    assert c.first() == (min(s) if s else -1)
    assert c.last() == (max(s) if s else -1)
    assert all(i in c for i in s) and -1 not in c and "0" not in c


@given(st.integers(0, 500), st.integers(0, 100), st.integers(1, 17))
def test_stride(lo, span, stride):
    assert set(CpuSet.parse(f"{lo}-{lo + span}:{stride}")) == set(range(lo, lo + span + 1, stride))


@given(st.lists(sets, min_size=2, max_size=6))
def test_sorting_is_deterministic(items):
    cs = [CpuSet(s) for s in items]
    assert sorted(cs) == sorted(reversed(cs)) or len(set(cs)) < len(cs)


@pytest.mark.parametrize("text", ["3-1", "a", "1,,2", "-1", "0-3:0", "1-", "0x1", "1 2"])
def test_bad_lists_raise(text):
    with pytest.raises(CpuSetError):
        CpuSet.parse(text)


def test_examples():
    assert CpuSet.parse(" 0-3,8-11 ").format() == "0-3,8-11"
    assert CpuSet.parse("") == CpuSet() and CpuSet().format() == ""
    assert CpuSet.parse_mask("ff,00000000") == CpuSet.parse("32-39")
    assert CpuSet.parse_mask("0x000000ff,,0x1") == CpuSet.parse("0,64-71")
    assert CpuSet.parse_mask("") == CpuSet()
    assert repr(CpuSet([1, 2, 3])) == "CpuSet('1-3')"
    with pytest.raises(CpuSetError):
        CpuSet.parse_mask("zz")
    with pytest.raises(CpuSetError):
        CpuSet([-1])
    with pytest.raises(CpuSetError):
        CpuSet.from_mask(-5)
