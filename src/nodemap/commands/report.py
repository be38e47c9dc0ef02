"""`nodemap report`: render saved check documents or bench results again,
or compare two of them."""

from __future__ import annotations

import argparse
import json
import os

DESCRIPTION = """\
Render a saved check document (check.json) or bench result files
(`nodemap bench KIND -o FILE`, several are merged) again: the one-screen
summary, the JSON document (--json) or the HTML report (--html OUT).
Bench results are judged by the same rules as `nodemap check`; with
--expect, a check document is judged again against a site file.
--compare BEFORE AFTER prints every figure's after/before ratio and flags
regressions (below 95% warn, below 90% fail by default; thresholds
compare_warn/compare_fail of the expectations); a figure inconclusive on
either side (measured while the node was busy, or undecided) is not
compared. Exit status as check's: 1 when the node failed for a hardware
cause (with --compare: a figure regressed past compare_fail, or is gone),
2 when it was busy (with --compare: figures could not be compared and none
regressed), else 0.

A folder of `nodemap run --watch` timelines (or .watch files) gives each
rank's memory peak, growth and shape, per GPU the peak against its memory,
and findings (growth and its likely cause, imbalance, near capacity, other
processes), by the [watch] thresholds of the expectations (a site file's
with --expect); with --html a plot of memory against time per rank. Given
with a check document, the memory section joins its report."""

EPILOG = """\
examples:
  nodemap report nodemap-check-n1-20261123-2200/check.json
  nodemap report check.json --html /tmp/check.html
  nodemap report mem.json numa.json --json        bench results judged and merged
  nodemap report --compare before/check.json after/check.json
  nodemap report nodemap-watch --html /tmp/memory.html    memory timelines of nodemap run --watch
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("files", nargs="*", metavar="FILE",
                   help="check.json, bench result files, or a folder of nodemap run --watch timelines")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print the (merged) check document as JSON")
    out.add_argument("--html", metavar="OUT", help="write the HTML report to OUT")
    p.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"), help="per-figure ratios of AFTER to BEFORE")
    p.add_argument("--expect", metavar="FILE", help="judge again against this site expectations file (TOML); watch "
                                                    "timelines by its [watch]")
    p.add_argument("--job", metavar="ID", help="watch timelines: only this run's (default every run in the folder, "
                                               "newest first)")


def load(paths: list[str], expect: str | None):
    """One CheckDoc from a check document or from bench ResultSets."""
    from .. import infile, records
    from ..bench import resultfile
    from ..bench.results import SCHEMA as RESULTS
    from ..check import document, expectations
    from ..errors import NodemapError

    what = "check document or bench result file"
    docs, sets = [], []
    for path in paths:
        _not_a_folder(path)
        data = infile.read(path, infile.MAX_DOCUMENT, what)
        schema = records.schema_of(path, data, what)
        if schema in document.SCHEMAS:
            docs.append((path, data))
        elif schema == RESULTS:
            sets.append(resultfile.decode(path, data))
        else:
            raise NodemapError(f"{path}: {records.got(schema)}; nodemap report reads check documents "
                               f"({', '.join(document.SCHEMAS)}), bench result files ({RESULTS}) and watch folders")
    if docs and (sets or len(docs) > 1):
        raise NodemapError("give one check document (or bench result files); compare two with --compare BEFORE AFTER")
    exp = expectations.load(expect) if expect or not docs else None
    if docs:
        return document.decode(docs[0][0], docs[0][1], exp)
    doc = document.CheckDoc(level="", topology=None, expectations=exp, results=sets, complete=all(s.complete
                            for s in sets), host=sets[0].host if sets else "", started=sets[0].started if sets else "",
                            command="nodemap report " + " ".join(paths))
    doc.rejudge()
    return doc


def _not_a_folder(path: str) -> None:
    from ..errors import NodemapError

    if os.path.isdir(path):
        raise NodemapError(f"{path}: a folder with no watch timelines (*.watch) in it: give a check.json, bench "
                           "result files, or the folder that nodemap run --watch wrote (--watch-dir)")


def run(args: argparse.Namespace) -> int:
    from ..errors import NodemapError
    from .. import outfile
    from ..report import compare, html, terminal

    if args.compare:
        if args.files or args.html:
            raise NodemapError("--compare BEFORE AFTER takes no other FILE and no --html")
        before, after = (load([p], args.expect) for p in args.compare)
        for doc in (before, after):  # figures from the results, by the same extraction on both sides
            doc.rejudge()
        incomplete = [side for side, d in (("before", before), ("after", after)) if not d.complete]
        changes = compare.compare([j.figure for j in before.judged], [j.figure for j in after.judged],
                                  after.expectations.thresholds, after_complete=after.complete,
                                  unsure_before=compare.unsure(before), unsure_after=compare.unsure(after))
        if args.json:
            print(outfile.json_text(compare.Comparison(before=args.compare[0], after=args.compare[1],
                                                       incomplete=incomplete, changes=changes,
                                                       summary=compare.closing(changes, incomplete))))
        else:
            print(compare.text(changes, *args.compare, incomplete=incomplete))
        return compare.exit_status(changes)
    if not args.files:
        raise NodemapError("give a check.json or bench result files (or --compare BEFORE AFTER)")
    from ..check.document import exit_status
    from ..report import watch

    watched = [p for p in args.files if watch.is_watch_input(p)]
    if watched:
        return _watch(args, watched, [p for p in args.files if p not in watched])
    if args.html:
        outfile.check(args.html, "--html")
    doc = load(args.files, args.expect)
    if args.html:
        outfile.write(args.html, html.render(doc), "--html")
        print(f"report: {args.html}")
    elif args.json:
        print(doc.to_json())
    else:
        print(terminal.summary(doc))
    return exit_status(doc, saved=True)


def _watch(args: argparse.Namespace, paths: list[str], others: list[str]) -> int:
    """Memory timelines alone, or beside a check document (their section joins its report)."""
    from .. import outfile
    from ..check import expectations
    from ..check.document import exit_status
    from ..report import html, terminal, watch

    unreadable: list = []
    rules = expectations.load(args.expect).table(expectations.WatchRules)
    jobs = watch.runs(watch.load(paths, unreadable), rules, args.job)
    where = ", ".join(paths)
    doc = load(others, args.expect) if others else None
    if args.html:
        outfile.check(args.html, "--html")
        if doc is None:
            text = watch.page(jobs, where)
        else:
            html.SECTIONS.extend(lambda _doc, n=n, tls=tls, a=a: watch.section(tls, a, n)
                                 for n, (tls, a) in enumerate(jobs))
            text = html.render(doc)
        outfile.write(args.html, text, "--html")
        print(f"report: {args.html}")
    elif args.json:
        d = watch.document(jobs, unreadable)
        print(outfile.json_text(d if doc is None else {**json.loads(doc.to_json()), "watch": d}))
    else:
        if doc is not None:
            print(terminal.summary(doc))
        print(watch.render(jobs, where), end="")
    return exit_status(doc, saved=True) if doc is not None else 0
