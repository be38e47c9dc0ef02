"""`nodemap topo --input X.xml` of two git revisions against lstopo, interleaved.

The target is <= 3x `lstopo-no-graphics --input X.xml --of console`. (A
launch reads XML once per node: the rank that makes the node's plan when
none is cached, nodemap.mapping.plancache; the other ranks read the plan.)
On a shared 2-core machine wall time drifts with other jobs by more than the
difference between versions, so, as launch_ab.py does, single runs of every
case alternate and each gets its CPU time (user + sys from wait4) and its
wall time. Cases per file: both revisions (their src/ from git archive, run
with `python -S`), lstopo, and `python -S -c pass`: the floor under any
Python CLI, which alone makes 3x of a few-ms lstopo out of reach.

A change of a few ms to the reader is lost in the ~90 ms of CPU the whole
command spends, mostly on the interpreter, imports and argparse; so a second
table times the reader alone in-process: `hwloc_xml.parse` (its mask cache
cleared first, as in a fresh process) and `render.tree`, best of 20 in one
child per revision, children alternating (--in-process N: N children each).

`live` in place of a file times both on this machine (`nodemap topo`
against `lstopo-no-graphics --of console`, no --input; no in-process table):
what the model's import costs shows there (issue 31).

Run: python benchmarks/xml_read_ab.py REV_BEFORE REV_AFTER X.xml|live... [--repeat 20] [--in-process 5] [--lstopo PATH]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from launch_ab import _one, _tree, summary  # noqa: E402  (one way to time a child: launch_ab's)

LIVE = "live"  # this machine, not a file


def _topo(tree: str, xml: str) -> list[str]:
    # -S keeps the editable install's import hook out; defusedxml still comes
    # from site-packages (added by hand: no .pth files are run)
    import site

    code = (f"import sys; sys.path.insert(0, {tree!r}); sys.path += {site.getsitepackages()!r}; "
            "from nodemap.cli import main; sys.argv[0] = 'nodemap'; sys.exit(main())")
    return [sys.executable, "-S", "-c", code, "topo", *_input(xml)]


def _input(xml: str) -> list[str]:
    return [] if xml == LIVE else ["--input", xml]


def _cases(trees: dict[str, str], xml: str, lstopo: str) -> list[tuple[str, list[str]]]:
    cases = [(f"nodemap {name}", _topo(tree, xml)) for name, tree in trees.items()]
    return cases + [("lstopo", [lstopo, *_input(xml), "--of", "console"]),
                    ("python -S -c pass", [sys.executable, "-S", "-c", "pass"])]


# best of 20 of parse and of tree, in ms (argv: the revision's tree, xml, site-packages...)
_IN_PROCESS = """
import sys, time
sys.path.insert(0, sys.argv[1]); sys.path += sys.argv[3:]
from nodemap.topology import hwloc_xml, render
data, parse, tree = open(sys.argv[2], "rb").read(), [], []
for _ in range(20):
    hwloc_xml._parse_mask.cache_clear()
    t0 = time.perf_counter(); topo = hwloc_xml.parse(data, sys.argv[2]); t1 = time.perf_counter()
    render.tree(topo); tree.append(time.perf_counter() - t1); parse.append(t1 - t0)
print(min(parse) * 1e3, min(tree) * 1e3)
"""


def _in_process(trees: dict[str, str], xmls: list[str], children: int, env: dict[str, str]) -> None:
    import site

    print("| file | revision | parse best ms | tree best ms |")
    print("|---|---|---|---|")
    for xml in (x for x in xmls if x != LIVE):
        best: dict[str, list[float]] = {name: [float("inf")] * 2 for name in trees}
        for _ in range(children):
            for name, tree in trees.items():
                cmd = [sys.executable, "-S", "-c", _IN_PROCESS, tree, xml, *site.getsitepackages()]
                out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout.split()
                best[name] = [min(b, float(x)) for b, x in zip(best[name], out)]
        for name, (parse, tree) in best.items():
            print(f"| {os.path.basename(xml)} | {name} | {parse:.2f} | {tree:.2f} |")


def _quiet(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    out = os.dup(1)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    try:
        return _one(cmd, env)
    finally:
        os.dup2(out, 1)
        os.close(null)
        os.close(out)


def interleaved(cases: list[tuple[str, list[str]]], env: dict[str, str], repeat: int) -> dict[str, list]:
    """Each case's (CPU, wall) ms per round, after a warm-up run each (byte code, page cache)."""
    for _, cmd in cases:
        _quiet(cmd, env)
    res: dict[str, list[tuple[float, float]]] = {name: [] for name, _ in cases}
    for _ in range(repeat):
        for name, cmd in cases:
            res[name].append(_quiet(cmd, env))
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("xml", nargs="+")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--in-process", type=int, default=5, metavar="N", help="children per revision (0: no table)")
    ap.add_argument("--lstopo", default=shutil.which("lstopo-no-graphics") or "lstopo-no-graphics")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="nodemap-xmlab-")
    # Time what users run: with byte code caches (PYTHONDONTWRITEBYTECODE
    # would time the compiler: 120 ms instead of ~35), kept out of the trees.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = os.path.join(work, "pycache")
    try:
        trees = {name: _tree(rev, os.path.join(work, name)) for name, rev in (("before", args.before),
                                                                                ("after", args.after))}
        print(f"# {args.before} -> {args.after}: {args.repeat} interleaved runs each; {os.cpu_count()} CPUs, "
              f"load {' '.join(f'{x:.1f}' for x in os.getloadavg())}, Python {sys.version.split()[0]}, "
              f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, lstopo {args.lstopo}")
        print("| file | case | CPU median ms | CPU best | wall median ms | wall best | CPU vs lstopo |")
        print("|---|---|---|---|---|---|---|")
        for xml in args.xml:
            res = interleaved(_cases(trees, xml, args.lstopo), env, args.repeat)
            base = summary(res["lstopo"])[0]
            for name, xs in res.items():
                cpu_med, cpu_best, wall_med, wall_best = summary(xs)
                print(f"| {os.path.basename(xml)} | {name} | {cpu_med:.1f} | {cpu_best:.1f} | {wall_med:.1f} | "
                      f"{wall_best:.1f} | {cpu_med / base:.1f}x |")
        if args.in_process:
            print()
            _in_process(trees, args.xml, args.in_process, env)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
