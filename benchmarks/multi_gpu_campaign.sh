#!/usr/bin/env bash
# The new capabilities on a node of several GPUs (issue 21), one part per
# device call as time allows. On the lent machine:
#   source benchmarks/device_setup.sh && bash benchmarks/multi_gpu_campaign.sh OUTDIR [PARTS] [BUDGET_S]
# PARTS (comma list; default info,check1,qvf,fleet,compare):
#   info     nvidia-smi topo -m beside `nodemap topo --matrix`, versions (~10 s)
#   check1   `nodemap check --level quick` with one GPU visible: the 1-GPU node's
#            wall time (issue 14's <= 60 s), HTML kept (~55 s)
#   qvf      benchmarks/check_quick_vs_full.py --gpu --pairs 2 on every GPU: quick
#            and full alternately, their wall times, quick/full per figure; every
#            run's check.json kept, the first full one rendered to HTML (~350 s on 2 GPUs)
#   fleet    `nodemap check --fleet`, 2 ranks per GPU acting as nodes (the
#            NODEMAP_FLEET_NODE hook), pair tests host and device buffers (~100 s)
#   compare  `nodemap compare` one rank per GPU, every probe (~60 s)
#   placement `nodemap bench placement` on every GPU, 8 GiB table (~70 s)
#   repeat   `nodemap check --level full` 3 times back to back on every GPU: the
#            verdict, node/environment verdicts and exit status of each run in
#            OUTDIR/repeat.txt, each run's check.json kept (issue 29: one verdict
#            every time on a healthy node; ~170 s a run on 2 GPUs)
# Every part has its own limit and is skipped when less than its estimate is
# left of BUDGET_S (default 560); commands, output and exit codes go to
# OUTDIR/log.txt, and OUTDIR is packed into OUTDIR.tar.gz after each part, so
# a call cut short still brings back what ran.
set -u
out=${1:?usage: multi_gpu_campaign.sh OUTDIR [PARTS] [BUDGET_S]}
parts=${2:-info,check1,qvf,fleet,compare}
budget=${3:-560}
mkdir -p "$out"
log="$out/log.txt"
. "$(dirname "${BASH_SOURCE[0]}")/lib/campaign.sh"
campaign_start
pack_into "$out.tar.gz" "$(dirname "$out")" "$(basename "$out")"
ngpu=$(gpu_count)
machine_record >>"$log" 2>&1
mpirun_setup
if want info 20; then
  step nvidia-smi-topo 20 nvidia-smi topo -m
  step topo-matrix 30 nodemap topo --matrix
  step topo-export 30 nodemap topo --export "$out/topology.json"
fi
if want check1 60; then
  step check-quick-1gpu 100 env CUDA_VISIBLE_DEVICES=0 nodemap check --level quick -o "$out/check_quick_1gpu"
fi
if want qvf 200; then
  step quick-vs-full 420 python3 benchmarks/check_quick_vs_full.py --gpu --pairs 2 --keep "$out/qvf_runs" \
    --out "$out/qvf"
  full=$(ls -d "$out"/qvf_runs/*-full 2>/dev/null | head -1)
  [ -n "$full" ] && step report-full 60 nodemap report "$full/check.json" --html "$out/check_full.html"
fi
if want fleet 100; then
  # 2 ranks per GPU, each its own "node" with one GPU: >= 3 nodes for fleet-relative verdicts
  step fleet 200 "${MPIRUN[@]}" -np $((2 * ngpu)) -x NODEMAP_FLEET_NODE='gpunode{rank}' \
    bash -c 'export CUDA_VISIBLE_DEVICES=$((OMPI_COMM_WORLD_RANK % '"$ngpu"')); exec nodemap check --fleet -o '"$out/fleet"' --check-timeout 150 --pair-timeout 20 --pair-buffers host,device'
  rm -f "$out"/fleet/nodes/*.html
fi
if want compare 60; then
  step compare 150 nodemap compare --probes stream,h2d,gpu,jacobi -o "$out/compare.json"
fi
if want repeat 180; then
  for i in 1 2 3; do
    want repeat 180 || break
    step "check-full-$i" 300 nodemap check --level full -q -o "$out/repeat_$i"
    python3 - "$out/repeat_$i/check.json" "$i" >>"$out/repeat.txt" 2>&1 <<'PY'
import json, sys
from nodemap.check.document import exit_status, from_dict
d = json.load(open(sys.argv[1]))
s = d["summary"]
counts = {}
for f in d["figures"]:
    counts[f["verdict"]] = counts.get(f["verdict"], 0) + 1
doc = from_dict(d)
print(f"run {sys.argv[2]}: verdict={s['verdict']} node={s.get('node')} environment={s.get('environment')} "
      f"busy={doc.is_busy()} exit={exit_status(doc, saved=True)} figures={counts}")
PY
  done
  rm -f "$out"/repeat_*/*.html
fi
if want placement 70; then
  step placement 150 nodemap bench placement --table 8GiB --zipf 1.0 --chunks 2MiB --replication 0,5%,auto \
    --iterations 3 -o "$out/placement.json"
fi
campaign_done
