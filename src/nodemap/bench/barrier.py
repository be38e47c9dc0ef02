"""A barrier before each timed repetition, for ranks that are separate
processes and must run their repetitions together, as a real job's ranks do.

`nodemap compare` starts each rank of a binding as its own bound process
(no MPI between them): alone, each rank's repetitions drift apart within a
second, so rank 0's third STREAM triad may run while rank 1 sits in its
warm-up, and neither sees the node as the job would (per-rank spreads of
±54-186% on 4 H200s, issue 27). Ranks that are MPI processes already start
each repetition together (harness.slowest_rank: an MPI barrier); these are
not.

The parent (`Coordinator`) gives each rank two pipes, named in the rank's
environment (ENV = "GO,READY,SECONDS"); ranks started by an MPI launcher
instead take ENV = "mpi,SECONDS" (an MPI barrier of COMM_WORLD, mpi4py,
MPI started at the first wait). Before each timed repetition the
driver calls `wait()`: the rank writes one byte on READY and reads one on
GO; the coordinator answers every rank once all ranks still running have
written. A rank that ends (done, failed) closes its pipe: the others go on
without it. The wait is bounded (proc.deadline): a rank left waiting
SECONDS (another hangs) ends with a line that says so, never hangs itself.
No ENV: `wait()` does nothing (a plain `nodemap bench`).
"""

from __future__ import annotations

import os
import select
import threading
import time

ENV = "NODEMAP_BARRIER"

MPI = -1  # the GO fd of ranks that are MPI processes
_pipes: tuple[int, int, float] | None = None
_read = False
rounds = 0  # barriers passed by this process


def _spec() -> tuple[int, int, float] | None:
    """This rank's (GO fd, READY fd, seconds), read once; ENV is dropped so a
    process this rank starts does not wait on pipes it does not hold."""
    global _pipes, _read
    if not _read:
        _read = True
        text = os.environ.pop(ENV, "")
        try:
            if text.startswith("mpi,"):
                _pipes = (MPI, MPI, float(text.split(",")[1]))
            elif text:
                go, ready, seconds = text.split(",")
                _pipes = (int(go), int(ready), float(seconds))
        except ValueError:  # nodemap sets it for the ranks it starts: one set by hand, or left over
            from ..text import shown
            from ..errors import NodemapError

            raise NodemapError(f"{ENV}={shown(text)} is not 'GO,READY,SECONDS' or 'mpi,SECONDS' (nodemap sets it "
                               f"for the ranks it starts): unset {ENV}") from None
    return _pipes


def active() -> bool:
    return _spec() is not None


def wait() -> None:
    """Block until every rank of the group reaches this point (module docstring)."""
    global rounds
    spec = _spec()
    if spec is None:
        return
    go, ready, seconds = spec
    from ..proc import deadline

    with deadline(seconds, f"nodemap: the other ranks did not reach repetition {rounds + 1} within {seconds:g} s "
                           "(one hangs or is much slower): this rank ends; raise compare's --timeout"):
        if go == MPI:
            from mpi4py import MPI as mpi

            mpi.COMM_WORLD.Barrier()
        else:
            os.write(ready, b".")
            os.read(go, 1)  # b"": the coordinator is gone; run on alone
    rounds += 1


class Coordinator:
    """The parent's side for n ranks: `env(i)` and `fds(i)` for rank i's
    process, `started()` once every rank is started, `close()` at the end.
    `releases` holds the time.monotonic() of each barrier released."""

    def __init__(self, n: int, seconds: float) -> None:
        self.n, self.seconds = n, seconds
        self.ready = [os.pipe() for _ in range(n)]  # rank writes, parent reads
        self.go = [os.pipe() for _ in range(n)]  # parent writes, rank reads
        self.releases: list[float] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def env(self, i: int) -> dict[str, str]:
        return {ENV: f"{self.go[i][0]},{self.ready[i][1]},{self.seconds:g}"}

    def fds(self, i: int) -> tuple[int, int]:
        """The descriptors rank i's process inherits (Popen's pass_fds)."""
        return self.go[i][0], self.ready[i][1]

    def started(self) -> None:
        """Close the ranks' ends here (so a rank's exit reads as EOF) and serve."""
        for i in range(self.n):
            os.close(self.go[i][0])
            os.close(self.ready[i][1])
        self._thread.start()

    def _serve(self) -> None:
        live = set(range(self.n))
        while live:
            waiting: set[int] = set()
            while live - waiting:
                fds = {self.ready[i][0]: i for i in live - waiting}
                for fd in select.select(list(fds), [], [])[0]:
                    i = fds[fd]
                    if os.read(fd, 1):
                        waiting.add(i)
                    else:  # rank i ended: the others go on without it
                        live.discard(i)
            if waiting:
                self.releases.append(time.monotonic())
            for i in waiting:
                try:
                    os.write(self.go[i][1], b".")
                except OSError:  # it died after writing
                    live.discard(i)

    def close(self) -> None:
        """After every rank ended: the thread sees their EOFs and stops."""
        self._thread.join(timeout=5)
        for i in range(self.n):
            for fd in (self.ready[i][0], self.go[i][1]):
                try:
                    os.close(fd)
                except OSError:
                    pass
