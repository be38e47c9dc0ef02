"""Deadlines that hold even while this process holds the GIL.

`deadline(seconds, line)` bounds a block: past `seconds`, `line` is printed
and the process ends. Two guards, because one cannot do both jobs:

- a timer thread ends the process cleanly (exit 2, or the code given) when the interpreter
  still runs (a Python loop, a sleep, an MPI call that released the GIL);
- a forked watchdog ends it from outside (SIGKILL) GRACE seconds later,
  when it could not: MPI_Init and some blocking C calls hold the GIL, and
  then no thread of this process ever runs again. The timer thread tells
  the watchdog first thing when it runs ("!"), and the watchdog then waits
  EXITING_GRACE for the clean exit: on a loaded node the thread may get
  the GIL late, and a live interpreter must exit 2, not be killed (137).

The watchdog is forked once per process, at the first deadline (for MPI
programs that is the one around MPI_Init, before MPI starts: forking an MPI
process is unsafe), and told each deadline over a pipe. It holds no file
of this process but the pipe and stderr (a launcher waits for stdout's
EOF); EOF on the pipe, also when this process dies, ends it quietly.

`cut_after` ends a block's work but not the process (`nodemap check
--budget`). `run_group` runs a child in its own process group, so a timeout
or Ctrl-C ends it and everything it started, never an orphan that spins on
(mpiexec's ranks, a hung scontrol's RPC).
"""

from __future__ import annotations

import os
import select
import signal
import sys
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator

GRACE = 1.0  # s the timer thread gets to start the clean exit before the watchdog kills
EXITING_GRACE = 5.0  # s the clean exit gets to finish once the timer thread said it runs
EXIT_CODE = 2


class _Watchdog:
    """The forked child and the stack of deadlines it guards (the earliest wins)."""

    def __init__(self) -> None:
        self.pid = 0
        self.w = -1
        self.stack: list[tuple[float, str]] = []

    def push(self, at: float, line: str) -> None:
        self.stack.append((at, line))
        self._tell()

    def pop(self) -> None:
        self.stack.pop()
        self._tell()

    def _tell(self) -> None:
        if self.pid and not self._alive():
            self.pid = 0
        if not self.pid:
            if not self.stack:
                return
            self._fork()
        msg = "-\n" if not self.stack else "%r %s\n" % min(self.stack)
        try:
            os.write(self.w, msg.encode())
        except OSError:  # the watchdog is gone (killed with its group): the next deadline forks another
            os.close(self.w)
            self.pid = 0

    def exiting(self) -> None:
        """The timer thread runs: the watchdog waits for the clean exit."""
        try:
            os.write(self.w, b"!\n")
        except OSError:
            pass

    def _alive(self) -> bool:
        try:
            return os.waitpid(self.pid, os.WNOHANG) == (0, 0)
        except ChildProcessError:
            return False

    def _fork(self) -> None:
        r, w = os.pipe()
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:  # the watchdog: never returns
            code = 0
            try:
                os.close(w)
                _watch(r, parent)
            except BaseException:
                code = 1
            finally:
                os._exit(code)
        os.close(r)
        self.pid, self.w = pid, w


def _watch(r: int, parent: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    os.close(1)  # the launcher waits for stdout's EOF: never hold it
    os.closerange(3, r)  # nor the launcher's PMI socket or anything else but our pipe
    os.closerange(r + 1, 1 << 16)
    at, line, buf, grace = None, b"", b"", GRACE
    while True:
        wait = None if at is None else max(0.0, at + grace - time.monotonic())
        if not select.select([r], [], [], wait)[0]:
            os.write(2, line + b"\n")
            os.kill(parent, signal.SIGKILL)
            return
        chunk = os.read(r, 4096)
        if not chunk:
            return
        buf += chunk
        while b"\n" in buf:
            msg, buf = buf.split(b"\n", 1)
            if msg == b"-":
                at = None
            elif msg == b"!":  # the process is exiting by itself: let it finish
                at, grace = time.monotonic(), EXITING_GRACE
            else:
                when, _, line = msg.partition(b" ")
                at, grace = float(when), GRACE


_dog = _Watchdog()


@contextmanager
def deadline(seconds: float, line: str, code: int = EXIT_CODE) -> Iterator[None]:
    """End the process with `line` (one line on stderr) and exit status
    `code` if the block runs past `seconds`."""
    t = end_by(seconds, line, code)
    try:
        yield
    finally:
        t.cancel()
        _dog.pop()


def end_by(seconds: float, line: str, code: int = EXIT_CODE) -> threading.Timer:
    """End the process with `line` (one line on stderr) and exit status
    `code` `seconds` from now unless it has ended by then (both guards
    above; `deadline` cancels them when its block ends). For a process that
    must end: its work is over (check --fleet: the rank it reports to
    stopped answering)."""
    line = " ".join(line.split())

    def expire() -> None:
        _dog.exiting()
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
        os._exit(code)

    t = threading.Timer(seconds, expire)
    t.daemon = True
    _dog.push(time.monotonic() + seconds, line)
    t.start()
    return t


CUT_GRACE = 1.0  # s a polled stop gets before the main thread is interrupted
CUT_KILL = 10.0  # s past the cut before the watchdog ends the process (C holding the GIL)


class Cut(KeyboardInterrupt):
    """What `cut_after` raises in the main thread: a KeyboardInterrupt, so
    code that keeps what it measured on Ctrl-C keeps it here too."""


@contextmanager
def cut_after(seconds: float, stop: Callable[[], None], line: str, grace: float = CUT_GRACE,
              kill: float = CUT_KILL) -> Iterator[None]:
    """Past `seconds`: `stop()`; `grace` s later, if the block still runs,
    Cut (a KeyboardInterrupt) in the main thread, through SIGALRM sent to
    that thread so a blocking call (select, wait) returns EINTR; `kill` s
    past `seconds`, if it still runs, the watchdog prints `line` and kills
    the process. Main thread only. A Cut may also surface just after the
    block, so the caller catches KeyboardInterrupt around it."""
    line = " ".join(line.split())
    done, lock = threading.Event(), threading.Lock()
    main = threading.main_thread().ident

    def on_alarm(signum: int, frame: object) -> None:
        if not done.is_set():  # one sent as the block ended is dropped
            raise Cut()

    def cut() -> None:
        if done.wait(max(0.0, seconds)):
            return
        stop()
        if done.wait(grace):
            return
        with lock:
            if not done.is_set() and main is not None:
                signal.pthread_kill(main, signal.SIGALRM)

    old = signal.signal(signal.SIGALRM, on_alarm)
    _dog.push(time.monotonic() + max(0.0, seconds) + kill, line)
    t = threading.Thread(target=cut, name="nodemap-cut", daemon=True)
    t.start()
    try:
        yield
    finally:
        try:
            done.set()
            with lock:  # a SIGALRM being sent arrives while on_alarm is still the handler
                pass
        finally:
            _dog.pop()
            signal.signal(signal.SIGALRM, old)


class TooMuchOutput(Exception):
    """A child printed more than run_group's `limit` bytes on one stream (it was killed)."""

    def __init__(self, stream: str, limit: int) -> None:
        super().__init__(f"more than {limit} bytes on {stream}")
        self.stream, self.limit = stream, limit


def run_group(cmd: list[str], env: dict[str, str] | None, timeout: float, *, text: bool = True,
              limit: int | None = None) -> tuple[int, Any, Any]:
    """(exit status, stdout, stderr) of `cmd` (str, or bytes with text=False);
    subprocess.TimeoutExpired after `timeout` seconds, the whole group killed
    first. OSError when it does not start. `limit`: at most that many bytes
    read per stream, else TooMuchOutput (the group killed first; scontrol
    printing a 300 MB reason took 903 MB and 26 s); bytes only (text=False):
    the caller decodes what it got."""
    if limit is None:
        return wait_group(start_group(cmd, env, text=text), timeout)
    if text:
        raise ValueError("run_group: limit reads bytes (text=False)")
    p = start_group(cmd, env, text=False)
    try:
        return _read_bounded(p, timeout, limit)
    except BaseException:  # TimeoutExpired, TooMuchOutput, KeyboardInterrupt
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.stdout.close()  # not drained: what is left unread stays unread
        p.stderr.close()
        p.wait()
        raise


def _read_bounded(p: Any, timeout: float, limit: int) -> tuple[int, bytes, bytes]:
    import selectors
    import subprocess

    end = time.monotonic() + timeout
    got = {p.stdout.fileno(): bytearray(), p.stderr.fileno(): bytearray()}
    names = {p.stdout.fileno(): "stdout", p.stderr.fileno(): "stderr"}
    with selectors.DefaultSelector() as sel:
        for fd in got:
            sel.register(fd, selectors.EVENT_READ)
        while sel.get_map():
            left = end - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired(p.args, timeout)
            for key, _ in sel.select(left):
                chunk = os.read(key.fd, 1 << 16)
                if not chunk:
                    sel.unregister(key.fd)
                    continue
                got[key.fd] += chunk
                if len(got[key.fd]) > limit:
                    raise TooMuchOutput(names[key.fd], limit)
    p.wait(max(0.0, end - time.monotonic()))  # TimeoutExpired when it closed its output but runs on
    return p.returncode, bytes(got[p.stdout.fileno()]), bytes(got[p.stderr.fileno()])


def start_group(cmd: list[str], env: dict[str, str] | None, *, text: bool = True, **popen: Any) -> Any:
    """`cmd` started in its own process group, stdout and stderr piped, stdin
    closed; `popen`: more of Popen's arguments (compare's ranks: pass_fds,
    preexec_fn). Several can run at once; end each with `wait_group`."""
    import subprocess  # here: the MPI ranks import this module for `deadline` only

    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=text,
                            env=env, start_new_session=True, **popen)


def wait_group(p: Any, timeout: float) -> tuple[int, Any, Any]:
    """(exit status, stdout, stderr) of a child `start_group` started; past
    `timeout` (subprocess.TimeoutExpired) or on Ctrl-C, its group killed first."""
    try:
        out, err = p.communicate(timeout=timeout)
    except BaseException:  # TimeoutExpired, KeyboardInterrupt
        kill_group(p)
        raise
    return p.returncode, out, err


def kill_group(p: Any) -> None:
    """End a child `start_group` started and everything it started, and reap it."""
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    p.communicate()
