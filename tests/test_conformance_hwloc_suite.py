"""nodemap's readers against hwloc's whole test suite (tests/hwloc_suite.py).

Set NODEMAP_HWLOC_TESTS to tests/hwloc of an open-mpi/hwloc checkout (the
folder holding linux/ and xml/) to run it; skipped when unset.
benchmarks/hwloc_suite.py runs the same cases and records the tally.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

import hwloc_suite

FOLDER = os.environ.get("NODEMAP_HWLOC_TESTS", "")


def suite_cases() -> list:
    if not FOLDER or not Path(FOLDER).is_dir():
        return [pytest.param(None, marks=pytest.mark.skip(reason="NODEMAP_HWLOC_TESTS is not set to hwloc's "
                                                                     "tests/hwloc folder"), id="unset")]
    found = hwloc_suite.cases(FOLDER)
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
    names = {c.name for c in hwloc_suite.cases(FOLDER)}
    assert set(hwloc_suite.EXPECTED) <= names
