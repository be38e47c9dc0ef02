"""Run `nodemap compare`'s probes under each binding and judge the difference.

Every task of a binding runs as its own process at the same time (as the
ranks of an application would), bound before it starts: CPU affinity, a
memory policy binding it to its NUMA nodes (when the binding has any) and
CUDA_VISIBLE_DEVICES naming its GPU. Each process runs one `nodemap bench`
kind (the harness: verified, repeated, median) and returns its result set
as JSON. Probes and the figure kept per rank:
  stream  bench memory, triad with the rank's threads       GB/s, higher is better
  h2d     bench copies --cases host (copy engine), host memory
          placed by the rank's policy (else its node's row)  GB/s
  gpu     bench gpu, triad float64 on the rank's GPU         GB/s
  jacobi  bench jacobi, the single-GPU step on the rank's GPU  us, lower is better
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any

from ..errors import NodemapError
from ..mapping.request import TaskBinding
from ..topology.model import Topology
from .bindings import Binding

PROBES = ("stream", "h2d", "gpu", "jacobi")
GPU_PROBES = ("h2d", "gpu", "jacobi")
LOWER_IS_BETTER = {"jacobi"}
# Kernels of ranks that share a GPU run by turns (the GPU time-slices between processes), so each rank's
# repetitions can each see the whole GPU: their figures do not add up; copies share the engines at once and do.
TIME_SLICED = {"gpu"}
UNITS = {"stream": "GB/s", "h2d": "GB/s", "gpu": "GB/s", "jacobi": "us"}


def argv(probe: str, t: TaskBinding, size: str | None) -> list[str]:
    """The bench command line of one rank's probe."""
    threads = max(1, min(t.threads or 1, len(t.cpus)))
    if probe == "stream":  # a kind on the driver: typed options, a command line only at the process boundary
        from ..bench.driver import argv_of
        from ..bench.host_memory import Options

        return ["memory", *argv_of(Options(threads=threads, kernels="triad", repeats=5, size=size))]
    if probe == "h2d":
        return ["copies", "--cases", "host", "--engine", "ce", "--gpus", "0", "--repeats", "5"]
    if probe == "gpu":
        return ["gpu", "--gpus", "0", "--kernels", "triad", "--dtype", "float64", "--no-aggregate", "--repeats", "5"]
    if probe == "jacobi":
        return ["jacobi", "--mode", "single", "--gpus", "0", "--variants", "single", "--size", "8192x8192",
                "--iters", "100", "--repeats", "3"]
    raise ValueError(probe)


def first_touch_node(topo: Topology, t: TaskBinding) -> int:
    """The NUMA node a rank's host memory lands on: its policy's first node,
    else the node of its first CPU (first touch)."""
    if t.mems:
        return min(t.mems)
    nodes = topo.numa_of(t.cpus)
    return min(nodes) if nodes else -1


def figure(probe: str, rs: dict[str, Any], node: int) -> float | None:
    """The one number kept from a rank's result set (its median)."""
    st = stats_of(probe, rs, node)
    return st["median"] if st else None


def stats_of(probe: str, rs: dict[str, Any], node: int) -> dict[str, Any] | None:
    """The statistics (median, spread, ...) of the one result kept from a
    rank's result set. H2D: the row of host memory placed by the rank's own
    policy (host_node -1, where bench copies measures one), else the row of
    the node its memory lands on."""
    if probe == "h2d":
        rows: dict[int, dict[str, Any]] = {}
        for r in rs.get("results", []):
            if r["metric"] == "h2d_ce":  # the rank's one GPU: the first row of each placement
                rows.setdefault(r.get("params", {}).get("host_node"), r["stats"])
        return rows.get(-1, rows.get(node))
    for r in rs.get("results", []):
        m, p = r["metric"], r.get("params", {})
        if probe == "stream" and m == "triad":
            return r["stats"]
        if probe == "gpu" and m == "triad" and p.get("dtype") in ("float64", None):
            return r["stats"]
        if probe == "jacobi" and m == "single":
            return r["stats"]
    return None


@dataclass
class Row:
    binding: str
    probe: str
    values: list[float | None]  # per rank
    errors: list[str]
    spreads: list[float] = field(default_factory=list)  # per measured rank: (max - min) / median of its repetitions
    warnings: list[str] = field(default_factory=list)  # a binding asked for but not applied (the figure stands)
    gpus: list[tuple[int, ...]] = field(default_factory=list)  # per rank: its GPUs

    @property
    def noise(self) -> float:
        """The widest relative spread of this row's repetitions."""
        return max(self.spreads, default=0.0)

    @property
    def total(self) -> float | None:
        """Sum of ranks' bandwidths (ranks sharing GPUs under a time-sliced probe count once, at their
        median); the slowest rank's step time."""
        v = [x for x in self.values if x is not None]
        if not v or len(v) != len(self.values):
            return None
        if self.probe in LOWER_IS_BETTER:
            return max(v)
        if self.probe in TIME_SLICED and len(self.gpus) == len(v):
            shared: dict[tuple[int, ...], list[float]] = {}
            for g, x in zip(self.gpus, v):
                shared.setdefault(g, []).append(x)
            return sum(statistics.median(xs) for xs in shared.values())
        return sum(v)


def run_binding(topo: Topology, b: Binding, probe: str, size: str | None, timeout: float) -> Row:
    """Every rank of the binding runs the probe at once; one row."""
    procs = []
    for t in b.tasks:
        env = dict(os.environ, CUDA_DEVICE_ORDER="PCI_BUS_ID", NCCL_NVLS_ENABLE="0")
        if t.gpus:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, t.gpus))
        cmd = [sys.executable, "-m", "nodemap", "bench", *argv(probe, t, size), "--json", "-q"]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                      preexec_fn=_binder(t) if b.bound else None))
    values, errors, spreads, warnings = [], [], [], []
    for t, p in zip(b.tasks, procs):
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            err = f"no answer in {timeout:g} s"
        value = None
        warnings += [f"rank {t.task}: {line[len(POLICY_FAILED):].strip()}" for line in err.splitlines()
                     if line.startswith(POLICY_FAILED)]
        if p.returncode in (0, 1) and out.strip().startswith("{"):
            st = stats_of(probe, json.loads(out), first_touch_node(topo, t))
            if st:
                value = st["median"]
                spreads.append(st.get("spread") or 0.0)
        if value is None:
            errors.append(f"rank {t.task}: {(err.strip().splitlines() or ['no result'])[-1]}")
        values.append(value)
    return Row(b.name, probe, values, errors, spreads, warnings, [tuple(t.gpus) for t in b.tasks])


POLICY_FAILED = "nodemap-compare: memory binding not applied:"


def _binder(t: TaskBinding) -> Any:
    """Bind the child between fork and exec (inherited by the bench)."""
    cpus, mems = sorted(t.cpus), sorted(t.mems)

    def bind() -> None:
        if cpus:
            os.sched_setaffinity(0, cpus)
        if mems:
            from .. import native

            try:
                native.set_mempolicy(native.MPOL_BIND, mems)
            except OSError as e:  # a container may forbid it: the probe runs on, the row says so
                os.write(2, f"{POLICY_FAILED} set_mempolicy(MPOL_BIND, NUMA {','.join(map(str, mems))}): "
                            f"{e.strerror or e}; memory is first-touch\n".encode())

    return bind


MIN_NOISE = 0.03  # below this a difference is not told apart even with tight repetitions


def verdict(row: Row, plan_row: Row | None, b: Binding, same: bool = False) -> str:
    """One sentence: how this binding's figure compares with the plan's, and
    why. The noise band is the widest spread of either row's repetitions: a
    difference inside it is no difference. `same`: the binding cannot differ
    from the plan (every rank got the plan's CPUs, memory and GPUs, or, on a
    node of one NUMA node, as many cores of its own)."""
    if row.total is None:
        return f"{row.probe}: not measured ({'; '.join(row.errors) or 'no result'})"
    value = f"{row.probe}: {row.total:,.1f} {UNITS[row.probe]}"
    if row.binding == "plan":
        return f"{value} (the reference; repetitions spread ±{100 * row.noise:.0f}%)"
    if plan_row is None or plan_row.total is None:
        return value
    mine, ref = row.total, plan_row.total
    worse = mine > ref if row.probe in LOWER_IS_BETTER else mine < ref
    change = abs(mine - ref) / ref if ref else 0.0
    band = max(row.noise, plan_row.noise, MIN_NOISE)
    how = ("slower" if worse else "faster") if row.probe in LOWER_IS_BETTER else ("lower" if worse else "higher")
    if change <= band:
        why = "; it cannot differ from the plan here" if same else ""
        return f"{value}: no difference beyond noise (±{100 * band:.0f}%){why}"
    if same:
        return (f"{value}, {100 * change:.0f}% {how}, but it cannot differ from the plan here: run-to-run "
                f"variation wider than the repetitions' ±{100 * band:.0f}%")
    cause = f" ({b.bad})" if b.bad and worse else ""
    return f"{value}, {100 * change:.0f}% {how} than the plan's (beyond the ±{100 * band:.0f}% noise){cause}"


def usable_probes(wanted: list[str], gpus: int) -> tuple[list[str], list[str]]:
    run, why = [], []
    for p in wanted:
        if p in GPU_PROBES and gpus == 0:
            why.append(f"{p}: no GPU on this node")
        else:
            run.append(p)
    return run, why


def parse_probes(spec: str) -> list[str]:
    got = [s.strip() for s in spec.split(",") if s.strip()]
    if not got or any(p not in PROBES for p in got):
        raise NodemapError(f"--probes {spec!r}: choose from {','.join(PROBES)}")
    return list(dict.fromkeys(got))
