"""Temporary files that neither an error nor SIGTERM leaves behind.

A SIGTERM's default action ends the process without unwinding, so a
temporary copy of a pipe (tens of MB) would stay in $TMPDIR. While a
scratch file exists, SIGTERM raises SystemExit(143) instead, so that the
`finally` that removes it runs; while it is being removed, SIGTERM and
Ctrl-C wait until it is gone. Handlers are changed only in the main
thread, the only one Python runs them in.
"""

from __future__ import annotations

import os
import signal
import tempfile
import threading
from contextlib import contextmanager
from typing import Iterator

__all__ = ["scratch_file"]


@contextmanager
def scratch_file(prefix: str) -> Iterator[tuple[int, str]]:
    """(fd, path) of a new temporary file; the file is removed on the way out
    (the fd is the caller's to close)."""
    with _Unwinding() as unwinding:
        fd, path = tempfile.mkstemp(prefix=prefix)
        try:
            yield fd, path
        finally:
            with unwinding.held():
                _unlink(path)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


class _Unwinding:
    """SIGTERM raises SystemExit(143) inside the block; inside `held()` it and
    SIGINT are only noted, and raised (SIGTERM first) when `held()` ends,
    unless an exception is already on its way out."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __enter__(self) -> "_Unwinding":
        self.holding, self.pending = False, []
        self.old = {}
        if threading.current_thread() is threading.main_thread():
            self.old = {s: signal.signal(s, self._handle) for s in self.SIGNALS
                        if s == signal.SIGTERM or signal.getsignal(s) is signal.default_int_handler}
        return self

    def __exit__(self, *exc) -> None:
        for s, handler in self.old.items():
            signal.signal(s, handler)

    def _handle(self, signum, frame) -> None:
        if self.holding:
            self.pending.append(signum)
        elif signum == signal.SIGINT:
            raise KeyboardInterrupt
        else:
            raise SystemExit(128 + signum)

    @contextmanager
    def held(self) -> Iterator[None]:
        self.holding = True
        try:
            yield
        finally:
            self.holding = False
        if self.pending:  # reached only when nothing is raised already
            if signal.SIGTERM in self.pending:
                raise SystemExit(128 + signal.SIGTERM)
            raise KeyboardInterrupt
