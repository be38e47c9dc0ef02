"""Findings: plain sentences from judged figures and inventory checks,
each with its evidence, a fix, and whether the cause is configuration or
hardware; ranked fail before warn, then by how far the figure is off.
Pure: (judged figures, checks) -> findings, so fleet can reuse it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

from ..bench.report import number
from .inventory import Check
from .mpi import AWARE_KEY
from .verdicts import RANK, Judged


@dataclass(frozen=True)
class Finding:
    verdict: str  # warn | fail
    cause: str  # configuration | hardware
    area: str
    text: str  # the sentence
    evidence: str  # the numbers and rule behind it
    fix: str
    keys: tuple[str, ...] = field(default_factory=tuple)  # figures/checks it rests on
    severity: float = 0.0  # for ranking: how far off (0 = at the threshold)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["keys"] = list(self.keys)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Finding":
        d = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        d["keys"] = tuple(d.get("keys", ()))
        return cls(**d)


def rank(findings: Sequence[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: (-RANK[f.verdict], -f.severity, f.area, f.text))


def derive(judged: Sequence[Judged], checks: Sequence[Check]) -> list[Finding]:
    by_key = {j.figure.key: j for j in judged}
    links = {c.key: c for c in checks if c.key.startswith("inventory/pcie/")}
    out = [f for j in judged if j.verdict in ("warn", "fail") for f in [figure_finding(j, by_key, links)] if f]
    used = {k for f in out for k in f.keys}
    out += [check_finding(c) for c in checks if c.verdict in ("warn", "fail") and c.key not in used]
    return rank(out)


def _gpu(key: str) -> str:
    import re

    m = re.search(r"gpu(\d+)", key)
    return m.group(1) if m else ""


def _off(j: Judged) -> float:
    """How far below (or above, latency) its reference the figure is: 0..1+."""
    f = j.figure
    ref = j.expectation.get("peak") or j.expectation.get("median_of_peers") or j.expectation.get("minimum_of_peers")
    if not ref:
        return 0.0
    return max(0.0, 1 - f.value / ref) if f.higher_is_better else max(0.0, f.value / ref - 1)


def _rel(j: Judged) -> str:
    if j.relative is None or not j.figure.higher_is_better:
        return ""
    return f", {j.relative:.0%} of the median of its peers on this node"


def figure_finding(j: Judged, by_key: dict[str, Judged], links: dict[str, Check]) -> Finding | None:
    f = j.figure
    v = f"{number(f.value)} {f.unit}"
    mk = lambda cause, text, fix, keys=(f.key,): Finding(j.verdict, cause, f.area, text, j.rule, fix,  # noqa: E731
                                                           tuple(keys), _off(j))
    if f.kind == "h2d" or (f.area == "host<->GPU" and f.kind != "h2d_remote"):
        g = _gpu(f.key)
        link = links.get(f"inventory/pcie/gpu{g}")
        if link is not None and link.verdict != "pass":
            return mk("hardware", f"GPU{g}'s PCIe link runs {link.value} (capable of {link.expected}): "
                      f"{f.key.split('/')[0].upper()} {v}{_rel(j)}", "reseat the GPU or check the slot and riser",
                      (f.key, link.key))
        return mk("hardware", f"{f.label}: {v}{_rel(j)}, below what a {f.part.split(' (')[0] or 'PCIe'} link "
                  "delivers", "check the GPU's PCIe link (lspci -vv LnkSta), the IOMMU setting and that the "
                  "copy ran from the GPU's own NUMA node")
    if f.kind == "h2d_remote":
        return mk("configuration", f"{f.label}: {v}, {f.value / f.peak:.0%} of the copy from the GPU's own NUMA node"
                  if f.peak else f"{f.label}: {v}", "bind each rank's memory to its GPU's NUMA node "
                  "(nodemap run does; numactl --membind otherwise)")
    if f.kind == "hbm":
        return mk("hardware", f"{f.label}: {v}{_rel(j)}", "check clocks, throttle reasons and remapped rows "
                  "(nvidia-smi -q -d PERFORMANCE,ROW_REMAPPER); rerun on an idle GPU; RMA if it persists")
    if f.kind == "d2d":
        return mk("hardware", f"{f.label}: {v}{_rel(j)}", "check the links between the pair (nvidia-smi nvlink -s, "
                  "nvidia-smi nvlink -e for errors); for PCIe peers, the switch and ACS settings")
    if f.kind == "nccl":
        return mk("configuration", f"{f.label}: {v}, below what the node's links carry",
                  "check NCCL_* variables (P2P/SHM disabled, forced algorithm) and NCCL_DEBUG=INFO for the "
                  "transport; a slow pair among the GPU<->GPU figures points to hardware")
    if f.kind == "placement":
        return _placement(j, mk)
    if f.kind.startswith("mpi_"):
        return _mpi(j, v, mk)
    if f.kind == "numa_remote":
        return mk("hardware", f"{f.label}: {v}, {f.value / f.peak:.0%} of local bandwidth" if f.peak else f.label,
                  "check the socket interconnect width/speed in the BIOS (xGMI/UPI links) and NUMA settings")
    if f.area == "NUMA" and f.higher_is_better:
        return mk("hardware", f"{f.label}: {v}{_rel(j)}", "check the DIMMs of that node (dmidecode -t 17: "
                  "every channel populated, same speed) and the BIOS memory log")
    if f.kind == "stream":
        return mk("hardware", f"{f.label}: {v}, below the expected share of the DRAM peak",
                  "check DIMM population (one DIMM per channel, all channels) and memory speed in the BIOS")
    if not f.higher_is_better:
        return mk("configuration", f"{f.label}: {v}, slower than expected",
                  "VMs and 4 KiB pages add latency: enable transparent huge pages (madvise), run on bare metal; "
                  "check the BIOS memory and power settings")
    return mk("hardware", f"{f.label}: {v}{_rel(j)}", "rerun on an idle node; if it persists, check the part")


def _placement(j: Judged, mk) -> Finding:
    f = j.figure
    best = f.peak_source.removeprefix("best placement of the sweep: ")
    fix = (f"place memory-bound threads as the sweep recommends: {f.setting}" if f.setting else
           "place memory-bound threads as the best placement: `nodemap bench memory --sweep` prints its "
           "OMP_PLACES/OMP_PROC_BIND")
    return mk("configuration", f"STREAM peaks with {best} ({number(f.peak)} GB/s); one thread per core gives "
              f"{number(f.value)} GB/s, {f.value / f.peak:.0%}", fix)


def _mpi(j: Judged, v: str, mk) -> Finding:
    f = j.figure
    if f.kind == "mpi_device" and f.part == "staged":
        return mk("configuration", f"MPI is not CUDA-aware: device buffers are staged ({v} vs {number(f.peak)} "
                  f"{f.unit} between the GPUs' copy engines)" if f.peak else f"MPI is not CUDA-aware: device "
                  f"buffers are staged ({v})", "use a CUDA-aware MPI build (Open MPI/UCX built with CUDA, MPICH "
                  "with MPIR_CVAR_ENABLE_GPU=1, Cray MPICH with MPICH_GPU_SUPPORT_ENABLED=1)", (f.key, AWARE_KEY))
    if f.kind == "mpi_device":
        return mk("configuration", f"{f.label}: {v}, {f.value / f.peak:.0%} of the GPUs' copy engines" if f.peak
                  else f"{f.label}: {v}", "check that UCX_TLS includes cuda_ipc (NCCL/UCX peer access) and "
                  "that each rank uses the GPU near it (nodemap run)")
    what = "slower" if f.kind == "mpi_latency" else "below what shared memory moves"
    return mk("configuration", f"{f.label}: {v}, {what}: the ranks do not use shared memory or share a core",
              "check UCX_TLS / FI_PROVIDER / OMPI_MCA_btl (shared memory: shm, sm, vader, cma) and that each "
              "rank has a core of its own")


def check_finding(c: Check) -> Finding:
    return Finding(c.verdict, c.cause or "configuration", c.area, f"{c.label}: {c.value} (expected {c.expected})"
                   if c.expected else f"{c.label}: {c.value}", c.rule, c.fix, (c.key,), 0.0)
