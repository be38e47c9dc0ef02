#!/usr/bin/env bash
# nodemap STREAM (copy, triad; plain and non-temporal stores) against
# likwid-bench: same CPUs, same array size, one kernel per process for both
# tools, N rounds interleaved (each round runs nodemap and every matching
# likwid kernel once). Prints medians, bests and the ratio.
#
#   benchmarks/stream_vs_likwid.sh [THREADS] [BYTES_PER_ARRAY] [N]
#   e.g. benchmarks/stream_vs_likwid.sh 2 256M 7
#
# Threads go on the first THREADS hardware threads of likwid's node domain
# (N), chunk-wise first touch (-W), and nodemap gets the same CPUs (--cpus).
#
# Installs Debian's likwid when likwid-bench is missing (needs root/apt).
# likwid-bench reports one figure per run: bytes of all its iterations over
# their total time. nodemap's comparable figure is the same (bytes * reps /
# sum of rep times). likwid's "best matching kernel" is the variant (scalar,
# SSE, AVX, FMA...) with the highest median over the rounds; the ratio is
# nodemap's median over that kernel's median, so each side has N samples
# (a max over all variants would give likwid 4-7 times as many draws).
# Bests of N are printed beside it, and the instruction set nodemap's
# kernels used (NODEMAP_STREAM_ISA forces one). JSON_OUT=file.json keeps every sample.
set -euo pipefail
THREADS=${1:-$(nproc)}
SIZE=${2:-512M}
N=${3:-5}
HERE=$(cd "$(dirname "$0")/.." && pwd)
NODEMAP=${NODEMAP:-$HERE/.venv/bin/nodemap}
PY=${PYTHON:-$HERE/.venv/bin/python}

if ! command -v likwid-bench >/dev/null; then
  echo "installing likwid (apt-get)..." >&2
  apt-get update -qq >/dev/null && apt-get install -y -qq likwid >/dev/null
fi

export THREADS SIZE N NODEMAP JSON_OUT=${JSON_OUT:-}
exec "$PY" - <<'PYEOF'
import json, os, re, statistics, subprocess, sys

nthreads, size, n, nodemap = int(os.environ["THREADS"]), os.environ["SIZE"], int(os.environ["N"]), os.environ["NODEMAP"]
sys.path.insert(0, os.path.join(os.path.dirname(nodemap), "..", "src"))
from nodemap.bench.host_memory import parse_size

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
    args = [nodemap, "bench", "memory", "--cpus", cpus, "--size", str(per_array), "--repeats", str(ITERS),
            "--kernels", kernel, "--json"] + (["--nt-stores"] if nt else [])
    (r,) = json.loads(subprocess.run(args, capture_output=True, text=True, check=True).stdout)["results"]
    isas.add(r["params"]["isa"])
    secs = [r["bytes"] / (v * 1e9) for v in r["samples"]]
    return r["bytes"] * len(secs) / sum(secs) / 1e9


samples, isas = {}, set()  # (tool kernel, family) -> GB/s per round
for rep in range(n):
    for fam, kernels in FAMILIES.items():
        samples.setdefault(("nodemap", fam), []).append(ours(*fam))
        for lk in kernels:
            if lk in available and (g := likwid(lk, ARRAYS[fam[0]])):
                samples.setdefault((lk, fam), []).append(g)
    print(f"round {rep + 1}/{n} done", file=sys.stderr)

med = statistics.median
print(f"CPUs {cpus} ({nthreads} threads), {per_array / 2**20:.0f} MiB per array, {ITERS} iterations per run, {n} rounds; "
      f"GB/s = 1e9 B/s; nodemap kernels: {', '.join(sorted(isas))}")
print(f"{'kernel':6} {'stores':6} {'nodemap median':>14} {'best':>6} {'likwid kernel':18} {'median':>7} {'best':>6} "
      f"{'ratio of medians':>16} {'of bests':>8}")
table = []
for fam in FAMILIES:
    mine = samples.get(("nodemap", fam))
    theirs = [(med(v), lk, v) for (lk, f), v in samples.items() if lk != "nodemap" and f == fam and len(v) == n]
    if not mine or not theirs:
        continue
    m, lk, v = max(theirs)
    k, nt = fam
    row = dict(kernel=k, stores="NT" if nt else "plain", nodemap=mine, likwid_kernel=lk, likwid=v,
               ratio_median=med(mine) / m, ratio_best=max(mine) / max(v))
    table.append(row)
    print(f"{k:6} {row['stores']:6} {med(mine):14.2f} {max(mine):6.2f} {lk:18} {m:7.2f} {max(v):6.2f} "
          f"{row['ratio_median']:15.2f}x {row['ratio_best']:7.2f}x")
print("likwid medians: " + ", ".join(f"{lk} {med(v):.2f}" for (lk, f), v in sorted(samples.items()) if lk != "nodemap"))
if os.environ.get("JSON_OUT"):
    with open(os.environ["JSON_OUT"], "w") as f:
        json.dump(dict(cpus=cpus, bytes_per_array=per_array, rounds=n, iterations=ITERS, isa=sorted(isas), rows=table,
                       samples={f"{lk} {k} {'NT' if nt else 'plain'}": v for (lk, (k, nt)), v in samples.items()}), f, indent=1)
PYEOF
