"""One self-contained HTML file per check: opens offline (no scripts, no
external styles or fonts; plots are inline SVG drawn by matplotlib).

Sections: summary and area verdicts, findings, plots, figures with their
verdicts and rules, inventory checks, skipped items, environment. Other
commands add sections by appending a function to SECTIONS (it gets the
CheckDoc and returns a Section or None) and plots to plots.PLOTS.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape
from typing import Callable

import msgspec

from ..check.document import CheckDoc
from ..check.inventory import VERIFICATION
from ..htmlpage import Cell, Markup, head, table
from ..text import number
from . import plots
from .terminal import no_findings, verdict_line

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:1.5em auto;max-width:1150px;color:#222;
padding:0 1em}
h1{font-size:1.4em}h2{font-size:1.15em;border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:1.6em}
table{border-collapse:collapse;font-size:.85em;margin:.4em 0}td,th{border:1px solid #ddd;padding:.25em .5em;
text-align:left;vertical-align:top}th{background:#f4f4f4}td.num{text-align:right;font-variant-numeric:tabular-nums}
.v{font-weight:600;text-align:center}.pass{background:#b7e1b0}.warn{background:#f6d67a}.fail{background:#f08a80}
.info{background:#e4e4e4}.inconclusive{background:#c9d8f0}.note{color:#555;font-size:.9em}.plot{margin:.8em 0}.plot svg{max-width:100%;height:auto}
li{margin:.3em 0}code{background:#f4f4f4;padding:0 .2em}
"""


@dataclass(frozen=True)
class Section:
    id: str
    title: str
    html: str  # trusted markup built with escape()


SECTIONS: list[Callable[[CheckDoc], Section | None]] = []  # extra sections, appended by other commands


def _v(verdict: str) -> Cell:
    return Cell(verdict, cls=f"v {verdict}")


def _badge(verdict: str) -> str:
    return f"<span class='{escape(verdict)}'>&nbsp;{escape(verdict)}&nbsp;</span>"


def _num(x: float | None) -> str:
    return "" if x is None else number(x)


def header(doc: CheckDoc) -> str:
    state = "complete" if doc.complete else f"INCOMPLETE: {escape(doc.incomplete_why())}, what was measured only"
    areas = table(["area", "verdict"], [(Cell(a, header=True), _v(v)) for a, v in doc.areas().items()], id="areas")
    skipped = "".join(f"<li>{escape(s.what)}: {escape(s.reason)}</li>" for s in doc.skipped)
    c = doc.counts()
    # bench results judged by `nodemap report` have no level, no end time and no checks: say what they are
    run = (f"level <b>{escape(doc.level)}</b>, started {escape(doc.started)}, finished {escape(doc.finished or '-')}"
           if doc.level else f"bench results of <code>{escape(doc.origin())}</code> judged by the check's rules, "
           f"started {escape(doc.started)}")
    return (f"<h1>{escape(_name(doc))} on {escape(doc.host)}: {_badge(doc.node_verdict())}</h1>"
            f"<p id='verdict'><b>{escape(verdict_line(doc))}</b></p>"
            f"<p id='run'>{run}, {escape(state)}. {len(doc.judged)} figures, {len(doc.checks)} checks: "
            f"{c['pass']} pass, {c['warn']} warn, {c['fail']} fail, {c['inconclusive']} inconclusive, {c['info']} "
            "recorded without a rule.</p>"
            + (f"<p id='budget'>{escape(doc.budget.describe())}</p>" if doc.budget else "") + busy(doc) + areas
            + (f"<p>Skipped:</p><ul id='skipped'>{skipped}</ul>" if skipped else ""))


def _name(doc: CheckDoc) -> str:
    """'nodemap check', or for bench results what made them ('nodemap bench memory')."""
    return "nodemap check" if doc.level else doc.origin()


def busy(doc: CheckDoc) -> str:
    """A busy node says so at the top, with every reason."""
    if not doc.is_busy():
        return ""
    items = "".join(f"<li>{escape(r)}</li>" for r in (doc.busy.reasons if doc.busy else []))
    return ("<div id='busy'><p><span class='inconclusive'>&nbsp;BUSY&nbsp;</span> other work shared this node "
            "during the check: figures measured then are not failed for speed (inconclusive); run the check "
            f"again when the node is idle.</p><ul>{items}</ul></div>")


def findings(doc: CheckDoc) -> str:
    if not doc.findings:
        said = no_findings(doc)
        return f"<h2 id='findings'>Findings</h2><p>{escape(said[0].upper() + said[1:])}.</p>"
    items = "".join(
        f"<li>{_badge(f.verdict)} <b>[{escape(f.cause)}]</b> {escape(f.text)}"
        f"<br><span class='note'>evidence: {escape(f.evidence)}</span><br>fix: {escape(f.fix)}</li>"
        for f in doc.findings)
    return f"<h2 id='findings'>Findings (worst first)</h2><ol>{items}</ol>"


def plot_section(doc: CheckDoc) -> str:
    if not plots.available():
        return ("<h2 id='plots'>Plots</h2><p class='note'>Plots need matplotlib: install the report extra "
                "(<code>pip install 'nodemap[report]'</code>) and run <code>nodemap report FILE --html OUT</code>. "
                "The tables below hold every number.</p>")
    drawn = plots.draw(doc)
    body = "".join(f"<div class='plot' id='{escape(p.id)}'><h3>{escape(p.title)}</h3>{p.svg}</div>" for p in drawn)
    return f"<h2 id='plots'>Plots</h2>{body or '<p>No data to plot.</p>'}"


def figures_table(doc: CheckDoc) -> str:
    rows = [r for group in same_measurement(doc.judged) for r in _measurement_rows(group)]
    return (f"<h2 id='figures'>Figures</h2><p class='note'>value: the best repetition; judged: the median with "
            "its 95% interval from the repetitions (order statistics; the range [min, max] for 2-5 repetitions, "
            "with its lower coverage), docs/check.md. One measurement judged by several rules (STREAM's triad "
            "against the best placement and against the DRAM peak) is one row with a line per rule.</p>"
            + table(["area", "figure", "value", "median [interval]", "unit", "verdict",
                     "rule (and the source of its limit)"], rows, id="figure-table"))


def same_measurement(judged: list) -> list[list]:
    """Adjacent judged figures drawn from one measurement (same path, unit
    and statistics), in order: each group is shown as one row."""
    def measured(j):
        f = j.figure
        return (f.area, f.path, f.unit, f.value, f.median, f.low, f.high, f.n)
    groups: list[list] = []
    for j in judged:
        if groups and measured(groups[-1][0]) == measured(j):
            groups[-1].append(j)
        else:
            groups.append([j])
    return groups


def _measurement_rows(group: list) -> list[list]:
    """The shared cells (area, value, interval, unit) span the group's lines; figure, verdict and rule per line."""
    f, span = group[0].figure, len(group)
    lines = []
    for n, j in enumerate(group):
        figure = Markup(f"<code>{escape(j.figure.key)}</code><br>{escape(j.figure.label)}")
        rule = Markup(f"{escape(j.rule)}<br><span class='note'>{escape(j.expectation.source or '')}</span>")
        if n == 0:
            lines.append([Cell(f.area, rowspan=span), figure, Cell(_num(f.value), cls="num", rowspan=span),
                          Cell(Markup(interval(f)), cls="num", rowspan=span), Cell(f.unit, rowspan=span),
                          _v(j.verdict), rule])
        else:
            lines.append([figure, _v(j.verdict), rule])
    return lines


def interval(f) -> str:
    """The judged median, its interval and what it rests on ('3 repetitions, 75%; 2 rounds')."""
    if f.n <= 1:
        return "one sample" if f.n == 1 else ""
    rounds = f"; {f.rounds} rounds" if f.rounds > 1 else ""
    return (f"{number(f.median)} [{number(f.low)}, {number(f.high)}]<br><span class='note'>{f.n} repetitions, "
            f"{f.coverage:.0%}{rounds}</span>")


def checks_title(doc: CheckDoc) -> str:
    """The checks section's heading: what it holds, verification of a
    step's output (check/failed.py: wrong NCCL data...) named where there is
    some; the anchor stays #inventory either way."""
    verified = any(c.key.startswith(VERIFICATION) for c in doc.checks)
    return "Inventory, health and verification" if verified else "Inventory and health"


def checks_table(doc: CheckDoc) -> str:
    rows = [(Markup(f"<code>{escape(c.key)}</code>"), c.label, c.value, c.expected, _v(c.verdict), c.rule, c.fix)
            for c in doc.checks]
    if not rows:
        why = "None recorded." if doc.level else ("Bench results hold no inventory or health checks: "
                                                  "<code>nodemap check</code> runs them.")
        return f"<h2 id='inventory'>Inventory and health</h2><p class='note'>{why}</p>"
    return f"<h2 id='inventory'>{checks_title(doc)}</h2>" + table(
        ["check", "what", "value", "expected", "verdict", "rule", "fix"], rows, id="checks")


def environment(doc: CheckDoc) -> str:
    env = msgspec.to_builtins(doc.environment)  # what it recorded, by the names the document gives them
    variables = env.pop("variables", {})
    rows = [(Cell(k, header=True), v) for k, v in env.items()]
    rows += [(Cell(k, header=True), Markup(f"<code>{escape(str(v))}</code>")) for k, v in variables.items()]
    if not env and not variables:  # bench results: each file's own environment and messages
        rows = [r for rs in doc.results for r in _bench_environment(rs)]
    cmd = f"<p>Reproduce: <code>{escape(doc.command)}</code></p>" if doc.command else ""
    return f"<h2 id='environment'>Environment</h2>{cmd}" + (table([], rows) if rows else "")


def _bench_environment(rs) -> list[tuple]:
    """One bench result file's command, environment (a GPU's record on one line) and messages."""
    def flat(v) -> str:
        return ", ".join(f"{k}={x}" for k, x in v.items()) if isinstance(v, dict) else str(v)
    rows = [("command", f"nodemap {rs.command}, started {rs.started}")]
    rows += [(str(k), flat(v)) for k, v in rs.environment.items()]
    rows += [("note", m) for m in rs.messages]
    return [(Cell(k, header=True), v) for k, v in rows]


def render(doc: CheckDoc) -> str:
    parts = [header(doc), findings(doc), plot_section(doc), figures_table(doc), checks_table(doc)]
    for fn in SECTIONS:
        s = fn(doc)
        if s is not None:
            parts.append(f"<h2 id='{escape(s.id)}'>{escape(s.title)}</h2>{s.html}")
    parts.append(environment(doc))
    title = f"{_name(doc)}: {doc.host} (node {doc.node_verdict()}, environment {doc.environment_verdict()})"
    return head(title, CSS) + "\n".join(parts) + "</body></html>\n"
