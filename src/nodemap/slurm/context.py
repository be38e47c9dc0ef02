"""Who started a check, as Slurm says it, and the exit status that context
needs. slurmd turns ANY non-zero exit of a Prolog or Epilog into a drain
("Prolog error", "Epilog error") that is not nodemap's to resume, so there
a check that could not judge (a busy node, another check holding the node's
lock, scontrol slow) exits 0 with one line on stderr, and only a node that
fails for a hardware cause exits 1 (with --slurm-drain nodemap has drained
it first, with its own reason, which Slurm keeps). A HealthCheckProgram's
non-zero exit is only logged by slurmd (22.05: `error: health_check failed:
rc:2 output:...`, the node's state untouched), so there the statuses stay
as they are and the log shows why.

slurmd sets SLURM_SCRIPT_CONTEXT=prolog_slurmd / epilog_slurmd for Prolog
and Epilog (22.05, seen live); it sets nothing that marks a
HealthCheckProgram (only SLURMD_NODENAME), so that one is named with
`--slurm-context health`.
"""

from __future__ import annotations

import os
from typing import Any, Mapping

CONTEXTS = ("prolog", "epilog", "health", "none")
_FROM_SLURM = {"prolog_slurmd": "prolog", "epilog_slurmd": "epilog"}
HEALTHY, UNHEALTHY = 0, 1


def detect(env: Mapping[str, str], given: str | None = None) -> str:
    """The context: `given` (--slurm-context), else slurmd's SLURM_SCRIPT_CONTEXT, else none."""
    if given:
        return given
    return _FROM_SLURM.get(env.get("SLURM_SCRIPT_CONTEXT", ""), "none")


def drains_on_failure(context: str) -> bool:
    """Whether slurmd drains the node when the check exits non-zero."""
    return context in ("prolog", "epilog")


def exit_status(context: str, status: int) -> tuple[int, str]:
    """(the status to exit with, a line saying why it differs, or "").
    In a prolog or epilog everything but unhealthy (1) is 0: could not
    judge (2), interrupted (130, 143) and bad usage must not drain."""
    if not drains_on_failure(context) or status in (HEALTHY, UNHEALTHY):
        return status, ""
    what = {2: "could not judge", 130: "interrupted", 143: "ended by SIGTERM"}.get(status, f"status {status}")
    return HEALTHY, (f"nodemap check: {context}: {what} (status {status}): exit 0, nothing drained, the job "
                     f"{'starts' if context == 'prolog' else 'ends'} as usual (slurmd would drain the node "
                     f"'{context.capitalize()} error' for any other status)")


def next_run(context: str) -> str:
    """What happens to a check that steps aside, said in its context."""
    return {
        "prolog": "this prolog's check steps aside without judging; the job starts, nothing drained",
        "epilog": "this epilog's check steps aside without judging, nothing drained",
        "health": "this health check steps aside without judging; it runs again at the next HealthCheckInterval",
    }.get(context, "this check stops without judging (exit 2); run it again once the other one has ended")


class Forgiving:
    """A prolog's or epilog's standard output or error: a write that fails
    (its log on a full or vanished file system) is dropped and the stream
    pointed at /dev/null, so that Python's own flush at exit stays quiet
    too (it exits 120 when that flush fails), and the check goes on: slurmd
    drains the node for any non-zero exit, and a full /var is no fault of
    the node's hardware. What the check wanted to say is lost; its status,
    and its metrics where they could be written, are not."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError:
            self._drop()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError:
            self._drop()
            try:
                self._stream.flush()  # what is still buffered, now into /dev/null
            except OSError:
                pass

    def _drop(self) -> None:
        try:
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, self._stream.fileno())
            os.close(null)
        except (OSError, ValueError, AttributeError):  # no descriptor (a test's capture): the write is dropped
            pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)
