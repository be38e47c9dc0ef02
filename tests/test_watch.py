"""`nodemap run --watch`: the monitor's lifecycle (CPU only) and the memory timeline analysis."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time

import pytest

from nodemap.check import expectations
from nodemap.watch import analysis, summary, timeline
from nodemap.watch.analysis import classify
from nodemap.units import GiB, MiB

RULES = expectations.shipped().table(expectations.WatchRules)

# --- the classifier on synthetic series ---------------------------------------------------


def _ts(n=100, dt=0.2):
    return [i * dt for i in range(n)]


def test_steady_series_is_steady():
    t = _ts()
    y = [4 * GiB + (i % 3) * MiB for i in range(len(t))]
    assert classify(t, y, RULES).kind == "steady"


def test_leak_is_growing_with_its_slope_and_total():
    t = _ts()
    y = [2 * GiB + i * 100 * MiB for i in range(len(t))]  # 100 MiB per 0.2 s sample
    s = classify(t, y, RULES)
    assert s.kind == "growing"
    assert s.slope == pytest.approx(500 * MiB, rel=0.01)
    assert s.growth > 7 * GiB and s.peak == y[-1]


def test_staircase_leak_freed_at_exit_is_still_growing():
    """IPC-style: a step each iteration; the application frees all at its very end."""
    t = _ts(200)
    y = [1 * GiB + (i // 10) * 256 * MiB for i in range(len(t))]
    y[-3:] = [1 * GiB] * 3
    assert classify(t, y, RULES).kind == "growing"


def test_short_leak_with_a_teardown_of_two_samples_is_growing():
    t = _ts(30)
    y = [500 * MiB + i * 256 * MiB for i in range(28)] + [300 * MiB, 0]
    assert classify(t, y, RULES).kind == "growing"


def test_spike_given_back_is_a_spike():
    t = _ts()
    y = [3 * GiB] * len(t)
    for i in range(40, 50):
        y[i] = 9 * GiB
    s = classify(t, y, RULES)
    assert s.kind == "spike" and s.peak == 9 * GiB


def test_allocation_at_start_then_flat_is_ramp_not_growth():
    t = _ts()
    y = [min(i, 30) * 200 * MiB for i in range(len(t))]
    assert classify(t, y, RULES).kind == "ramp"


def test_too_few_samples_is_short():
    assert classify([0.0, 0.2], [1, 2], RULES).kind == "short"


# --- findings on synthetic timelines --------------------------------------------------------


def _write(path, rank, own, *, used=None, total=80 * GiB, job="j1", pid=None, gpus=(0,), libs=(), others=None,
           end=True, rss=None, held=0, start=0, planned=None):
    pid = pid or 1000 + rank
    lines = [{"schema": "nodemap.watch/1", "host": "n1", "job": job, "rank": rank, "local_rank": rank,
              "local_size": 2, "pid": pid, "argv": ["app"], "start": start, "interval": 0.2,
              "planned_gpus": list(gpus if planned is None else planned), "mem_total": 512 * GiB, "env": {}},
             {"gpus": [{"index": g, "uuid": f"GPU-{g}", "name": "H100", "total": total} for g in gpus]}]
    if libs:
        lines.append({"libs": list(libs)})
    if others:
        lines.append({"others": others})
    for i, o in enumerate(own):
        u = used[i] if used else o + 500 * MiB
        r = rss[i] if rss else 2 * GiB
        lines.append([round(i * 0.2, 3), r, 400 * GiB, [o] * len(gpus), [u] * len(gpus), [held] * len(gpus)])
    if end:
        lines.append({"end": {"t": len(own) * 0.2, "samples": len(own), "exit": 0}})
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))


def _analyse(tmp_path):
    return analysis.analyse(timeline.read_dir(str(tmp_path)), RULES)


def test_leaking_rank_gets_a_growth_finding_with_the_pool_fix(tmp_path):
    _write(tmp_path / "n1.r0.1.watch", 0, [4 * GiB + i * 50 * MiB for i in range(100)], libs=["cupy"])
    _write(tmp_path / "n1.r1.2.watch", 1, [4 * GiB] * 100, gpus=(1,))
    a = _analyse(tmp_path)
    kinds = [(f.kind, f.rank) for f in a.findings]
    assert ("growth", 0) in kinds and not any(r == 1 for _, r in kinds)
    f = next(f for f in a.findings if f.kind == "growth")
    assert "free_all_blocks" in f.fix and "GiB/min" in f.evidence


def test_ucx_loaded_makes_it_ipc_growth_with_the_ucx_fix(tmp_path):
    _write(tmp_path / "n1.r0.1.watch", 0, [4 * GiB + i * 50 * MiB for i in range(100)],
           libs=["libucp", "libuct_cuda"])
    f = next(f for f in _analyse(tmp_path).findings if f.rank == 0)
    assert f.kind == "ipc-growth" and "UCX_TLS=^cuda_ipc" in f.fix


def test_peer_rank_holding_the_gpu_makes_growth_ipc_style(tmp_path):
    # rank 1's child (pid 5000, parent 1001) holds rank 0's GPU 0, which its plan did not give it
    _write(tmp_path / "n1.r0.1.watch", 0, [4 * GiB + i * 50 * MiB for i in range(100)],
           others={"0": [[5000, "python", [1001, 1]]]})
    _write(tmp_path / "n1.r1.2.watch", 1, [4 * GiB] * 100, gpus=(1,))
    a = _analyse(tmp_path)
    kinds = {f.kind for f in a.findings}
    assert {"ipc-growth", "shared-gpu"} <= kinds and "foreign" not in kinds


def test_plain_leak_of_two_ranks_planned_on_one_gpu_is_not_ipc(tmp_path):
    """Two ranks per GPU by plan see each other there, and both grow alike: that is a shared leak, not CUDA IPC;
    CuPy's fix comes first."""
    leak = [4 * GiB + i * 50 * MiB for i in range(100)]
    _write(tmp_path / "n1.r0.1001.watch", 0, leak, pid=1001,
           libs=["cupy"], others={"0": [[1002, "python", [900]]]}, held=4 * GiB)
    _write(tmp_path / "n1.r1.1002.watch", 1, leak, pid=1002, libs=["cupy"],
           others={"0": [[1001, "python", [900]]]}, held=4 * GiB)
    a = _analyse(tmp_path)
    kinds = [(f.kind, f.rank) for f in a.findings]
    assert ("growth", 0) in kinds and not any(k in ("ipc-growth", "shared-gpu") for k, _ in kinds)
    f = a.findings[0]
    assert f.fix.startswith("CuPy") and f.fix.index("CuPy") < f.fix.index("UCX_TLS=^cuda_ipc")  # IPC last
    assert "rank 1 (pid 1002 python) also holds GPU 0, as planned" in f.evidence


def test_one_rank_growing_beside_a_steady_planned_peer_is_ipc_style(tmp_path):
    """The importer of CUDA IPC handles grows, the exporter that owns the buffers holds steady: IPC's fix first."""
    _write(tmp_path / "n1.r0.1001.watch", 0, [4 * GiB] * 100, pid=1001, libs=["cupy"],
           others={"0": [[1002, "python", [900]]]}, held=4 * GiB)
    _write(tmp_path / "n1.r1.1002.watch", 1, [4 * GiB + i * 50 * MiB for i in range(100)], pid=1002,
           libs=["cupy"], others={"0": [[1001, "python", [900]]]}, held=4 * GiB)
    f = next(f for f in _analyse(tmp_path).findings if f.rank == 1 and f.kind.endswith("growth"))
    assert f.kind == "ipc-growth" and "holds steady while this rank grows" in f.evidence
    assert f.fix.index("UCX_TLS=^cuda_ipc") < f.fix.index("CuPy")


def test_ucx_excluded_from_cuda_ipc_is_not_ipc_growth(tmp_path):
    _write(tmp_path / "n1.r0.1.watch", 0, [4 * GiB + i * 50 * MiB for i in range(100)],
           libs=["libucp", "libuct_cuda"])
    p = tmp_path / "n1.r0.1.watch"
    lines = p.read_text().splitlines()
    head = json.loads(lines[0])
    head["env"] = {"UCX_TLS": "^cuda_ipc"}
    p.write_text("\n".join([json.dumps(head), *lines[1:]]) + "\n")
    f = next(f for f in _analyse(tmp_path).findings if f.rank == 0)
    assert f.kind == "growth" and "already excludes cuda_ipc" in f.evidence


def test_steady_ranks_have_no_findings(tmp_path):
    for r in range(4):
        _write(tmp_path / f"n1.r{r}.{r}.watch", r, [4 * GiB + (i % 2) * MiB for i in range(100)], gpus=(r,))
    a = _analyse(tmp_path)
    assert a.findings == [] and [r.gpu.kind for r in a.ranks] == ["steady"] * 4
    assert "no memory findings" in summary.render(a)


def test_one_rank_far_above_its_peers_is_imbalance(tmp_path):
    for r in range(4):
        _write(tmp_path / f"n1.r{r}.{r}.watch", r, [(12 if r == 2 else 4) * GiB] * 50, gpus=(r,))
    f = [f for f in _analyse(tmp_path).findings]
    assert [(x.kind, x.rank) for x in f] == [("imbalance", 2)]
    assert "3.0x" in f[0].evidence


def test_gpu_near_capacity_names_the_margin(tmp_path):
    _write(tmp_path / "n1.r0.1.watch", 0, [70 * GiB] * 50, used=[76 * GiB] * 50)
    f = next(f for f in _analyse(tmp_path).findings if f.kind == "near-capacity")
    assert "margin 4.00 GiB" in f.evidence


def test_foreign_process_on_the_gpu(tmp_path):
    p = tmp_path / "n1.r0.1.watch"
    _write(p, 0, [4 * GiB] * 50, others={"0": [[777, "jupyter", [1]]]}, held=3 * GiB)
    f = next(f for f in _analyse(tmp_path).findings if f.kind == "foreign")
    assert "pid 777 jupyter" in f.evidence and "3.00 GiB" in f.evidence


def test_unattributed_gpu_growth_points_at_ipc(tmp_path):
    _write(tmp_path / "n1.r0.1.watch", 0, [4 * GiB] * 100, used=[5 * GiB + i * 40 * MiB for i in range(100)])
    f = next(f for f in _analyse(tmp_path).findings)
    assert f.kind == "gpu-growth" and "cudaIpcCloseMemHandle" in f.fix


def test_torn_last_line_and_killed_monitor(tmp_path):
    p = tmp_path / "n1.r0.1.watch"
    _write(p, 0, [4 * GiB] * 20, end=False)
    with open(p, "a") as f:
        f.write('[4.0,123,45')  # cut by a kill
    tl = timeline.read(str(p))
    assert tl.torn == 1 and len(tl.t) == 20 and not tl.ended
    assert any("has no end" in n for n in analysis.analyse([tl], RULES).notes)


def test_not_a_timeline_is_skipped(tmp_path):
    (tmp_path / "x.watch").write_text("hello\n")
    assert timeline.read_dir(str(tmp_path)) == []


# --- the monitor's lifecycle, end to end (CPU only) -------------------------------------------

RUN = [sys.executable, "-m", "nodemap", "run", "--local-rank", "0", "--local-size", "1", "--no-cache", "--watch",
       "--watch-interval", "20ms"]

# prints its pid and its parent's (the launcher, its monitor), then does what argv[1] says
APP = r"""
import os, sys, time, signal
print(os.getpid(), os.getppid(), flush=True)
what = sys.argv[1]
keep = []
end = time.time() + float(sys.argv[2]) if len(sys.argv) > 2 else 0
while time.time() < end:
    if what == "grow":
        keep.append(bytearray(8 << 20))
    time.sleep(0.02)
if what == "crash":
    os.abort()
if what == "exit3":
    sys.exit(3)
"""


# runs until its timeline is nearly at the file size limit (the monitor's next write fails), then a little more
APP_UNTIL_THE_TIMELINE_IS_FULL = r"""
import os, sys, time
print("app", flush=True)
d, limit = sys.argv[1], int(sys.argv[2])
end = time.time() + 100
while time.time() < end and sum(f.stat().st_size for f in os.scandir(d)) < limit - 200:
    time.sleep(0.05)
time.sleep(0.5)
sys.exit(3)
"""


def _gone(pid, within=5.0):
    deadline = time.time() + within
    while time.time() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] in "ZX":
                    return True  # a zombie: it has ended (a container's init may not reap)
        except OSError:
            return True
        time.sleep(0.05)
    return False


def _start(tmp_path, *app_args, env=None):
    """nodemap run --watch of APP; (process, watch dir, the application's pid, its parent's)."""
    d = tmp_path / "w"
    p = subprocess.Popen(RUN + ["--watch-dir", str(d), "--", sys.executable, "-c", APP, *app_args],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env={**os.environ, **(env or {})})
    first = p.stdout.readline().split()
    return p, d, int(first[0]), int(first[1])


@pytest.mark.parametrize("what,code", [("exit3", 3), ("crash", -signal.SIGABRT)])
def test_app_keeps_its_exit_status_and_the_summary_comes_before_the_return(tmp_path, what, code):
    """The summary arrived after the application's own exit (a script's next command printed first), once
    never: now the launcher stays the application's parent and returns only after the summary."""
    p, d, pid, parent = _start(tmp_path, what, "0.3")
    out, err = p.communicate(timeout=60)
    assert parent == p.pid and pid != p.pid  # the launcher started the application and stayed beside it
    assert p.returncode == code  # its code, or death by its signal
    assert "nodemap watch" in err or "memory" in err, err  # the summary, printed before nodemap run returned
    assert _gone(pid)  # no orphan
    (tl,) = timeline.read_dir(str(d))
    assert tl.header.pid == p.pid and tl.ended and tl.torn == 0 and len(tl.t) >= 3
    assert getattr(tl.end, "exit" if code > 0 else "signal") == abs(code)


def test_a_script_s_next_command_prints_after_the_summary(tmp_path):
    d = tmp_path / "w"
    run = " ".join(shlex.quote(a) for a in RUN + ["--watch-dir", str(d), "--", "true"])
    r = subprocess.run(["sh", "-c", f"{run} 2>&1; echo NEXT"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.rstrip().endswith("NEXT"), r.stdout
    assert r.stdout.index("NEXT") > r.stdout.index("memory"), r.stdout


def test_the_monitor_is_not_counted_in_the_application_s_memory(tmp_path):
    d = tmp_path / "w"
    r = subprocess.run(RUN + ["--watch-dir", str(d), "--", "sleep", "0.5"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    (tl,) = timeline.read_dir(str(d))
    assert 0 < max(tl.rss) < 8 * MiB  # sleep alone; the monitor (a Python process) is tens of MiB


def test_killed_app_leaves_complete_timeline_and_the_launcher_ends_the_same_way(tmp_path):
    p, d, pid, parent = _start(tmp_path, "sleep", "30")
    time.sleep(0.5)
    os.kill(pid, signal.SIGKILL)
    p.communicate(timeout=60)
    killed_at = 0.5
    assert p.returncode == -signal.SIGKILL
    (tl,) = timeline.read_dir(str(d))
    assert tl.torn == 0 and tl.ended and tl.t[-1] >= killed_at * 0.8 and tl.end.signal == signal.SIGKILL


def test_killed_monitor_leaves_complete_lines_and_app_runs_on(tmp_path):
    p, d, pid, parent = _start(tmp_path, "exit3", "0.8")
    time.sleep(0.3)
    p.kill()  # the launcher is the monitor
    p.wait(timeout=60)
    assert not _gone(pid, within=0.2)  # the application runs on
    p.communicate(timeout=60)  # its stdout ends with it
    assert _gone(pid, within=10)
    (tl,) = timeline.read_dir(str(d))
    assert tl.torn == 0 and not tl.ended and len(tl.t) >= 3


def test_signals_to_the_launcher_reach_the_application(tmp_path):
    """kill, mpirun and srun signal the launcher's pid: the application gets it, the timeline still ends."""
    p, d, pid, parent = _start(tmp_path, "sleep", "30")
    time.sleep(0.3)
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=60)
    assert p.returncode == -signal.SIGTERM and _gone(pid)
    (tl,) = timeline.read_dir(str(d))
    assert tl.ended and tl.end.signal == signal.SIGTERM and "memory" in err


def test_growing_app_is_flagged_in_the_summary(tmp_path):
    p, d, pid, parent = _start(tmp_path, "grow", "1.5")
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0
    assert "host memory (RSS) grows steadily" in err, err
    assert "host memory only" in err or "GPU" in err


def test_unwritable_watch_dir_is_one_line_before_the_app_starts(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    marker = tmp_path / "started"
    r = subprocess.run(RUN + ["--watch-dir", str(blocker / "sub"), "--", sys.executable, "-c",
                              f"open({str(marker)!r}, 'w')"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "--watch-dir" in r.stderr and "Traceback" not in r.stderr
    assert not marker.exists()


def test_full_disk_stops_the_timeline_with_one_note_and_the_app_runs_on(tmp_path):
    """A file size limit stands in for a full disk: the write that crosses it is short, the next fails."""
    import resource

    limit = 4096
    d = tmp_path / "w"
    d.mkdir()
    # the application runs until its timeline is full (however slowly a loaded machine samples)
    p = subprocess.Popen(RUN + ["--watch-dir", str(d), "--", sys.executable, "-c", APP_UNTIL_THE_TIMELINE_IS_FULL,
                                str(d), str(limit)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)))
    out, err = p.communicate(timeout=150)
    assert p.returncode == 3 and len(out.splitlines()) == 1, (out, err)  # the application's own exit, run once
    assert err.count("timeline of rank 0 stops at") == 1 and "error" not in err and "Traceback" not in err, err
    (f,) = d.iterdir()
    assert f.stat().st_size <= limit and f.read_bytes().endswith(b"\n")  # no torn last line
    tl = timeline.read(str(f))
    assert tl.torn == 0 and len(tl.t) >= 3 and not tl.ended


def test_a_damaged_line_before_the_last_is_named_a_torn_last_one_is_skipped(tmp_path):
    """A line in the middle is never cut by a kill (the monitor writes each whole, in one write): one that does
    not decode is damage, named by file, line and field; it was skipped and counted as torn."""
    from nodemap.errors import InputError

    p = tmp_path / "n1.r0.1.watch"
    _write(p, 0, [4 * GiB] * 20)
    with open(p, "a") as f:
        f.write('[4.0,"x",1,[1],[1],[1]]\n[4.2,1,')
    with pytest.raises(InputError, match=r"n1.r0.1.watch, line 24: field \[1\] is str, not an integer"):
        timeline.read(str(p))
    _write(p, 0, [4 * GiB] * 20)
    with open(p, "a") as f:
        f.write('[4.2,1,')  # the monitor killed in its last write
    tl = timeline.read(str(p))
    assert tl.torn == 1 and len(tl.t) == 20
    assert any("1 line(s) of its timeline could not be read" in n for n in analysis.analyse([tl], RULES).notes)


@pytest.mark.parametrize("prog", ["/nonexistent/app", "nodemap-no-such-program", "script"])
def test_failed_exec_leaves_no_monitor_and_no_timeline(tmp_path, prog):
    if prog == "script":  # found, but its interpreter is missing: exec fails after the monitor forked
        prog = str(tmp_path / "app.sh")
        (tmp_path / "app.sh").write_text("#!/nonexistent/sh\n")
        os.chmod(prog, 0o755)
    d = tmp_path / "w"
    r = subprocess.run(RUN + ["--watch-dir", str(d), "--", prog], capture_output=True, text=True, timeout=60)
    assert r.returncode == 127 and "cannot run" in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert "nodemap watch" not in r.stderr and not list(d.glob("*.watch"))


def test_bad_interval_is_one_line(tmp_path):
    r = subprocess.run(RUN[:-1] + ["fast", "--", "true"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--watch-interval" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("opt", [["--watch-interval", "fast"], ["--watch-interval", "1s"], ["--watch-dir", "w"]])
def test_watch_options_without_watch_are_refused(tmp_path, opt):
    marker = tmp_path / "started"
    r = subprocess.run(RUN[:-3] + opt + ["--", sys.executable, "-c", f"open({str(marker)!r}, 'w')"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "only with --watch" in r.stderr and not marker.exists(), r.stderr


def test_dry_run_says_where_the_timelines_would_go(tmp_path):
    r = subprocess.run(RUN + ["--watch-dir", str(tmp_path / "w"), "--dry-run", "--", "true"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0 and f"every 0.02 s into {tmp_path / 'w'}/" in r.stdout, r.stderr
    assert not (tmp_path / "w").exists()  # nothing is written by a dry run
    env = {k: v for k, v in os.environ.items() if k != "NODEMAP_WATCH_DIR" and not k.endswith(("JOB_ID", "JOBID"))}
    r = subprocess.run(RUN + ["--dry-run", "--json", "--", "true"], capture_output=True, text=True, timeout=60,
                       env=env)
    assert json.loads(r.stdout)["watch"] == {"dir": "nodemap-watch", "interval_s": 0.02}


def test_watch_code_is_not_imported_without_watch():
    code = ("import sys; from nodemap import cli; "
            "cli.main(['run', '--local-rank', '0', '--local-size', '1', '--dry-run', '--', 'true']); "
            "assert not any(m.startswith('nodemap.watch') for m in sys.modules); print('ok')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.stdout.strip().endswith("ok"), r.stderr


FAKE_NVML = r'''
"""A stand-in for nvidia-ml-py: one 80 GiB GPU on which the watched application grows 1 GiB/s
and PID 1 holds 2 GiB."""
import os, time
T0 = time.time()
class NVMLError(Exception):
    pass
def nvmlInit(): pass
def nvmlShutdown(): pass
def nvmlDeviceGetCount(): return 1
def nvmlDeviceGetHandleByIndex(i): return i
def nvmlDeviceGetUUID(h): return "GPU-fake"
def nvmlDeviceGetName(h): return "FakeGPU"
def nvmlDeviceGetPciInfo(h):
    p = _O(); p.busId = b"00000000:3B:00.0"
    return p
def _own(): return int((time.time() - T0) * (1 << 30))
class _O:
    pass
def nvmlDeviceGetMemoryInfo(h):
    m = _O(); m.total = 80 << 30; m.used = (3 << 30) + _own(); m.free = m.total - m.used
    return m
def _p(pid, b):
    p = _O(); p.pid = pid; p.usedGpuMemory = b
    return p
def nvmlDeviceGetComputeRunningProcesses(h):
    return [_p(_app(), _own()), _p(1, 2 << 30)]
def _app():  # the monitor's child is the application
    kids = [k for t in os.listdir("/proc/self/task") for k in open(f"/proc/self/task/{t}/children").read().split()]
    return int(kids[0]) if kids else 0
def nvmlDeviceGetGraphicsRunningProcesses(h):
    return []
'''


def test_nvml_path_records_the_rank_s_gpu_memory_and_finds_growth_and_foreign(tmp_path):
    (tmp_path / "pynvml.py").write_text(FAKE_NVML)
    p, d, pid, parent = _start(tmp_path, "sleep", "1.5", env={"PYTHONPATH": str(tmp_path)})
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0
    (tl,) = timeline.read_dir(str(d))
    assert tl.gpus[0].name == "FakeGPU" and tl.gpus[0].total == 80 * GiB
    assert tl.own[-1][0] > tl.own[0][0] > 0 and tl.others[-1] == [2 * GiB]
    assert "GPU memory grows steadily" in err and "another process holds memory" in err, err


def _fake_nvml(monkeypatch, buses):
    """NVML that sees only the GPUs of `buses` (a device cgroup), indexed 0.. in that order."""
    import types

    m = types.ModuleType("pynvml")
    mem = types.SimpleNamespace(total=80 * GiB, used=GiB)
    m.nvmlInit = m.nvmlShutdown = lambda: None
    m.nvmlDeviceGetCount = lambda: len(buses)
    m.nvmlDeviceGetHandleByIndex = lambda i: ("handle", buses[i])
    m.nvmlDeviceGetPciInfo = lambda h: types.SimpleNamespace(busId=h[1].encode())
    m.nvmlDeviceGetMemoryInfo = lambda h: mem
    m.nvmlDeviceGetUUID = lambda h: f"GPU-{h[1]}"
    m.nvmlDeviceGetName = lambda h: "H100"
    monkeypatch.setitem(sys.modules, "pynvml", m)


def test_monitor_finds_its_gpus_by_bus_id_under_a_device_cgroup(monkeypatch):
    from nodemap.watch.monitor import _Gpus

    # the node's GPUs 2 and 3 (bus 0000:9b, 0000:bb); NVML sees only them, as its indexes 0 and 1
    _fake_nvml(monkeypatch, ["00000000:9B:00.0", "00000000:BB:00.0"])
    g = _Gpus([3], ["0000:bb:00.0"], NODE)
    assert [(i.index, i.uuid) for i in g.info] == [(3, "GPU-00000000:BB:00.0")] and not g.note
    g = _Gpus([1, 3], ["0000:1b:00.0", "0000:bb:00.0"], NODE)
    assert [i.index for i in g.info] == [3] and "does not see planned GPU(s) 1 (0000:1b:00.0)" in g.note


# the node's four GPUs by PCI bus id, as its topology (sysfs) indexes them
NODE = {"0000:1b:00.0": 0, "0000:3b:00.0": 1, "0000:9b:00.0": 2, "0000:bb:00.0": 3}


def test_monitor_without_a_plan_names_gpus_by_the_topology_not_nvml_s_index(monkeypatch):
    """NVML's indexes 0 and 1 under a device cgroup are the node's GPUs 2 and 3 (were recorded as GPU 0, 1)."""
    from nodemap.watch.monitor import _Gpus

    _fake_nvml(monkeypatch, ["00000000:9B:00.0", "00000000:BB:00.0"])
    g = _Gpus([], [], NODE)
    assert [(i.index, i.bus_id) for i in g.info] == [(2, "0000:9b:00.0"), (3, "0000:bb:00.0")] and not g.note
    # without a topology: by bus id, never NVML's index presented as the node's
    g = _Gpus([], [], {})
    assert [(i.index, i.bus_id) for i in g.info] == [(-1, "0000:9b:00.0"), (-2, "0000:bb:00.0")]
    assert "recorded by PCI bus id" in g.note  # each its own index: the others record is keyed by it
    assert analysis.gpu_label(g.info[0]) == "the GPU at 0000:9b:00.0"
    assert analysis.gpu_label(timeline.Gpu(index=3)) == "GPU 3"


def test_monitor_finds_a_plan_s_gpu_without_bus_ids_through_the_topology(monkeypatch):
    """A plan without bus ids opened NVML's handle by the node's index: NVML's GPU 3 does not exist here."""
    from nodemap.watch import monitor
    from nodemap.watch.monitor import _Gpus

    _fake_nvml(monkeypatch, ["00000000:9B:00.0", "00000000:BB:00.0"])
    g = _Gpus([3], [], NODE)
    assert [(i.index, i.uuid) for i in g.info] == [(3, "GPU-00000000:BB:00.0")] and not g.note
    g = _Gpus([3], [], {})  # neither the plan nor a topology gives its bus id: said, not guessed
    assert g.info == [] and "3 (no PCI bus id" in g.note
    # this node's topology is read (sysfs) only where the plan's bus ids do not say it all
    read = []
    monkeypatch.setattr(monitor, "node_gpus", lambda: read.append(1) or NODE)
    assert [i.index for i in _Gpus([3], ["0000:bb:00.0"]).info] == [3] and read == []
    assert [i.index for i in _Gpus([3], []).info] == [3] and read == [1]


def test_two_gpus_no_topology_named_stay_apart_in_the_analysis(tmp_path):
    from nodemap.watch.analysis import _gpu_stats

    tl = timeline.Timeline("x", timeline.Header(timeline.SCHEMA, host="n1"), t=[0.0, 1.0],
                           used=[[GiB, 2 * GiB]] * 2, own=[[0, 0]] * 2,
                           gpus=[timeline.Gpu(-1, bus_id="0000:9b:00.0", total=80 * GiB),
                                 timeline.Gpu(-1, bus_id="0000:bb:00.0", total=80 * GiB)])  # two monitors' -1
    st = _gpu_stats([tl], RULES)
    assert [(g.label, g.peak_used) for g in st] == [("the GPU at 0000:9b:00.0", GiB), ("the GPU at 0000:bb:00.0", 2 * GiB)]


def test_rank_0_waits_for_a_slow_peer_s_end_beyond_a_few_seconds(tmp_path, monkeypatch):
    """A loaded node ends ranks seconds apart: the summary waits for the peer's end while its application lives."""
    import threading

    from nodemap.watch import monitor as watch

    monkeypatch.setenv("NODEMAP_WATCH_SUMMARY_WAIT", "60")
    peer = subprocess.Popen(["sleep", "30"])
    try:
        _write(tmp_path / "n1.r0.1.watch", 0, [GiB] * 5)
        _write(tmp_path / "n1.r1.2.watch", 1, [GiB] * 5, pid=peer.pid, end=False)
        ending = threading.Timer(4.5, lambda: (tmp_path / "n1.r1.2.watch").open("a").write('{"end":{"t":1}}\n'))
        ending.start()
        t0 = time.time()
        watch._await_peers(str(tmp_path), timeline.Header(timeline.SCHEMA, "n1", "j1", local_size=2))
        assert time.time() - t0 >= 4.4
        assert all(ended for _, ended in timeline.peek_dir(str(tmp_path), "j1", "n1"))
    finally:
        peer.kill()
        peer.wait()


def test_rank_0_does_not_wait_for_a_peer_whose_monitor_died(tmp_path, monkeypatch):
    from nodemap.watch import monitor as watch

    monkeypatch.setenv("NODEMAP_WATCH_SUMMARY_WAIT", "60")
    _write(tmp_path / "n1.r0.1.watch", 0, [GiB] * 5)
    _write(tmp_path / "n1.r1.2.watch", 1, [GiB] * 5, pid=2**22 + 12345, end=False)  # above pid_max: no such process
    t0 = time.time()
    watch._await_peers(str(tmp_path), timeline.Header(timeline.SCHEMA, "n1", "j1", local_size=2))
    assert watch.PEER_GRACE <= time.time() - t0 < 30


def test_mpi_ranks_share_one_job_and_rank_0_prints_the_node_summary_once(tmp_path):
    """mpiexec -n 2 nodemap run --watch: one timeline per rank, grouped as one job; rank 1 holds 4x the memory."""
    pytest.importorskip("mpi4py")
    from pathlib import Path
    import shutil

    found = Path(sys.executable).parent / "mpiexec"
    mpiexec = str(found) if found.exists() else shutil.which("mpiexec")
    if not mpiexec:
        pytest.skip("no mpiexec next to this Python or on PATH")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OMP_", "SLURM_", "OMPI_", "PMI_")) or k.startswith(("OMPI_MCA_", "OMPI_ALLOW"))}
    env["NODEMAP_CACHE_DIR"] = str(tmp_path)
    env["NODEMAP_WATCH_SUMMARY_WAIT"] = "200"  # a loaded machine starts and ends the two ranks seconds apart
    if os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    d = tmp_path / "w"
    app = ("import os, time; r = int(os.environ.get('PMI_RANK') or os.environ.get('OMPI_COMM_WORLD_RANK')); "
           "b = bytearray((1 + 3 * r) * 400 << 20); b[::4096] = b'x' * len(b[::4096]); time.sleep(1.0)")
    cmd = [mpiexec, "--bind-to", "none", "-n", "2", sys.executable, "-m", "nodemap", "run", "--oversubscribe",
           "--watch", "--watch-interval", "50ms", "--watch-dir", str(d), "--", sys.executable, "-c", app]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    tls = timeline.read_dir(str(d))
    assert sorted(t.rank for t in tls) == [0, 1] and len({t.job for t in tls}) == 1 and all(t.ended for t in tls)
    assert r.stderr.count("nodemap watch: 2 rank(s)") == 1, r.stderr
    assert "rank 1: host memory peak far above its peers'" in r.stderr, r.stderr


# --- invariants (hypothesis) ------------------------------------------------------------------

from hypothesis import given, settings
from hypothesis import strategies as st

from nodemap.errors import NodemapError
from nodemap.watch.monitor import parse_interval


@given(st.integers(min_value=10, max_value=3_600_000))
def test_interval_in_ms_parses_to_seconds(ms):
    assert parse_interval(f"{ms}ms") == pytest.approx(ms / 1000)
    assert parse_interval(f" {ms / 1000}S ") == pytest.approx(ms / 1000)


@given(st.text(max_size=12))
def test_interval_parser_never_crashes(text):
    try:
        v = parse_interval(text)
    except NodemapError:
        return
    assert 0.01 <= v <= 3600


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=1 << 36), min_size=5, max_size=60),
       st.floats(min_value=0.01, max_value=10))
def test_shape_does_not_depend_on_the_time_unit(ys, dt):
    t = [i * 0.2 for i in range(len(ys))]
    base, scaled = classify(t, ys, RULES), classify([x * dt for x in t], ys, RULES)
    assert scaled.kind == base.kind and scaled.growth == base.growth and scaled.peak == max(ys)


@settings(max_examples=40, deadline=None)
@given(st.integers(min_value=0, max_value=10_000))
def test_a_timeline_cut_anywhere_reads_as_a_prefix(tmp_path_factory, cut):
    d = tmp_path_factory.mktemp("cut")
    p = d / "n1.r0.1.watch"
    _write(p, 0, [4 * GiB + i * MiB for i in range(40)], end=False)
    full = timeline.read(str(p))
    data = p.read_bytes()
    header_end = data.index(b"\n") + 1
    p.write_bytes(data[:max(header_end, cut % (len(data) + 1))])
    part = timeline.read(str(p))
    assert part.t == full.t[:len(part.t)] and part.own == full.own[:len(part.own)] and part.torn <= 1


# synthetic memory behaviours: a leak under temporaries or noise rises by its floor; steady noise and a spike
# given back do not
_base = st.integers(min_value=1, max_value=40).map(lambda g: g * GiB)
_n = st.integers(min_value=100, max_value=600)


def _noise(seed, n, amp):
    import random

    rnd = random.Random(seed)
    return [rnd.randint(-amp, amp) for _ in range(n)]


@settings(max_examples=60, deadline=None)
@given(_base, _n, st.integers(min_value=2, max_value=20), st.integers(min_value=256, max_value=4096),
       st.integers(min_value=2, max_value=6))
def test_leak_under_freed_temporaries_is_growing(base, n, leak_gib, temp_mib, every):
    """A temporary allocated and freed every few samples must not hide the growth beneath it."""
    leak = max(leak_gib * GiB, base // 5)
    y = [base + leak * i // n + (temp_mib * MiB if i % every == 0 else 0) for i in range(n)]
    s = classify(_ts(n), y, RULES)
    assert s.kind == "growing" and s.growth > leak // 2


@settings(max_examples=60, deadline=None)
@given(_base, _n, st.integers(min_value=2, max_value=20), st.integers(min_value=0, max_value=2**31))
def test_leak_under_noise_is_growing(base, n, leak_gib, seed):
    leak = max(leak_gib * GiB, base // 5)
    y = [base + leak * i // n + e for i, e in enumerate(_noise(seed, n, leak // 16))]
    assert classify(_ts(n), y, RULES).kind == "growing"


@settings(max_examples=60, deadline=None)
@given(_base, _n, st.integers(min_value=0, max_value=2**31), st.floats(min_value=0, max_value=0.02))
def test_steady_with_noise_is_not_growing(base, n, seed, amp):
    y = [base + e for e in _noise(seed, n, int(amp * base))]
    assert classify(_ts(n), y, RULES).kind == "steady"


@settings(max_examples=60, deadline=None)
@given(_base, _n, st.floats(min_value=0.15, max_value=0.6), st.floats(min_value=0.02, max_value=0.2),
       st.integers(min_value=1, max_value=30))
def test_spike_given_back_is_not_growing(base, n, where, width, height_gib):
    y = [base] * n
    a = int(n * where)
    for i in range(a, min(n - 1, a + max(1, int(n * width)))):
        y[i] = base + max(height_gib * GiB, base // 5)  # above the growth threshold (5% of the peak)
    assert classify(_ts(n), y, RULES).kind == "spike"


def test_rank_0_stops_waiting_for_a_peer_that_never_wrote_a_timeline(tmp_path, monkeypatch):
    """A peer that failed before its monitor started leaves no file: rank 0 held
    the job's stderr for the whole 60 s bound, on every such run."""
    from nodemap.watch import monitor as watch

    monkeypatch.setenv("NODEMAP_WATCH_SUMMARY_WAIT", "60")
    monkeypatch.setattr(watch, "NEVER_STARTED", 1.0)
    _write(tmp_path / "n1.r0.1.watch", 0, [GiB] * 5)
    t0 = time.time()
    watch._await_peers(str(tmp_path), timeline.Header(timeline.SCHEMA, "n1", "j1", local_size=2))
    assert 1.0 <= time.time() - t0 < 10
