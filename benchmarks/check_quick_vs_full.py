"""`nodemap check` quick against full on this node, over repeated runs.

  python3 benchmarks/check_quick_vs_full.py [--pairs K] [--gpu] [--out PREFIX]
  python3 benchmarks/check_quick_vs_full.py --from DIR        (analyse saved runs again)

Runs `nodemap check --level quick` and `--level full` as a user does
(`-o DIR --no-html -q`, then DIR/check.json), alternately K times (pair i
runs quick first when i is even, full first when odd, so a drift of the
machine's load falls on both levels). Without --gpu the GPUs are hidden
(CUDA_VISIBLE_DEVICES=""), so only the host part runs. For every figure
present at both levels it prints the median of the quick figures, the
median of the full ones, their ratio, a 95% bootstrap interval of that
ratio (quick and full runs resampled independently, 10,000 times), and
whether |ratio - 1| <= 3% is

  supported       the interval lies inside 0.97..1.03
  contradicted    the interval lies wholly outside it
  not shown       neither: the runs are too noisy or too few to say

One pair of single runs cannot show 3% where a figure's own run-to-run
spread is larger; the interval says how much the runs can show. Writes
PREFIX.json (every run's figures and wall time) and PREFIX.md (default
benchmarks/results/check_quick_vs_full_YYYYMMDD) after every run, so a
campaign cut short keeps its runs. On a 1-GPU device (a call of 600 s at
most; quick ~50 s and full ~65 s there):
  python3 benchmarks/check_quick_vs_full.py --gpu --pairs 4 --out $OUT/qvf
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Callable

from check_vs_peers import TARGET, figures, load

from nodemap.outfile import write

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LEVELS = ("quick", "full")
RESAMPLES = 10_000


def nodemap_command() -> list[str]:
    """The nodemap a user of this Python would run: beside the interpreter, else on PATH."""
    here = os.path.join(os.path.dirname(sys.executable), "nodemap")
    found = here if os.access(here, os.X_OK) else shutil.which("nodemap")
    return [found] if found else [sys.executable, "-m", "nodemap"]


def run_check(cmd: list[str], level: str, out: str, env: dict[str, str]) -> dict:
    """One `nodemap check`; its figures (key -> value, median) and wall time."""
    t0 = time.monotonic()
    p = subprocess.run(cmd + ["check", "--level", level, "-o", out, "--no-html", "-q"], env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.monotonic() - t0
    doc = load(os.path.join(out, "check.json"))
    if p.returncode not in (0, 1) or doc is None:  # 1: a figure failed its rule, still a measurement
        raise SystemExit(f"nodemap check --level {level} exited {p.returncode}: {p.stderr.strip()[-400:]}")
    figs = {k: {"value": f["value"], "median": f.get("median"), "unit": f["unit"], "label": f["label"]}
            for k, f in figures(doc).items()}
    if not doc["complete"]:  # said now and kept out of the comparison: its figures are a part of the suite
        print(f"nodemap check --level {level} ended incomplete (exit {p.returncode}); its stderr ends:\n"
              f"{p.stderr.strip()[-1500:]}", file=sys.stderr)
    return {"level": level, "wall_s": wall, "rc": p.returncode, "started": doc["started"],
            "complete": doc["complete"], "figures": figs, "load": os.getloadavg()[0], "stderr": p.stderr[-4000:]}


def campaign(pairs: int, gpu: bool, keep: str, runs: list[dict], saved: Callable[[], None]) -> None:
    """Adds each run to `runs` and calls `saved` after it, so a run cut
    short (a device call's time limit) keeps what it measured."""
    env = dict(os.environ)
    if not gpu:
        env["CUDA_VISIBLE_DEVICES"] = ""  # hides every GPU: the check skips the GPU kinds, as it says
    cmd = nodemap_command()
    for i in range(pairs):
        for level in LEVELS if i % 2 == 0 else LEVELS[::-1]:
            r = run_check(cmd, level, os.path.join(keep, f"{i}-{level}"), env)
            runs.append(dict(r, pair=i))
            saved()
            print(f"pair {i + 1}/{pairs} {level}: {r['wall_s']:.1f} s, load {r['load']:.2f}", file=sys.stderr)


def ratio_interval(quick: list[float], full: list[float], rng: random.Random) -> tuple[float, float]:
    """95% percentile bootstrap interval of median(quick) / median(full)."""
    med = statistics.median
    boot = sorted(med(rng.choices(quick, k=len(quick))) / med(rng.choices(full, k=len(full)))
                  for _ in range(RESAMPLES))
    return boot[int(0.025 * RESAMPLES)], boot[int(0.975 * RESAMPLES) - 1]


def verdict(lo: float, hi: float) -> str:
    if 1 - TARGET <= lo and hi <= 1 + TARGET:
        return "supported"
    if lo > 1 + TARGET or hi < 1 - TARGET:
        return "contradicted"
    return "not shown"


def spread(values: list[float]) -> float:
    """Run-to-run spread of one level: (max - min) / median."""
    return (max(values) - min(values)) / statistics.median(values) if len(values) > 1 else 0.0


def compare(runs: list[dict], seed: int = 1) -> list[dict]:
    rng = random.Random(seed)
    by = {lv: [r["figures"] for r in runs if r["level"] == lv and r.get("complete", True)] for lv in LEVELS}
    keys = sorted(set.intersection(*(set(f) for f in by["quick"] + by["full"]))) if all(by.values()) else []
    rows = []
    for key in keys:
        q, f = ([figs[key]["value"] for figs in by[lv]] for lv in LEVELS)
        lo, hi = ratio_interval(q, f, rng)
        one = len(q) < 2 or len(f) < 2  # a campaign cut short: one run of a level has no spread to judge by
        rows.append({"key": key, "unit": by["full"][0][key]["unit"], "quick": q, "full": f,
                     "median_quick": statistics.median(q), "median_full": statistics.median(f),
                     "ratio": statistics.median(q) / statistics.median(f), "low": lo, "high": hi,
                     "spread_quick": spread(q), "spread_full": spread(f),
                     "within_3pct": "not shown (one run)" if one else verdict(lo, hi)})
    return rows


def machine() -> dict:
    def git(*args: str) -> str:
        p = subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True)
        return p.stdout.strip() if p.returncode == 0 else ""

    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "")
    return {"host": platform.node(), "cpu": cpu, "cpus": os.cpu_count(), "python": platform.python_version(),
            "commit": git("rev-parse", "--short", "HEAD") + ("+changes" if git("status", "--porcelain", "src") else ""),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def markdown(doc: dict) -> str:
    m, rows, runs = doc["machine"], doc["figures"], doc["runs"]
    walls = {lv: [r["wall_s"] for r in runs if r["level"] == lv] for lv in LEVELS}
    loads = [r["load"] for r in runs]
    lines = [f"- machine: `{m['host']}`, {m['cpu']}, {m['cpus']} CPUs; {m['date']}; commit {m['commit']}",
             f"- command: `{doc['command']}`",
             *(["- left out, ended incomplete: " + ", ".join(f"pair {r['pair'] + 1} {r['level']} (exit {r['rc']})"
                                                           for r in runs if not r.get("complete", True))]
               if any(not r.get("complete", True) for r in runs) else []),
             f"- {len(walls['quick'])} quick and {len(walls['full'])} full runs, alternating; wall time per run: "
             + ", ".join(f"{lv} median {statistics.median(w):.1f} s ({min(w):.1f}-{max(w):.1f})"
                         for lv, w in walls.items() if w),
             f"- 1-minute load average after each run: {min(loads):.2f}-{max(loads):.2f} (median "
             f"{statistics.median(loads):.2f})" if loads else "- no runs", "",
             "| figure | unit | median quick | median full | quick/full | 95% interval | run spread quick, full | "
             "within 3% |", "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['key']} | {r['unit']} | {r['median_quick']:,.3g} | {r['median_full']:,.3g} | {r['ratio']:.3f} | "
              f"{r['low']:.3f}-{r['high']:.3f} | {100 * r['spread_quick']:.1f}%, {100 * r['spread_full']:.1f}% | "
              f"{r['within_3pct']} |" for r in rows]
    count = {v: [r["key"] for r in rows if r["within_3pct"].startswith(v)]
             for v in ("supported", "not shown", "contradicted")}
    lines += [""] + [f"- {v}: {len(k)} ({', '.join(k) or '-'})" for v, k in count.items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pairs", type=int, default=5, metavar="K", help="quick+full pairs to run (default 5)")
    p.add_argument("--gpu", action="store_true", help="keep the GPU kinds (default: GPUs hidden, host part only)")
    p.add_argument("--out", metavar="PREFIX", help="PREFIX.json and PREFIX.md (default "
                   "benchmarks/results/check_quick_vs_full_YYYYMMDD; with --from, the saved file's own)")
    p.add_argument("--keep", metavar="DIR", help="keep every run's check.json under DIR (default: a temporary folder)")
    p.add_argument("--from", dest="saved", metavar="JSON", help="compare the runs of a PREFIX.json again, run nothing")
    a = p.parse_args(argv)
    if a.pairs < 2 and not a.saved:
        p.error("--pairs: at least 2 (one pair gives no interval)")
    # --from without --out writes beside the saved runs, never over today's campaign
    prefix = a.out or (a.saved.removesuffix(".json") if a.saved else os.path.join(
        ROOT, "benchmarks", "results", "check_quick_vs_full_" + time.strftime("%Y%m%d", time.gmtime())))
    if a.saved:
        doc = load(a.saved) or p.error(f"--from {a.saved}: not a readable JSON file")
    else:
        keep = a.keep or tempfile.mkdtemp(prefix="nodemap-quick-vs-full-")
        os.makedirs(keep, exist_ok=True)
        doc = {"machine": machine(), "command": " ".join(["python3", "benchmarks/check_quick_vs_full.py"]
                                                         + (argv if argv is not None else sys.argv[1:])),
               "gpu": a.gpu, "runs": []}
        campaign(a.pairs, a.gpu, keep, doc["runs"], lambda: save(doc, prefix))
    print(save(doc, prefix))
    return 0


def save(doc: dict, prefix: str) -> str:
    """PREFIX.json and PREFIX.md of the runs so far; the markdown."""
    doc["figures"] = compare(doc["runs"])
    text = markdown(doc)
    # atomic: a device call's time limit can land mid-write, and these files are the campaign
    write(prefix + ".json", json.dumps(doc, indent=1) + "\n", "--out")
    write(prefix + ".md", text, "--out")
    return text


if __name__ == "__main__":
    sys.exit(main())
