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
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

from ..errors import NodemapError
from ..mapping.request import TaskBinding
from ..topology.model import Topology
from .bindings import Binding

PROBES = ("stream", "h2d", "gpu", "jacobi")
GPU_PROBES = ("h2d", "gpu", "jacobi")
LOWER_IS_BETTER = {"jacobi"}
UNITS = {"stream": "GB/s", "h2d": "GB/s", "gpu": "GB/s", "jacobi": "us"}


def argv(probe: str, t: TaskBinding, size: str | None) -> list[str]:
    """The bench command line of one rank's probe."""
    threads = max(1, min(t.threads or 1, len(t.cpus)))
    if probe == "stream":
        return ["memory", "--threads", str(threads), "--kernels", "triad", "--repeats", "5"] + (
            ["--size", size] if size else [])
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
    """The one number kept from a rank's result set. H2D: the row of host
    memory placed by the rank's own policy (host_node -1, where bench copies
    measures one), else the row of the node its memory lands on."""
    if probe == "h2d":
        rows: dict[int, float] = {}
        for r in rs.get("results", []):
            if r["metric"] == "h2d_ce":  # the rank's one GPU: the first row of each placement
                rows.setdefault(r.get("params", {}).get("host_node"), r["stats"]["median"])
        return rows.get(-1, rows.get(node))
    for r in rs.get("results", []):
        m, p = r["metric"], r.get("params", {})
        if probe == "stream" and m == "triad":
            return r["stats"]["median"]
        if probe == "gpu" and m == "triad" and p.get("dtype") in ("float64", None):
            return r["stats"]["median"]
        if probe == "jacobi" and m == "single":
            return r["stats"]["median"]
    return None


@dataclass
class Row:
    binding: str
    probe: str
    values: list[float | None]  # per rank
    errors: list[str]

    @property
    def total(self) -> float | None:
        """Sum of ranks' bandwidths; the slowest rank's step time."""
        v = [x for x in self.values if x is not None]
        if not v or len(v) != len(self.values):
            return None
        return max(v) if self.probe in LOWER_IS_BETTER else sum(v)


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
    values, errors = [], []
    for t, p in zip(b.tasks, procs):
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            err = f"no answer in {timeout:g} s"
        value = None
        if p.returncode in (0, 1) and out.strip().startswith("{"):
            value = figure(probe, json.loads(out), first_touch_node(topo, t))
        if value is None:
            errors.append(f"rank {t.task}: {(err.strip().splitlines() or ['no result'])[-1]}")
        values.append(value)
    return Row(b.name, probe, values, errors)


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
            except OSError:
                pass  # a container may forbid it: the row's resources say what was asked

    return bind


def verdict(row: Row, plan_row: Row | None, b: Binding, same: bool = False) -> str:
    """One sentence: how this binding's figure compares with the plan's, and
    why; `same`: every rank got the plan's CPUs, memory and GPUs."""
    if row.total is None:
        return f"{row.probe}: not measured ({'; '.join(row.errors) or 'no result'})"
    if row.binding == "plan" or plan_row is None or plan_row.total is None:
        return f"{row.probe}: {row.total:,.1f} {UNITS[row.probe]}" + (" (the reference)" if row.binding == "plan" else "")
    mine, ref = row.total, plan_row.total
    worse = mine > ref if row.probe in LOWER_IS_BETTER else mine < ref
    change = abs(mine - ref) / ref if ref else 0.0
    how = ("slower" if worse else "faster") if row.probe in LOWER_IS_BETTER else ("lower" if worse else "higher")
    cause = f" ({b.bad})" if b.bad and worse else ""
    if same:
        return (f"{row.probe}: {mine:,.1f} {UNITS[row.probe]}: the plan's resources exactly, so the "
                f"{100 * change:.0f}% difference is run-to-run variation")
    if change < 0.03:
        return f"{row.probe}: {mine:,.1f} {UNITS[row.probe]}, within 3% of the plan's{cause if b.bad else ''}"
    return f"{row.probe}: {mine:,.1f} {UNITS[row.probe]}, {100 * change:.0f}% {how} than the plan's{cause}"


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
