#!/usr/bin/env bash
# Experiment: does the page size nodemap's STREAM arrays get change its
# bandwidth against likwid-bench (which takes 4 KiB pages from malloc)?
# Rounds of: nodemap triad/copy with transparent huge pages (its default,
# madvise), nodemap with THP refused for the process (prctl
# PR_SET_THP_DISABLE, inherited through exec), likwid-bench stream/copy.
#   [LK_TRIAD=stream_avx512] [LK_COPY=copy_avx512] benchmarks/experiments/thp_ab.sh THREADS MIB_PER_ARRAY ROUNDS
set -euo pipefail
T=${1:-2}; MIB=${2:-256}; R=${3:-5}
NODEMAP=${NODEMAP:-$(dirname "$0")/../../.venv/bin/nodemap}
PY=${PYTHON:-python3}
cpus=$(seq -s, 0 $((T - 1)))
nothp() { "$PY" -c 'import ctypes, os, sys
assert ctypes.CDLL(None).prctl(41, 1, 0, 0, 0) == 0  # PR_SET_THP_DISABLE
os.execvp(sys.argv[1], sys.argv[1:])' "$@"; }
ours() { "$@" bench memory --cpus "$cpus" --size "${MIB}MiB" --repeats 20 --kernels "$K" --json |
  "$PY" -c 'import json, sys; (r,) = json.load(sys.stdin)["results"]; s = r["samples"]; print(f"{len(s) / sum(1 / x for x in s):.2f}")'; }
for r in $(seq "$R"); do
  for K in triad copy; do
    arrays=$([ $K = triad ] && echo 3 || echo 2); lk=$([ $K = triad ] && echo "${LK_TRIAD:-stream_avx}" || echo "${LK_COPY:-copy_avx}")
    a=$(ours "$NODEMAP"); b=$(ours nothp "$NODEMAP")
    c=$(likwid-bench -t $lk -W N:$((MIB * 1048576 * arrays / 1000))kB:$T:1:1 -i 20 2>/dev/null | awk '/MByte\/s/ {printf "%.2f", $2 / 1000}')
    echo "round $r $K: nodemap THP $a  nodemap 4K $b  likwid $lk $c GB/s"
  done
done
