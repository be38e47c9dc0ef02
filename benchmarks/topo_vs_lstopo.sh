#!/usr/bin/env bash
# Wall time of `nodemap topo` against `lstopo-no-graphics --of console` on
# this machine, same output kind (a console tree), N runs each. Target:
# nodemap <= 3x lstopo. Installs Debian's hwloc when lstopo is missing.
#
# usage: benchmarks/topo_vs_lstopo.sh [N]
#   env: NODEMAP=path/to/nodemap, NODEMAP_ARGS="--input node.json" (times
#   rendering a saved node instead of discovering this one; say so if used),
#   SNAPSHOT=fixture.tar.bz2 (an hwloc sysfs snapshot: both tools read the
#   same extracted tree with --input, so a big node is timed on a small VM),
#   XML=node.xml (an hwloc XML export: both tools read it with --input; a
#   launch reads it once per node, in the rank that plans), LSTOPO=path (another
#   lstopo-no-graphics, e.g. an hwloc 3.0 build for v3 XML, which Debian's
#   2.9 cannot read)
# Prints a Markdown block for benchmarks/results/topo_vs_lstopo.md.
set -euo pipefail

N=${1:-${N:-20}}
read -r -a extra <<< "${NODEMAP_ARGS:-}"
lsextra=() lslabel=""
if [ -n "${SNAPSHOT:-}" ]; then
  snapdir=$(mktemp -d -t nodemap-snap-XXXXXX)
  trap 'rm -rf "$snapdir"' EXIT
  tar -xjf "$SNAPSHOT" -C "$snapdir"
  root="$snapdir/$(ls "$snapdir" | head -1)"
  extra+=(--input "$root"); lsextra=(--input "$root")
  NODEMAP_ARGS="--input $(basename "$SNAPSHOT" .tar.bz2)"; lslabel=" $NODEMAP_ARGS"
fi
if [ -n "${XML:-}" ]; then
  extra+=(--input "$XML"); lsextra=(--input "$XML")
  NODEMAP_ARGS="--input $(basename "$XML")"; lslabel=" $NODEMAP_ARGS"
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
"$LSTOPO" "${lsextra[@]}" --of console >/dev/null

# median wall ms of "$@" over N runs (after one warm-up run)
median_ms() {
  if command -v hyperfine >/dev/null 2>&1; then
    local json; json=$(mktemp)
    hyperfine -N -s none --warmup 1 --runs "$N" --export-json "$json" "$*" >/dev/null 2>&1
    python3 -c 'import json,sys; print(f"{json.load(open(sys.argv[1]))["results"][0]["median"]*1e3:.1f}")' "$json"
    rm -f "$json"
    return
  fi
  "$@" >/dev/null 2>&1
  local times=() t0 t1
  for _ in $(seq "$N"); do
    t0=$(date +%s%N); "$@" >/dev/null 2>&1; t1=$(date +%s%N)
    times+=($(( (t1 - t0) / 1000 )))
  done
  printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR]=$1} END {m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; printf "%.1f\n", m/1000}'
}

nm=$(median_ms "$NODEMAP" topo "${extra[@]}")
ls=$(median_ms "$LSTOPO" "${lsextra[@]}" --of console)
# The floor under any Python CLI: the interpreter nodemap runs on, doing nothing.
py=$(head -1 "$NODEMAP" | sed -n 's/^#!//p'); py=${py:-python3}
# `#!/usr/bin/env python3` or pip's `#!/bin/sh` wrapper is no interpreter to time: then python3 on PATH
"$py" -c pass 2>/dev/null || py=python3
"$py" -c pass || { echo "topo_vs_lstopo.sh: no Python interpreter to time ($py)" >&2; exit 2; }
bare=$(median_ms "$py" -c pass)
ratio=$(awk -v a="$nm" -v b="$ls" 'BEGIN {printf "%.2f", a/b}')
verdict=$(awk -v r="$ratio" 'BEGIN {print (r <= 3.0) ? "met" : "MISSED"}')
timer=$(command -v hyperfine >/dev/null 2>&1 && echo "hyperfine -N" || echo "bash loop, date +%s%N")
cpu=$(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo 2>/dev/null || uname -m)

cat <<EOF
## $(date -u +%Y-%m-%d) on $(hostname)

- machine: ${cpu:-unknown}, $(nproc) CPUs visible, $(uname -sr), load $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)
- nodemap: $("$NODEMAP" --version) ($(python3 --version 2>&1), source: $("$NODEMAP" topo "${extra[@]}" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["source"])'))
- lstopo: $("$LSTOPO" --version)
- method: median wall time of $N runs each after a warm-up ($timer), output to /dev/null

| command | median ms |
|---|---|
| \`nodemap topo${NODEMAP_ARGS:+ $NODEMAP_ARGS}\` | $nm |
| \`lstopo-no-graphics${lslabel} --of console\` | $ls |
| ratio (target <= 3x) | ${ratio}x: $verdict |
| \`python -c pass\` (the interpreter alone) | $bare |
EOF
