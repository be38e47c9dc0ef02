"""The one driver of every benchmark kind (DESIGN.md point 5), as nccl-tests'
`testColl`, nvbandwidth's `Testcase` and BabelStream's driver are.

A kind is a module that holds only what is its own:
    Options            a dataclass of its options on `options.Common`, each field
                       declared once with its flag and help (options.option): its
                       command line (commands/bench.add_options) and the record `check`
                       fills; declared, with the kind's help text, in the light
                       module beside it (bench/kinds.py: `options_module`)
    plan(opts) -> Plan its cases for this node's topology, its ResultSet's header, its table
(no run(): `nodemap bench KIND` calls `main`, check and compare `measure`)
and per case (a `Case`): setup, one timed run, verify, the Results it makes.

The driver owns the rest, the same for every kind: warm-up, repetitions
(a fixed count, or adaptive: until the median's 95% interval is narrow
enough or the case's budget is spent), the timing loop, interruption
(what was measured is kept), progress and saving (through harness.session
and harness.finish); harness.slowest_rank is the one slowest-process
reduction of a repetition. `main` runs a kind from its
command line, `measure` from a typed Options (check, compare): no argv.
"""

from __future__ import annotations

import dataclasses
import time
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Callable, Sequence

from ..errors import NodemapError
from . import barrier, interrupt
from .harness import Progress, Stopped, cautions, check_shared, exit_code, finish, session
from .intervals import CONFIDENCE, median_interval
from .options import Common, check_bounds, flag
from .results import Failure, Result, ResultSet


class Skipped(Exception):
    """Raised by a case's setup when the case cannot run here (placement: a
    strategy that does not fit the budget): the run goes on without it, the
    message (naming the case and why) among the ResultSet's messages."""


class VerificationFailed(NodemapError):
    """Raised by a case (setup, run, verify) whose measurement ran but whose
    output cannot be trusted (placement: a checksum that differs from the
    row formula's, hints the CUDA driver did not take, a profile that lost
    accesses): no number is reported. The run fails as a part that failed
    (exit 1) with one line "verification failed: CASE: reason", the case
    named by `measure_case`; `nodemap check` lists the step with that line.
    Never a crash, and never a case skipped as one that does not fit (Skipped)."""

    exit_code = 1

    def __init__(self, reason: str, case: str = "", failure: Failure | None = None) -> None:
        self.reason, self.case, self.failure = reason, case, failure
        super().__init__(f"verification failed: {case + ': ' if case else ''}{reason}")

    def record(self) -> Failure | None:
        """What failed, typed, with this line as its message (the ResultSet
        keeps it, check/failed.py judges it); None where the verification
        that failed says nothing of the node or its setup (a profile that
        lost accesses): the run still fails with its line."""
        return dataclasses.replace(self.failure, message=str(self)) if self.failure else None


class PartFailed(Exception):
    """Raised by a case (its verify, usually) whose output is wrong while the
    other cases can still be trusted (one transport's halo exchange, not the
    others'): no Result, its typed Failure on the ResultSet (ResultSet.fail:
    the record check/failed.py judges, and its message as the kind words it
    among the messages), and the run goes on, incomplete: it exits 1, a part
    failed. VerificationFailed instead ends the run. Ranks that run a plan
    together raise it alike. Typed only: a part that failed with a line alone
    would go unjudged by the check."""

    def __init__(self, failure: Failure) -> None:
        self.failure = failure
        super().__init__(failure.message)


def argv_of(opts: Common) -> tuple[str, ...]:
    """The command line that gives `opts` (the options that differ from the
    kind's defaults): shown beside a check step, and passed where a kind
    runs in a child process (compare). A None where the default is a value
    is left out: no command line spells "unset", and a kind reads None as
    its default (mpi's --timeout), which the omitted option gives."""
    out: list[str] = []
    for f in dataclasses.fields(opts):
        value = getattr(opts, f.name)
        if value == f.default or value is None:
            continue
        name = flag(f)
        if isinstance(value, (tuple, list)):  # a repeatable option (--pair A,B --pair C,D)
            out += [x for v in value for x in (name, str(v))]
        else:
            out += [name] if value is True else [name, str(value)]
    return tuple(out)


@dataclass(frozen=True)
class Repeats:
    """How many times the driver runs a case."""

    count: int = 10  # timed repetitions; adaptive: the most
    warmup: int = 1  # untimed runs first (a batched case warms up inside its kernel)
    width: float | None = None  # adaptive: the relative width of the median's 95% interval to reach
    least: int = 3  # with `width` or `budget`: never fewer repetitions than this
    budget_s: float | None = None  # per case: stop after `least` once this is spent

    def enough(self, figures: Sequence[float], started: float) -> bool:
        """Whether the repetitions so far end the case before `count`."""
        if len(figures) < self.least:
            return False
        if self.budget_s is not None and time.monotonic() - started > self.budget_s:
            return True
        if self.width is None:
            return False
        iv = median_interval(figures)
        return iv is not None and iv.coverage >= CONFIDENCE and iv.width() <= self.width


def repeats_of(opts: Common) -> Repeats:
    adaptive = opts.adaptive is not None or opts.budget is not None
    # an order-statistic 95% interval of the median needs 6 repetitions (intervals.py)
    return Repeats(count=opts.repeats, width=opts.adaptive, budget_s=opts.budget,
                   least=min(opts.repeats, 6 if opts.adaptive is not None else 3) if adaptive else opts.repeats)


class Case:
    """One measured case. A kind's case sets `label` and defines `run` (one
    timed repetition: its seconds, or the sample its Results are made of)
    or, where the kernel loops natively (threads pinned, arrays first-touched
    once, warm-up inside), `runs(n)` (n timed repetitions, fewer when
    stopped); then `verify` and `results`."""

    label = ""  # progress text
    repeats: Repeats | None = None  # this case's own policy (else the kind's)
    messages: Sequence[str] = ()  # for the ResultSet's messages, each said once
    # ranks that run a plan together (Plan.together): False where this process has no part in the
    # case (another pair's), so nothing is measured here; `gather` still runs
    mine = True
    stop: Callable[[], bool] | None = None  # the case's own stop (a pair of ranks agreeing), else the plan's
    shows_best = True  # the progress line: the label and its first Result's best; False: the label alone

    def setup(self) -> None:
        """Allocate and fill inputs (untimed)."""

    def run(self) -> Any:
        raise NotImplementedError

    def verify(self) -> None:
        """Check the output of the last run; raise NodemapError when it is wrong."""

    def results(self, samples: list[Any]) -> list[Result]:
        raise NotImplementedError

    def teardown(self) -> None:
        """Free what setup took (also after an error or a stop)."""

    def gather(self, results: list[Result]) -> list[Result]:
        """Every process, after the case (measured, not its own, or stopped):
        where ranks send their Results to the reporting one."""
        return results

    def figure(self, sample: Any) -> float:
        """The number the adaptive stop watches (a sample's seconds by default)."""
        return float(sample)

    def progress(self, results: list[Result]) -> str:
        r = results[0] if results else None
        return f"{self.label}: {r.stats.best:.1f} {r.unit}" if r and self.shows_best else self.label


def samples(case: Case, policy: Repeats, stop: Callable[[], bool] = interrupt.requested) -> list[Any]:
    """The timed samples of one case under `policy`: the one timing loop.
    Ends early (what was measured kept) when `stop` says so."""
    if hasattr(case, "runs"):
        return _batches(case, policy, stop)
    for _ in range(max(0, policy.warmup)):
        case.run()
        if stop():
            return []
    out: list[Any] = []
    figures: list[float] = []
    t0 = time.monotonic()
    while len(out) < policy.count:
        barrier.wait()  # ranks started by `compare`: each repetition together (barrier.py)
        s = case.run()
        f = case.figure(s)
        if not f > 0:
            raise RuntimeError(f"timer returned {f!r}: the timed region is empty or the clock is broken")
        out.append(s)
        figures.append(f)
        if stop() or policy.enough(figures, t0):
            break
    case.verify()
    return out


def _batches(case: Any, policy: Repeats, stop: Callable[[], bool]) -> list[Any]:
    """A native loop: all repetitions in one call, or with an adaptive
    policy rounds of `least` until it is enough; one per call after a
    barrier where ranks run their repetitions together (barrier.py)."""
    adaptive = policy.width is not None or policy.budget_s is not None
    together = barrier.active()
    out: list[Any] = []
    t0 = time.monotonic()
    while len(out) < policy.count:
        ask = min(1 if together else policy.least if adaptive else policy.count, policy.count - len(out))
        barrier.wait()
        got = list(case.runs(ask))
        if got:
            case.verify()
        out += got
        if len(got) < ask or stop() or policy.enough([case.figure(s) for s in out], t0):
            break
    return out


def measure_case(case: Case, policy: Repeats, stop: Callable[[], bool] = interrupt.requested) -> list[Result]:
    """setup, the timed samples, verify, the Results; teardown always.
    Stopped (Ctrl-C, --timeout) with samples: their Results, noted; none: Stopped.
    A failed verification names the case it failed in."""
    policy = case.repeats or policy
    ready = False
    try:
        case.setup()  # a setup that fails half-way still has its teardown free what it took
        ready = True
        got = samples(case, policy, stop)
        if not got:
            raise Stopped
        out = case.results(got)
    except VerificationFailed as e:
        if e.case or not case.label:
            raise
        raise type(e)(e.reason, case.label, failure=e.failure) from None
    finally:
        _teardown(case, ready)
    if len(got) < policy.count and stop():
        note = f"interrupted after {len(got)} of {policy.count} repetitions"
        out = [dataclasses.replace(r, notes=r.notes + (note,)) for r in out]
    return out


def _teardown(case: Case, ready: bool) -> None:
    """After a setup that failed, a teardown meeting what it never made must
    not hide the setup's own error (the one the user needs)."""
    try:
        case.teardown()
    except Exception:
        if ready:
            raise


@dataclass
class Plan:
    """What a kind runs for one set of options, on this node."""

    command: str  # "bench latency"
    cases: list[Case]
    text: Callable[[ResultSet], str]  # the kind's table
    environment: dict[str, Any] = field(default_factory=dict)
    messages: list[str] = field(default_factory=list)
    after: Callable[[ResultSet], list[str]] | None = None  # messages from all the results (latency's disagreements)
    stop: Callable[[], bool] = interrupt.requested  # ranks that must agree pass their own
    # what the cases share, released after the last or on an error (GPU kinds: CuPy's pools, the spin gate)
    hold: AbstractContextManager = field(default_factory=nullcontext)
    root: bool = True  # this process reports and saves (under MPI: rank 0)
    # processes run the plan together (MPI ranks): each step bounds its own wait (no watchdog), a stop
    # inside a case ends only that case, and the run ends where `stop` (which they agree on) says so
    together: bool = False
    # every case bounds its own steps (a deadline that ends the process with one line): no --timeout watchdog
    bounded: bool = False


def execute(plan: Plan, opts: Common, args: Any) -> ResultSet:
    """Every case of the plan, saved as each completes (session); an
    interrupted or timed-out run keeps what was measured."""
    rs = ResultSet(command=plan.command, environment=plan.environment, messages=list(plan.messages))
    policy = repeats_of(opts)
    kind = (plan.command.removeprefix("bench ").split() or [""])[0]  # "bench jacobi --size 64" -> "jacobi"
    prog = Progress(len(plan.cases), kind, quiet=getattr(args, "quiet", False) or not plan.root,
                    stops=not plan.together)
    with session(rs, args, root=plan.root, watchdog=not (plan.together or plan.bounded)), plan.hold:
        for case in plan.cases:
            try:
                got = measure_case(case, policy, case.stop or plan.stop) if case.mine else []
            except Skipped as e:
                rs.messages.append(str(e))
                got = []
            except PartFailed as e:
                rs.fail(e.failure)
                got = []
            except VerificationFailed as e:  # the run ends; an --output file keeps the cases before it and why
                failure = e.record()
                if failure is not None:
                    rs.fail(failure)
                else:  # one that says nothing of the node (a profile that lost accesses): its line only
                    rs.messages.append(str(e))
                    rs.complete = False
                rs.extend([])
                raise
            except Stopped:
                if not plan.together:
                    raise
                got = []  # the case's ranks agreed to stop; the run ends where all agree (plan.stop)
            got = case.gather(got)
            rs.messages += [m for m in case.messages if m not in rs.messages]
            rs.extend(got)
            prog.step(case.progress(got))
            if plan.stop():
                raise Stopped
    prog.close()
    if plan.after is not None:
        rs.messages += plan.after(rs)
    return rs


def options(cls: type, args: Any) -> Any:
    """The kind's typed Options from its parsed command line."""
    got = {f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if hasattr(args, f.name)}
    return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in got.items()})  # records hold tuples


def main(kind: Any, args: Any) -> int:
    """`nodemap bench KIND ...` of a kind on the driver (commands/bench.py)."""
    opts = options(kind.Options, args)
    check_bounds(opts)
    plan = kind.plan(opts)
    rs = execute(plan, opts, args)
    if not plan.root:  # another rank reports; its exit status as the root's (mpiexec ORs them: 1 | 130 = 131)
        return exit_code(rs)
    return finish(rs, args, plan.text)


def measure(kind: Any, opts: Common) -> ResultSet:
    """Run a kind in this process from typed options (check, compare):
    nothing printed or saved, no progress; the Results carry the cautions
    the printed run would add. Bad options raise NodemapError."""
    args = SimpleNamespace(json=False, output=None, quiet=True, timeout=opts.timeout, topology=opts.topology)
    check_shared(args)
    check_bounds(opts)
    rs = execute(kind.plan(opts), opts, args)
    rs.results = [cautions(r) for r in rs.results]
    return rs
