"""A step whose part failed: what it says about the node, judged.

What failed becomes which check, of which cause, and what is skipped:
docs/check.md, "A part that failed". A kind records a typed Failure on its
ResultSet (bench/results.py); one on the driver whose output cannot be
trusted raises `driver.VerificationFailed`, its Failure with it
(suite.KindFailed carries it). The area and cause come from the kind's
STORY (bench/story.py).
"""

from __future__ import annotations

from typing import Iterable

from ..bench import harness, interrupt
from ..bench.driver import VerificationFailed
from ..bench.kinds import story
from ..bench.results import Failure, ResultSet
from ..bench.story import by_transport
from .inventory import VERIFICATION, Check, Skipped

# NCCL_ALGO/NCCL_PROTO force a path NCCL would not choose for these GPUs (the
# inventory warns of them, check/inventory.py RISKY_ENV): wrong data under
# them is the job's setting first, and a scheduler must not drain a node for it.
FORCED_NCCL = ("NCCL_ALGO", "NCCL_PROTO")


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
    variant, a transport: its sizes counted in one), from the set's typed
    failures. `checks`: the inventory's, for what the environment forced
    (forced_nccl)."""
    forced = forced_nccl(checks)
    found: dict[str, list[Failure]] = {}
    for f in rs.failures:
        if f.kind == kind:
            found.setdefault(f.part, []).append(f)
    return [_check(same, forced, f"bench {kind} verifies its output: ") for same in found.values()]


def _check(found: list[Failure], forced: list[str], said: str) -> Check:
    f = found[0]
    cause, fix = _cause(f, forced)
    more = f", at {len(found) - 1} more size{'s' * (len(found) > 2)}" if len(found) > 1 else ""
    return Check(f"{VERIFICATION}{f.kind}/{f.part}", f.what, f.got + more, f.expected, "fail",
                 said + "; ".join(x.message for x in found), cause, fix, (story(f.kind).areas or (f.kind,))[0])


def _cause(f: Failure, forced: list[str]) -> tuple[str, str]:
    """Whose fault wrong data is, as its kind's STORY says (bench/story.py `by_transport` unless it says
    otherwise: the GPUs and their links, MPI's settings, or NCCL's forced by the job)."""
    return (story(f.kind).cause or by_transport)(f, forced)


def verification(error: BaseException | None) -> Check | None:
    """A kind's driver.VerificationFailed as a failing Check where it says
    something of the node or its setup (its typed Failure); None: the step
    is skipped with the kind's line (a profiler that lost accesses is the
    tool's, not the node's)."""
    failure = error.record() if isinstance(error, VerificationFailed) else None
    return None if failure is None else _check([failure], [], "")


def skipped(what: str, rs: ResultSet, judged: list[Check]) -> list[Skipped]:
    """What an incomplete set that was neither interrupted nor cut by the
    budget leaves unmeasured: a timeout with the kind's line and what it
    kept; a part that failed with no typed failure, with its messages (none when `judged`
    already says what failed)."""
    timeouts = [m for m in rs.messages if m.startswith(harness.TIMEOUT + ":")]
    if timeouts:
        return [Skipped(what, f"{timeouts[0]}; its {len(rs.results)} result(s) kept")]
    if judged:
        return []
    return [Skipped(what, "a part did not complete: " + ("; ".join(rs.messages) or "the kind gave no reason"))]
