"""Check this node: inventory, the suite of bench kinds, verdicts, findings.

`run_check` measures and returns a CheckDoc; `on_update` is called with
the document after every step, so the caller saves it as it grows and an
interruption keeps what was measured (marked incomplete).
"""

from __future__ import annotations

import os
import platform
import sys
import time
import traceback
from typing import TYPE_CHECKING, Any, Callable

from .. import __version__
from ..bench.host.thread_orders import load_topology
from ..bench.kinds import story
from ..topology.nvml import session as one_nvml_session
from . import busy, failed, remeasure
from .budget import Budget, order
from .document import UNJUDGED, CheckDoc, Environment
from .expectations import BusyRules, Expectations, NodeClassRules
from .inventory import Skipped, collect, relevant_environment
from .mpi import InJob, awareness_check
from .suite import TINY_ENV, KindFailed, measure, plan

if TYPE_CHECKING:
    from ..topology.model import Topology


def environment(root: str = "/") -> Environment:
    """Versions and what the findings' fixes depend on (variables, the transparent huge page mode)."""
    from importlib.metadata import version

    from ..topology.sysfs import Root
    from .findings import thp_mode

    fs = Root(root)
    installed = {}
    for pkg in ("cupy-cuda12x", "cupy-cuda13x", "nvidia-ml-py", "mpi4py", "numpy", "matplotlib"):
        try:
            installed[pkg.replace("-", "_")] = version(pkg)
        except Exception:
            pass
    return Environment(nodemap=__version__, python=platform.python_version(), kernel=platform.release(),
                       machine=platform.machine(), variables=relevant_environment(os.environ),
                       transparent_hugepage=thp_mode(fs.read("sys/kernel/mm/transparent_hugepage/enabled")),
                       virtual_machine=virtual_machine(fs, root), **installed)


# DMI vendors and products of hypervisors (x86 guests also have the cpuid "hypervisor" flag; Arm ones not)
_VM_DMI = ("QEMU", "KVM", "VMware", "VirtualBox", "innotek", "Xen", "Virtual Machine", "OpenStack", "Bochs",
           "Parallels", "BHYVE", "Cloud Hypervisor", "Firecracker")


def virtual_machine(fs: Any, root: str = "/") -> bool:
    """Whether this node is a VM: the CPU's "hypervisor" flag, a
    /sys/hypervisor type, or a hypervisor's DMI name (findings: a VM's
    memory latency is the hypervisor's nested paging, not the job's doing).
    A hint: what cannot be read says no."""
    from ..errors import NodemapError

    try:
        with open(os.path.join(root, "proc/cpuinfo"), "rb") as f:
            head = f.read(1 << 16).decode("ascii", "replace")  # the first CPU's flags: 1,024 CPUs' are megabytes
    except OSError:
        head = ""
    flags = next((ln for ln in head.splitlines() if ln.startswith("flags")), "")
    try:
        if "hypervisor" in flags.split() or fs.read("sys/hypervisor/type"):
            return True
        dmi = " ".join(fs.read(f"sys/class/dmi/id/{n}") or "" for n in ("sys_vendor", "product_name"))
    except NodemapError:  # a file this user may not read
        return False
    return any(name.lower() in dmi.lower() for name in _VM_DMI)


@one_nvml_session  # the topology, the health counters and every step's busy sample share one NVML start
def run_check(level: str, expectations: Expectations, on_update: Callable[[CheckDoc], None] = lambda d: None,
              progress: Callable[[str], None] = lambda s: None, command: str = "",
              in_job: InJob | None = None, detector: busy.Detector | None = None,
              expected: "Topology | None" = None, remeasure_budget: float | None = None,
              budget: Budget | None = None) -> CheckDoc:
    """`in_job`: the check runs as a rank of an MPI job (check --fleet), its MPI step is that.
    `detector`: what says whether the node is busy (a fake /proc in tests).
    `expected`: the node class's Topology this node must match (check/expected.py).
    `remeasure_budget`: seconds for measuring undecided figures again (default the level's, 0 none).
    `budget`: --budget (check/budget.py): steps run while their estimates fit, re-measurement gets
    what is left, a step still running at its end is cut, keeping what its kind measured."""
    from ..bench import interrupt

    interrupt.clear_signalled()  # a user's Ctrl-C or SIGTERM from here on is an interruption (failed.interrupted)
    topo = load_topology()
    doc = _inventory(level, topo, expectations, command, expected)
    steps, skipped = plan(topo, level, in_job=in_job)
    steps = order(steps)  # most telling first: what a cut-short check keeps (check/budget.py)
    doc.skipped += skipped
    detector = detector or busy.Detector(siblings=in_job is not None, limits=expectations.table(BusyRules),
                                         gpu_keys={g.pci_bus_id: g.key for g in topo.gpus if g.pci_bus_id})
    check = _Measuring(doc, topo, level, in_job, detector, budget, progress, on_update)
    check.run(steps, remeasure_budget)
    return check.finish()


def _inventory(level: str, topo: "Topology", expectations: Expectations, command: str,
               expected: "Topology | None") -> CheckDoc:
    """The document before any measurement: the node's inventory checks, and its match to the node class."""
    doc = CheckDoc(level=level, topology=topo, expectations=expectations, environment=environment(),
                   command=command, complete=False)
    doc.checks, doc.skipped = collect(topo, os.environ)
    if expected is not None:
        from .expected import compare

        doc.checks += compare(expected, topo, expectations.table(NodeClassRules).memory_floor)
    return doc


class _Measuring:
    """One check's measuring: its steps in order, then the undecided figures again (check/remeasure.py),
    each step's busy sample kept; the budget's cut and the user's interruption end it keeping what was measured."""

    def __init__(self, doc: CheckDoc, topo: "Topology", level: str, in_job: InJob | None, detector: busy.Detector,
                 budget: Budget | None, progress: Callable[[str], None],
                 on_update: Callable[[CheckDoc], None]) -> None:
        self.doc, self.topo, self.level, self.in_job, self.detector = doc, topo, level, in_job, detector
        self.budget, self.progress, self.on_update = budget, progress, on_update
        self.before = detector.sample(BUSY_SAMPLE)
        self.sampled: list[tuple[str, busy.Sample]] = []
        doc.busy = busy.summary(self.before, self.sampled)
        doc.rejudge()
        on_update(doc)
        self.t0 = time.monotonic()
        self.done: list[remeasure.Measured] = []
        self.shape = (sum(g.visible and g.vendor == "NVIDIA" for g in topo.gpus),
                      len([n for n in topo.numa_nodes if n.cpuset]), bool(os.environ.get(TINY_ENV)))
        self.current = None  # the step running (what a cut outside a kind ends)
        self.pending: list = []

    def run(self, steps: list, remeasure_budget: float | None) -> None:
        """Every step, then the re-measurement; complete unless the user interrupted it."""
        doc, budget = self.doc, self.budget
        self.pending = list(steps)
        try:
            with _cut(budget):
                self.first_runs(steps)
                remeasure.again(doc, self.done, self.level, self.rerun, self.progress, self.on_update,
                                _remeasure_budget(self.level, remeasure_budget, budget))
            doc.complete = True
        except KeyboardInterrupt:
            # the budget's cut outside a kind that keeps its measurements (a launcher's wait): nothing of it kept
            doc.complete = _budget_cut(doc, budget, self.current, None)
            if not doc.complete:
                self.progress("nodemap check: interrupted, reporting what was measured")
            elif budget is not None:
                doc.skipped += [budget.admit(step, self.level, *self.shape) for step in self.pending]

    def first_runs(self, steps: list) -> None:
        """Each step that the budget admits, measured once; KeyboardInterrupt when the user stopped one."""
        for i, step in enumerate(steps, 1):
            self.pending.remove(step)
            head = f"[check {i}/{len(steps)} {time.monotonic() - self.t0:5.1f}s] {step.what}"
            out = self.budget.admit(step, self.level, *self.shape) if self.budget is not None else None
            if out is not None:
                self.doc.skipped.append(out)
                self.progress(f"{head}: {out.reason}")
                continue
            self.progress(f"{head} (nodemap bench {step.kind} {' '.join(step.argv)})")
            t, self.current = time.monotonic(), step
            rs = self.measured(step)
            self.current = None
            if rs is not None:
                self.keep(step, rs, t)

    def keep(self, step, rs, t: float) -> None:
        """A step's results into the document (saved), its figures pooled later if undecided."""
        doc = self.doc
        doc.results.append(rs)
        if not (story(step.kind).launched and self.in_job is not None):  # the job's ranks measure together, once
            self.done.append(remeasure.Measured(step, len(doc.results) - 1, time.monotonic() - t))
        doc.skipped += [s for s in unjudged(rs, doc.expectations) if s not in doc.skipped]
        stop = not rs.complete and _incomplete(doc, self.budget, step, rs, time.monotonic() - t)
        doc.rejudge()
        self.on_update(doc)
        if stop:
            raise KeyboardInterrupt

    def measured(self, step, again: bool = False):
        """One step measured, its busy sample kept; None when it failed (said in skipped the first time)."""
        doc = self.doc
        self.detector.begin()
        try:
            rs = measure(step.kind, step.options, self.level, self.in_job, self.topo)
        except KindFailed as e:
            judged = failed.verification(e.error)  # output that could not be trusted
            if judged is not None:
                _add(doc.checks, [judged])
            elif not again:
                doc.skipped.append(Skipped(f"{step.what} (bench {step.kind})", str(e)))
            return None
        except Exception as e:  # a bug in one kind must not cost the figures of the others
            traceback.print_exc(file=sys.stderr)
            if not again:
                doc.skipped.append(Skipped(f"{step.what} (bench {step.kind})", crashed(step.kind, e)))
            return None
        sample = self.detector.end()
        rs.environment["busy"] = sample  # its figures are judged knowing it (busy.under_interference)
        self.sampled.append((step.what, sample))
        doc.busy = busy.summary(self.before, self.sampled)
        return rs

    def rerun(self, step):
        """A re-run stopped by the user or the budget stops the check as the first run does; one
        whose part failed is judged as the first (its wrong data a failing check) and not pooled."""
        rs = self.measured(step, again=True)
        if rs is None or rs.complete:
            return rs
        _add(self.doc.checks, failed.parts(step.kind, rs, self.doc.checks))
        if failed.interrupted(rs) or (self.budget is not None and self.budget.expired):
            raise KeyboardInterrupt
        return None

    def finish(self) -> CheckDoc:
        """The budget's account, the MPI checks, the end time: the document as saved last."""
        doc, budget = self.doc, self.budget
        if budget is not None:
            budget.stop_clock()
            doc.budget = budget.spent()
        doc.checks += mpi_checks(self.topo, doc.results)
        doc.finished = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        doc.rejudge()
        self.on_update(doc)
        return doc


BUSY_SAMPLE = 0.5  # s of watching the node before the check starts


def _cut(budget: Budget | None):
    """Ends the measuring at the budget (proc.cut_after): kernels that poll
    the stop flag return what they measured, other work is interrupted."""
    import contextlib

    if budget is None:
        return contextlib.nullcontext()
    from ..bench import interrupt
    from ..proc import CUT_KILL, cut_after

    def stop() -> None:
        budget.expired = True
        interrupt.request(interrupt.BUDGET)

    stack = contextlib.ExitStack()
    _note_sigint(stack)
    stack.callback(interrupt.reset)  # a stop asked between kinds (bench sessions keep it) ends with the check
    stack.enter_context(cut_after(budget.left(), stop, f"nodemap check --budget {budget.seconds:g}: a step did "
                                  f"not stop {CUT_KILL:g} s after the budget ended; check.json holds the steps before it"))
    return stack


def _note_sigint(stack) -> None:
    """Ctrl-C between kinds (Python's own handler; a kind's is
    interrupt.sigint_stops, which notes it too) noted as the user's."""
    import signal
    import threading

    from ..bench import interrupt

    old = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or not callable(old):
        return  # ignored or default: left so

    def on_sigint(signum, frame) -> None:
        interrupt.note_signal()
        old(signum, frame)

    signal.signal(signal.SIGINT, on_sigint)
    stack.callback(signal.signal, signal.SIGINT, old)


def _budget_cut(doc: CheckDoc, budget: Budget | None, step, took: float | None, results: int = 0) -> bool:
    """Whether the budget ended the measuring (in `step`, then said in
    skipped and the budget; None: between steps or while re-measuring,
    whose re-runs are not pooled): the check is complete, budgeted. False
    for an interruption (Ctrl-C, SIGTERM). `took` None: the cut came
    outside a kind, nothing of the step kept; else `results` it kept. A
    user's SIGINT or SIGTERM (interrupt.signalled) is an interruption even
    after the budget ended: the cut alone sends neither."""
    from ..bench import interrupt

    if budget is None or not budget.expired or interrupt.signalled():
        return False
    if step is not None and not budget.cut:
        budget.cut = step.what
        kept = ("nothing of it kept" if took is None else f"after {took:.0f} s, "
                + (f"its {results} result(s) kept" if results else "before its first result"))
        doc.skipped.append(Skipped(f"{step.what} (bench {step.kind})",
                                   f"cut at the end of the {budget.seconds:g} s budget, {kept}"))
    return True


def _remeasure_budget(level: str, given: float | None, budget: Budget | None) -> float | None:
    """Re-measurement's seconds: the level's (or `given`), within what the budget left."""
    if budget is None:
        return given
    return max(0.0, min(remeasure.BUDGET.get(level, 0.0) if given is None else given, budget.left()))


def _incomplete(doc: CheckDoc, budget: Budget | None, step, rs, took: float) -> bool:
    """A step whose kind marked its results incomplete: True when the user
    stopped it (an interruption: the check ends). Else the check goes on,
    what failed judged (check/failed.py): wrong output a failing check, the
    budget's cut said as _budget_cut says, a timeout or another failure
    skipped with the kind's line."""
    wrong = failed.parts(step.kind, rs, doc.checks)  # measured before any stop: kept in an interrupted document too
    _add(doc.checks, wrong)
    if _budget_cut(doc, budget, step, took, len(rs.results)):
        return False
    if failed.interrupted(rs):
        return True
    doc.skipped += failed.skipped(f"{step.what} (bench {step.kind})", rs, wrong)
    return False


def _add(checks: list, new: list) -> None:
    """`new` checks whose keys are not there yet (a re-run failing again is the same finding)."""
    keys = {c.key for c in checks}
    checks += [c for c in new if c.key not in keys]


# What the health level cannot read, said once in every document of that level.
XID_SKIP = Skipped("GPU Xid error counts", "NVML reports Xid errors only as events to a listener that was "
                   "running when they happened; read the kernel log (dmesg | grep -i xid)")


@one_nvml_session
def run_health(expectations: Expectations, expected: "Topology | None" = None, input: str | None = None,
               command: str = "") -> CheckDoc:
    """The passive level: inventory, NVML health, NIC links and the
    environment, against the expected node (its saved Topology) when given;
    nothing is measured, so it is safe while jobs run and takes seconds.
    `input`: a saved node (snapshot, XML, JSON) instead of this one: its
    hardware is judged, this machine's NVML, binding and variables are not."""
    from .expected import compare

    if input is None:
        topo = load_topology()
    else:
        from ..bench.harness import read_topology

        topo = read_topology(input, "--input")
    live = input is None
    doc = CheckDoc(level="health", topology=topo, expectations=expectations, environment=environment(),
                   command=command)
    doc.checks, doc.skipped = collect(topo, os.environ if live else {}, nvml=live,
                                      affinity=None if live else topo.allowed_cpus)
    if not live:
        doc.skipped.append(Skipped("GPU health from NVML, this process's binding and environment",
                                   f"--input {input}: a saved node, not this machine"))
    elif any(g.vendor == "NVIDIA" for g in topo.gpus):
        doc.skipped.append(XID_SKIP)
    if expected is not None:
        doc.checks += compare(expected, topo, expectations.table(NodeClassRules).memory_floor)
    else:
        doc.skipped.append(Skipped("this node against its node class (missing GPUs, NICs, links, memory)",
                                   "no --expect-topology FILE (save one with nodemap topo --export FILE on a good "
                                   "node of the class)"))
    doc.finished = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    doc.rejudge()
    return doc


def crashed(kind: str, e: Exception) -> str:
    return (f"crashed ({type(e).__name__}: {e}); the traceback is on stderr: a nodemap bug, please report it "
            f"with that traceback (nodemap bench {kind} alone may show it again)")


# how the check (not `bench memory`, which takes --peak) is given the DRAM peak
SITE_PEAK = ('give it to the check in a site file (channels x MT/s x 8 B / 1000 GB/s): [[limit]] kind = "stream", '
             'match = ".", peak = GB/S, warn = 0.72, fail = 0.60, source = "our DIMMs"; then nodemap check '
             '--expect FILE')


def unjudged(rs, exp: Expectations | None = None) -> list[Skipped]:
    """Rules a kind's own messages say cannot apply here (no DRAM peak on a
    VM), for the summary's skipped list, not only the results' messages;
    none where the site expectations give the peak."""
    if exp is not None and exp.dram_peak():
        return []
    return [Skipped(what, m.split("; give it with --peak")[0] + "; " + SITE_PEAK if "--peak" in m else m)
            for m in rs.messages for prefix, what in UNJUDGED if m.startswith(prefix)]


def mpi_checks(topo, results) -> list:
    """MPI's CUDA-awareness, once the MPI run (if any) has probed it."""
    gpu = any(g.visible and g.vendor == "NVIDIA" for g in topo.gpus)
    c = awareness_check(gpu, results, os.environ)
    return [c] if c is not None else []


def stderr_progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
