"""A bench kind at an earlier revision against this tree: the same figures?

  python3 benchmarks/same_figures.py --base REV [--rounds N] [--out FILE] -- KIND [ARGS...]

For refactors that must not change what a kind measures (issue 31's kinds
on one driver): exports REV's src/ to a temporary folder and runs
`nodemap bench KIND ARGS --json -q` from it and from this tree, N rounds
(default 3), the base first in even rounds and second in odd ones, so
neither the machine's drift nor running first favours a side. Two
answers:

  definitions  every result document is the same apart from its timings
               (metric, unit, params, bytes, counting, path, peak,
               verification, notes), compared round by round: exit 1 if not
  figures      per result, the median over the rounds of each side's best,
               and their ratio (the machine's noise; a shared VM moves
               several-fold)

Both sides load this tree's native library (NODEMAP_NATIVE_LIB): if native/
differs between REV and here, the script says so, and the figures compare
the Python around one set of kernels. Both sides run alike, `python -S`
with PYTHONPATH=SIDE/src:site-packages (REV's src, or this tree's), so an
editable install of this tree does not shadow the old side and neither side
starts differently: with the old side alone under -S, one GPU's ring (a
Python loop of ~20 us steps) read 0.79-0.87x for a tree against itself's
0.95-1.03x (results/same_figures_20261202c). On a device (GPU kinds):
  python3 benchmarks/same_figures.py --base fffed39~1 -- gpu --kernels triad --repeats 10
Kinds of several ranks run under a launcher (--launch, split on spaces;
it must pass the environment on, as MPICH's and Open MPI's -x do):
  python3 benchmarks/same_figures.py --base f650703 --launch "mpiexec -n 2" -- mpi --sizes 1K,1M
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TIMINGS = ("stats", "samples", "efficiency")
# params derived from the timings (or from a float sum whose order the GPU picks: jacobi's norm), and a
# choice made by timing (bench gpu's fastest block): they move with the clock, not with the definition
TIMING_PARAMS = ("write_allocate_best_gbps", "algbw_best", "algbw_median", "time_us_best", "t_comm_us", "t_comp_us",
                 "t_both_us", "overlap", "compute_reps", "us_per_step", "cells_per_s", "efficiency",
                 "weak_efficiency", "comm_share", "t_compute_us", "overlap_hidden", "norm", "block")
TIMING_NOTES = ("caution: spread", "overlap efficiency ")


def export(rev: str, into: Path) -> Path:
    """REV's src/ under `into`; a folder REV holding src/ is that src/ (on a
    device machine, whose copy of the tree has no usable git history: export
    it here with `git archive REV src | tar -x -C DIR` and carry DIR)."""
    if (Path(rev) / "src").is_dir():
        return Path(rev).resolve() / "src"
    tar = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "src"], capture_output=True, check=True).stdout
    with tarfile.open(fileobj=BytesIO(tar)) as t:
        t.extractall(into, filter="data") if sys.version_info >= (3, 12) else t.extractall(into)
    return into / "src"


def dependency_paths() -> list[str]:
    """PYTHONPATH entries that hold no nodemap (a device machine's wheels of
    msgspec and the like, installed with --target): the old side needs its
    dependencies, never a second nodemap."""
    return [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and not (Path(p) / "nodemap").exists()]


def native_lib() -> str:
    from nodemap import native

    found = [p for p in native._candidates() if p and os.path.exists(p)]
    if not found:
        raise SystemExit("same_figures: this tree's native library is not built (make dev)")
    return found[0]


def side_of(launch: list[str], cmd: list[str], src: Path, lib: str) -> tuple[list[str], dict[str, str]]:
    """One side's command and environment: its src first on the path, the
    dependencies after it, no site (no editable finder, no .pth), the one
    native library."""
    path = os.pathsep.join([str(src), sysconfig.get_paths()["purelib"], *dependency_paths()])
    return [*launch, sys.executable, "-S", "-m", *cmd], dict(os.environ, PYTHONPATH=path, NODEMAP_NATIVE_LIB=lib)


def run(cmd: list[str], env: dict[str, str]) -> dict:
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode not in (0,):
        raise SystemExit(f"same_figures: {' '.join(cmd[-6:])} exited {p.returncode}: {p.stderr.strip()[-400:]}")
    return json.loads(p.stdout)


def definition(doc: dict) -> list[dict]:
    """The results without their timings: what was measured and how."""
    out = []
    for r in doc["results"]:
        r = {k: v for k, v in r.items() if k not in TIMINGS}
        r["params"] = {k: v for k, v in r.get("params", {}).items() if k not in TIMING_PARAMS}
        r["notes"] = [n for n in r.get("notes", []) if not n.startswith(TIMING_NOTES)]
        out.append(r)
    return out


def key(r: dict) -> str:
    p = r.get("params", {})
    where = [str(p[k]) for k in ("thread_order", "working_set", "cpu_node", "mem_node", "size", "dtype", "src", "dst")
             if k in p]
    return " ".join([r["metric"], *where, r.get("path", "")]).strip()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", required=True, help="the earlier revision (git rev), or a folder holding its src/")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", help="write the runs and the table as JSON here")
    ap.add_argument("--launch", default="", help="run both sides under this launcher, e.g. 'mpiexec -n 2'")
    ap.add_argument("bench", nargs=argparse.REMAINDER, help="-- KIND [ARGS...]")
    a = ap.parse_args(argv)
    bench = [x for x in a.bench if x != "--"] if a.bench[:1] == ["--"] else a.bench
    if not bench:
        ap.error("give the bench command after --, e.g. -- latency --max-size 64M")
    lib = native_lib()
    if not Path(a.base).is_dir() and subprocess.run(
            ["git", "-C", str(ROOT), "diff", "--quiet", a.base, "--", "native"]).returncode:
        print(f"note: native/ differs between {a.base} and this tree; both sides run this tree's kernels")
    cmd = ["nodemap", "bench", *bench, "--json", "-q"]
    with tempfile.TemporaryDirectory(prefix="same_figures.") as tmp:
        launch = a.launch.split()
        sides = {"base": side_of(launch, cmd, export(a.base, Path(tmp)), lib),
                 "this": side_of(launch, cmd, ROOT / "src", lib)}
        docs: dict[str, list[dict]] = {"base": [], "this": []}
        for i in range(a.rounds):
            for side in ("base", "this") if i % 2 == 0 else ("this", "base"):  # neither side always runs first
                docs[side].append(run(*sides[side]))
    same = all(definition(b) == definition(t) for b, t in zip(docs["base"], docs["this"]))
    print(f"definitions: {'the same apart from the timings' if same else 'DIFFERENT'} "
          f"({a.rounds} rounds, {len(docs['this'][0]['results'])} results each)")
    if not same:
        b, t = definition(docs["base"][0]), definition(docs["this"][0])
        for x, y in zip(b, t):
            for k in sorted(set(x) | set(y)):
                if x.get(k) != y.get(k):
                    print(f"  {key(x)}: {k}: {x.get(k)!r} -> {y.get(k)!r}")
    rows = []
    for i, r in enumerate(docs["this"][0]["results"]):
        med = {side: statistics.median(d["results"][i]["stats"]["best"] for d in docs[side]
                                       if i < len(d["results"])) for side in docs}
        rows.append({"result": key(r), "unit": r["unit"], "base": med["base"], "this": med["this"],
                     "ratio": med["this"] / med["base"] if med["base"] else None})
        print(f"  {key(r)[:60]:60s} {med['base']:10.4g} -> {med['this']:10.4g} {r['unit']:5s}"
              f" ({rows[-1]['ratio']:.3f}x)")
    if a.out:
        Path(a.out).write_text(json.dumps({"base": a.base, "launch": a.launch, "bench": bench,
                                           "same_definitions": same, "figures": rows, "runs": docs}, indent=1) + "\n")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
