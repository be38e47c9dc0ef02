"""`nodemap check`: is this node right? Inventory, measurements, verdicts,
findings; a one-screen summary, a JSON document and an HTML report."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import threading
import time

from ..fleet import command as fleet_command
from ..slurm import context
from ..units import seconds

TYPE_CHECKING = False  # typing costs ~3 ms of `nodemap check --help`
if TYPE_CHECKING:
    from collections.abc import Iterator

DESCRIPTION = """\
Check this node: inventory and health (GPUs, NICs, PCIe links trained at
their maximum, NUMA balance, offline CPUs, ECC/remapped rows/throttling
through NVML, environment variables that change results), then the
measurements the topology calls for (STREAM placement sweep, NUMA
matrices, latency; per GPU: HBM, host<->GPU from every NUMA node,
GPU<->GPU, NCCL all_reduce). Every figure gets a verdict (pass/warn/fail)
against its path's practical limit and against its peers on this node,
with the rule that decided it; findings say what is wrong, the evidence,
the fix, and whether the cause is configuration or hardware. What the
node lacks (GPU, NVML, MPI) is skipped with the reason, never failed.

--level health measures nothing: inventory against the node's class
(--expect-topology), NVML health, NIC links and the environment, in
seconds and safe while jobs run (Slurm's HealthCheckProgram; docs/slurm.md).
--slurm-drain drains this node in Slurm when it fails for a hardware cause
and resumes it when it passes again, if nodemap drained it.

Writes DIR/check.json (docs/check.md) and DIR/check.html (open offline;
at --level health only when -o is given).
Other work on the node (other processes' CPU time on the measured CPUs,
memory pressure, other processes on the GPUs) is sampled before the check
and around every step; a busy node's report says so at the top, and its
figures measured then are "inconclusive", not failed for speed (unless
a bandwidth fails even credited for the CPU time others took).
Exit status: 0 the node is healthy (pass, warn, inconclusive; findings
about the job's configuration, such as MPI not CUDA-aware, are printed
but do not fail the node), 1 unhealthy (a hardware-cause figure whose
whole interval is beyond its fail limit, a failed health check, or
wrong data from the GPUs or their links, such as elements NCCL received wrong),
2 bad usage or could not judge (a busy node, scontrol missing or slow,
another check holding this node's lock: retry later, do not drain),
130 interrupted (the report holds what was measured, marked incomplete).
In a Slurm prolog or epilog every status but 1 is 0: slurmd drains a node
on any non-zero exit (--slurm-context)."""

EPILOG = """\
examples:
  nodemap check                          quick level, report in ./nodemap-check-HOST-TIME/
  nodemap check --level full -o /tmp/c   standard sizes and every engine
  nodemap check --expect site.toml       site limits and thresholds (keys of nodemap/check/expectations.toml)
  nodemap check --budget 30 --slurm-drain
                                         a Slurm prolog: measure what fits in 30 s, most telling first
  nodemap report /tmp/c/check.json       the summary again; --html, --compare BEFORE AFTER
  nodemap topo --export class.json       once, on a good node of the class; then on every node:
  nodemap check --level health --expect-topology class.json --slurm-drain
                                         HealthCheckProgram: drain on a hardware fault, resume when fixed
  nodemap check --level health --input snap.tar.bz2 --expect-topology class.json
                                         judge a saved node (sysfs snapshot, hwloc XML, topology JSON)
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--level", choices=("quick", "full", "health"), default="quick",
                   help="quick: only the sizes and cases that are judged, the host ones with full's repetitions "
                        "(default); full: every size, case and repetition the kinds take by default; health: "
                        "nothing measured, inventory and health counters only (seconds, safe while jobs run)")
    p.add_argument("--budget", type=seconds, metavar="S",
                   help="finish measuring within S seconds of the start (a Slurm prolog): steps run most telling "
                        "first (GPU memory, host<->GPU, GPU<->GPU, NCCL, STREAM, latency, NUMA, MPI) while their "
                        "estimated time fits, the rest are skipped with the budget named; a step still running at "
                        "the end is cut, keeping what it measured; the report takes 1-3 s more")
    p.add_argument("--expect-topology", metavar="FILE",
                   help="the node class this node must match (nodemap topo --export FILE on a good node): a "
                        "missing GPU/NIC/NVLink, a narrower PCIe link, a NIC port down, less memory fail")
    p.add_argument("--health-timeout", type=seconds, default=45.0, metavar="S",
                   help="--level health ends after S seconds with exit 2, nothing drained (a hung driver must not "
                        "outlive Slurm's 60 s HealthCheckProgram limit; default 45)")
    p.add_argument("--input", metavar="PATH",
                   help="--level health only: judge a saved node (sysfs snapshot, hwloc XML, topology JSON, or a "
                        "check document: its topology)")
    p.add_argument("--output", "-o", metavar="DIR",
                   help="folder for check.json and check.html (default ./nodemap-check-HOST-YYYYmmdd-HHMMSS)")
    p.add_argument("--expect", metavar="FILE", help="site expectations (TOML) overriding the shipped limits and "
                                                    "thresholds ([thresholds], [busy], [fleet]: docs/check.md)")
    p.add_argument("--json", action="store_true", help="print the check document as JSON on stdout")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress lines on stderr")
    p.add_argument("--prom", metavar="FILE",
                   help="also write the figures and verdicts as a Prometheus text file (node_exporter's textfile "
                        "collector: FILE.prom in its folder), replaced atomically")
    g = p.add_argument_group("Slurm")
    g.add_argument("--slurm-drain", nargs="?", const="on", choices=("on", "dry-run"), metavar="dry-run",
                   help="drain this node (scontrol update State=DRAIN Reason='nodemap: ...') when it fails for a "
                        "hardware cause; resume it when it passes, if nodemap drained it; =dry-run prints the "
                        "scontrol command instead")
    g.add_argument("--dry-run", action="store_true", help="same as --slurm-drain=dry-run")
    g.add_argument("--slurm-timeout", type=seconds, default=10.0, metavar="S",
                   help="seconds each scontrol call may take before the check gives up, exit 2 (default 10)")
    g.add_argument("--node-name", metavar="NAME",
                   help="the node's Slurm NodeName (default $SLURMD_NODENAME, else the short hostname; not "
                        "with --fleet, where each node names itself)")
    g.add_argument("--slurm-context", choices=context.CONTEXTS, metavar="prolog|epilog|health|none",
                   help="who runs this check (default: slurmd's SLURM_SCRIPT_CONTEXT, prolog_slurmd or "
                        "epilog_slurmd, else none): in a prolog or epilog every status but 1 (a hardware fault) "
                        "is exit 0, as slurmd drains the node on any other ('Prolog error'); health (name it in "
                        "a HealthCheckProgram, which slurmd does not mark) words what happens next")
    g.add_argument("--lock-wait", type=seconds, metavar="S",
                   help="with --slurm-drain: seconds to wait for the node's lock before stepping aside without "
                        "judging (default 1 for --level health, which shares the lock with other health checks, "
                        "at most half its --health-timeout; 10 for a measuring level, which holds it alone)")
    fleet_command.add_arguments(p)


def output_dir(arg: str | None) -> str:
    """The report folder, created now so a bad path fails before measuring."""
    import socket

    from ..errors import NodemapError
    from ..outfile import writable_folder

    d = arg or f"nodemap-check-{socket.gethostname()}-{time.strftime('%Y%m%d-%H%M%S')}"
    parent = os.path.dirname(os.path.abspath(d))
    if not os.path.isdir(parent):
        raise NodemapError(f"--output {d}: the folder {parent} does not exist; create it or give another")
    writable_folder(d, "--output", "check.json and check.html")
    return d


# s: health checks share the lock, so a health check waits only for a measuring one, which holds it for
# minutes: waiting longer rarely helps and delays the job whose prolog waits; a measuring check waits for
# health checks, done in about a second each
HEALTH_LOCK_WAIT, MEASURING_LOCK_WAIT = 1.0, 10.0


def run(args: argparse.Namespace) -> int:
    """The check, its exit status as the context that runs it needs
    (slurm/context.py: in a prolog or epilog only a hardware fault is
    non-zero, any other status would drain the node)."""
    import sys

    from ..errors import NodemapError

    where = context.detect(os.environ, args.slurm_context)
    if args.fleet or args.from_dirs:
        if args.slurm_context:
            raise NodemapError("--slurm-context: a fleet runs under a launcher, not in a prolog or epilog: leave it "
                               "out")
        return _run(args, where)
    if not context.drains_on_failure(where):
        return context.exit_status(where, _run(args, where))[0]
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = context.Forgiving(sys.stdout), context.Forgiving(sys.stderr)
    try:
        try:
            status = _run(args, where)
        except NodemapError as e:
            print(f"nodemap check: error: {' '.join(str(e).split())}", file=sys.stderr)
            status = e.exit_code
        status, said = context.exit_status(where, status)
        if said:
            print(said, file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        return status
    finally:
        sys.stdout, sys.stderr = streams


def _run(args: argparse.Namespace, where: str) -> int:
    from ..errors import NodemapError

    if args.dry_run:
        args.slurm_drain = "dry-run"
    if args.input and args.level != "health":
        raise NodemapError("--input: only --level health judges a saved node (the other levels measure this one); "
                           "add --level health")
    if args.budget is not None and (args.level == "health" or args.fleet or args.from_dirs):
        raise NodemapError("--budget: bounds the measuring of one node's check (quick or full); --level health "
                           "measures nothing (bound it with --health-timeout) and --fleet's ranks measure together")
    if args.fleet or args.from_dirs:
        if args.expect_topology is not None or args.level == "health":
            raise NodemapError("--fleet: --expect-topology and --level health are per node; run nodemap check "
                               "--level health --expect-topology FILE on each node (HealthCheckProgram)")
        if args.prom:
            raise NodemapError("--prom: per node; run nodemap check --prom FILE on each node (prolog, epilog, "
                               "HealthCheckProgram)")
        if args.node_name:  # every node's leader would drain (or resume) that one node
            raise NodemapError("--node-name: names one node; with --fleet each node's leader acts on its own "
                               "name (SLURMD_NODENAME under srun, else its short hostname): leave it out")
        if args.slurm_drain and args.from_dirs:
            raise NodemapError("--from: --slurm-drain acts on the node a check runs on; saved documents are "
                               "not this node's now (drain by hand from the fleet's drain list)")
        return fleet_command.run(args)
    from ..check.budget import Budget

    budget = Budget(args.budget) if args.budget is not None else None  # its clock starts here: a lock's wait counts
    if args.level != "health":
        return _with_lock(args, where, budget)
    from ..proc import deadline

    code = context.exit_status(where, 2)[0]  # a prolog's health check past its time drains nothing either
    with deadline(args.health_timeout, f"nodemap check --level health: not done within {args.health_timeout:g} s "
                  f"(a hung GPU driver, file system or slurmctld?): could not judge, nothing drained (exit {code})",
                  code):
        return _with_lock(args, where, budget)


def _with_lock(args: argparse.Namespace, where: str, budget) -> int:
    """The check, under this node's lock when it may drain: shared by health
    checks, a measuring check's alone (slurm/drain.py NodeLock)."""
    if not args.slurm_drain:
        return _check(args, where, budget)
    import sys

    from ..check.document import NOT_JUDGED
    from ..launcher import node_name
    from ..slurm import drain

    name = node_name(os.environ, args.node_name, for_slurm=True)
    health = args.level == "health"
    wait = args.lock_wait if args.lock_wait is not None else HEALTH_LOCK_WAIT if health else MEASURING_LOCK_WAIT
    if health:
        wait = min(wait, args.health_timeout / 2)  # the check itself must still fit in its deadline
    try:
        lock = drain.NodeLock(drain.runtime_dir(os.environ), name, shared=health, wait=wait, level=args.level)
        lock.__enter__()
    except drain.LockBusy as e:
        print(f"nodemap check: {e}: {context.next_run(where)}", file=sys.stderr)
        return NOT_JUDGED
    try:
        return _check(args, where, budget, name)
    finally:
        lock.__exit__(None, None, None)


def _check(args: argparse.Namespace, where: str, budget, node: str = "") -> int:
    import sys

    from ..errors import NodemapError
    from ..check import expectations
    from ..check.node import run_check, run_health, stderr_progress
    from .. import outfile
    from ..report import html, terminal

    exp = expectations.load(args.expect)
    expected = _expected(args.expect_topology)
    if args.prom:
        outfile.check(args.prom, "--prom")
    health = args.level == "health"
    d = output_dir(args.output) if args.output or not health else None
    json_path = html_path = None
    files: tuple[str, ...] = ()
    if d is not None:
        json_path, html_path = os.path.join(d, "check.json"), os.path.join(d, "check.html")
        for p in (json_path, html_path):
            outfile.check(p, "--output")
        files = (json_path, html_path)
    cmd = "nodemap check --level " + args.level + (f" --expect {args.expect}" if args.expect else "") + (
        f" --expect-topology {args.expect_topology}" if args.expect_topology else "") + (
        f" --budget {args.budget:g}" if budget is not None else "")
    terminated: list[int] = []
    unsaved: list[str] = []  # a disk that fills mid-check: said once, measuring and the summary go on

    def save(path: str, text: str, final: bool = False) -> None:
        try:
            outfile.write(path, text)
        except NodemapError as e:
            if not unsaved and not final:
                print(f"nodemap check: {e}; the check goes on and prints its summary", file=sys.stderr, flush=True)
            unsaved.append(str(e))

    if health:
        doc = run_health(exp, expected, args.input, command=cmd)
    else:
        with _sigterm_interrupts() as terminated:
            doc = run_check(args.level, exp, on_update=lambda doc: save(json_path, doc.to_json()),
                            progress=(lambda s: None) if args.quiet else stderr_progress, command=cmd,
                            expected=expected, budget=budget)
    if json_path is not None:
        unsaved.clear()
        save(json_path, doc.to_json(), final=True)
        save(html_path, html.render(doc), final=True)
        files = () if unsaved else files
    if args.json:
        print(doc.to_json())
    else:
        print(terminal.summary(doc, files=files))
    if unsaved:
        print(f"nodemap check: error: the report was not written: {'; '.join(unsaved)}", file=sys.stderr)
    if not args.quiet and args.json and files:
        print(f"report: {json_path}, {html_path}", file=sys.stderr)
    from ..check.document import exit_status

    status = 128 + signal.SIGTERM if terminated else exit_status(doc)
    if unsaved and status == 0:
        status = 2  # healthy, but the report asked for is not there: the user must act
    if args.prom:  # before Slurm is asked: a failing scontrol must not leave the last check's metrics standing
        from ..report import prom

        outfile.write(args.prom, prom.render(doc, status), "--prom")
    if node:
        status = _slurm(doc, node, args.slurm_drain == "dry-run", args.slurm_timeout, status, where)
    return status


@contextlib.contextmanager
def _sigterm_interrupts() -> Iterator[list[int]]:
    """A batch time limit's SIGTERM ends the measuring as Ctrl-C does: what
    was measured is judged, written (check.json, check.html) and summed up,
    the MPI step's launcher killed and its temporary folder removed (the
    default action ended the process on the spot and left all of that
    undone). Later SIGTERMs are ignored while the report is written; the
    scheduler's SIGKILL still ends it. Yields the signals received."""
    got: list[int] = []

    def on_term(signum: int, frame: object) -> None:
        from ..bench import interrupt

        interrupt.note_signal()  # an interruption, not --budget's cut (check/node.py _budget_cut)
        got.append(signum)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread():
        yield got
        return
    old = signal.signal(signal.SIGTERM, on_term)
    try:
        yield got
    finally:
        if not got:
            signal.signal(signal.SIGTERM, old)


def _expected(path: str | None):
    """The node class's Topology (--expect-topology), read and checked before anything runs."""
    from ..errors import NodemapError

    if path is None:
        return None
    if not path.strip():  # an unset variable in a HealthCheckProgram line: not "no class"
        raise NodemapError("--expect-topology '': an empty path; name the node class file (nodemap topo --export "
                           "FILE on a good node), or leave the option out")
    from ..bench.harness import read_topology
    from ..check.expected import validate

    cls = read_topology(path, "--expect-topology")
    validate(cls, path)
    return cls


def _slurm(doc, node: str, dry_run: bool, timeout: float, status: int, where: str) -> int:
    """Drain or resume the node on the document's verdict; one line on stderr;
    the status to exit with. A scontrol that fails is exit 2 (SlurmError),
    except for a node found unhealthy in a prolog or epilog: its exit 1
    makes slurmd drain it."""
    import sys

    from ..check.document import UNHEALTHY
    from ..slurm import drain, verdict

    healthy, why = verdict.health(doc)
    try:
        said = drain.act(node, healthy, why, verdict.scope(doc), dry_run, timeout)
    except drain.SlurmError as e:
        if status != UNHEALTHY or not context.drains_on_failure(where):
            raise
        said = f"not drained by nodemap ({e}); exit 1: slurmd drains it ('{where.capitalize()} error')"
        print(f"nodemap check: slurm: {said}", file=sys.stderr)
        return status
    print(f"nodemap check: slurm: {said}", file=sys.stderr)
    if status == UNHEALTHY and context.drains_on_failure(where) and not dry_run and _resumed_meanwhile(node, timeout):
        print(f"nodemap check: slurm: {node}: resumed while this {where}'s check ran (a newer check found it "
              f"healthy, or an admin): exit 0, as slurmd would drain it '{where.capitalize()} error', a drain "
              "nodemap never resumes", file=sys.stderr)
        return 0
    return status


def _resumed_meanwhile(node: str, timeout: float) -> bool:
    """Whether the node is out of drain now, as this prolog's or epilog's
    check ends unhealthy: a check that began after the fault was fixed
    judged it healthy and resumed it while this one, slower, ran on what it
    had read before the fix. Read again as late as can be: this check's exit
    1 would make slurmd drain the node with its own reason. A scontrol that
    fails now says nothing: the drain stands, exit 1."""
    from ..slurm import drain

    try:
        return not drain.show(node, timeout).drained
    except drain.SlurmError:
        return False
