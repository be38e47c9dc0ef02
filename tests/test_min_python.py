"""The Python pyproject declares (requires-python) is proven on the source by vermin, a static checker.

tomllib is excluded: its one import (check/sitefile.py) falls back to the tomli
backport that pyproject requires below 3.11, and test_import_graph fails on
a tomllib import without that fallback.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VERMIN = "import sys; from vermin import main; sys.argv[0] = 'vermin'; sys.exit(main())"


def declared() -> str:
    text = (ROOT / "pyproject.toml").read_text()
    return re.search(r'^requires-python\s*=\s*">=\s*([0-9.]+)"', text, re.M).group(1)


def vermin(*args: str) -> subprocess.CompletedProcess:
    try:
        import vermin  # noqa: F401
    except ImportError:
        raise AssertionError("vermin is not installed: it is in the test extra (make dev)") from None
    return subprocess.run([sys.executable, "-c", VERMIN, "--no-tips", "--violations", "--processes", "1", *args],
                          capture_output=True, text=True, timeout=120)


def test_the_source_runs_on_the_declared_python():
    r = vermin(f"-t={declared()}-", "--exclude", "tomllib", str(ROOT / "src" / "nodemap"))
    assert r.returncode == 0, r.stdout + r.stderr


def test_vermin_sees_a_violation(tmp_path):
    # the check can fail: a 3.11 module imported bare is reported against 3.10
    (tmp_path / "m.py").write_text("import tomllib\n")
    assert vermin("-t=3.10-", str(tmp_path)).returncode != 0
