"""The fleet report: one self-contained HTML page (no network, no scripts,
no fonts), plots drawn by matplotlib and embedded as SVG.

- node x figure heatmap: each cell a node's figure as % of its class's fleet
  median (below 1 is worse, latency included); red below the fail
  threshold, yellow below warn, green around 100%. Nodes with a finding
  come first; beyond `max_rows` the healthy ones are left out (counted).
- node x node link heatmap: each tested pair's bandwidth as % of the best
  pair (ClusterKit's rule); grey where the pair was not tested.
- per-figure distributions: one box per figure key of every node's % of
  its class's median, the farthest nodes as points, the median and the
  warn/fail lines drawn across.
- the ranked drain list with reasons and evidence.
"""

from __future__ import annotations

import html
import io
import math
from typing import Any

from .merge import Fleet

MAX_ROWS = 80  # heatmap rows (nodes) drawn: every tick costs layout time (1,000-node target 5 s)
MAX_COLS = 120  # heatmap columns (figures) drawn
MAX_FLIERS = 20  # per figure in the distributions: the farthest nodes (the drain list names them all)
HEAT_MIN_W, HEAT_MIN_H = 7.0, 3.5  # inches: the smallest heatmap drawn
COLORBAR_IN = 1.8  # inches right of a heatmap for its colour bar, ticks and label
MAX_CELL_VALUES = 30  # nodes up to which the link heatmap prints each cell's % in it


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # names and keys from documents are labels, never TeX: "$x^$" in a node name ended the page (mathtext)
    plt.rcParams.update({"svg.fonttype": "none", "font.size": 8, "text.parse_math": False})
    return plt


def _svg(fig: Any, tight: bool = True) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight" if tight else None)
    _plt().close(fig)
    text = buf.getvalue()
    return text[text.index("<svg"):]


def _cmap(fleet: Fleet) -> tuple[Any, Any]:
    from matplotlib.colors import BoundaryNorm, ListedColormap

    th = fleet.thresholds
    # fail, warn, within 2-5% below, within 2% (noise), better than the median
    colors = ["#b2182b", "#f4a582", "#fee8c8", "#ffffff", "#d1e5f0"]
    bounds = [0.0, th.fail, th.warn, 0.98, 1.02, 10.0]
    return ListedColormap(colors), BoundaryNorm(bounds, len(colors))


def _colorbar(fig: Any, im: Any, ax: Any, bounds: list[float], label: str) -> None:
    cb = fig.colorbar(im, ax=ax, fraction=0.03)
    cb.set_ticks(bounds[1:-1], labels=[f"{b:.0%}" for b in bounds[1:-1]])
    cb.set_label(label)


def figure_heatmap(fleet: Fleet, max_rows: int = MAX_ROWS, max_cols: int = MAX_COLS) -> tuple[str, str]:
    flagged = {f.node for f in fleet.findings}
    rows = [n.name for n in fleet.nodes if n.name in fleet.ratios]
    rows.sort(key=lambda r: (r not in flagged, min((x for x in fleet.ratios[r] if x is not None), default=1.0)))
    left = max(0, len(rows) - max_rows)
    rows = rows[:max_rows]
    cols = list(range(len(fleet.keys)))
    if len(cols) > max_cols:  # the figures that vary most first
        cols.sort(key=lambda c: min((fleet.ratios[r][c] or 1.0) for r in rows))
        cols = sorted(cols[:max_cols])
    if not rows or not cols:
        return "", "no figures to draw"
    plt = _plt()
    data = [[(fleet.ratios[r][c] if fleet.ratios[r][c] is not None else math.nan) for c in cols] for r in rows]
    cmap, norm = _cmap(fleet)
    cmap.set_bad("#dddddd")
    # At least a page's width and a readable height: 8 figures of 4 nodes drew 3.5 x 3 inches (issue 29).
    w, h = max(HEAT_MIN_W, 3.6 + 0.14 * len(cols)), max(HEAT_MIN_H, 2.5 + 0.16 * len(rows))
    fig, ax = plt.subplots(figsize=(w, h))
    # Fixed margins for the names instead of a tight bounding box: that would draw the figure twice;
    # the right one holds the colour bar and its label (1.0 inch cut the label).
    fig.subplots_adjust(left=1.1 / w, right=1 - COLORBAR_IN / w, bottom=1.6 / h, top=1 - 0.2 / h)
    im = ax.imshow(data, aspect="auto", cmap=cmap, norm=norm, interpolation="nearest")
    ax.set_yticks(range(len(rows)), rows, fontsize=6 if len(rows) > 40 else 8)
    ax.set_xticks(range(len(cols)), [fleet.keys[c] for c in cols], rotation=90, fontsize=5 if len(cols) > 40 else 7)
    _colorbar(fig, im, ax, list(norm.boundaries), "% of the fleet median (below 100% is worse)")
    note = f"{left} healthy nodes not drawn" if left else ""
    return _svg(fig, tight=False), note


def link_heatmap(fleet: Fleet, key: str = "mpi bw host", max_nodes: int = MAX_ROWS) -> str:
    links = [x for x in fleet.links if x.key == key]
    if not links:
        return ""
    names = sorted({x.a for x in links} | {x.b for x in links})[:max_nodes]
    idx = {n: i for i, n in enumerate(names)}
    data = [[math.nan] * len(names) for _ in names]
    for x in links:
        if x.a in idx and x.b in idx:
            data[idx[x.a]][idx[x.b]] = data[idx[x.b]][idx[x.a]] = x.of_best
    plt = _plt()
    from matplotlib.colors import BoundaryNorm, ListedColormap

    cmap = ListedColormap(["#b2182b", "#fddbc7", "#5aae61"])
    cmap.set_bad("#eeeeee")
    norm = BoundaryNorm([0.0, fleet.thresholds.link_bad, 0.98, 10.0], 3)
    size = min(max(4.5, 2 + 0.3 * len(names)), 16)
    fig, ax = plt.subplots(figsize=(size + COLORBAR_IN, size))
    im = ax.imshow(data, cmap=cmap, norm=norm, interpolation="nearest")
    fs = 6 if len(names) > 30 else 8
    if len(names) <= MAX_CELL_VALUES:  # the value in each tested cell, not only its colour (issue 29)
        for i, row in enumerate(data):
            for j, v in enumerate(row):
                if not math.isnan(v):
                    ax.text(j, i, f"{v:.0%}", ha="center", va="center", fontsize=max(4, fs - 2),
                            color="white" if v < fleet.thresholds.link_bad else "black")
    ax.set_xticks(range(len(names)), names, rotation=90, fontsize=fs)
    ax.set_yticks(range(len(names)), names, fontsize=fs)
    _colorbar(fig, im, ax, list(norm.boundaries), f"{key}: % of the best pair")
    return _svg(fig)


def distributions(fleet: Fleet, limit: int = MAX_COLS, fliers: int = MAX_FLIERS) -> str:
    """The distribution of every figure across the nodes: one box per figure
    key (rows, worst node first), each node's % of its class's median, the
    median and the warn/fail lines drawn across. The boxes are summaries, so
    the drawing does not grow with the node count: of the nodes outside the
    whiskers only the `fliers` farthest are drawn per figure."""
    col = {k: i for i, k in enumerate(fleet.keys)}
    values = {k: [r[i] for r in fleet.ratios.values() if r[i] is not None] for k, i in col.items()}
    shown = sorted((k for k in values if values[k]), key=lambda k: (min(values[k]), k))[:limit]
    if not shown:
        return ""
    stats = [box_stats(values[k], _dist_label(fleet, k, len(values[k])), fliers) for k in shown]
    plt = _plt()
    th = fleet.thresholds
    height = 0.8 + 0.2 * len(shown)
    fig, ax = plt.subplots(figsize=(7.5, height))
    # Fixed margins: a tight bounding box would draw the 100+ boxes twice.
    fig.subplots_adjust(left=0.36, right=0.98, top=1 - 0.15 / height, bottom=0.55 / height)
    draw_boxes(ax, stats[::-1])
    for x, c, s in ((1.0, "k", "-"), (th.warn, "#e08214", "--"), (th.fail, "#b2182b", "--")):
        ax.axvline(x, color=c, linestyle=s, linewidth=0.8)
    lo = min(min(st["whislo"], *st["fliers"]) if len(st["fliers"]) else st["whislo"] for st in stats)
    hi = max(max(st["whishi"], *st["fliers"]) if len(st["fliers"]) else st["whishi"] for st in stats)
    ax.set_xlim(max(0.0, min(lo, th.fail) - 0.03), min(2.0, max(hi, 1.02) + 0.03))
    ax.tick_params(axis="y", labelsize=6)
    ax.xaxis.set_major_formatter(lambda v, _: f"{v:.0%}")
    ax.set_xlabel(f"% of the class's median (dashed: warn, fail; points: <= {fliers} farthest nodes a figure)")
    return _svg(fig, tight=False)


def draw_boxes(ax: Any, stats: list[dict[str, Any]]) -> None:
    """Horizontal boxes, one row each, in four artists (matplotlib's bxp
    makes seven per box: 120 boxes cost a second)."""
    y = list(range(len(stats)))
    ax.barh(y, [s["q3"] - s["q1"] for s in stats], left=[s["q1"] for s in stats], height=0.6, color="white",
            edgecolor="#333333", linewidth=0.6)
    ax.hlines(y, [s["whislo"] for s in stats], [s["q1"] for s in stats], color="#333333", linewidth=0.6)
    ax.hlines(y, [s["q3"] for s in stats], [s["whishi"] for s in stats], color="#333333", linewidth=0.6)
    ax.vlines([s["med"] for s in stats], [i - 0.3 for i in y], [i + 0.3 for i in y], color="#4575b4", linewidth=1)
    pts = [(v, i) for i, s in zip(y, stats) for v in s["fliers"]]
    if pts:
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "o", markersize=2, markerfacecolor="none",
                markeredgecolor="#b2182b")
    ax.set_yticks(y, [s["label"] for s in stats])
    ax.set_ylim(-0.7, len(stats) - 0.3)


def box_stats(values: list[float], label: str, fliers: int) -> dict[str, Any]:
    """matplotlib's box (quartiles, whiskers at the farthest value within
    1.5 IQR) by NumPy, and only the `fliers` values farthest from 100%."""
    import numpy as np

    v = np.sort(np.asarray(values, dtype=float))
    q1, med, q3 = np.percentile(v, (25, 50, 75))
    iqr = q3 - q1
    inside = v[(v >= q1 - 1.5 * iqr) & (v <= q3 + 1.5 * iqr)]
    lo, hi = (inside[0], inside[-1]) if len(inside) else (q1, q3)
    out = v[(v < lo) | (v > hi)]
    far = out[np.argsort(-np.abs(out - 1.0), kind="stable")[:fliers]]
    return {"med": med, "q1": q1, "q3": q3, "whislo": lo, "whishi": hi, "fliers": far, "label": label}


def _dist_label(fleet: Fleet, key: str, n: int) -> str:
    b = next((b for b in fleet.baselines if b.key == key), None)
    return f"{key}  {b.median:,.4g} {b.unit} ({n})" if b else f"{key} ({n})"


CSS = """body{font-family:sans-serif;margin:1.5em;max-width:1400px}table{border-collapse:collapse}
td,th{border:1px solid #ccc;padding:3px 6px;font-size:13px;vertical-align:top;text-align:left}
.fail{color:#b2182b;font-weight:bold}.warn{color:#b35806}.pass{color:#1b7837}.note{color:#555}
svg{max-width:100%;height:auto}"""


def verdict_counts(fleet: Fleet) -> dict[str, int]:
    """How many nodes have each verdict ("missing": no document)."""
    counts: dict[str, int] = {}
    for n in fleet.nodes:
        v = "missing" if n.status == "missing" else fleet.verdict(n.name)
        counts[v] = counts.get(v, 0) + 1
    return counts


def page(fleet: Fleet, messages: list[str]) -> str:
    e = html.escape
    counts = verdict_counts(fleet)
    from ..htmlpage import Cell, Markup, head, table

    parts = [head("nodemap fleet check", CSS) + "<h1>nodemap fleet check</h1>",
             f"<p>{len(fleet.nodes)} nodes: " + ", ".join(f"<span class='{e('fail' if k == 'missing' else k)}'>"
                                                           f"{v} {e(k)}</span>" for k, v in sorted(counts.items()))
             + ("" if fleet.complete else " <span class='fail'>(incomplete)</span>") + "</p>"]
    th = fleet.thresholds
    parts.append(f"<p class='note'>Rules: warn below {th.warn:.0%}, fail below {th.fail:.0%} of the fleet median "
                 f"of the same figure on the same GPU (or CPU) model; latency inverted. Pairs: bad below "
                 f"{th.link_bad:.0%} of the best pair's bandwidth or above {th.link_latency:g}x the lowest "
                 f"latency; a rail, in every repetition, below {th.rail_bad:.0%} of the same pair's other rail's "
                 f"bandwidth or above {th.rail_latency:g}x its latency; a rail whose slowest round trips stay "
                 f"above {th.rail_tail:g}x the other rail's in most repetitions (lost packets).</p>")
    parts.append("<h2>Nodes to drain</h2>")
    if fleet.drain:
        parts.append(table(["#", "node", "reason", "evidence"], [
            (d.rank, Cell(d.node, cls="fail"), d.reason, Markup("<br>".join(e(x) for x in d.evidence[1:])))
            for d in fleet.drain]))
    else:
        parts.append("<p class='pass'>none</p>")
    if not _have_matplotlib():
        parts.append("<p class='note'>No plots: matplotlib is not installed (pip install 'nodemap[report]').</p>")
        return "\n".join(parts + _lists(fleet, messages) + ["</body></html>"])
    svg, note = figure_heatmap(fleet)
    parts.append("<h2>Node x figure: % of the fleet median</h2>" + _plot("figures", svg)
                 + (f"<p class='note'>{e(note)}</p>" if note else ""))
    links = link_heatmap(fleet)
    if links:
        parts.append("<h2>Node x node: pair bandwidth, % of the best pair</h2>" + _plot("links", links))
    dists = distributions(fleet)
    if dists:
        parts.append("<h2>Distribution of each figure across the nodes</h2>" + _plot("distributions", dists)
                     + (f"<p class='note'>{len(fleet.keys) - MAX_COLS} more figures in fleet.json</p>"
                        if len(fleet.keys) > MAX_COLS else ""))
    return "\n".join(parts + _lists(fleet, messages) + ["</body></html>"])


def _plot(pid: str, svg: str) -> str:
    """The markup benchmarks/html_in_browser.py finds plots by."""
    return f"<div class='plot' id='{pid}'>{svg}</div>" if svg else ""


def _lists(fleet: Fleet, messages: list[str]) -> list[str]:
    e = html.escape
    out = []
    warn = [f for f in fleet.findings if f.verdict == "warn"]
    if warn:
        out.append("<h2>Warnings</h2><ul>" + "".join(f"<li>{e(f.node)}: {e(f.text)}</li>" for f in warn[:200])
                   + (f"<li>... {len(warn) - 200} more in fleet.json</li>" if len(warn) > 200 else "") + "</ul>")
    if messages or fleet.notes:
        out.append("<h2>Notes</h2><ul>" + "".join(f"<li>{e(m)}</li>" for m in messages + fleet.notes) + "</ul>")
    return out


def _have_matplotlib() -> bool:
    import importlib.util

    return importlib.util.find_spec("matplotlib") is not None
