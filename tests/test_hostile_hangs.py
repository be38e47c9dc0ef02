"""Issue 16, item 4 (and the pipe of item 8): nothing the user points
nodemap at makes it wait forever."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hostile import CPU, _cap, env, hwloc_xml, nodemap, refused, snapshot, terminate_when


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_fifo_or_device_in_a_snapshot_is_refused_not_waited_on(tmp_path, kind):
    snapshot(tmp_path)
    online = tmp_path / CPU / "online"
    online.unlink()
    if kind == "fifo":
        os.mkfifo(online)
    elif os.geteuid() == 0:
        os.mknod(online, 0o644 | stat.S_IFCHR, os.makedev(1, 5))  # a /dev/zero of its own
    else:
        pytest.skip("making a device node needs root")
    refused(nodemap("topo", "--input", str(tmp_path)), "cpu/online", "FIFO or device")


def test_input_from_a_pipe_is_read_whole(tmp_path):
    """--input <(cat node.xml): the format sniffer must not eat the pipe's first bytes."""
    rd, wr = os.pipe()
    with os.fdopen(wr, "w") as w:
        w.write(hwloc_xml())  # small enough for the pipe's buffer
    try:
        r = subprocess.run([sys.executable, "-m", "nodemap", "topo", "--input", f"/dev/fd/{rd}"], pass_fds=[rd],
                           capture_output=True, text=True, timeout=10, env=env(), preexec_fn=_cap)
    finally:
        os.close(rd)
    assert r.returncode == 0 and "PUs 0-1" in r.stdout, r.stderr
    assert "/dev/fd/" in r.stdout  # the source names the pipe, not a temporary copy


def test_device_given_as_input_is_refused_at_once():
    refused(nodemap("topo", "--input", "/dev/zero"), "/dev/zero", "unrecognized format")


def _mpiexec() -> str:
    pytest.importorskip("mpi4py")
    found = Path(sys.executable).parent / "mpiexec"
    path = str(found) if found.exists() else shutil.which("mpiexec")
    if not path:
        pytest.skip("no mpiexec next to this Python or on PATH")
    return path


@pytest.mark.mpi
def test_show_timeout_bounds_mpi_start_up_when_a_rank_never_starts(tmp_path):
    """Rank 1 never calls MPI_Init: rank 0 blocks in it holding the GIL, so
    only a watchdog outside the interpreter can end it."""
    cmd = [_mpiexec(), "-n", "1", sys.executable, "-m", "nodemap", "show", "--timeout", "2", ":",
           "-n", "1", "sleep", "60"]
    t0 = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=30, env=env(tmp_path))
    took = time.monotonic() - t0
    assert took < 10, took
    assert r.returncode != 0
    lines = [line for line in r.stderr.splitlines() if line.startswith("nodemap show:")]
    assert len(lines) == 1 and "MPI_Init" in lines[0] and "more than 2 s" in lines[0], r.stderr


@pytest.mark.parametrize("value", ["nan", "-1", "0"])
def test_show_timeout_out_of_range(value):
    refused(nodemap("show", "--timeout", value), "--timeout")


def _fed(tmp_path: Path, feeder: str, *args: str) -> tuple[subprocess.Popen, subprocess.Popen, Path]:
    """`nodemap topo --input /dev/fd/N ARGS` reading the output of the Python
    program `feeder`, with $TMPDIR in tmp_path: (feeder, nodemap, $TMPDIR)."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    feed = subprocess.Popen([sys.executable, "-c", feeder], stdout=subprocess.PIPE)
    fd = feed.stdout.fileno()
    p = subprocess.Popen([sys.executable, "-m", "nodemap", "topo", "--input", f"/dev/fd/{fd}", *args],
                         pass_fds=[fd], env=env(TMPDIR=str(tmp)), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, preexec_fn=_cap)
    feed.stdout.close()
    return feed, p, tmp


ENDLESS = "import sys\nchunk = b'<topology>' * 100000\nwhile True: sys.stdout.buffer.write(chunk)"
STALLED = "import sys, time\nsys.stdout.buffer.write(b'<topology>'); sys.stdout.flush(); time.sleep(60)"


def test_an_endless_pipe_is_cut_at_the_input_limit(tmp_path):
    """The copy of a pipe stops at MAX_INPUT: it once copied 4.3 GB in 20 s."""
    from nodemap.topology.discover import MAX_INPUT

    feed, p, tmp = _fed(tmp_path, ENDLESS)
    try:
        out, err = p.communicate(timeout=10)
    finally:
        feed.kill()
        feed.wait()
    r = subprocess.CompletedProcess(p.args, p.returncode, out, err)
    refused(r, "/dev/fd/", f"more than {MAX_INPUT >> 20} MiB")
    assert list(tmp.iterdir()) == []  # the partial copy is gone


def test_sigterm_removes_the_copy_of_a_pipe(tmp_path):
    feed, p, tmp = _fed(tmp_path, STALLED)
    try:
        terminate_when(p, tmp, "nodemap-input-*")
    finally:
        p.kill()
        p.communicate()
        feed.kill()
        feed.wait()
    assert list(tmp.iterdir()) == []
