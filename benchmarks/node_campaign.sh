#!/usr/bin/env bash
# Characterize a whole multi-GPU node in one go (issue 8): topology beside
# nvidia-smi, plans, live bindings under mpirun, GPU tests, copies, HBM,
# NCCL, ring and placement. Run on the lent machine:
#   source benchmarks/device_setup.sh && bash benchmarks/node_campaign.sh OUTDIR [PARTS]
# Every step has its own time limit, its command, output and exit code go to
# OUTDIR/node_log.txt, JSON result sets to OUTDIR/json/ (packed into
# OUTDIR/node_results.tar.gz at the end, so a handful of files come back).
set -u
out=${1:?usage: node_campaign.sh OUTDIR [PARTS]}
parts=${2:-info,plan,show,placement,copies,gpu,nccl,ncclsingle,ring,tests,placement2,mpi,memory}
mkdir -p "$out/json"
log="$out/node_log.txt"
j="$out/json"
. "$(dirname "${BASH_SOURCE[0]}")/lib/campaign.sh"
campaign_start
pack_into "$out/node_results.tar.gz" "$out" json
ngpu=$(gpu_count)
{ machine_record; python3 -c 'import torch; print("torch", torch.__version__)'; } >>"$log" 2>&1
mpirun_setup -np "$ngpu"
if want info; then
  step nvidia-smi-topo 20 nvidia-smi topo -m
  step topo 30 nodemap topo
  step topo-matrix 30 nodemap topo --matrix
  step topo-export 30 nodemap topo --export "$j/topology.json"
fi
if want plan; then
  step plan-1-per-gpu 20 nodemap plan --tasks "$ngpu"
  step plan-2-tasks 20 nodemap plan --tasks 2
  step plan-2-per-gpu-env 20 nodemap plan --tasks $((2 * ngpu)) --env --launcher mpirun
fi
if want show; then
  step run-show 60 "${MPIRUN[@]}" nodemap run -- nodemap show
  step run-show-json 60 "${MPIRUN[@]}" nodemap run -- nodemap show --json
fi
# PLACEMENT_ZIPF / PLACEMENT_SECS: which exponents one call runs, and for how long;
# PLACEMENT_EXTRA: more options (e.g. "--object-bytes 2MiB --hot-mix 0.9"), PLACEMENT_TAG names its JSON
read -r -a pextra <<< "${PLACEMENT_EXTRA:-}"
want placement && step placement "${PLACEMENT_SECS:-200}" nodemap bench placement --table 8GiB \
  --zipf "${PLACEMENT_ZIPF:-0,1.0}" --chunks 2MiB --replication 0,1%,5%,auto --iterations 3 "${pextra[@]}" \
  -o "$j/placement_${PLACEMENT_TAG:-rows}_s${PLACEMENT_ZIPF:-0,1.0}.json"
# small all_reduce in single-process mode hung once (2 and 4 H200): a short probe with its own limit
want ncclsingle && step nccl-single 90 nodemap bench nccl --mode single --ops all_reduce,all_gather \
  --sizes 8:64MiB --iters 5 --repeats 3 --timeout 20 -q -o "$j/nccl_single.json"
want memory && step memory-sweep 150 nodemap bench memory --sweep --output "$j/memory_sweep.json"
want memory && step numa 60 nodemap bench numa --output "$j/numa.json"
want copies && step copies 150 nodemap bench copies --matrix --latency -q -o "$j/copies.json"
want gpu && step gpu 90 nodemap bench gpu -q -o "$j/gpu.json"
want nccl && step nccl 120 "${MPIRUN[@]}" nodemap bench nccl --ops all_reduce,all_gather,alltoall \
  --sizes 8:1GiB --inplace out -q -o "$j/nccl.json"
want ring && step ring 60 nodemap bench ring --sizes 64KiB,1MiB,16MiB,64MiB -q -o "$j/ring.json"
want tests && step gpu-tests 150 python3 -m pytest -q -p no:cacheprovider tests/test_gpu_device.py \
  tests/test_gpu_cli.py tests/test_placement_gpu.py tests/test_nccl.py tests/test_ring.py
want placement2 && step placement-2gpu 90 nodemap bench placement --gpus 0,1 --table 8GiB --zipf 1.0 \
  --chunks 2MiB --replication 0,5%,auto --iterations 3 --strategies round-robin,copies,analysis \
  -o "$j/placement_2gpu.json"
want mpi && step mpi 60 "${MPIRUN[@]}" nodemap bench mpi --buffers HH,DD --sizes 1:4MiB --repeats 3 -q -o "$j/mpi.json"
campaign_done && rm -rf "$j"
