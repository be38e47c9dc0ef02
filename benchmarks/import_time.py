#!/usr/bin/env python3
"""How long importing nodemap's core takes (target: <= 40 ms), and with
--cli how long its help and usage errors take beside `nodemap topo --help`.

Two measures, each in fresh interpreters:
  importtime  sum of `python -X importtime` self times of every module the
              import pulls in beyond a bare interpreter (what nodemap costs)
  wall        median wall time of `python -c "import ..."` minus the median
              of `python -c pass` (what a user waits for, startup removed)

--cli: `python -m nodemap ARGS` for `--help` of the top level, topo, check,
compare, bench and every bench kind, and a bad option of every kind (exit 2):
the median wall time of each (runs interleaved, so a load change falls on
all alike), its ratio to `topo --help` (target <= 1.25: a kind's help costs
about what topo's does), the modules it imports beyond `topo --help` and
whether msgspec, the topology model or NVML is among them.

usage: python benchmarks/import_time.py [--runs N] [--modules a,b,c] [--top K]
       python benchmarks/import_time.py --cli [--runs N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

DEFAULT = "nodemap,nodemap.topology.model,nodemap.cli"
TARGET_MS = 40.0
TARGET_CLI = 1.25  # a command's --help or usage error over `topo --help`
HEAVY = ("msgspec", "nodemap.topology.model", "nodemap.topology.nvml")  # what a help screen never needs

# Users run with bytecode caches; a PYTHONDONTWRITEBYTECODE environment
# would time the compiler instead. Caches go to a private prefix so the
# source tree stays clean.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
ENV["PYTHONPYCACHEPREFIX"] = tempfile.mkdtemp(prefix="nodemap-pycache-")


def wall_ms(code: str, runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True, env=ENV)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def importtime(code: str, check: bool = True) -> list[tuple[float, int, str]]:
    """(self ms, depth, module) per module imported, from -X importtime
    (`check`: the code must exit 0; a usage error exits 2)."""
    err = subprocess.run([sys.executable, "-X", "importtime", "-c", code],
                         capture_output=True, text=True, check=check, env=ENV).stderr
    rows = []
    for line in err.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, _cum, name = (x.strip() for x in line[len("import time:"):].split("|"))
        rows.append((int(self_us) / 1e3, len(name) - len(name.lstrip()), name.strip()))
    return rows


def cli_lines() -> list[tuple[str, ...]]:
    """The command lines --cli times: help screens and a usage error per bench kind."""
    from nodemap.bench.kinds import BENCHES

    lines = [("topo", "--help"), ("--help",), ("check", "--help"), ("compare", "--help"), ("bench", "--help")]
    lines += [("bench", kind, "--help") for kind in BENCHES]
    return lines + [("bench", kind, "--no-such-option") for kind in BENCHES]


def modules_of(words: tuple[str, ...]) -> set[str]:
    """The modules `nodemap WORDS` has imported when it exits (-X importtime
    misses those importlib.import_module loads, so sys.modules is asked)."""
    code = ("import sys\nfrom nodemap.cli import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
            "print(' '.join(sys.modules), file=sys.stderr)")
    r = subprocess.run([sys.executable, "-c", code, *words], capture_output=True, text=True, env=ENV)
    return set(r.stderr.splitlines()[-1].split())  # after the usage error, if any


def cli(runs: int) -> int:
    """Median wall ms of each command line, runs interleaved; ratio to `topo --help`."""
    lines = cli_lines()
    times: dict[tuple[str, ...], list[float]] = {w: [] for w in lines}
    for words in lines:  # write the bytecode caches first
        subprocess.run([sys.executable, "-m", "nodemap", *words], capture_output=True, env=ENV)
    load = os.getloadavg()[0]
    for _ in range(runs):
        for words in lines:
            t0 = time.perf_counter()
            r = subprocess.run([sys.executable, "-m", "nodemap", *words], capture_output=True, env=ENV)
            times[words].append((time.perf_counter() - t0) * 1e3)
            if r.returncode != (2 if words[-1] == "--no-such-option" else 0):
                raise SystemExit(f"nodemap {' '.join(words)}: exit {r.returncode}: {r.stderr.decode()[-300:]}")
    base = statistics.median(times[lines[0]])
    topo_modules = modules_of(lines[0])
    print(f"python {sys.version.split()[0]}  python -m nodemap ARGS, median of {runs} interleaved runs "
          f"(bytecode cached); load {load:.2f} -> {os.getloadavg()[0]:.2f}")
    print(f"{'nodemap ARGS':36} {'median ms':>9} {'x topo':>7} {'modules':>8}  heavy imported")
    worst = 0.0
    for words in lines:
        ms = statistics.median(times[words])
        extra = modules_of(words) - topo_modules
        heavy = [m for m in HEAVY if m in extra]
        worst = max(worst, ms / base)
        print(f"{' '.join(words):36} {ms:9.1f} {ms / base:7.2f} {'+' + str(len(extra)):>8}  {', '.join(heavy) or '-'}")
    slowest = max(lines, key=lambda w: statistics.median(times[w]))
    seen = {name for _, _, name in importtime_of(lines[0])}
    extra = sorted((r for r in importtime_of(slowest) if r[2] not in seen), reverse=True)
    print(f"beyond topo --help, `{' '.join(slowest)}` imports (-X importtime self ms, min of 5 runs; "
          "modules loaded by importlib.import_module are not listed):")
    for ms, _, name in extra[:8]:
        print(f"  {ms:7.2f} ms  {name}")
    print(f"target <= {TARGET_CLI:.2f}x topo --help: {'met' if worst <= TARGET_CLI else 'MISSED'} ({worst:.2f}x)")
    return 0 if worst <= TARGET_CLI else 1


def importtime_of(words: tuple[str, ...], runs: int = 5) -> list[tuple[float, int, str]]:
    """importtime() of `nodemap WORDS`, each module's least self time over `runs` runs."""
    best: dict[str, tuple[float, int]] = {}
    for _ in range(runs):
        for ms, depth, name in importtime(f"import sys\nfrom nodemap.cli import main\ntry:\n    main({list(words)!r})\n"
                                          "except SystemExit:\n    pass\n", check=False):
            best[name] = min(best.get(name, (ms, depth)), (ms, depth))
    return [(ms, depth, name) for name, (ms, depth) in best.items()]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--modules", default=DEFAULT)
    ap.add_argument("--top", type=int, default=8, help="show the K slowest modules")
    ap.add_argument("--cli", action="store_true", help="time help screens and usage errors against topo --help")
    args = ap.parse_args()
    if args.cli:
        return cli(args.runs)
    code = "import " + ", ".join(args.modules.split(","))
    for warm in ("pass", code):  # write the bytecode caches first
        subprocess.run([sys.executable, "-c", warm], check=True, env=ENV)

    base = {name for _, _, name in importtime("pass")}
    rows = [r for r in importtime(code) if r[2] not in base]
    total = sum(ms for ms, _, _ in rows)
    wall = wall_ms(code, args.runs) - wall_ms("pass", args.runs)

    print(f"python {sys.version.split()[0]}  {code}  (bytecode cached)")
    print(f"importtime: {total:.1f} ms over {len(rows)} modules beyond a bare interpreter")
    print(f"wall:       {wall:.1f} ms (median of {args.runs}, interpreter startup subtracted)")
    for ms, _, name in sorted(rows, reverse=True)[: args.top]:
        print(f"  {ms:7.2f} ms  {name}")
    worst = max(total, wall)
    print(f"target <= {TARGET_MS:.0f} ms: {'met' if worst <= TARGET_MS else 'MISSED'} ({worst:.1f} ms)")
    return 0 if worst <= TARGET_MS else 1


if __name__ == "__main__":
    sys.exit(main())
