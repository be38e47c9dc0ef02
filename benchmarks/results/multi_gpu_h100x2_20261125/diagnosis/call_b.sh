#!/usr/bin/env bash
# device call B (2026-11-25, nvidia-h100-x2): diagnose bench copies --latency on 2 GPUs (check full stopped
# after its first step), GPU tests incl. 2-GPU ones, fleet as 2 clean nodes, jacobi/nccl smoke, placement.
source benchmarks/device_setup.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
R=/tmp/rb; mkdir -p $R; T0=$SECONDS; BUDGET=${1:-400}
left() { echo $((BUDGET - (SECONDS - T0))); }
say() { echo "[$((SECONDS - T0))s] $*" | tee -a $R/log.txt; }
MPIRUN="mpirun --oversubscribe --bind-to none --mca pml ob1 --mca btl self,vader -x NCCL_NVLS_ENABLE -x PYTHONPATH -x PATH -x OMPI_ALLOW_RUN_AS_ROOT -x OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"
say "1 copies full with --latency"
timeout 150 nodemap bench copies --latency -o $R/copies_full.json > $R/copies_full.txt 2>&1; say "copies full rc=$?"
tail -25 $R/copies_full.txt >> $R/log.txt
say "2 GPU tests"
timeout 220 python3 -m pytest -q -p no:cacheprovider -rs tests/test_gpu_device.py tests/test_gpu_format.py tests/test_jacobi_gpu.py tests/test_nccl.py tests/test_ring.py tests/test_placement_gpu.py tests/test_check_mpi.py tests/test_compare_cli.py tests/test_bench_harness.py > $R/pytest.txt 2>&1; say "pytest rc=$?"
tail -30 $R/pytest.txt >> $R/log.txt
say "3 nccl smoke, both modes"
[ "$(left)" -gt 100 ] && { timeout 60 nodemap bench nccl --mode single --ops all_reduce,all_gather,reduce_scatter,alltoall,sendrecv --sizes 8:64MiB -o $R/nccl_single.json > $R/nccl.txt 2>&1; say "nccl single rc=$?"; }
[ "$(left)" -gt 100 ] && { timeout 60 $MPIRUN -np 2 nodemap bench nccl --mode mpi --ops all_reduce,sendrecv --sizes 8:64MiB -o $R/nccl_mpi.json >> $R/nccl.txt 2>&1; say "nccl mpi rc=$?"; }
say "4 fleet: 2 nodes, each 16 cores and its own GPU"
[ "$(left)" -gt 90 ] && { timeout -s INT 120 $MPIRUN -np 2 -x NODEMAP_FLEET_NODE='gpunode{rank}' bash -c 'r=$OMPI_COMM_WORLD_RANK; export CUDA_VISIBLE_DEVICES=$r; exec taskset -c $((16*r))-$((16*r+15)) nodemap check --fleet -o '$R'/fleet2 --check-timeout 100 --pair-timeout 20 --pair-buffers host,device' > $R/fleet2.txt 2>&1; say "fleet2 rc=$?"; rm -f $R/fleet2/nodes/*.html; tail -15 $R/fleet2.txt >> $R/log.txt; }
say "5 placement"
[ "$(left)" -gt 80 ] && { timeout 100 nodemap bench placement --table 8GiB --zipf 1.0 --chunks 2MiB --replication 0,5%,auto --iterations 3 -o $R/placement.json > $R/placement.txt 2>&1; say "placement rc=$?"; }
say "done"
cd /tmp && tar czf $OUT/callb.tar.gz rb && cp rb/log.txt $OUT/
