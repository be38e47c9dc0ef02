"""`nodemap check`: is this node right? Inventory, measurements, verdicts,
findings; a one-screen summary, a JSON document and an HTML report."""

from __future__ import annotations

import argparse
import os
import time

from ..fleet import command as fleet_command

DESCRIPTION = """\
Check this node: inventory and health (GPUs, NICs, PCIe links trained at
their maximum, NUMA balance, offline CPUs, ECC/remapped rows/throttling
through NVML, environment variables that change results), then the
measurements the topology calls for (STREAM placement sweep, NUMA
matrices, latency; per GPU: HBM, host<->GPU from every NUMA node,
GPU<->GPU, NCCL all_reduce). Every figure gets a verdict (pass/warn/fail)
against its path's practical limit and against its peers on this node,
with the rule that decided it; findings say what is wrong, the evidence,
the fix, and whether the cause is configuration or hardware. What the
node lacks (GPU, NVML, MPI) is skipped with the reason, never failed.

Writes DIR/check.json (docs/check.md) and DIR/check.html (open offline).
Other work on the node (other processes' CPU time on the measured CPUs,
memory pressure, other processes on the GPUs) is sampled before the check
and around every step; a busy node's report says so at the top, and its
figures measured then are "inconclusive", never failed for speed.
Exit status: 0 no figure failed, 1 something failed, 2 bad usage or a busy
node (could not judge: retry later, do not drain), 130 interrupted (the
report holds what was measured, marked incomplete)."""

EPILOG = """\
examples:
  nodemap check                          quick level, report in ./nodemap-check-HOST-TIME/
  nodemap check --level full -o /tmp/c   standard sizes and every engine
  nodemap check --expect site.toml       site limits and thresholds (keys of nodemap/check/expectations.toml)
  nodemap report /tmp/c/check.json       the summary again; --html, --compare BEFORE AFTER
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--level", choices=("quick", "full"), default="quick",
                   help="quick: only the sizes and cases that are judged, the host ones with full's repetitions "
                        "(default); full: every size, case and repetition the kinds take by default")
    p.add_argument("--output", "-o", metavar="DIR",
                   help="folder for check.json and check.html (default ./nodemap-check-HOST-YYYYmmdd-HHMMSS)")
    p.add_argument("--expect", metavar="FILE", help="site expectations (TOML) overriding the shipped limits")
    p.add_argument("--json", action="store_true", help="print the check document as JSON on stdout")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress lines on stderr")
    fleet_command.add_arguments(p)


def output_dir(arg: str | None) -> str:
    """The report folder, created now so a bad path fails before measuring."""
    from ..errors import NodemapError

    import socket

    d = arg or f"nodemap-check-{socket.gethostname()}-{time.strftime('%Y%m%d-%H%M%S')}"
    if os.path.exists(d) and not os.path.isdir(d):
        raise NodemapError(f"--output {d}: exists and is not a folder; give a folder for check.json and check.html")
    parent = os.path.dirname(os.path.abspath(d))
    if not os.path.isdir(parent):
        raise NodemapError(f"--output {d}: the folder {parent} does not exist; create it or give another")
    try:
        os.makedirs(d, exist_ok=True)
    except OSError as e:
        raise NodemapError(f"--output {d}: cannot create it ({e.strerror or e})") from None
    if not os.access(d, os.W_OK | os.X_OK):
        raise NodemapError(f"--output {d}: not writable; give a folder you can write to")
    return d


def run(args: argparse.Namespace) -> int:
    import sys

    if args.fleet or args.from_dirs:
        return fleet_command.run(args)

    from ..check import expectations
    from ..check.node import run_check, stderr_progress
    from .. import outfile
    from ..report import html, terminal

    exp = expectations.load(args.expect)
    d = output_dir(args.output)
    json_path, html_path = os.path.join(d, "check.json"), os.path.join(d, "check.html")
    for p in (json_path, html_path):
        outfile.check(p, "--output")
    cmd = "nodemap check --level " + args.level + (f" --expect {args.expect}" if args.expect else "")
    doc = run_check(args.level, exp, on_update=lambda doc: outfile.write(json_path, doc.to_json()),
                    progress=(lambda s: None) if args.quiet else stderr_progress, command=cmd)
    outfile.write(html_path, html.render(doc))
    if args.json:
        print(doc.to_json())
    else:
        print(terminal.summary(doc, files=(json_path, html_path)))
    if not args.quiet and args.json:
        print(f"report: {json_path}, {html_path}", file=sys.stderr)
    from ..check.document import exit_status

    return exit_status(doc)
