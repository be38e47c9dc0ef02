"""Run `nodemap compare`'s probes under each binding and judge the difference.

Every task of a binding runs as its own process at the same time (as the
ranks of an application would), bound before it starts: CPU affinity, a
memory policy binding it to its NUMA nodes (when the binding has any) and
CUDA_VISIBLE_DEVICES naming its GPU. Each process runs one `nodemap bench`
kind (the harness: verified, repeated, median) and returns its result set
as JSON. The probes and the figure kept per rank are the kinds' own (their
STORY's probes, bench/story.py): stream (bench memory's triad with the
rank's threads), h2d (bench copies, host memory the rank's own), gpu
(bench gpu's float64 triad), jacobi (bench jacobi's single-GPU step).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from ..bench.intervals import Interval, median_interval, ratio_interval
from ..bench.kinds import BENCHES, story
from ..bench.results import HIGHER_IS_BETTER, Result, ResultSet
from ..bench.story import Probe
from ..check.expectations import CompareRules
from ..errors import NodemapError
from ..mapping import launch
from ..mapping.emit import gpu_env
from ..mapping.request import TaskBinding
from ..proc import kill_group, start_group, wait_group
from ..topology.model import Topology
from .bindings import Binding


def declared() -> dict[str, tuple[str, Probe]]:
    """Every probe the kinds declare, in the registry's order: name -> (kind, probe)."""
    return {p.name: (kind, p) for kind in BENCHES for p in story(kind).probes}


def probe_of(name: str) -> Probe:
    return declared()[name][1]


def lower_is_better(name: str) -> bool:
    return not HIGHER_IS_BETTER.get(probe_of(name).unit, True)


def argv(probe: str, t: TaskBinding, size: str | None) -> list[str]:
    """The bench command line of one rank's probe: its kind's typed options,
    a command line only at the child process boundary (driver.argv_of)."""
    from ..bench.driver import argv_of

    kind, opts = options(probe, t, size)
    return [kind, *argv_of(opts)]


def options(probe: str, t: TaskBinding, size: str | None) -> tuple[str, Any]:
    """(bench kind, its Options) of one rank's probe."""
    kind, p = declared()[probe]
    return kind, p.options(max(1, min(t.threads or 1, len(t.cpus))), size)


def first_touch_node(topo: Topology, t: TaskBinding) -> int:
    """The NUMA node a rank's host memory lands on: its policy's first node,
    else the node of its first CPU (first touch)."""
    if t.mems:
        return min(t.mems)
    nodes = topo.numa_of(t.cpus)
    return min(nodes) if nodes else -1


def result_of(probe: str, rs: ResultSet, node: int) -> Result | None:
    """The one result kept from a rank's result set (`node`: the NUMA node its host memory lands on)."""
    return probe_of(probe).kept(rs, node)


def kept(probe: str, out: str, node: int) -> Result | None:
    """The result kept from a rank's `nodemap bench --json` output, read as
    `report` reads a result file: a damaged one is an InputError naming the
    field, which becomes the rank's error."""
    from ..bench import resultfile

    return result_of(probe, resultfile.decode("its bench output", out.encode()), node)


def combine(probe: str, values: list[float], gpus: list[tuple[int, ...]]) -> float:
    """The whole binding's figure from its ranks' (one repetition's, or their
    medians): the sum of bandwidths (ranks sharing a GPU under a time-sliced
    probe count once, at their median); the slowest rank's step time."""
    if lower_is_better(probe):
        return max(values)
    if probe_of(probe).time_sliced and len(gpus) == len(values):
        shared: dict[tuple[int, ...], list[float]] = {}
        for g, x in zip(gpus, values):
            shared.setdefault(g, []).append(x)
        return sum(statistics.median(xs) for xs in shared.values())
    return sum(values)


@dataclass
class Row:
    binding: str
    probe: str
    values: list[float | None]  # per rank: the median of its repetitions
    errors: list[str]
    spreads: list[float] = field(default_factory=list)  # per measured rank: (max - min) / median of its repetitions
    warnings: list[str] = field(default_factory=list)  # a binding asked for but not applied (the figure stands)
    gpus: list[tuple[int, ...]] = field(default_factory=list)  # per rank: its GPUs
    samples: list[list[float]] = field(default_factory=list)  # per rank: its repetitions, every round's
    totals: list[float] = field(default_factory=list)  # per repetition of the whole binding: its figure
    rounds: int = 0  # runs of this binding (alternating with the others)
    together: int = 0  # repetitions its ranks started together (barriers released)

    @property
    def noise(self) -> float:
        """The widest relative spread of one rank's repetitions (shown; the verdict uses `interval`)."""
        return max(self.spreads, default=0.0)

    @property
    def total(self) -> float | None:
        """The whole binding's figure: the median of its repetitions' where
        they are known, else from its ranks' medians (`combine`)."""
        if any(x is None for x in self.values) or not self.values:
            return None
        if self.totals:
            return statistics.median(self.totals)
        return combine(self.probe, [x for x in self.values if x is not None], self.gpus)

    @property
    def interval(self) -> Interval | None:
        """The 95% interval (or range, under 6) of the whole binding's median over its repetitions."""
        return median_interval(self.totals) if self.total is not None else None

    def add(self, run: "Row") -> None:
        """Another round of the same binding and probe: its repetitions join
        these (ranks in the same order); a rank's figure is its median over all."""
        failed = [x is None for x in run.values]
        if self.rounds:
            failed = [a or b is None for a, b in zip(failed, self.values)]  # failed once: not trusted
        else:
            self.samples = [[] for _ in run.values]
        for mine, more in zip(self.samples, run.samples or [[] for _ in run.values]):
            mine.extend(more)
        self.totals += run.totals
        self.together += run.together
        self.errors += run.errors
        self.warnings += [w for w in run.warnings if w not in self.warnings]
        self.gpus = self.gpus or run.gpus
        self.values = [None if bad or not xs else statistics.median(xs) for bad, xs in zip(failed, self.samples)]
        self.spreads = [(max(xs) - min(xs)) / statistics.median(xs) for xs in self.samples if len(xs) > 1]
        self.rounds += 1


def whole(probe: str, samples: list[list[float]], gpus: list[tuple[int, ...]]) -> list[float]:
    """The whole binding's figure per repetition: repetition i of every rank
    ran together (a barrier before each), so they combine; as many as the
    rank with the fewest."""
    if not samples or any(not s for s in samples):
        return []
    return [combine(probe, list(rep), gpus) for rep in zip(*samples)]


def run_binding(topo: Topology, b: Binding, probe: str, size: str | None, timeout: float) -> Row:
    """Every rank of the binding runs the probe at once, each repetition
    together (a barrier before each: bench/barrier.py); one row of this round."""
    from ..bench.barrier import Coordinator

    procs: list[Any] = []
    together = Coordinator(len(b.tasks), timeout)
    try:
        for i, t in enumerate(b.tasks):
            cmd = [sys.executable, "-m", "nodemap", "bench", *argv(probe, t, size), "--json", "-q"]
            # each rank in its own process group (proc.py): one that hangs is ended with all it started
            procs.append(start_group(cmd, rank_env(topo, t) | together.env(i), pass_fds=together.fds(i),
                                     preexec_fn=_binder(t) if b.bound else None))
        together.started()
        answers = answers_within(procs, timeout)
    finally:  # Ctrl-C, a failed start: no rank runs on (in its own group, the terminal's Ctrl-C missed it)
        for p in procs:
            if p.returncode is None:
                kill_group(p)
    values, errors, spreads, warnings, samples = [], [], [], [], []
    for t, (code, out, err) in zip(b.tasks, answers):
        value, mine = None, []
        warnings += [f"rank {t.task}: {line[len(POLICY_FAILED):].strip()}" for line in err.splitlines()
                     if line.startswith(POLICY_FAILED)]
        if code in (0, 1) and out.strip().startswith("{"):
            try:
                r = kept(probe, out, first_touch_node(topo, t))
            except NodemapError as e:
                r, err = None, str(e)
            if r:
                value, mine = r.stats.median, list(r.samples or [r.stats.median])
                spreads.append(r.stats.spread)
        if value is None:
            errors.append(f"rank {t.task}: {(err.strip().splitlines() or ['no result'])[-1]}")
        values.append(value)
        samples.append(mine)
    together.close()
    gpus = [tuple(t.gpus) for t in b.tasks]
    return Row(b.name, probe, values, errors, spreads, warnings, gpus, samples, whole(probe, samples, gpus),
               together=len(together.releases))


def rank_env(topo: Topology, t: TaskBinding) -> dict[str, str]:
    """A rank's environment: its planned GPUs visible as CUDA numbers them (mapping/emit.py: among the
    node's NVIDIA GPUs in PCI order; a physical index counts every vendor's GPUs)."""
    return dict(os.environ, CUDA_DEVICE_ORDER="PCI_BUS_ID", NCCL_NVLS_ENABLE="0") | dict(gpu_env(topo, t.gpus))


def answers_within(procs: list[Any], timeout: float) -> list[tuple[int, str, str]]:
    """Every rank's answer by one deadline, `timeout` from now: waited one after another, each with
    the full `timeout`, n ranks stuck in one hung driver took n times --timeout."""
    end = time.monotonic() + timeout
    return [_answer(p, end, timeout) for p in procs]


def _answer(p: Any, end: float, timeout: float) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of a rank; one still running at `end` is killed, with what it
    started (one that ended is read however late it is)."""
    try:
        # one that ended gets a second past the deadline to hand over its output (a child it left may
        # hold the pipes open); one still running, none
        return wait_group(p, max(end - time.monotonic(), 1.0 if p.poll() is not None else 0.01))
    except subprocess.TimeoutExpired:
        return p.returncode, "", f"no answer in {timeout:g} s"


POLICY_FAILED = f"nodemap-compare: {launch.POLICY_REFUSED}"


def _binder(t: TaskBinding) -> Any:
    """Bind the child between fork and exec as `nodemap run` binds a rank (inherited by the bench); a
    refused memory policy is said on stderr (the row's warning) and the probe runs on."""
    binding = launch.Binding(sorted(t.cpus), sorted(t.mems))

    def bind() -> None:
        for note in launch.apply(binding):
            os.write(2, f"{POLICY_FAILED} {note}\n".encode())

    return bind


def verdict(row: Row, plan_row: Row | None, b: Binding, rules: CompareRules, same: bool = False) -> str:
    """One sentence: how this binding's figure compares with the plan's, and
    why. Each figure is the median over repetitions of the whole binding
    (its ranks' figures of one repetition, run together, combined); the
    ratio to the plan's is a difference when the ratio's interval (from
    both medians' 95% intervals, bench/intervals.py) excludes 1 and the
    change exceeds [compare] min_noise (`rules`, the expectations'). `same`: the binding cannot differ from the
    plan (every rank got the plan's CPUs, memory and GPUs, or, on a node of
    one NUMA node, as many cores of its own)."""
    if row.total is None:
        return f"{row.probe}: not measured ({'; '.join(row.errors) or 'no result'})"
    unit, lower = probe_of(row.probe).unit, lower_is_better(row.probe)
    value = f"{row.probe}: {row.total:,.1f} {unit}"
    if row.binding == "plan":
        iv = row.interval
        how = f"{_span(iv.low, iv.high, unit)}: {iv.method} of the whole binding" if iv else (
            "one repetition")
        return f"{value} (the reference; {how})"
    if plan_row is None or plan_row.total is None:
        return value
    mine, ref = row.total, plan_row.total
    ratio = mine / ref if ref else 1.0
    lo, hi = _ratio_bounds(row, plan_row)
    worse = ratio > 1 if lower else ratio < 1
    change = abs(ratio - 1)
    how = ("slower" if worse else "faster") if lower else ("lower" if worse else "higher")
    band = f"{ratio:.2f}x the plan's, interval {lo:.2f}-{hi:.2f}x"
    if lo <= 1 <= hi or change <= rules.min_noise:
        held = "holds 1" if lo <= 1 <= hi else f"a change within {100 * rules.min_noise:.0f}%"
        why = "; it cannot differ from the plan here" if same else ""
        return f"{value}: no difference beyond noise ({band}: {held}){why}"
    if same:
        return (f"{value}, {100 * change:.0f}% {how} ({band}), but it cannot differ from the plan here: "
                f"run-to-run variation beyond the repetitions' interval")
    cause = f" ({b.bad})" if b.bad and worse else ""
    return f"{value}, {100 * change:.0f}% {how} than the plan's ({band}, beyond noise){cause}"


def _ratio_bounds(row: Row, plan_row: Row) -> tuple[float, float]:
    """The interval of row's figure over the plan's: every ratio the two
    medians' intervals allow; a figure of one repetition is a point."""
    def bounds(r: Row) -> tuple[float, float]:
        iv = r.interval
        return (iv.low, iv.high) if iv else (r.total or 0.0, r.total or 0.0)

    mine, ref = bounds(row), bounds(plan_row)
    return ratio_interval(mine, ref) if ref[0] > 0 else (1.0, 1.0)


def _span(lo: float, hi: float, unit: str) -> str:
    return f"{lo:,.1f}-{hi:,.1f} {unit}"


def usable_probes(wanted: list[str], gpus: int) -> tuple[list[str], list[str]]:
    run, why = [], []
    for p in wanted:
        if probe_of(p).gpu and gpus == 0:
            why.append(f"{p}: no GPU on this node")
        else:
            run.append(p)
    return run, why


def parse_probes(spec: str) -> list[str]:
    got = [s.strip() for s in spec.split(",") if s.strip()]
    known = declared()
    if not got or any(p not in known for p in got):
        raise NodemapError(f"--probes {spec!r}: choose from {','.join(known)}")
    return list(dict.fromkeys(got))
