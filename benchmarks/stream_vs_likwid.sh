#!/usr/bin/env bash
# nodemap STREAM (copy, triad) against likwid-bench, same CPUs, same array
# size, interleaved runs, best of N each. Prints both and the ratio.
#
#   benchmarks/stream_vs_likwid.sh [THREADS] [BYTES_PER_ARRAY] [N]
#   e.g. benchmarks/stream_vs_likwid.sh 2 512M 5
#
# Threads go on the first THREADS hardware threads of likwid's node domain
# (N), chunk-wise first touch (-W), and nodemap gets the same CPUs (--cpus).
#
# Installs Debian's likwid when likwid-bench is missing (needs root/apt).
# likwid-bench reports one figure per run: bytes of all its iterations over
# their total time. nodemap's comparable figure is the same (bytes * reps /
# sum of rep times); its best single repetition is printed beside it, and
# the instruction set its kernels used (NODEMAP_STREAM_ISA forces one).
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

export THREADS SIZE N NODEMAP
exec "$PY" - <<'PYEOF'
import json, os, re, subprocess, sys

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


def likwid(kernel, arrays):
    # likwid sizes are the whole working set in decimal units (kB = 1000 B)
    total_kb = per_array * arrays // 1000
    out = subprocess.run(["likwid-bench", "-t", kernel, "-W", f"N:{total_kb}kB:{nthreads}:1:1", "-i", "20"],
                         capture_output=True, text=True)
    m = re.search(r"MByte/s:\s+([0-9.]+)", out.stdout)
    return float(m.group(1)) / 1000 if m else None


def ours(nt):
    args = [nodemap, "bench", "memory", "--cpus", cpus, "--size", str(per_array), "--repeats", "20",
            "--kernels", "copy,triad", "--json"] + (["--nt-stores"] if nt else [])
    d = json.loads(subprocess.run(args, capture_output=True, text=True, check=True).stdout)
    out = {}
    for r in d["results"]:
        isas.add(r["params"]["isa"])
        secs = [r["bytes"] / (v * 1e9) for v in r["samples"]]
        out[r["metric"]] = (r["bytes"] * len(secs) / sum(secs) / 1e9, r["stats"]["best"])
    return out


best, isas = {}, set()
for rep in range(n):
    for nt in (False, True):
        for k, v in ours(nt).items():
            prev = best.get(("nodemap", k, nt), (0, 0))
            best[("nodemap", k, nt)] = (max(prev[0], v[0]), max(prev[1], v[1]))
        for (k, fnt), kernels in FAMILIES.items():
            if fnt != nt:
                continue
            for lk in kernels:
                if lk in available:
                    g = likwid(lk, ARRAYS[k])
                    if g:
                        best[(lk, k, nt)] = max(best.get((lk, k, nt), 0), g)
    print(f"round {rep + 1}/{n} done", file=sys.stderr)

print(f"CPUs {cpus} ({nthreads} threads), {per_array / 2**20:.0f} MiB per array, best of {n} runs; GB/s = 1e9 B/s; "
      f"nodemap kernels: {', '.join(sorted(isas))}")
print(f"{'kernel':6} {'stores':9} {'nodemap run':>11} {'(best rep)':>10} {'likwid best':>11} {'likwid kernel':18} {'ratio':>6}")
for (k, nt) in FAMILIES:
    mine = best.get(("nodemap", k, nt))
    theirs = [(g, lk) for (lk, kk, knt), g in best.items() if lk != "nodemap" and kk == k and knt == nt]
    if not mine or not theirs:
        continue
    g, lk = max(theirs)
    print(f"{k:6} {'NT' if nt else 'plain':9} {mine[0]:11.2f} {mine[1]:10.2f} {g:11.2f} {lk:18} {mine[0] / g:5.2f}x")
print("all likwid kernels: " + ", ".join(f"{lk} {g:.2f}" for (lk, k, nt), g in sorted(best.items()) if lk != "nodemap"))
PYEOF
