"""nodemap's readers against hwloc's whole test suite (tests/hwloc_suite.py).

Skipped unless NODEMAP_HWLOC_TESTS names tests/hwloc of an open-mpi/hwloc
checkout (the folder holding linux/ and xml/):

    git clone https://github.com/open-mpi/hwloc /tmp/hwloc   # results: commit 3b37b02
    NODEMAP_HWLOC_TESTS=/tmp/hwloc/tests/hwloc .venv/bin/python -m pytest -q tests/test_conformance_hwloc_suite.py

NODEMAP_HWLOC_REFS may name a folder of `<stem>.console` files printed by
an hwloc 3.0 lstopo for the suite's XML files (`lstopo-no-graphics --if xml
--input X.xml -v > X.console`; Debian's 2.9 cannot read v3 XML): each is a
case "ref/<stem>" too. benchmarks/hwloc_suite_tally.py runs the same cases and
records the tally (benchmarks/results/hwloc_suite.md).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

import hwloc_suite

FOLDER = os.environ.get("NODEMAP_HWLOC_TESTS", "")
REFS = os.environ.get("NODEMAP_HWLOC_REFS", "") or None


def suite_cases() -> list:
    if not FOLDER or not Path(FOLDER).is_dir():
        return [pytest.param(None, marks=pytest.mark.skip(reason="NODEMAP_HWLOC_TESTS is not set to hwloc's "
                                                                     "tests/hwloc folder"), id="unset")]
    found = hwloc_suite.cases(FOLDER, REFS)
    return [pytest.param(c, id=c.name, marks=[pytest.mark.xfail(strict=True, reason=hwloc_suite.EXPECTED[c.name])]
                         if c.name in hwloc_suite.EXPECTED else []) for c in found]


@pytest.fixture(scope="module")
def unpack(tmp_path_factory):
    from nodemap.topology import snapshot

    roots: dict[Path, str] = {}

    def get(tarball: Path) -> str:
        if tarball not in roots:
            dest = tmp_path_factory.mktemp(re.sub(r"\W", "_", tarball.name))
            snapshot.unpack(str(tarball), str(dest))
            roots[tarball] = snapshot.find_root(str(dest))
        return roots[tarball]

    return get


@pytest.mark.parametrize("case", suite_cases())
def test_agrees_with_hwloc(case, unpack):
    diffs = hwloc_suite.check(case, unpack)
    assert not diffs, f"{case.name}:\n" + "\n".join(d[:400] for d in diffs)


def test_expected_failures_name_real_cases():
    if not FOLDER:
        pytest.skip("NODEMAP_HWLOC_TESTS is not set")
    names = {c.name for c in hwloc_suite.cases(FOLDER, REFS)}
    listed = {n for n in hwloc_suite.EXPECTED if REFS or not n.startswith("ref/")}
    assert listed <= names
