"""`nodemap topo --input X.xml` of two git revisions against lstopo, interleaved.

The XML path is on the launch path (plans read XML on every uncached rank
start); the target is <= 3x `lstopo-no-graphics --input X.xml --of console`.
On a shared 2-core machine wall time drifts with other jobs by more than the
difference between versions, so, as launch_ab.py does, single runs of every
case alternate and each gets its CPU time (user + sys from wait4) and its
wall time. Cases per file: both revisions (their src/ from git archive, run
with `python -S`), lstopo, and `python -S -c pass`: the floor under any
Python CLI, which alone makes 3x of a few-ms lstopo out of reach.

Run: python benchmarks/xml_read_ab.py REV_BEFORE REV_AFTER X.xml... [--repeat 20] [--lstopo PATH]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from launch_ab import _one, _tree, summary  # noqa: E402  (one way to time a child: launch_ab's)


def _topo(tree: str, xml: str) -> list[str]:
    # -S keeps the editable install's import hook out; defusedxml still comes
    # from site-packages (added by hand: no .pth files are run)
    import site

    code = (f"import sys; sys.path.insert(0, {tree!r}); sys.path += {site.getsitepackages()!r}; "
            "from nodemap.cli import main; sys.argv[0] = 'nodemap'; sys.exit(main())")
    return [sys.executable, "-S", "-c", code, "topo", "--input", xml]


def _cases(trees: dict[str, str], xml: str, lstopo: str) -> list[tuple[str, list[str]]]:
    cases = [(f"nodemap {name}", _topo(tree, xml)) for name, tree in trees.items()]
    return cases + [("lstopo", [lstopo, "--input", xml, "--of", "console"]),
                    ("python -S -c pass", [sys.executable, "-S", "-c", "pass"])]


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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("xml", nargs="+")
    ap.add_argument("--repeat", type=int, default=20)
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
            cases = _cases(trees, xml, args.lstopo)
            for _, cmd in cases:  # warm-up: byte code, page cache
                _quiet(cmd, env)
            res: dict[str, list[tuple[float, float]]] = {name: [] for name, _ in cases}
            for _ in range(args.repeat):
                for name, cmd in cases:
                    res[name].append(_quiet(cmd, env))
            base = summary(res["lstopo"])[0]
            for name, xs in res.items():
                cpu_med, cpu_best, wall_med, wall_best = summary(xs)
                print(f"| {os.path.basename(xml)} | {name} | {cpu_med:.1f} | {cpu_best:.1f} | {wall_med:.1f} | "
                      f"{wall_best:.1f} | {cpu_med / base:.1f}x |")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
