"""Findings: plain sentences from judged figures and inventory checks,
each with its evidence, a fix, and whether the cause is configuration or
hardware; ranked fail before warn, then by how far the figure is off.
Pure: (judged figures, checks, node state) -> findings, so fleet can reuse it.

A fix proposes only a change not already in effect on the node (NodeState:
the transparent huge page mode, the OMP_*/UCX_*/MPI variables, CUDA-aware
MPI) and that the measurements support beyond their noise.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from ..bench.endpoints import Endpoint
from ..finding import Finding
from ..text import number
from ..bench.figures import Figure
from .inventory import Check
from .mpi import AWARE_KEY
from .verdicts import RANK, Judged


# UCX transports that carry on-node traffic through shared memory, and CUDA IPC
UCX_SHM = ("sm", "shm", "posix", "sysv", "cma", "xpmem", "knem", "all")
UCX_CUDA = ("cuda_ipc", "cuda", "all")
GPU_SUPPORT_VARS = (("MPIR_CVAR_ENABLE_GPU", "1"), ("MPICH_GPU_SUPPORT_ENABLED", "1"))


@dataclass(frozen=True)
class NodeState:
    """What is already in effect on the node when it was checked."""

    thp: str = ""  # transparent huge pages: always | madvise | never | "" (unknown)
    env: dict[str, str] = field(default_factory=dict)  # the check's relevant variables (OMP_*, UCX_*, MPI...)
    cuda_aware: bool | None = None  # the MPI CUDA-awareness check: None when not probed
    vm: bool | None = None  # the node is a virtual machine (check/node.virtual_machine); None: not recorded

    @classmethod
    def of(cls, environment: dict[str, Any], checks: Sequence[Check] = ()) -> "NodeState":
        """From a check document's environment and inventory checks."""
        aware = next((c.value for c in checks if c.key == AWARE_KEY), None)
        return cls(thp=str(environment.get("transparent_hugepage") or ""),
                   env=dict(environment.get("variables") or {}),
                   cuda_aware=None if aware in (None, "unknown") else aware == "CUDA-aware",
                   vm=environment.get("virtual_machine"))

    def ucx_tls(self, any_of: Sequence[str]) -> bool:
        """UCX_TLS is set and names one of `any_of` (a leading ^ excludes: not in effect)."""
        tls = self.env.get("UCX_TLS", "")
        return bool(tls) and not tls.startswith("^") and any(t.strip() in any_of for t in tls.split(","))


def thp_mode(text: str | None) -> str:
    """The selected mode of /sys/kernel/mm/transparent_hugepage/enabled ("always [madvise] never")."""
    import re

    m = re.search(r"\[(\w+)\]", text or "")
    return m.group(1) if m else ""


def rank(findings: Sequence[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: (-RANK[f.verdict], -f.shortfall, f.area, f.text))


def derive(judged: Sequence[Judged], checks: Sequence[Check], state: NodeState | None = None) -> list[Finding]:
    by_key = {j.figure.key: j for j in judged}
    links = {c.key: c for c in checks if c.key.startswith("inventory/pcie/")}
    state = state or NodeState.of({}, checks)
    out = [f for j in judged if j.verdict in ("warn", "fail") for f in [figure_finding(j, by_key, links, state)]
           if f]
    used = {k for f in out for k in f.keys}
    out += [check_finding(c) for c in checks if c.verdict in ("warn", "fail") and c.key not in used]
    return rank(out)


def _gpu(f: Figure) -> Endpoint | None:
    """The Topology GPU a figure measured (its endpoints, bench/endpoints.py): none for a CUDA ordinal
    ("cuda0"), whose index is not the node's GPU of that index (its PCIe link check)."""
    return next((e for e in f.endpoints() if e and e.kind == "gpu"), None)


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


def figure_finding(j: Judged, by_key: dict[str, Judged], links: dict[str, Check],
                   state: NodeState = NodeState()) -> Finding | None:
    f = j.figure
    v = f"{number(f.value)} {f.unit}"
    mk = lambda cause, text, fix, keys=(f.key,): Finding(  # noqa: E731
        j.verdict, text, j.rule, fix, tuple(keys), _off(j), cause=cause, area=f.area)
    if f.kind == "h2d" or (f.area == "host<->GPU" and f.kind != "h2d_remote"):
        g = _gpu(f)
        link = links.get(f"inventory/pcie/{g.key}") if g else None
        if g and link is not None and link.verdict != "pass":
            return mk("hardware", f"{g.label}'s PCIe link runs {link.value} (capable of {link.expected}): "
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
        return _placement(j, mk, state)
    if f.kind.startswith("mpi_"):
        return _mpi(j, v, mk, state)
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
        return _latency(f, v, mk, state)
    return mk("hardware", f"{f.label}: {v}{_rel(j)}", "rerun on an idle node; if it persists, check the part")


def _latency(f: Figure, v: str, mk: Any, state: NodeState) -> Finding:
    """Memory latency: a VM's is the hypervisor's nested paging (every TLB
    miss walks two page tables), the platform's, not the job's settings; on
    bare metal with huge pages in effect, the memory or BIOS; only huge pages
    off (mode [never], or unknown) is a setting to change. The latency kernel
    calls madvise(MADV_HUGEPAGE), so madvise and always both give it huge pages."""
    rest = "check the BIOS memory and power settings"
    thp_off = ("transparent huge pages are off (mode [never]): enable them for madvise (echo madvise > "
               "/sys/kernel/mm/transparent_hugepage/enabled, or transparent_hugepage=madvise at boot)")
    if state.vm:
        return mk("hardware", f"{f.label}: {v}, slower than expected on this VM: the hypervisor's nested paging "
                  "adds to every TLB miss (the platform, not the job)",
                  "run on bare metal to judge the memory; on the VM's host, back the guest with huge pages"
                  + (f"; in the guest, {thp_off}" if state.thp == "never" else ""))
    if state.thp in ("always", "madvise"):
        return mk("hardware" if state.vm is False else "configuration", f"{f.label}: {v}, slower than expected",
                  f"transparent huge pages are already in effect (mode [{state.thp}]; the latency kernel asks for "
                  f"them with madvise): no page-size change helps; {rest}"
                  + ("" if state.vm is False else "; on a VM nested paging adds latency (run on bare metal to "
                     "compare)"))
    if state.thp == "never":
        return mk("configuration", f"{f.label}: {v}, slower than expected", f"{thp_off}; {rest}")
    return mk("configuration", f"{f.label}: {v}, slower than expected",
              f"VMs and 4 KiB pages add latency: enable transparent huge pages (madvise), run on bare metal; {rest}")


def beyond_noise(f) -> bool:
    """The peak (another measurement: STREAM's best placement) beats the
    figure by more than both their spreads together: their ranges do not
    overlap, so the difference is not run-to-run noise."""
    if not f.peak or not f.value:
        return False
    return f.peak / f.value - 1 > f.spread + f.peak_spread


def _placement(j: Judged, mk, state: NodeState = NodeState()) -> Finding:
    f = j.figure
    best = f.peak_source.removeprefix("best placement of the sweep: ")
    setting = dict(kv.split("=", 1) for kv in f.setting.replace('"', "").split(" ") if "=" in kv) if f.setting else {}
    if not beyond_noise(f):
        fix = (f"no change recommended: the best placement is {f.peak / f.value - 1:.0%} faster, within the "
               f"noise of the two (spreads {f.spread:.0%} and {f.peak_spread:.0%}); rerun with more --repeats "
               "or on an idle node to decide")
    elif setting and all(state.env.get(k) == v for k, v in setting.items() if k != "OMP_PLACES"):
        fix = (f"the recommended {' '.join(f'{k}={v}' for k, v in setting.items() if k != 'OMP_PLACES')} is "
               "already set: the check's own sweep does not follow it; bind the application's threads to "
               f"OMP_PLACES=\"{setting.get('OMP_PLACES', '')}\" (nodemap run does)")
    else:
        fix = (f"place memory-bound threads as the sweep recommends: {f.setting}" if f.setting else
               "place memory-bound threads as the best placement: `nodemap bench memory --sweep` prints its "
               "OMP_PLACES/OMP_PROC_BIND")
    return mk("configuration", f"STREAM peaks at {number(f.peak)} GB/s with {best}; one thread per core gives "
              f"{number(f.value)} GB/s, {f.value / f.peak:.0%}", fix)


def _mpi(j: Judged, v: str, mk, state: NodeState = NodeState()) -> Finding:
    f = j.figure
    if f.kind == "mpi_device" and f.part == "staged":
        staged = (f"device buffers are staged ({v} vs {number(f.peak)} {f.unit} between the GPUs' copy engines)"
                  if f.peak else f"device buffers are staged ({v})")
        return mk("configuration", f"MPI is not CUDA-aware: {staged}", _cuda_aware_fix(state), (f.key, AWARE_KEY))
    if f.kind == "mpi_device":
        near = "that each rank uses the GPU near it (nodemap run)"
        fix = (f"check {near}; UCX_TLS={state.env['UCX_TLS']} already includes CUDA IPC" if state.ucx_tls(UCX_CUDA)
               else f"check that UCX_TLS includes cuda_ipc (NCCL/UCX peer access) and {near}")
        return mk("configuration", f"{f.label}: {v}, {f.value / f.peak:.0%} of the GPUs' copy engines" if f.peak
                  else f"{f.label}: {v}", fix)
    what = "slower" if f.kind == "mpi_latency" else "below what shared memory moves"
    fix = ("check that each rank has a core of its own (nodemap run binds them); UCX_TLS="
           f"{state.env['UCX_TLS']} already includes shared memory" if state.ucx_tls(UCX_SHM) else
           "check UCX_TLS / FI_PROVIDER / OMPI_MCA_btl (shared memory: shm, sm, vader, cma) and that each "
           "rank has a core of its own")
    return mk("configuration", f"{f.label}: {v}, {what}: the ranks do not use shared memory or share a core", fix)


def _cuda_aware_fix(state: NodeState) -> str:
    """A CUDA-aware build is proposed only where MPI is not one; the GPU
    switch of MPICH only where it is not already set."""
    on = [f"{k}={val}" for k, val in GPU_SUPPORT_VARS if state.env.get(k) == val]
    if state.cuda_aware:
        return ("this MPI is CUDA-aware (see the awareness check), yet device buffers were staged: pass device "
                "pointers to MPI and check that the GPU transport is enabled" +
                (f" ({', '.join(on)} is already set: check UCX_TLS/UCX_MEMTYPE_CACHE)" if on else
                 " (MPICH: MPIR_CVAR_ENABLE_GPU=1, Cray MPICH: MPICH_GPU_SUPPORT_ENABLED=1)"))
    if on:
        return (f"{', '.join(on)} is already set, so this MPI build has no GPU support: use a CUDA-aware MPI build "
                "(Open MPI/UCX built with CUDA, MPICH built with CUDA)")
    return ("use a CUDA-aware MPI build (Open MPI/UCX built with CUDA, MPICH with MPIR_CVAR_ENABLE_GPU=1, Cray "
            "MPICH with MPICH_GPU_SUPPORT_ENABLED=1)")


def check_finding(c: Check) -> Finding:
    return Finding(c.verdict, f"{c.label}: {c.value} (expected {c.expected})" if c.expected else
                   f"{c.label}: {c.value}", c.rule, c.fix, (c.key,), cause=c.cause or "configuration", area=c.area)
