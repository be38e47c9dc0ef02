"""Issue 16, item 1: `nodemap run` hands the application the signal
dispositions it would get from a shell, not the ones Python set for itself
(SIGPIPE and SIGXFSZ ignored), and an empty signal mask."""

from __future__ import annotations

import signal
import subprocess
import sys

from hostile import _cap, env, nodemap

RUN = ["run", "--local-rank", "0", "--local-size", "1", "--no-cache", "--"]


def _mask(status: str, field: str) -> int:
    return next(int(line.split()[1], 16) for line in status.splitlines() if line.startswith(field + ":"))


def test_the_application_ignores_no_signal_python_ignored():
    r = nodemap(*RUN, "sh", "-c", "grep -E '^Sig(Ign|Blk)' /proc/self/status")
    assert r.returncode == 0, r.stderr
    with open("/proc/self/status") as f:
        ours = f.read()
    python_ignores = 1 << (signal.SIGPIPE - 1) | 1 << (signal.SIGXFSZ - 1)
    # what this test's own parent made us ignore (nohup's SIGHUP) is kept; normally nothing
    inherited = _mask(ours, "SigIgn") & ~python_ignores
    assert _mask(r.stdout, "SigIgn") == inherited
    assert _mask(r.stdout, "SigBlk") == 0


def test_a_pipeline_into_head_ends_the_application_by_sigpipe(tmp_path):
    app = subprocess.Popen([sys.executable, "-m", "nodemap", *RUN, "yes"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, env=env(tmp_path), preexec_fn=_cap)
    head = subprocess.run(["head", "-1"], stdin=app.stdout, capture_output=True, timeout=10)
    app.stdout.close()
    assert app.wait(timeout=10) == -signal.SIGPIPE  # a shell reports 141 for the first stage
    assert head.stdout == b"y\n" and b"Broken pipe" not in app.stderr.read()
    app.stderr.close()
