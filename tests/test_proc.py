"""nodemap.proc.deadline: holds while the GIL is held, exits 2 when the interpreter runs, cancels cleanly."""

import subprocess
import sys
import time

# libc's sleep through PyDLL keeps the GIL for the whole call, as MPI_Init does
GIL_HELD = "import ctypes; ctypes.PyDLL(None).sleep(4)"
RELEASED = "import time; time.sleep(4)"


def _run(body: str, seconds: float = 0.5) -> tuple[subprocess.CompletedProcess, float]:
    code = f"from nodemap.proc import deadline\nwith deadline({seconds}, 'nodemap: error: it hung'):\n    {body}\n"
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=20)
    return p, time.monotonic() - t0


def test_a_gil_holding_call_ends_at_the_deadline():
    # was: threading.Timer in mpi_common.deadline, which ran the 4 s call to its end
    p, took = _run(GIL_HELD)
    assert took < 2.5, took  # 0.5 s deadline + proc.GRACE (1 s)
    assert p.returncode != 0
    assert p.stderr.splitlines() == ["nodemap: error: it hung"], p.stderr


def test_a_running_interpreter_exits_2_with_one_line():
    p, took = _run(RELEASED)
    assert took < 1.5, took
    assert p.returncode == 2 and p.stderr.splitlines() == ["nodemap: error: it hung"], p.stderr


def test_a_timer_thread_that_gets_the_gil_late_still_exits_cleanly():
    # a loaded node: the interpreter runs, but the timer thread waits 0.5 s for the GIL (the switch
    # interval stands in for the load); the watchdog killed it (137) 0.25 s past the deadline
    p, took = _run("import sys; sys.setswitchinterval(0.5)\n    while True: pass")
    assert p.returncode == 2 and p.stderr.splitlines() == ["nodemap: error: it hung"], (p.returncode, p.stderr)


def test_a_clean_exit_under_way_is_not_killed():
    # the timer thread runs but its exit is slow (stderr that takes 1.5 s: a loaded node, a slow pipe)
    slow = ("import sys, time\n    class Slow:\n        def write(self, s): time.sleep(1.5); sys.__stderr__.write(s)\n"
            "        def flush(self): sys.__stderr__.flush()\n    sys.stderr = Slow()\n    time.sleep(4)")
    p, took = _run(slow)
    assert p.returncode == 2 and p.stderr.splitlines() == ["nodemap: error: it hung"], (p.returncode, p.stderr)


def test_a_block_that_ends_in_time_cancels_both_guards():
    p, _ = _run("pass\nimport ctypes, time\nctypes.PyDLL(None).sleep(1)\nprint('done')", 0.3)
    assert p.returncode == 0 and p.stdout == "done\n" and p.stderr == "", p.stderr


def test_nested_deadlines_keep_the_outer_one():
    body = ("with deadline(5, 'inner'):\n        pass\n"
            "    import ctypes; ctypes.PyDLL(None).sleep(4)")
    p, took = _run(body)
    assert took < 2.5 and p.stderr.splitlines() == ["nodemap: error: it hung"], (took, p.stderr)


def test_mpi_common_deadline_is_the_proc_one():
    code = ("import ctypes; from nodemap.bench.comm.mpi_common import deadline\n"
            "with deadline(0.5, 'a peer that never answers'):\n    ctypes.PyDLL(None).sleep(4)\n")
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=20,
                       env={"PATH": "/usr/bin:/bin", "PMI_RANK": "3"})
    assert time.monotonic() - t0 < 2.5
    assert "rank 3 waited 0.5 s for a peer that never answers" in p.stderr, p.stderr


def _cut(body: str, seconds: float = 0.3, kill: float = 1.0) -> tuple[subprocess.CompletedProcess, float]:
    code = ("import sys, time\nfrom nodemap.proc import Cut, cut_after\nstopped = []\n"
            f"try:\n    with cut_after({seconds}, lambda: stopped.append(1), 'cut: it hung', grace=0.2, kill={kill}):\n"
            f"        {body}\n    print('ended', stopped)\nexcept Cut:\n    print('cut', stopped)\n"
            "time.sleep(0.5)\nprint('alive')\n")
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=20)
    return p, time.monotonic() - t0


def test_cut_after_stops_polling_work_and_the_process_goes_on():
    # work that polls the stop flag ends by itself: no interrupt, the process carries on
    p, took = _cut("while not stopped: time.sleep(0.01)")
    assert p.returncode == 0 and p.stdout.split("\n")[:2] == ["ended [1]", "alive"], (p.stdout, p.stderr)


def test_cut_after_interrupts_a_blocking_wait_in_the_main_thread():
    # a subprocess wait (as the MPI step's launcher) is interrupted grace s after the stop
    p, took = _cut("import subprocess; subprocess.run(['sleep', '5'])")
    assert p.returncode == 0 and p.stdout.split("\n")[:2] == ["cut [1]", "alive"], (p.stdout, p.stderr)
    assert took < 3, took


def test_cut_after_kills_a_gil_holding_call_and_says_why():
    p, took = _cut(GIL_HELD, kill=0.5)
    assert p.returncode != 0 and p.stderr.splitlines() == ["cut: it hung"], p.stderr
    assert took < 2.5, took


def test_a_block_that_ends_before_the_cut_is_untouched():
    p, _ = _cut("pass", seconds=0.5)
    assert p.returncode == 0 and p.stdout.split("\n")[:2] == ["ended []", "alive"], p.stdout
