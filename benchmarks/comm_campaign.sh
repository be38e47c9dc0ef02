#!/usr/bin/env bash
# The communication campaign on a node of 2+ GPUs (the device machine):
#   source benchmarks/device_setup.sh && bash benchmarks/comm_campaign.sh OUTDIR [quick]
# Runs nodemap bench mpi (host and GPU buffers), nccl (both modes), ring (both
# modes) and benchmarks/comm_vs_peers.py; JSON per part and one log in OUTDIR.
set -u
out=${1:?usage: comm_campaign.sh OUTDIR [quick]}
quick=${2:-}
mkdir -p "$out"
log="$out/comm_log.txt"
. "$(dirname "${BASH_SOURCE[0]}")/lib/campaign.sh"
campaign_start
ngpu=$(gpu_count)
{ machine_record; nvidia-smi topo -m; } >>"$log" 2>&1
mpirun_setup -np "$ngpu"
if [ -n "$quick" ]; then S_MPI=1:1MiB; S_NCCL=8:16MiB; S_RING=64KiB,4MiB; T=(50 60 90 30 30 30)
else S_MPI=1:64MiB; S_NCCL=8:1GiB; S_RING=64KiB,1MiB,16MiB,64MiB; T=(80 100 400 40 45 120); fi
parts=${PARTS:-mpi,nccl-mpi,vs-peers,ring-single,ring-mpi,nccl-single}
want mpi && step mpi ${T[0]} "${MPIRUN[@]}" nodemap bench mpi --buffers HH,DD --sizes $S_MPI --repeats 3 -q -o "$out/comm_mpi.json"
want nccl-mpi && step nccl-mpi ${T[1]} "${MPIRUN[@]}" nodemap bench nccl --sizes $S_NCCL -q -o "$out/comm_nccl_mpi.json"
want vs-peers && step vs-peers ${T[2]} "${MPIRUN[@]}" python3 benchmarks/comm_vs_peers.py --out "$out" ${quick:+--repeats 3 --rounds 1 --nccl-sizes 1MiB:64MiB --mpi-sizes 1KiB:4MiB} ${VS_PEERS_ARGS:-}
want ring-single && step ring-single ${T[3]} nodemap bench ring --sizes $S_RING -q -o "$out/comm_ring_single.json"
want ring-mpi && step ring-mpi ${T[4]} "${MPIRUN[@]}" nodemap bench ring --sizes $S_RING -q -o "$out/comm_ring_mpi.json"
want nccl-single && step nccl-single ${T[5]} nodemap bench nccl --mode single --ops all_reduce,all_gather,sendrecv --sizes 1MiB:1GiB --inplace out -q -o "$out/comm_nccl_single.json"
campaign_done
