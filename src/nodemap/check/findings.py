"""Findings: plain sentences from judged figures and inventory checks,
each with its evidence, a fix, and whether the cause is configuration or
hardware; ranked fail before warn, then by how far the figure is off.
Pure: (judged figures, checks, node state) -> findings, so fleet can reuse it.

A figure is explained by the kind that drew it: its STORY's `finding`
(bench/story.py), found through the registry by the figure's area, so no
kind's figures are named here; a latency no kind explains is the node's
memory latency (huge pages, a VM's nested paging). A fix proposes only a
change not already in effect on the node (NodeState: the transparent huge
page mode, the OMP_*/UCX_*/MPI variables, CUDA-aware MPI) and that the
measurements support beyond their noise.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Any, Sequence

from ..bench.figures import Figure
from ..bench.kinds import BENCHES, story
from ..bench.story import Seen
from ..finding import Finding
from .inventory import Check
from .mpi import AWARE_KEY
from .verdicts import RANK, Judged

if TYPE_CHECKING:
    from .document import Environment


PCIE = "inventory/pcie/"  # the inventory's PCIe link checks: PCIE + the GPU's endpoint key


@dataclass(frozen=True)
class NodeState:
    """What is already in effect on the node when it was checked."""

    thp: str = ""  # transparent huge pages: always | madvise | never | "" (unknown)
    env: dict[str, str] = field(default_factory=dict)  # the check's relevant variables (OMP_*, UCX_*, MPI...)
    cuda_aware: bool | None = None  # the MPI CUDA-awareness check: None when not probed
    vm: bool | None = None  # the node is a virtual machine (check/node.virtual_machine); None: not recorded

    @classmethod
    def of(cls, environment: Environment | None, checks: Sequence[Check] = ()) -> "NodeState":
        """From a check document's environment (None: not recorded) and inventory checks."""
        aware = next((c.value for c in checks if c.key == AWARE_KEY), None)
        aware = None if aware in (None, "unknown") else aware == "CUDA-aware"
        if environment is None:
            return cls(cuda_aware=aware)
        return cls(thp=environment.transparent_hugepage or "", env=dict(environment.variables or {}),
                   cuda_aware=aware, vm=environment.virtual_machine)

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
    links = {c.key: c for c in checks if c.key.startswith(PCIE)}
    state = state or NodeState.of(None, checks)
    out = [f for j in judged if j.verdict in ("warn", "fail") for f in [figure_finding(j, by_key, links, state)]
           if f]
    used = {k for f in out for k in f.keys}
    out += [check_finding(c) for c in checks if c.verdict in ("warn", "fail") and c.key not in used]
    return rank(out)


def _off(j: Judged) -> float:
    """How far below (or above, latency) its reference the figure is: 0..1+."""
    f = j.figure
    ref = j.expectation.peak or j.expectation.median_of_peers or j.expectation.minimum_of_peers
    if not ref:
        return 0.0
    return max(0.0, 1 - f.value / ref) if f.higher_is_better else max(0.0, f.value / ref - 1)


def _rel(j: Judged) -> str:
    if j.relative is None or not j.figure.higher_is_better:
        return ""
    return f", {j.relative:.0%} of the median of its peers on this node"


def figure_finding(j: Judged, by_key: dict[str, Judged], links: dict[str, Check],
                   state: NodeState = NodeState()) -> Finding | None:
    """What a warned or failed figure tells: the first of its area's kinds that explains it (their STORY's
    `finding`), else, for a latency, the node's memory latency rule, else: rerun, check the part."""
    f = j.figure
    seen = Seen(f, j.verdict, j.rule, _off(j), _rel(j), state, _by_gpu(links), AWARE_KEY)
    for explain in _explainers(tuple(BENCHES)).get(f.area, ()):
        found = explain(seen)
        if found is not None:
            return found
    if not f.higher_is_better:
        return _latency(f, seen.value, seen.say, state)
    return seen.say("hardware", f"{f.label}: {seen.value}{seen.relative}",
                    "rerun on an idle node; if it persists, check the part")


@cache
def _explainers(kinds: tuple[str, ...]) -> dict[str, list[Any]]:
    """Each area's kinds' finding rules, in the registry's order (read again when it gains a kind)."""
    out: dict[str, list[Any]] = {}
    for told in map(story, kinds):
        for area in told.areas if told.finding else ():
            out.setdefault(area, []).append(told.finding)
    return out


def _by_gpu(links: dict[str, Check]) -> dict[str, Check]:
    """The PCIe link checks by their GPU's endpoint key ("inventory/pcie/gpu0" -> "gpu0")."""
    return {k.removeprefix(PCIE): c for k, c in links.items()}


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


def check_finding(c: Check) -> Finding:
    return Finding(c.verdict, f"{c.label}: {c.value} (expected {c.expected})" if c.expected else
                   f"{c.label}: {c.value}", c.rule, c.fix, (c.key,), cause=c.cause or "configuration", area=c.area)
