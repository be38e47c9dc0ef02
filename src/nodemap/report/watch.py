"""The memory timelines of `nodemap run --watch` in the report: HTML section, plot, JSON.

`nodemap report DIR` (a watch folder) prints nodemap.watch.summary,
its JSON (--json: statistics, findings and every rank's series) or a
self-contained HTML page (--html OUT); given with a check document, the
watch section joins the check's HTML report.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from html import escape
from typing import Literal

import msgspec

from ..check.expectations import WatchRules
from ..htmlpage import Cell, head, table
from ..units import GiB, gib
from ..watch import analysis, summary, timeline
from ..watch.analysis import Analysis
from . import plots
from .html import CSS, Section

SCHEMA = "nodemap.watch.report/2"  # /2: one entry per job
WHAT = "watch report (nodemap report DIR --json wrote it)"


def is_watch_input(path: str) -> bool:
    """A timeline file, or a folder that holds some."""
    if os.path.isdir(path):
        try:
            return any(n.endswith(".watch") for n in os.listdir(path))
        except OSError:
            return False
    return path.endswith(".watch")


def load(paths: list[str], unreadable: list[timeline.Skipped] | None = None) -> list[timeline.Timeline]:
    """The timelines of the files and folders; a folder's unreadable ones are said on stderr and
    added to `unreadable` (the JSON document names them too)."""
    from ..errors import NodemapError

    out: list[timeline.Timeline] = []
    unreadable = [] if unreadable is None else unreadable
    for p in paths:
        if os.path.isdir(p):
            out += timeline.read_dir(p, unreadable)
            continue
        out.append(timeline.read(p))  # a damaged one: InputError naming the file, line and field
    timeline.say_unreadable(unreadable, sys.stderr)  # the summary goes on with the others
    if not out:
        raise NodemapError(f"no readable timelines in {', '.join(paths)}: give the folder of nodemap run --watch "
                           "(--watch-dir; default ./nodemap-watch)")
    out.sort(key=lambda t: (t.job, t.host, t.rank, t.header.start))
    return out


Run = tuple[list[timeline.Timeline], analysis.Analysis]  # one job's timelines and their analysis


def runs(timelines: list[timeline.Timeline], rules: WatchRules, job: str | None = None) -> list[Run]:
    """Each job of the folder apart, newest first, judged by `rules` (the expectations' [watch]); only `job` when
    given."""
    from ..errors import NodemapError

    groups = analysis.by_job(timelines)
    if job is not None:
        groups = [g for g in groups if g[0].job == job]
        if not groups:
            raise NodemapError(f"no timelines of job {job!r}: the folder holds job(s) "
                               f"{', '.join(g[0].job for g in analysis.by_job(timelines))} (--job)")
    return [(g, analysis.analyse(g, rules)) for g in groups]


class Job(msgspec.Struct):
    job: str
    analysis: Analysis  # (by its name: a field named analysis hides the module)
    series: list[timeline.Series]  # each rank's


class Report(msgspec.Struct, kw_only=True):
    """`nodemap report DIR --json`: written and read as this (nodemap.records)."""

    schema: Literal[SCHEMA] = SCHEMA
    jobs: list[Job]
    unreadable: list[timeline.Skipped]  # the timelines skipped, so a reader of the JSON learns a rank is missing


def document(jobs: list[Run], unreadable: Sequence[timeline.Skipped] = ()) -> Report:
    return Report(jobs=[Job(a.job, a, [timeline.series(t) for t in tls]) for tls, a in jobs],
                  unreadable=list(unreadable))


def render(jobs: list[Run], where: str) -> str:
    """The terminal summary of each job, newest first."""
    head = (f"nodemap watch: {len(jobs)} runs (jobs) in {where}, newest first; --job ID shows one\n"
            if len(jobs) > 1 else "")
    return head + "\n".join(summary.render(a, where) for _, a in jobs)


def memory_plot(timelines: list[timeline.Timeline], suffix: str = "") -> plots.Plot | None:
    """GPU memory (top) and host RSS (bottom) against time, one line per rank."""
    if not timelines or not plots.available() or not any(t.t for t in timelines):
        return None
    plt = plots._pyplot()
    fig, (gpu, host) = plt.subplots(2, 1, figsize=(8, 5.5), sharex=True)
    for tl in timelines[:64]:
        s = timeline.series(tl)
        label = f"{tl.host} rank {tl.rank}"
        if s.gpu:
            gpu.plot(s.t, [b / GiB for b in s.gpu], label=label, linewidth=1.2)
        host.plot(s.t, [b / GiB for b in s.rss], label=label, linewidth=1.2)
    gpu.set_ylabel("GPU memory (GiB)")
    host.set_ylabel("host RSS (GiB)")
    host.set_xlabel("time since the rank started (s)")
    if len(timelines) <= 16:
        (gpu if gpu.lines else host).legend(fontsize=7, loc="upper left")
    if not gpu.lines:
        gpu.text(0.5, 0.5, "no GPU data (no NVML or no GPU)", ha="center", va="center", transform=gpu.transAxes)
    for ax in (gpu, host):
        ax.grid(alpha=0.3)
        ax.set_ylim(bottom=0)
    gpu.set_title("memory of each rank against time", fontsize=10)
    return plots.Plot("plot-watch-memory" + suffix, "Memory of each rank against time", plots.to_svg(fig))


def section(tls: list[timeline.Timeline], a: analysis.Analysis, n: int = 0) -> Section:
    """One job's findings, plot and tables; n > 0 for the older jobs of a folder (their ids differ)."""
    suffix = f"-{n + 1}" if n else ""
    rows = [[r.host, Cell(r.rank, cls="num"), ",".join(map(str, r.gpus)) or "-",
             *(_cells(r.gpu) if r.gpu.kind != "none" else _NONE), *_cells(r.host_rss),
             Cell(f"{r.duration:.1f}", cls="num"), _end(r)] for r in a.ranks]
    ranks = table(["host", "rank", "GPUs", "GPU peak GiB", "GPU growth GiB", "GiB/min", "shape", "host peak GiB",
                   "host growth GiB", "GiB/min", "shape", "s", "end"], rows, id=f"watch-ranks{suffix}")
    gpus = [[g.host, f"{g.index} {g.name}", Cell(gib(g.total), cls="num"), Cell(gib(g.peak_used), cls="num"),
             Cell(gib(g.margin), cls="num"), ",".join(map(str, g.ranks)), Cell(gib(g.ranks_peak_sum), cls="num")]
            for g in a.gpus]
    gpus = table(["host", "GPU", "memory GiB", "peak used GiB", "margin GiB", "ranks", "ranks' peaks GiB"], gpus,
                 id=f"watch-gpus{suffix}") if gpus else ""
    items = "".join(f"<li><span class='{escape(f.verdict)}'>&nbsp;{escape(f.verdict)}&nbsp;</span> "
                    f"<b>[{escape(f.kind)}]</b> "
                    f"{escape(f.text)}<br><span class='note'>evidence: {escape(f.evidence)}</span><br>"
                    f"fix: {escape(f.fix)}</li>" for f in a.findings)
    found = f"<ol id='watch-findings{suffix}'>{items}</ol>" if items else "<p>No memory findings.</p>"
    notes = "".join(f"<li>{escape(n)}</li>" for n in a.notes)
    p = memory_plot(tls, suffix)
    plot = (f"<div class='plot' id='{p.id}'>{p.svg}</div>" if p else
            "<p class='note'>The plot needs matplotlib (pip install 'nodemap[report]').</p>")
    body = found + plot + ranks + gpus + (f"<ul class='note'>{notes}</ul>" if notes else "")
    return Section("watch" + suffix, f"Memory over time (nodemap run --watch), job {a.job} started "
                   f"{summary.when(a.start)}", body)


def page(jobs: list[Run], where: str) -> str:
    sections = [section(tls, a, n) for n, (tls, a) in enumerate(jobs)]
    hosts = ", ".join(sorted({r.host for _, a in jobs for r in a.ranks}))
    title = (f"nodemap watch: {sum(len(a.ranks) for _, a in jobs)} rank(s) on {hosts}"
             + (f", {len(jobs)} runs" if len(jobs) > 1 else ""))
    return (head(title, CSS) + f"<h1>{escape(title)}</h1>"
            f"<p class='note'>timelines: {escape(where)}</p>"
            + "".join(f"<h2 id='{s.id}'>{escape(s.title)}</h2>{s.html}" for s in sections)
            + "</body></html>\n")


_NONE = (Cell("-", cls="num"),) * 3 + ("-",)


def _cells(s: analysis.Shape) -> tuple:
    return (Cell(gib(s.peak), cls="num"), Cell(gib(s.growth), cls="num"), Cell(gib(s.slope * 60, sign=True), cls="num"),
            s.kind)


def _end(r: analysis.RankStats) -> str:
    if not r.complete:
        return "monitor stopped early"
    if "signal" in r.exit:
        return f"signal {r.exit['signal']}"
    return f"exit {r.exit['exit']}" if "exit" in r.exit else "ended"
