"""`nodemap compare`: what each binding does to the same ranks' probes."""

from __future__ import annotations

import argparse

from ..errors import NodemapError

TYPE_CHECKING = False  # typing costs ~3 ms of `nodemap compare --help`
if TYPE_CHECKING:
    from typing import Any


DESCRIPTION = """\
Run the same probes under several bindings of the same ranks on this node and
print the difference each makes: per-rank STREAM triad, host->GPU copy
bandwidth, GPU memory bandwidth and a Jacobi step. Bindings: none (what the
OS gives), the launcher's default (Open MPI's), nodemap's plan, and
deliberately bad ones built from the topology: a GPU on a remote NUMA node
(remote-gpu), every rank packed on one NUMA node (packed), the NIC of
another socket (far-nic). Each row names the resources each rank got and a
verdict against the plan. On a node with one NUMA node the locality of CPU,
memory, GPU and NIC cannot differ: it says so and the bad bindings are not
built. The ranks of a binding run at once, each as its own bound process
running one `nodemap bench` kind (verified, repeated), with a barrier before
each repetition so the ranks' repetitions run together, as a real job's do.
Each binding runs --rounds times, the bindings in alternating order (A B C,
C B A, ...) so drift over the run biases none; a binding's figure is the
median over its repetitions of the whole binding (ranks combined), and a
difference from the plan is one where the two medians' 95% intervals
allow no ratio of 1 and the change is over [compare] min_noise of the
expectations (3%; a site file given with --expect sets its own)."""

EPILOG = """\
examples:
  nodemap compare                         one rank per GPU, every probe
  nodemap compare --tasks 4 --probes stream
  nodemap compare --input node.xml --dry-run      the bindings only, no measurement
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tasks", type=int, default=0, help="ranks on this node (default: one per GPU, else 2)")
    p.add_argument("--probes", default="stream,h2d,gpu,jacobi", help="subset of stream,h2d,gpu,jacobi")
    p.add_argument("--bindings", default="none,launcher,plan,remote-gpu,packed,far-nic",
                   help="subset of none,launcher,plan,remote-gpu,packed,far-nic")
    p.add_argument("--rounds", type=int, default=2, metavar="N",
                   help="runs of each binding per probe, in alternating order (default 2: A B .. B A); each run "
                        "is 5 repetitions of the whole binding (jacobi 3)")
    p.add_argument("--size", metavar="BYTES", help="STREAM bytes per array (default: the bench's)")
    p.add_argument("--input", "--topology", dest="topology", metavar="PATH",
                   help="plan from a saved node: hwloc XML, sysfs snapshot, nodemap JSON or a check document, as the "
                        "other commands' "
                        "--input (with --dry-run: any machine)")
    p.add_argument("--dry-run", action="store_true", help="print the bindings, measure nothing")
    from ..units import seconds

    p.add_argument("--timeout", type=seconds, default=300.0, metavar="S", help="seconds one probe may take")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON on stdout")
    p.add_argument("--output", "-o", metavar="FILE", help="also save the comparison (JSON) to FILE")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress lines on stderr")
    p.add_argument("--expect", metavar="FILE", help="site expectations file (TOML, as check's): its [compare] "
                                                    "min_noise decides a difference")


def run(args: argparse.Namespace) -> int:
    from ..check import expectations
    from ..compare import bindings as cb
    from ..compare import probes as pr
    from ..mapping.plan import plan
    from ..mapping.request import Request
    from ..outfile import json_text, write
    from ..topology.discover import discover

    if args.topology and not args.dry_run:
        raise NodemapError("--input describes another machine: add --dry-run (probes run on this node only)")
    if args.output:
        from ..outfile import check

        check(args.output)  # before the probes: a folder or FIFO at -o once lost every measurement
    rules = expectations.load(args.expect).table(expectations.CompareRules)  # a broken file: before measuring
    topo = discover(args.topology) if args.topology else discover()
    wanted = [s.strip() for s in args.bindings.split(",") if s.strip()]
    if not wanted or any(w not in cb.NAMES for w in wanted):
        raise NodemapError(f"--bindings {args.bindings!r}: choose from {','.join(cb.NAMES)}")
    probes = pr.parse_probes(args.probes)
    tasks = args.tasks or (len([g for g in topo.gpus if g.visible]) or 2)
    if tasks < 1:
        raise NodemapError("--tasks must be at least 1")
    if args.rounds < 1:
        raise NodemapError(f"--rounds {args.rounds}: need at least 1")
    if args.size is not None:  # here, not as every rank's error after the bindings ran (exit 1)
        from ..bench.host.stream import MIN_ARRAY
        from ..units import parse_size

        parse_size(args.size, "--size", minimum=MIN_ARRAY)
    p = plan(topo, Request(tasks=tasks))
    built, missing = cb.build(topo, p)
    chosen = [b for b in built if b.name in wanted]
    notes = [m for m in missing if m.split(":")[0] in wanted]
    if cb.one_numa(topo):
        notes.insert(0, "this node has one NUMA node: every rank's CPUs, memory, GPUs and NICs are equally near, so "
                        "bindings can differ only in how ranks share cores; remote-gpu, packed and far-nic cannot "
                        "be built here")
    probes, why = pr.usable_probes(probes, len([g for g in topo.gpus if g.visible]))
    notes += why
    out = cb.Comparison(tasks=tasks, topology=topo.source, rounds=args.rounds, bindings=[], notes=notes)
    planned = next((b for b in chosen if b.name == "plan"), None)
    order = sorted(chosen, key=lambda b: b.name != "plan")  # the plan first: the others are judged against it
    rows = {} if args.dry_run else measure(topo, order, probes, args)
    for b in order:
        entry = cb.Entry(b.name, b.what, b.bad, [cb.describe(topo, t) for t in b.tasks],
                         [cb.resources(topo, t) for t in b.tasks], {})
        for probe in ([] if args.dry_run else probes):
            row = rows[b.name, probe]
            iv = row.interval
            entry.probes[probe] = cb.Outcome(row.values, row.total, pr.probe_of(probe).unit, row.totals, row.rounds,
                                             row.together, [iv.low, iv.high] if iv else None, row.noise, row.errors,
                                             row.warnings, pr.verdict(row, rows.get(("plan", probe)), b, rules,
                                                                      same=cb.cannot_differ(topo, b, planned)))
        out.bindings.append(entry)
    out.bindings.sort(key=lambda e: cb.NAMES.index(e.name))
    if args.output:
        write(args.output, json_text(out))
    if args.json:
        print(json_text(out))
    else:
        print(text(out))
    failed = any(v.total is None for e in out.bindings for v in e.probes.values())
    return 1 if failed else 0


def measure(topo: Any, order: list[Any], probes: list[str], args: argparse.Namespace) -> dict[tuple[str, str], Any]:
    """Each probe under each binding, --rounds times, the bindings in
    alternating order (the order, then reversed: ABBA for two), so a drift
    over the run (heat, another job) moves every binding's figures alike."""
    import sys

    from ..compare import probes as pr

    rows: dict[tuple[str, str], Any] = {}
    for probe in probes:
        for r, b in alternating(order, args.rounds):
            if not args.quiet:
                print(f"[compare] {probe} round {r + 1}/{args.rounds}: {b.name} on {len(b.tasks)} rank(s)",
                      file=sys.stderr, flush=True)
            got = pr.run_binding(topo, b, probe, args.size, args.timeout)
            rows.setdefault((b.name, probe), pr.Row(b.name, probe, [], [])).add(got)
    return rows


def alternating(order: list[Any], rounds: int) -> list[tuple[int, Any]]:
    """(round, item) in the order a comparison runs them: forwards, then backwards, ..."""
    return [(r, x) for r in range(rounds) for x in (order if r % 2 == 0 else order[::-1])]


def text(out: Any) -> str:
    """The terminal table of a Comparison (compare/bindings.py)."""
    lines = [f"{out.tasks} rank(s), each binding run {out.rounds} time(s) in alternating order; bindings judged "
             "against nodemap's plan"]
    for e in out.bindings:
        lines.append(f"\n{e.name}: {e.what}")
        lines += ["  " + line for line in rank_table(e).splitlines()]
        if e.bad:
            lines.append(f"  remote by construction: {e.bad}")
        for p, v in e.probes.items():
            lines.append(f"  -> {v.verdict}")
            if v.repetitions and v.started_together < len(v.repetitions):
                lines.append(f"  !! {p}: the ranks' repetitions were not started together (this bench kind has no "
                             "barrier yet): the whole-binding figures pair repetitions by their index only")
            lines += [f"  !! {w}" for w in v.warnings]
    lines += [f"note: {n}" for n in out.notes]
    return "\n".join(lines)


def rank_table(e: Any) -> str:
    """One line per rank (an Entry's): its resources and each probe's figure."""
    from ..text import number, table

    probes = e.probes
    nic = any(r.nics for r in e.resources)
    heads = ["rank", "PUs", "NUMA", "memory", "GPU"] + ["NIC"] * nic + [f"{p} {v.unit}" for p, v in probes.items()]
    rows = []
    for i, r in enumerate(e.resources):
        figures = [number(v.per_rank[i]) for v in probes.values()]
        rows.append([str(r.rank), r.pus, r.numa, r.memory, ", ".join(r.gpus) or "-"]
                    + [", ".join(r.nics) or "-"] * nic + figures)
    return table(heads, rows, right=[True] + [False] * (4 + nic) + [True] * len(probes))
