"""A step whose part failed: what it says about the node, judged.

A kind's ResultSet is incomplete when the user stopped it (an
interruption: the check stops too), when `--budget` cut it (check/node.py),
when a case ran past its --timeout, and when a part failed: its output was
wrong (NCCL's received elements, a Jacobi or ring halo) and no figure was
reported for it. A kind on the driver whose output cannot be trusted
raises `driver.VerificationFailed` instead (suite.KindFailed carries it).

Wrong data is judged, never taken for an interruption: a failing Check
(key `verification/KIND/PART`) with its cause and fix, which the node's
verdict counts (hardware: the node fails, exit 1, Slurm drains it) or the
job environment's (configuration). A timeout, a failed verification that
says nothing of the node (a profiler that lost accesses) and an incomplete
set no rule here knows are skipped with the kind's own line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

from ..bench import harness, interrupt
from ..bench.results import ResultSet
from ..units import format_size
from .inventory import VERIFICATION, Check, Skipped

GPU_FIX = ("test the GPUs and their links (nvidia-smi nvlink -e for NVLink error counters, nvidia-smi -q -d "
           "ECC,ROW_REMAPPER, dcgmi diag -r 3), then run nodemap bench {kind} again")
MPI_FIX = ("check the MPI library and its transport settings (UCX_TLS, UCX_MEMTYPE_CACHE=n; the check's "
           "inventory/mpi/cuda_aware says whether MPI is CUDA-aware): the peer and nccl transports over the same "
           "GPUs tell whether the links are at fault")
# NCCL_ALGO/NCCL_PROTO force a path NCCL would not choose for these GPUs (the
# inventory warns of them, check/inventory.py RISKY_ENV): wrong data under
# them is the job's setting first, and a scheduler must not drain a node for it.
FORCED_NCCL = ("NCCL_ALGO", "NCCL_PROTO")
FORCED_FIX = "unset {names} and run again: wrong data that persists without it is the node's"


@dataclass(frozen=True)
class Wrong:
    """A kind's line for a part whose output was wrong: `said`, the fixed
    words of the kind's own message (tests check the kind still writes
    them); `pattern`, its named groups `part` (the key's end: an op, a
    variant, a transport) and `value` or `count` and `size`."""

    kind: str
    said: str
    pattern: re.Pattern[str]
    area: str
    label: str  # "{part}" filled in
    expected: str


WRONG = (
    Wrong("nccl", "wrong elements after the operation: NCCL or the GPUs' links corrupt data",
          re.compile(r"^(?P<part>\w+) (?P<where>in-place|out-of-place) (?P<size>\d+) B: (?P<count>\d+) wrong "
                     r"elements after the operation"), "NCCL", "NCCL {part}", "0 wrong elements"),
    Wrong("jacobi", "differs from the single-GPU run: ",
          re.compile(r"^(?P<part>[\w-]+) (?P<dtype>\w+): differs from the single-GPU run: (?P<why>.*): the halo "
                     r"exchange is wrong"), "GPU<->GPU", "Jacobi {part} halos", "the single-GPU run's field"),
    Wrong("ring", "wrong halo elements: the transport corrupts data",
          re.compile(r"^(?P<part>[\w-]+) at (?P<size>\d+) B: (?P<count>\d+) wrong halo elements"),
          "GPU<->GPU", "ring halos over {part}", "0 wrong elements"),
)


def interrupted(rs: ResultSet) -> bool:
    """The user stopped it (Ctrl-C or SIGTERM since the check began, or the
    kind's harness says so): an interruption, not a part that failed."""
    return interrupt.signalled() or harness.INTERRUPTED in rs.messages


def forced_nccl(checks: Iterable[Check]) -> list[str]:
    """The NCCL variables forcing an algorithm or protocol, as the check's
    inventory saw the environment (its inventory/env/NAME items)."""
    return [c.label for c in checks if c.key in {f"inventory/env/{n}" for n in FORCED_NCCL} and c.verdict == "warn"]


def why_incomplete(rs: ResultSet) -> str:
    """Why a saved set is incomplete, in a few words (a report's header)."""
    if harness.INTERRUPTED in rs.messages:
        return "interrupted"
    if harness.CUT in rs.messages:
        return "cut at the check's --budget"
    if any(m.startswith(harness.TIMEOUT + ":") for m in rs.messages):
        return "a case ran past its --timeout"
    return "a part failed"


def parts(kind: str, rs: ResultSet, checks: Iterable[Check] = ()) -> list[Check]:
    """A failing Check per part of `rs` whose output was wrong (an op, a
    variant, a transport: its sizes counted in one). `checks`: the
    inventory's, for what the environment forced (forced_nccl)."""
    forced = forced_nccl(checks)
    hits: dict[str, list[tuple[Wrong, re.Match[str], str]]] = {}
    for m in rs.messages:
        for rule in WRONG:
            got = rule.pattern.match(m) if rule.kind == kind else None
            if got:
                hits.setdefault(got["part"], []).append((rule, got, m))
    return [_check(kind, part, found, forced) for part, found in hits.items()]


def _check(kind: str, part: str, found: list[tuple[Wrong, re.Match[str], str]], forced: list[str]) -> Check:
    rule, first, _ = found[0]
    cause, fix = _cause(kind, part, forced)
    more = f", at {len(found) - 1} more size{'s' * (len(found) > 2)}" if len(found) > 1 else ""
    return Check(f"{VERIFICATION}{kind}/{part}", rule.label.format(part=part), _value(first) + more, rule.expected,
                 "fail", f"bench {kind} verifies its output: " + "; ".join(m for _, _, m in found), cause, fix,
                 rule.area)


def _value(m: re.Match[str]) -> str:
    g = m.groupdict()
    if "why" in g:
        return f"{g['dtype']}: {g['why']}"
    where = f"{g['where']}, " if g.get("where") else ""
    return f"{g['count']} wrong {'elements' if 'where' in g else 'halo elements'} ({where}{format_size(int(g['size']))})"


def _cause(kind: str, part: str, forced: list[str]) -> tuple[str, str]:
    """Whose fault wrong data is: NCCL's collectives, and halos carried by
    CUDA peer copies or NCCL, are the GPUs and their links (the node),
    unless the job forced NCCL's algorithm or protocol (configuration);
    halos MPI carried are the MPI library's or its settings first (a
    CUDA-aware path that is not, UCX's memory-type cache): configuration."""
    transport = part
    if kind == "jacobi":
        from ..bench.app.jacobi import VARIANTS

        transport = VARIANTS[part].transport if part in VARIANTS else part
    if transport.startswith("mpi"):
        return "configuration", MPI_FIX
    if forced and (kind == "nccl" or transport.startswith("nccl")):
        return "configuration", FORCED_FIX.format(names="/".join(forced))
    return "hardware", GPU_FIX.format(kind=kind)


def verification(kind: str, error: BaseException | None) -> Check | None:
    """A kind's driver.VerificationFailed as a failing Check where it says
    something of the node or its setup; None: the step is skipped with the
    kind's line (a profiler that lost accesses is the tool's, not the node's)."""
    if kind != "placement" or error is None:
        return None
    from ..bench.app.placement import ChecksumMismatch

    reason = getattr(error, "reason", str(error))
    if isinstance(error, ChecksumMismatch):
        return Check(VERIFICATION + "placement/checksum", "GPU data placement checksums", "differ",
                     "the row formula's", "fail", str(error), "hardware",
                     "test the GPUs' memory (nvidia-smi -q -d ECC,ROW_REMAPPER, dcgmi diag -r 3), then run "
                     "nodemap bench placement again", "GPU memory")
    if reason.startswith("placement hints not in effect"):
        return Check(VERIFICATION + "placement/hints", "GPU data placement hints", "not in effect",
                     "as the plan set them", "fail", str(error), "configuration",
                     "give the benchmark the GPUs to itself (no other process moving their pages) and check that "
                     "the CUDA driver honours cudaMemAdvise; then run nodemap bench placement again", "GPU memory")
    return None


def skipped(what: str, rs: ResultSet, judged: list[Check]) -> list[Skipped]:
    """What an incomplete set that was neither interrupted nor cut by the
    budget leaves unmeasured: a timeout with the kind's line and what it
    kept; a failure no rule knows with its messages (none when `judged`
    already says what failed)."""
    timeouts = [m for m in rs.messages if m.startswith(harness.TIMEOUT + ":")]
    if timeouts:
        return [Skipped(what, f"{timeouts[0]}; its {len(rs.results)} result(s) kept")]
    if judged:
        return []
    return [Skipped(what, "a part did not complete: " + ("; ".join(rs.messages) or "the kind gave no reason"))]
