"""Issue 26, poor list: SIGTERM mid-check (a batch time limit) ends the
check as Ctrl-C does: what was measured is written (check.json marked
incomplete, check.html) and summed up, exit 143; its temporary folders are
removed. It once ended on the spot: no HTML, no summary, MPI temp files left."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

from hostile import _cap, env


def test_sigterm_mid_check_writes_the_report(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    out = tmp_path / "c"
    p = subprocess.Popen([sys.executable, "-m", "nodemap", "check", "-o", str(out)], env=env(tmp_path, TMPDIR=str(tmp)),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_cap)
    deadline = time.monotonic() + 60
    while not (out / "check.json").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1.0)  # into the first step's measuring
    p.send_signal(signal.SIGTERM)
    stdout, stderr = p.communicate(timeout=120)
    assert p.returncode == 128 + signal.SIGTERM, stderr[-2000:]
    assert "interrupted, reporting what was measured" in stderr and "Traceback" not in stderr, stderr[-2000:]
    assert "INCOMPLETE" in stdout
    assert json.loads((out / "check.json").read_text())["complete"] is False
    assert "INCOMPLETE" in (out / "check.html").read_text()
    assert list(tmp.iterdir()) == []
