"""Ctrl-C for benchmarks: stop within about a second and keep what was measured.

While `sigint_stops()` is active the first SIGINT only sets a stop flag: the
native kernels (native/*.c) poll it between repetitions and return what they
completed, the harness ends the case loop, prints and saves. A second
SIGINT raises KeyboardInterrupt as usual (the harness still saves what it
has). Native calls run in a worker thread through `stoppable`, so the main
thread, the only one Python runs signal handlers in, stays free to take the
signal while C holds the CPU.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator

_state = {"requested": False, "why": ""}
BUDGET = "budget"  # why, when nodemap check --budget ended the run (check/node.py)
# A user's SIGINT or SIGTERM since clear_signalled(): unlike `why`, a stop the
# budget asked first does not hide it, and reset() keeps it (check/node.py
# reads it after its measuring ends, to tell an interruption from the budget's cut).
_signalled = {"yes": False}


def signalled() -> bool:
    return _signalled["yes"]


def note_signal() -> None:
    _signalled["yes"] = True


def clear_signalled() -> None:
    _signalled["yes"] = False


def requested() -> bool:
    return bool(_state["requested"])


def why() -> str:
    return str(_state["why"])


def request(why: str = "interrupted (Ctrl-C)") -> None:
    """Ask every running kernel to stop after its current repetition."""
    if not _state["requested"]:
        _state["why"] = why
    _state["requested"] = True
    _native_stop(1)


def reset() -> None:
    _state["requested"] = False
    _state["why"] = ""
    _native_stop(0)


def _native_stop(on: int) -> None:
    from .. import native

    if native._LIB is not None:  # never load the library just to clear a flag
        native._LIB.nm_stop(on)


@contextmanager
def sigint_stops() -> Iterator[None]:
    """First Ctrl-C: stop flag; second: KeyboardInterrupt. Main thread only
    (elsewhere the default behaviour stays)."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is signal.SIG_IGN):  # started ignoring it (nohup, &): keep that
        yield
        return

    def on_sigint(signum: int, frame: Any) -> None:
        note_signal()
        if requested():
            raise KeyboardInterrupt
        request()

    old = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


def stoppable(fn: Callable[..., Any], *args: Any) -> Any:
    """fn(*args) in a worker thread (a native call: it releases the GIL);
    a KeyboardInterrupt meanwhile asks the kernel to stop, waits for its
    partial result and is raised again."""
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["value"] = fn(*args)
        except BaseException as e:  # handed to the caller's thread
            box["error"] = e

    t = threading.Thread(target=work, name="nodemap-kernel", daemon=True)
    t.start()
    interrupted = False
    while t.is_alive():
        try:
            t.join(0.25)
        except KeyboardInterrupt:
            interrupted = True
            request()
    if "error" in box:
        raise box["error"]
    if interrupted:
        raise KeyboardInterrupt
    return box["value"]
