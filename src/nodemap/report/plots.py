"""Plots of a check as SVG text, drawn by matplotlib (the `report` extra).

Each plot function takes the CheckDoc and returns a Plot or None when the
document holds no data for it. PLOTS is the list the HTML report draws;
another section (e.g. a memory timeline) appends its own function.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from typing import Any, Callable

from ..text import number
from ..check.document import CheckDoc
from ..check.verdicts import Judged

# in the order of check.verdicts.VERDICTS; inconclusive as the report's CSS shows it
VERDICT_COLOR = {"pass": "#b7e1b0", "info": "#dddddd", "inconclusive": "#c9d8f0", "warn": "#f6d67a", "fail": "#f08a80"}


@dataclass(frozen=True)
class Plot:
    id: str  # HTML id, stable: tests look for it
    title: str
    svg: str


def available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.hashsalt"] = "nodemap"  # the same document gives the same SVG
    matplotlib.rcParams["svg.fonttype"] = "path"  # glyphs as paths: no font needed to view it
    import matplotlib.pyplot as plt

    return plt


def to_svg(fig: Any) -> str:
    plt = _pyplot()
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    text = buf.getvalue()
    text = re.sub(r"<metadata>.*?</metadata>\s*", "", text, flags=re.S)  # RDF naming creativecommons.org
    return text[text.index("<svg"):]  # drop the XML prolog and DOCTYPE: inline in HTML


# --- heatmaps coloured by verdict ------------------------------------------------------


def verdict_heatmap(id: str, title: str, cells: dict[tuple[str, str], Judged], rows: list[str], cols: list[str],
                    xlabel: str, ylabel: str) -> Plot:
    plt = _pyplot()
    from matplotlib.patches import Patch, Rectangle

    fig, ax = plt.subplots(figsize=(1.2 + 0.9 * len(cols), 1.0 + 0.6 * len(rows)))
    for i, r in enumerate(rows):
        for k, c in enumerate(cols):
            j = cells.get((r, c))
            color = VERDICT_COLOR[j.verdict] if j else "#ffffff"
            ax.add_patch(Rectangle((k, i), 1, 1, facecolor=color, edgecolor="white", linewidth=2))
            if j:
                ax.text(k + 0.5, i + 0.5, number(j.figure.value), ha="center", va="center", fontsize=9)
    ax.set_xlim(0, len(cols))
    ax.set_ylim(len(rows), 0)
    ax.set_xticks([k + 0.5 for k in range(len(cols))], cols)
    ax.set_yticks([i + 0.5 for i in range(len(rows))], rows)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    unit = next(iter(cells.values())).figure.unit if cells else ""
    ax.set_title(f"{title} ({unit})", fontsize=10)
    ax.tick_params(length=0)
    for s in ax.spines.values():
        s.set_visible(False)
    used = sorted({j.verdict for j in cells.values()}, key=list(VERDICT_COLOR).index)
    ax.legend(handles=[Patch(color=VERDICT_COLOR[v], label=v) for v in used], loc="upper left",
              bbox_to_anchor=(1.01, 1), fontsize=8, frameon=False)
    return Plot(id, title, to_svg(fig))


def _matrix(doc: CheckDoc, prefix: str) -> tuple[dict[tuple[str, str], Judged], list[str], list[str]]:
    ends = {}
    for j in doc.judged:
        a, b = j.figure.endpoints()
        if a and b and j.figure.key.startswith(prefix) and j.figure.key.count("/") == prefix.count("/"):
            ends[(a, b)] = j
    cells = {(a.label, b.label): j for (a, b), j in ends.items()}
    rows = [a.label for a in sorted({a for a, _ in ends})]  # by kind, then index
    cols = [b.label for b in sorted({b for _, b in ends})]
    return cells, rows, cols


def _heatmap(prefix: str, id: str, title: str, xlabel: str, ylabel: str) -> Callable[[CheckDoc], Plot | None]:
    """The plot function of one matrix: the judged figures under `prefix` as a verdict heatmap."""
    def plot(doc: CheckDoc) -> Plot | None:
        cells, rows, cols = _matrix(doc, prefix)
        return verdict_heatmap(id, title, cells, rows, cols, xlabel, ylabel) if cells else None
    return plot


gpu_matrix = _heatmap("d2d/", "plot-d2d", "GPU->GPU copy-engine bandwidth", "destination", "source")
gpu_latency_matrix = _heatmap("d2d_latency/", "plot-d2d-latency", "GPU->peer memory load latency", "memory of",
                              "loading GPU")
numa_matrix = _heatmap("numa/bw/", "plot-numa-bw", "NUMA bandwidth (cores of row, memory of column)",
                       "memory node", "CPU node")
numa_latency = _heatmap("numa/latency/", "plot-numa-latency", "NUMA idle latency", "memory node", "CPU node")
host_gpu_matrix = _heatmap("h2d/", "plot-h2d", "host->GPU copy bandwidth from each NUMA node", "GPU", "host memory")


# --- curves from the results ----------------------------------------------------------


def _results(doc: CheckDoc, bench: str) -> list[Any]:
    return [r for rs in doc.results for r in rs.results if r.benchmark == bench]


def stream_sweep(doc: CheckDoc) -> Plot | None:
    rs = [r for r in _results(doc, "memory") if r.metric == "triad"]
    if not rs:
        return None
    plt = _pyplot()
    rs.sort(key=lambda r: (r.params.get("threads", 0), r.params.get("thread_order", "")))
    fig, ax = plt.subplots(figsize=(7, 3.2))
    names = [f"{r.params.get('thread_order', '')} ({r.params.get('threads')})" for r in rs]
    best = max(r.stats.best for r in rs)
    colors = ["#4c72b0" if r.stats.best < best else "#55a868" for r in rs]
    ax.bar(range(len(rs)), [r.stats.best for r in rs], color=colors)
    ax.errorbar(range(len(rs)), [r.stats.median for r in rs], fmt="none", ecolor="#333333",
                yerr=[[r.stats.median - r.stats.min for r in rs], [r.stats.max - r.stats.median for r in rs]])
    ax.set_xticks(range(len(rs)), names, rotation=45, ha="right", fontsize=8)
    ax.set_ylabel("triad GB/s (best; bars: min-max)")
    ax.set_title("STREAM triad by thread placement (threads)", fontsize=10)
    return Plot("plot-stream-sweep", "STREAM placement sweep", to_svg(fig))


def latency_curve(doc: CheckDoc) -> Plot | None:
    rs = sorted(_results(doc, "latency"), key=lambda r: r.params.get("working_set", 0))
    if not rs:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.2))
    ax.plot([r.params["working_set"] for r in rs], [r.stats.best for r in rs], marker="o", ms=3)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    levels: dict[str, list[int]] = {}
    for r in rs:
        levels.setdefault(r.params.get("level") or "", []).append(r.params["working_set"])
    for level, ws in levels.items():
        if level:
            ax.axvspan(min(ws) / 1.41, max(ws) * 1.41, alpha=0.08, color="#4c72b0")
            ax.text((min(ws) * max(ws)) ** 0.5, ax.get_ylim()[1], level, ha="center", va="top", fontsize=8)
    ax.set_xlabel("working set (bytes)")
    ax.set_ylabel("ns per dependent load")
    ax.set_title("load latency against working-set size (predicted cache level)", fontsize=10)
    return Plot("plot-latency", "latency against working-set size", to_svg(fig))


def nccl_curve(doc: CheckDoc) -> Plot | None:
    rs = [r for r in _results(doc, "nccl") if r.metric == "all_reduce"]
    if not rs:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.2))
    for inplace in (False, True):
        pts = sorted((r.params["size"], r.stats.best) for r in rs if bool(r.params.get("inplace")) == inplace)
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3,
                    label="in-place" if inplace else "out-of-place")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel(rs[0].unit)
    ax.legend(fontsize=8, frameon=False)
    ax.set_title("NCCL all_reduce bus bandwidth against size", fontsize=10)
    return Plot("plot-nccl", "NCCL all_reduce against size", to_svg(fig))


PLOTS: list[Callable[[CheckDoc], Plot | None]] = [
    stream_sweep, numa_matrix, numa_latency, latency_curve, host_gpu_matrix, gpu_matrix, gpu_latency_matrix,
    nccl_curve,
]


def draw(doc: CheckDoc) -> list[Plot]:
    return [p for p in (fn(doc) for fn in PLOTS) if p is not None]
