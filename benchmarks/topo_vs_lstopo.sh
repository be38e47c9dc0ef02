#!/usr/bin/env bash
# Wall and CPU time of `nodemap topo` against `lstopo-no-graphics --of
# console` on this machine, same output kind (a console tree), runs
# interleaved: round after round, each case once per round, so that a load
# that comes and goes weighs on every case alike. Targets (issue 37): live
# nodemap <= 3x lstopo, --input X.xml <= 5x lstopo -i, a sysfs tarball <= 2x
# the same tree unpacked. Installs Debian's hwloc when lstopo is missing.
#
# usage: benchmarks/topo_vs_lstopo.sh [N]
#   env: NODEMAP=path/to/nodemap, NODEMAP_ARGS="--input node.json" (times
#   rendering a saved node instead of discovering this one; say so if used),
#   SNAPSHOT=fixture.tar.bz2 (an hwloc sysfs snapshot: nodemap reads the
#   tarball and the tree unpacked from it, lstopo the tree, so a big node is
#   timed on a small VM),
#   XML=node.xml (an hwloc XML export: both tools read it with --input; a
#   launch reads it once per node, in the rank that plans), LSTOPO=path (another
#   lstopo-no-graphics, e.g. an hwloc 3.0 build for v3 XML, which Debian's
#   2.9 cannot read), QUIET=LOAD (first wait, up to WAIT seconds, default
#   600, until the 1-minute load average is at most LOAD; figures taken
#   above it are marked so)
# Prints a Markdown block for benchmarks/results/topo_vs_lstopo_YYYYMMDD.md.
set -euo pipefail

N=${1:-${N:-20}}
read -r -a extra <<< "${NODEMAP_ARGS:-}"
lsextra=() lslabel="" target=3 what="live"
tarball=() tarlabel=""
if [ -n "${SNAPSHOT:-}" ]; then
  snapdir=$(mktemp -d -t nodemap-snap-XXXXXX)
  trap 'rm -rf "$snapdir"' EXIT
  tar -xjf "$SNAPSHOT" -C "$snapdir"
  root="$snapdir/$(ls "$snapdir" | head -1)"
  extra+=(--input "$root"); lsextra=(--input "$root")
  tarball=(--input "$SNAPSHOT"); tarlabel="--input $(basename "$SNAPSHOT")"
  NODEMAP_ARGS="--input $(basename "$SNAPSHOT" .tar.bz2)/"; lslabel=" $NODEMAP_ARGS" what="snapshot" target=""  # its target is against the tree: below
fi
if [ -n "${XML:-}" ]; then
  extra+=(--input "$XML"); lsextra=(--input "$XML")
  NODEMAP_ARGS="--input $(basename "$XML")"; lslabel=" $NODEMAP_ARGS" target=5 what="XML"
fi
here=$(cd "$(dirname "$0")/.." && pwd)
NODEMAP=${NODEMAP:-$( [ -x "$here/.venv/bin/nodemap" ] && echo "$here/.venv/bin/nodemap" || command -v nodemap || true)}
[ -n "$NODEMAP" ] || { echo "nodemap not found: pip install -e . (or set NODEMAP=)" >&2; exit 2; }

LSTOPO=${LSTOPO:-lstopo-no-graphics}
. "$here/benchmarks/lib/campaign.sh"
need_tool "$LSTOPO" hwloc

# Time what users run: with bytecode caches (a PYTHONDONTWRITEBYTECODE
# environment would time the compiler), kept out of the source tree.
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX=${PYTHONPYCACHEPREFIX:-$(mktemp -d -t nodemap-pycache-XXXXXX)}

# Both must work before being timed: a failing command is fast, not good.
"$NODEMAP" topo "${extra[@]}" >/dev/null
[ ${#tarball[@]} = 0 ] || "$NODEMAP" topo "${tarball[@]}" >/dev/null
"$LSTOPO" "${lsextra[@]}" --of console >/dev/null

# The floor under any Python CLI: the interpreter nodemap runs on, doing nothing.
py=$(head -1 "$NODEMAP" | sed -n 's/^#!//p'); py=${py:-python3}
# `#!/usr/bin/env python3` or pip's `#!/bin/sh` wrapper is no interpreter to time: then python3 on PATH
"$py" -c pass 2>/dev/null || py=python3
"$py" -c pass || { echo "topo_vs_lstopo.sh: no Python interpreter to time ($py)" >&2; exit 2; }

load() { cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo "?"; }
if [ -n "${QUIET:-}" ]; then  # wait for a quiet moment: on a shared machine other jobs move every figure
  waited=0
  until awk -v q="$QUIET" '{exit !($1 <= q)}' /proc/loadavg || [ "$waited" -ge "${WAIT:-600}" ]; do
    sleep 5; waited=$((waited + 5))
  done
fi
load0=$(load)

# One warm-up run each, then N rounds, each case once per round: median and
# least wall and CPU (user + system, from wait4) ms per case, tab-separated.
cases=("nodemap	$(printf '%q ' "$NODEMAP" topo "${extra[@]}")"
       "lstopo	$(printf '%q ' "$LSTOPO" "${lsextra[@]}" --of console)"
       "python	$(printf '%q ' "$py" -c pass)")
[ ${#tarball[@]} = 0 ] || cases+=("tarball	$(printf '%q ' "$NODEMAP" topo "${tarball[@]}")")
times=$(printf '%s\n' "${cases[@]}" | python3 -c '
import os, shlex, statistics, subprocess, sys, time
n = int(sys.argv[1])
cases = [line.rstrip("\n").split("\t", 1) for line in sys.stdin if line.strip()]
runs = {name: ([], []) for name, _ in cases}
def one(argv):
    t = time.perf_counter()
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, use = os.wait4(p.pid, 0)
    return (time.perf_counter() - t) * 1e3, (use.ru_utime + use.ru_stime) * 1e3
for r in range(n + 1):
    for name, cmd in cases:
        wall, cpu = one(shlex.split(cmd))
        if r:  # round 0 warms up
            runs[name][0].append(wall)
            runs[name][1].append(cpu)
for name, (wall, cpu) in runs.items():
    print(name, *(f"{f(v):.1f}" for v in (wall, cpu) for f in (statistics.median, min)), sep="\t")
' "$N")
field() { awk -F'\t' -v n="$1" -v c="$2" '$1 == n {print $c}' <<< "$times"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", (b > 0) ? a / b : 0}'; }
verdict() { awk -v r="$1" -v t="$2" 'BEGIN {print (r <= t) ? "met" : "MISSED"}'; }
load1=$(load)
quiet=$(awk -v a="${load0%% *}" -v b="${load1%% *}" 'BEGIN {print (a <= 1 && b <= 1) ? "" : " (above 1: every figure inflated, the ratios less so)"}')
cpu=$(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo 2>/dev/null || uname -m)
nm=$(field nodemap 2) ls=$(field lstopo 2)
r=$(ratio "$nm" "$ls") rc=$(ratio "$(field nodemap 4)" "$(field lstopo 4)")

cat <<EOF
## $(date -u +%Y-%m-%d) on $(hostname): $what

- machine: ${cpu:-unknown}, $(nproc) CPUs visible, $(uname -sr); load $load0 before, $load1 after$quiet
- nodemap: $("$NODEMAP" --version) ($(python3 --version 2>&1), source: $("$NODEMAP" topo "${extra[@]}" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["source"])')), commit $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo "?")
- lstopo: $("$LSTOPO" --version)
- method: $N interleaved rounds after a warm-up, each case once per round (wall, and CPU = user + system from wait4), output to /dev/null

| command | wall median ms | wall least | CPU median ms | CPU least |
|---|---|---|---|---|
| \`nodemap topo${NODEMAP_ARGS:+ $NODEMAP_ARGS}\` | $(field nodemap 2) | $(field nodemap 3) | $(field nodemap 4) | $(field nodemap 5) |
EOF
[ ${#tarball[@]} = 0 ] || echo "| \`nodemap topo $tarlabel\` | $(field tarball 2) | $(field tarball 3) | $(field tarball 4) | $(field tarball 5) |"
cat <<EOF
| \`lstopo-no-graphics${lslabel} --of console\` | $(field lstopo 2) | $(field lstopo 3) | $(field lstopo 4) | $(field lstopo 5) |
| \`python -c pass\` (the interpreter alone) | $(field python 2) | $(field python 3) | $(field python 4) | $(field python 5) |
EOF
if [ -n "$target" ]; then
  echo "| ratio (target <= ${target}x) | ${r}x wall: $(verdict "$r" "$target") | | ${rc}x CPU | |"
else
  echo "| ratio (no target: a snapshot's is the tarball against its tree) | ${r}x wall | | ${rc}x CPU | |"
fi
if [ ${#tarball[@]} != 0 ]; then
  t=$(ratio "$(field tarball 2)" "$nm") tc=$(ratio "$(field tarball 4)" "$(field nodemap 4)")
  echo "| tarball / unpacked tree (target <= 2x) | ${t}x wall: $(verdict "$t" 2) | | ${tc}x CPU | |"
fi
