#!/usr/bin/env bash
# same_figures for the GPU kinds (and memory) against .whl/base, on the device
source benchmarks/device_setup.sh
cd "$(dirname "$0")/.."
python3 -m pytest -q tests/test_gpu_device.py -rs 2>&1 | tail -4 | tee $OUT/gpu_device_test.txt
t0=$(date +%s)
for k in "nccl --sizes 64KiB,16MiB --repeats 5" "ring --sizes 64KiB,1MiB --repeats 5" "jacobi --gpus 0 --size 4096x4096 --repeats 5" "gpu --size 1GiB --repeats 5" "copies --size 256MiB --repeats 5" "memory --repeats 5"; do
  n=${k%% *}
  [ $(( $(date +%s) - t0 )) -gt 380 ] && { echo "skip $n: time"; continue; }
  timeout 150 python3 benchmarks/same_figures.py --base .whl/base --rounds 2 --out $OUT/sf_$n.json -- $k > $OUT/sf_$n.txt 2>&1; echo "$n rc=$?"
  tail -6 $OUT/sf_$n.txt
done
