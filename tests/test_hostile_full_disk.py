"""Issue 26, poor list: a disk filling while the check writes its report
(here a file size limit: writes fail with EFBIG as with ENOSPC) no longer
drops the summary: it is printed, the failed write is one line, exit 2 for
a node that is otherwise healthy."""

from __future__ import annotations

import resource
import subprocess
import sys

from hostile import env


def test_the_summary_survives_a_report_that_cannot_be_written(tmp_path):
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (2048, 2048))

    r = subprocess.run([sys.executable, "-m", "nodemap", "check", "--level", "health", "-o", str(tmp_path / "o")],
                       capture_output=True, text=True, timeout=60, env=env(tmp_path), preexec_fn=limit)
    assert "nodemap check --level health on" in r.stdout and "findings:" in r.stdout, r.stdout + r.stderr
    assert "report:" not in r.stdout  # no file is claimed written
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "the report was not written" in lines[0] and "File too large" in lines[0], r.stderr
    assert "Traceback" not in r.stderr and r.returncode == 2
