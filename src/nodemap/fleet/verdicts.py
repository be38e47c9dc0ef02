"""Fleet verdicts on figures: every node's figure judged against its class's baseline (fleet/noise.py).

Below 95% of the median a figure warns (superbench's baseline rule, the
procurement rule of 5% spread); it fails only beyond the noise too: z <=
-4 (a site may ask less below 90%: z_fail_below_fail). Where the noise is
unknown (no spreads, MAD 0) the ratios alone judge (fail below 90%). A
figure most nodes of a class have but a node lacks is a failure of its own.
"""

from __future__ import annotations

from ..check.expectations import FleetRules
from ..finding import Finding
from .noise import Baseline, below, figure_label, num, baseline, own_noise, ratio
from .nodefile import Fig
from .nodes import Node


def judge_figures(nodes: list[Node], th: FleetRules
                  ) -> tuple[list[Baseline], list[str], dict[str, list[float | None]], list[Finding]]:
    # Each figure's numbers taken in node order, where one node's records lie together in memory: read key by
    # key across 10,000 nodes they were cache misses, 4 of the merge's 5 s (benchmarks/fleet_scale.py).
    groups: dict[tuple[str, str], tuple[list[Node], list[Fig], list[float], list[float]]] = {}
    peers: dict[str, list[Node]] = {}
    for n in nodes:
        peers.setdefault(n.node_class, []).append(n)
        for key, f in n.figures.items():
            g = groups.get((n.node_class, key)) or groups.setdefault((n.node_class, key), ([], [], [], []))
            g[0].append(n)
            g[1].append(f)
            g[2].append(f.stat())
            g[3].append(own_noise(f))
    keys = sorted({k for _, k in groups})
    col = {k: i for i, k in enumerate(keys)}
    ratios: dict[str, list[float | None]] = {n.name: [None] * len(keys) for n in nodes}
    baselines: list[Baseline] = []
    findings: list[Finding] = []
    for (cls, key), (members, figs, stats, noises) in sorted(groups.items()):
        b = baseline(cls, key, figs[0], stats, noises)
        baselines.append(b)
        if b.n < th.min_nodes:
            continue
        c, warn, med, hib = col[key], th.for_figure(key, cls)[0], b.median, b.higher_is_better
        for n, f, v in zip(members, figs, stats):
            r = v / med if hib else med / v  # (noise.ratio)
            ratios[n.name][c] = r
            found = judge(f, b, th) if r < warn and key not in n.set_aside else None  # (judge: None at >= warn)
            if found:
                findings.append(Finding(found[0], found[1], keys=(key,), node=n.name, kind="figure", ratio=r,
                                        z=found[2]))
        findings += absent_figures(key, members, peers[cls], b)
    return baselines, keys, ratios, findings


def judge(f: Fig, b: Baseline, th: FleetRules) -> tuple[str, str, float | None] | None:
    """(fail | warn, the sentence with the rule that decided, robust z) or
    None: below `warn` of the median it warns; it fails when it is beyond
    the noise as well (z <= -z_fail, or <= -z_fail_below_fail under `fail`);
    with no noise known, under `fail` alone."""
    warn, fail = th.for_figure(b.key, b.node_class)
    r = ratio(f.stat(), b)
    if r >= warn:
        return None
    sigma = max(b.noise, own_noise(f))
    if sigma <= 0:
        sev = "fail" if r < fail else "warn"
        rule = f"{sev} {below(b, fail if r < fail else warn)}; the fleet's noise is unknown (MAD 0, no repetitions)"
        return sev, f"{_shortfall(f, b, r)} ({b.node_class}, {b.n} nodes; {rule})", None
    z = (r - 1) / sigma
    beyond = z <= -th.z_fail or (r < fail and z <= -th.z_fail_below_fail)
    noise = f"robust z {z:.1f}, sigma {sigma:.1%}: {_sigma_source(b, f)}"
    if beyond:
        rule = f"fail {below(b, warn)} and beyond the noise ({noise}; fail at z <= -{th.z_fail:g}" + (
            f", or <= -{th.z_fail_below_fail:g} {below(b, fail)})" if th.z_fail_below_fail < th.z_fail else ")")
    elif r < fail:
        rule = f"noisy: {below(b, fail)} but within the noise ({noise}), a warning, not a failure"
    else:
        rule = f"warn {below(b, warn)} ({noise})"
    return ("fail" if beyond else "warn"), f"{_shortfall(f, b, r)} ({b.node_class}, {b.n} nodes; {rule})", z


def _sigma_source(b: Baseline, f: Fig) -> str:
    own = own_noise(f)
    if own > b.noise:
        return f"its own repetitions (spread {2 * own:.1%})"
    if b.repetition >= b.noise:
        return f"the figure's repetition noise on these nodes (median spread {2 * b.repetition:.1%})"
    return "the fleet's spread (1.4826 MAD / median)"


def _shortfall(f: Fig, b: Baseline, r: float) -> str:
    if b.higher_is_better:
        how = f"{r:.0%} of the fleet median {num(b.median)} {b.unit}"
    else:  # latency: say it the way it is read, a multiple of the median
        how = f"{1 / r:.2f}x the fleet median {num(b.median)} {b.unit}"
    what = "median " if f.has_interval() else ""
    return f"{figure_label(b, f.path)} {what}{num(f.stat())} {b.unit} = {how}"


def absent_figures(key: str, members: list[Node], peers: list[Node], b: Baseline) -> list[Finding]:
    """A figure most nodes of the class (`peers`) have but a complete node lacks (a GPU gone, a test that failed)."""
    if len(members) * 2 <= len(peers) or len(members) == len(peers):
        return []
    have = {id(n) for n in members}
    return [Finding("fail", f"{figure_label(b, b.path)} not measured where {len(members)} of {len(peers)} "
                    f"{b.node_class} nodes "
                    f"measured it (median {num(b.median)} {b.unit})", node=n.name, kind="absent")
            for n in peers if id(n) not in have and n.status == "complete" and key not in n.set_aside]
