#!/usr/bin/env bash
# nodemap STREAM (copy, triad; plain and non-temporal stores) against
# likwid-bench: same CPUs, same array size, 20 iterations, one kernel per
# process for both tools. Prints medians, bests and the ratio.
#
#   [CAL=3] [JSON_OUT=f.json] benchmarks/stream_vs_likwid.sh [THREADS] [BYTES_PER_ARRAY] [N]
#   e.g. benchmarks/stream_vs_likwid.sh 2 256M 9
#
# Threads go on the first THREADS hardware threads of likwid's node domain
# (N), chunk-wise first touch (-W), and nodemap gets the same CPUs (--cpus).
# Installs Debian's likwid when likwid-bench is missing (needs root/apt);
# elsewhere put a likwid-bench (and likwid-accessD) on PATH.
#
# Two phases. Calibration: CAL rounds of every likwid variant matching a
# nodemap kernel (scalar, SSE, AVX, FMA, AVX-512; same loads and stores);
# the one with the highest median is likwid's best matching kernel. Then N
# rounds, each running nodemap and that kernel back to back (order
# alternating), on fresh samples: choosing the luckiest of 4-7 variants
# from the same samples would inflate likwid's figure on a noisy machine.
# likwid-bench times its 20 iterations as one (threads meet at a barrier
# before and after, not between iterations); nodemap runs the same with
# `--repeats 1 --batch 20` (after one untimed warm-up batch).
# The ratio is of medians; the paired ratios (nodemap over likwid in the
# same round) and bests are printed beside it, with the instruction set
# nodemap's kernels used (NODEMAP_STREAM_ISA forces one).
set -euo pipefail
THREADS=${1:-$(nproc)}
SIZE=${2:-512M}
N=${3:-5}
HERE=$(cd "$(dirname "$0")/.." && pwd)
NODEMAP=${NODEMAP:-$HERE/.venv/bin/nodemap}
PY=${PYTHON:-$HERE/.venv/bin/python}

. "$HERE/benchmarks/lib/campaign.sh"
need_tool likwid-bench likwid

export THREADS SIZE N NODEMAP JSON_OUT=${JSON_OUT:-} CAL=${CAL:-3}
exec "$PY" - <<'PYEOF'
import json, os, re, statistics, subprocess, sys

nthreads, size, n, nodemap = int(os.environ["THREADS"]), os.environ["SIZE"], int(os.environ["N"]), os.environ["NODEMAP"]
cal_rounds = int(os.environ["CAL"])
sys.path.insert(0, os.path.join(os.path.dirname(nodemap), "..", "src"))
from nodemap.units import parse_size

domains = subprocess.run(["likwid-bench", "-p"], capture_output=True, text=True).stdout
node_cpus = [int(c) for c in re.search(r"Tag N:([0-9 ]+)", domains).group(1).split()]
cpus = ",".join(str(c) for c in node_cpus[:nthreads])
per_array = parse_size(size)
available = set(re.findall(r"^(\S+) - ", subprocess.run(["likwid-bench", "-a"], capture_output=True, text=True).stdout, re.M))
FAMILIES = {  # nodemap kernel, NT stores -> likwid kernels with the same loads/stores
    ("copy", False): ["copy", "copy_sse", "copy_avx", "copy_avx512"],
    ("triad", False): ["stream", "stream_sse", "stream_sse_fma", "stream_avx", "stream_avx_fma", "stream_avx512", "stream_avx512_fma"],
    ("copy", True): ["copy_mem", "copy_mem_sse", "copy_mem_avx", "copy_mem_avx512"],
    ("triad", True): ["stream_mem", "stream_mem_sse", "stream_mem_sse_fma", "stream_mem_avx", "stream_mem_avx_fma", "stream_mem_avx512"],
}
ARRAYS = {"copy": 2, "triad": 3}
ITERS = 20


def likwid(kernel, arrays):
    # likwid sizes are the whole working set in decimal units (kB = 1000 B)
    total_kb = per_array * arrays // 1000
    out = subprocess.run(["likwid-bench", "-t", kernel, "-W", f"N:{total_kb}kB:{nthreads}:1:1", "-i", str(ITERS)],
                         capture_output=True, text=True)
    m = re.search(r"MByte/s:\s+([0-9.]+)", out.stdout)
    return float(m.group(1)) / 1000 if m else None


def ours(kernel, nt):
    # one sample of ITERS repetitions back to back (--batch): likwid-bench's timing
    args = [nodemap, "bench", "memory", "--cpus", cpus, "--size", str(per_array), "--repeats", "1",
            "--batch", str(ITERS), "--kernels", kernel, "--json"] + (["--nt-stores"] if nt else [])
    (r,) = json.loads(subprocess.run(args, capture_output=True, text=True, check=True).stdout)["results"]
    isas.add(r["params"]["isa"])
    return r["samples"][0]


isas = set()
# Phase 1, calibration: every matching likwid variant CAL times; the one
# with the highest median is likwid's best matching kernel. Phase 2 uses
# fresh samples, so picking the luckiest of 4-7 variants does not inflate
# the figure nodemap is held against (the same traffic varies by 15-30%
# between runs on a shared VM).
cal = {}
for rep in range(cal_rounds):
    for fam, kernels in FAMILIES.items():
        for lk in kernels:
            if lk in available and (g := likwid(lk, ARRAYS[fam[0]])):
                cal.setdefault(fam, {}).setdefault(lk, []).append(g)
    print(f"calibration round {rep + 1}/{cal_rounds} done", file=sys.stderr)
med = statistics.median
chosen = {fam: max(v, key=lambda lk: med(v[lk])) for fam, v in cal.items()}
# Phase 2: N rounds, each runs nodemap then the chosen likwid kernel (the
# order alternates between rounds) for every family.
samples = {fam: ([], []) for fam in chosen}
for rep in range(n):
    for fam, lk in chosen.items():
        runs = [lambda: ours(*fam), lambda: likwid(lk, ARRAYS[fam[0]])]
        order = (0, 1) if rep % 2 == 0 else (1, 0)
        got = {i: runs[i]() for i in order}
        if got[1]:
            samples[fam][0].append(got[0])
            samples[fam][1].append(got[1])
    print(f"round {rep + 1}/{n} done", file=sys.stderr)

print(f"CPUs {cpus} ({nthreads} threads), {per_array / 2**20:.0f} MiB per array, {ITERS} iterations per run; "
      f"likwid kernel chosen on {cal_rounds} calibration rounds, then {n} interleaved rounds; GB/s = 1e9 B/s; "
      f"nodemap kernels: {', '.join(sorted(isas))}")
print(f"{'kernel':6} {'stores':6} {'likwid kernel':18} {'nodemap median':>14} {'likwid median':>13} {'ratio':>6} "
      f"{'paired ratios (min/median/max)':>30} {'nodemap best':>12} {'likwid best':>11}")
table = []
for fam, lk in chosen.items():
    mine, theirs = samples[fam]
    if not mine:
        continue
    pairs = sorted(a / b for a, b in zip(mine, theirs))
    k, nt = fam
    row = dict(kernel=k, stores="NT" if nt else "plain", likwid_kernel=lk, nodemap=mine, likwid=theirs,
               ratio=med(mine) / med(theirs), paired=pairs)
    table.append(row)
    print(f"{k:6} {row['stores']:6} {lk:18} {med(mine):14.2f} {med(theirs):13.2f} {row['ratio']:5.2f}x "
          f"{pairs[0]:18.2f} / {med(pairs):.2f} / {pairs[-1]:.2f} {max(mine):12.2f} {max(theirs):11.2f}")
print("calibration medians: " + "; ".join(f"{lk} {med(v):.2f}" for fam in cal for lk, v in sorted(cal[fam].items())))
if os.environ.get("JSON_OUT"):
    with open(os.environ["JSON_OUT"], "w") as f:
        json.dump(dict(cpus=cpus, bytes_per_array=per_array, rounds=n, calibration_rounds=cal_rounds, iterations=ITERS,
                       isa=sorted(isas), rows=table,
                       calibration={f"{k} {'NT' if nt else 'plain'}": v for (k, nt), v in cal.items()}), f, indent=1)
PYEOF
