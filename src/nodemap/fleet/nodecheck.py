"""What a node leader runs for the fleet: the node's own check (`nodemap
check`'s entry, fleet/command.py), as one document (schema
nodemap.check/2), through the test hooks that let ranks on
one machine act as different nodes and inject faults.

Test hooks (environment, read only here):
  NODEMAP_FLEET_NODE=NAME      this rank's node name instead of Slurm's or the hostname
                               ("{rank}" in it becomes the MPI rank)
  NODEMAP_FLEET_NODE_DOC=FILE  the node check replays this saved document
                               (its host replaced by the node name)
  NODEMAP_FLEET_SCALE=X        fault injection: every figure of this node X
                               times worse (0.8: 20% less bandwidth)
  NODEMAP_FLEET_SCALE_ONCE=X   the same on its first check only: a transient
                               the fleet's re-measure clears
  NODEMAP_FLEET_SLOW=S         the node check takes S seconds more; stopped
                               meanwhile (liveness.abandon's stop flag, Ctrl-C), it ends
                               at once, its document kept incomplete, as a real check's
  NODEMAP_FLEET_HANG=check|join|crash|local|end  fault injection: this rank
                               never answers (its node check never returns /
                               it never joins / as its node's second rank, it
                               never takes part in the node's MPI step / once
                               rank 0 said done, it never says goodbye) or
                               dies in its node check
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any, Callable

import msgspec
from msgspec.structs import replace

from ..check.document import CheckFile

NODE_ENV = "NODEMAP_FLEET_NODE"
DOC_ENV = "NODEMAP_FLEET_NODE_DOC"
SCALE_ENV = "NODEMAP_FLEET_SCALE"
ONCE_ENV = "NODEMAP_FLEET_SCALE_ONCE"
HANG_ENV = "NODEMAP_FLEET_HANG"
SLOW_ENV = "NODEMAP_FLEET_SLOW"

# (node name, level, expect file, the MPI step: check/mpi.InJob) -> document
CheckFn = Callable[[str, str, "str | None", Any], CheckFile]


class Replayed(CheckFile, kw_only=True):
    """A saved document the test hook replays: its topology kept as written (a synthetic fleet's is not a whole
    Topology), a start time not required; the rest read as the check's."""

    started: str = ""
    topology: dict[str, Any] | None = None


class Gathered(CheckFile, kw_only=True):
    """What rank 0 gathers of a node's document: all but every ResultSet with its samples and the expectations
    table (those stay in the leader's full copy), and where that copy is."""

    results: msgspec.UnsetType = msgspec.UNSET
    expectations: msgspec.UnsetType = msgspec.UNSET
    full_document: str | msgspec.UnsetType = msgspec.UNSET


def node_name(rank: int) -> str:
    """The test hook's name, else the scheduler's (Slurm's node name), else the hostname."""
    from ..launcher import node_name as scheduler_node

    name = os.environ.get(NODE_ENV, "")
    return name.replace("{rank}", str(rank)) if name else scheduler_node(os.environ)


def hang_point() -> str:
    return os.environ.get(HANG_ENV, "")


def hang_forever() -> None:
    while True:  # fault injection: a rank that is alive but never answers
        time.sleep(3600)


def run_check(check: CheckFn, node: str, level: str, expect: str | None, in_job: Any = None,
              again: bool = False) -> CheckFile:
    """The node's document, through the hooks (a replayed one is as saved: no
    step runs); `again`: the fleet's re-measure of a suspect (the hang hooks
    and NODEMAP_FLEET_SCALE_ONCE apply to the first check only)."""
    if hang_point() == "check" and not again:
        hang_forever()
    if hang_point() == "crash" and not again:
        os._exit(3)  # a node whose check dies: no message, no MPI_Finalize
    cut = not again and _slow(float(os.environ.get(SLOW_ENV) or 0))
    path = os.environ.get(DOC_ENV)
    if path:
        from .. import infile, records
        from . import nodefile

        data = infile.read(path, infile.MAX_DOCUMENT, nodefile.WHAT)
        nodefile.node_document(path, data)  # as check --fleet --from reads one
        doc: CheckFile = records.decode(path, data, Replayed, nodefile.WHAT)
    else:
        doc = check(node, level, expect, in_job)  # nodes measured on one host at once contend:
        doc = replace(doc, extra=replace(doc.extra, boot_id=boot_id()))
    doc = replace(doc, host=node, complete=doc.complete and not cut)
    for env in (SCALE_ENV,) if again else (SCALE_ENV, ONCE_ENV):
        if os.environ.get(env):
            doc = scaled(doc, float(os.environ[env]), env)
    return doc


def _slow(seconds: float) -> bool:
    """The test hook's extra time; whether it was cut short (Ctrl-C, or the
    stop flag a real check's kernels obey: bench/interrupt.py)."""
    from ..bench import interrupt

    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            if interrupt.requested():
                return True
            time.sleep(0.05)
    except KeyboardInterrupt:
        return True
    return False


def boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read(64).strip()
    except OSError:
        return ""


def scaled(doc: CheckFile, x: float, env: str = SCALE_ENV) -> CheckFile:
    """Every figure x times as good (x < 1: worse), recorded in the document."""
    def by(f: Any) -> Any:  # the statistic the fleet judges moves with it
        move = (lambda v: v * x) if f.higher_is_better else (lambda v: v / x)
        return dataclasses.replace(f, value=move(f.value), median=move(f.median), low=move(f.low), high=move(f.high))

    return replace(doc, figures=[by(f) for f in doc.figures],
                   environment=replace(doc.environment, fault_injected=f"{env}={x:g}"))


def compact(doc: CheckFile, full_path: str = "") -> Gathered:
    return Gathered(**{k: v for k, v in msgspec.structs.asdict(doc).items() if k not in HEAVY},
                    full_document=full_path or msgspec.UNSET)


HEAVY = ("results", "expectations")  # what Gathered leaves out
