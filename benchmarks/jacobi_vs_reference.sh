#!/usr/bin/env bash
# `nodemap bench jacobi` beside NVIDIA's multi-gpu-programming-models (the
# reference) on the same GPU(s), grid and step count, in one call (issue 19).
#   source benchmarks/device_setup.sh && bash benchmarks/jacobi_vs_reference.sh OUTDIR REFDIR [PARTS]
# REFDIR holds the reference's variant folders (single_gpu, nccl, ...), e.g.
# extracted from github.com/NVIDIA/multi-gpu-programming-models with
#   git archive HEAD LICENSE.md single_gpu nccl nccl_overlap nccl_graphs multi_threaded_copy \
#     multi_threaded_copy_overlap multi_threaded_p2p multi_threaded_p2p_opt mpi mpi_overlap | tar -x -C REFDIR
# Each step has its own time limit; its command, output and exit code go to
# OUTDIR/jacobi_log.txt, result sets to OUTDIR/json/, packed into
# OUTDIR/jacobi_results.tar.gz. The last step prints the side-by-side table
# (benchmarks/jacobi_vs_reference.py). Environment: NX, NY (16384), ITERS (200),
# REPEATS (5), DTYPES (fp32,fp64).
set -u
out=${1:?usage: jacobi_vs_reference.sh OUTDIR REFDIR [PARTS]}
ref=${2:?usage: jacobi_vs_reference.sh OUTDIR REFDIR [PARTS]}
parts=${3:-info,build,tests,sweep,single,ref,mpi1,shared,mpi2,summary}
NX=${NX:-16384} NY=${NY:-16384} ITERS=${ITERS:-200} REPEATS=${REPEATS:-5} DTYPES=${DTYPES:-fp32,fp64}
mkdir -p "$out/json" "$out/ref"
log="$out/jacobi_log.txt"
j="$out/json"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PYTHONUNBUFFERED=1
export NODEMAP_JACOBI_BLOCK=${NODEMAP_JACOBI_BLOCK:-256x8} LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-} PYTHONPATH=${PYTHONPATH:-}
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --bind-to none -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH -x PYTHONPATH
        -x NODEMAP_JACOBI_BLOCK)
want() { [[ ",$parts," == *",$1,"* ]]; }
step() {  # step NAME SECONDS CMD...: log the command, its output and its exit code
  local name=$1 secs=$2; shift 2
  echo "=== $name: $*" >>"$log"
  local t0=$SECONDS
  timeout -k 5 "$secs" "$@" >>"$log" 2>&1
  echo "=== $name: rc=$? in $((SECONDS - t0)) s" >>"$log"
  tar -C "$out" -czf "$out/jacobi_results.tar.gz" json ref  # a call cut short still brings back what ran
}
GRID=(--size "${NX}x${NY}" --iters "$ITERS" --repeats "$REPEATS")

# NCCL from the nvidia-nccl wheel, where the reference's Makefiles look for it
nccl_dir=$(python3 -c 'import nvidia.nccl as n; print(list(n.__path__)[0])' 2>/dev/null || true)
mkdir -p /tmp/nccl/lib
if [ -n "$nccl_dir" ]; then
  ln -sfn "$nccl_dir/include" /tmp/nccl/include
  ln -sf "$(ls "$nccl_dir"/lib/libnccl.so* | head -1)" /tmp/nccl/lib/libnccl.so
  export LD_LIBRARY_PATH="$nccl_dir/lib:/tmp/nccl/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
{ echo "=== machine"; date -u; hostname; nproc; lscpu | grep -E 'Model name|^NUMA node'
  nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv
  mpirun --version | head -1; nvcc --version | tail -1; echo "nccl wheel: $nccl_dir"
  python3 -c 'import sys, cupy, mpi4py, numpy; from cupy.cuda import nccl
print("python", sys.version.split()[0], "cupy", cupy.__version__, "cuda runtime", cupy.cuda.runtime.runtimeGetVersion(),
      "mpi4py", mpi4py.__version__, "nccl", nccl.get_version(), "numpy", numpy.__version__)'
  cat "$ref/COMMIT" 2>/dev/null; } >>"$log" 2>&1
if ! "${MPIRUN[@]}" -np 2 python3 -c 'from mpi4py import MPI; MPI.COMM_WORLD.Barrier()' >>"$log" 2>&1; then
  MPIRUN+=(--mca pml ob1 --mca btl self,vader)  # no UCX/IB here: plain shared memory
  echo "=== mpirun: falling back to ${MPIRUN[*]}" >>"$log"
fi

# the reference builds in the background while nodemap runs (16 cores)
REF_VARIANTS=(single_gpu multi_threaded_copy multi_threaded_copy_overlap multi_threaded_p2p multi_threaded_p2p_opt
              nccl nccl_overlap nccl_graphs)
if want build; then
  # the one change to the reference: CUDA 13's CUB/Thrust require C++17 (its Makefiles say c++14)
  sed -i 's/-std=c++14/-std=c++17/g' "$ref"/*/Makefile
  for v in "${REF_VARIANTS[@]}"; do
    ( cd "$ref/$v" && timeout 240 make BUILD_SM_ARCH=90 CUDA_HOME=/usr/local/cuda NCCL_HOME=/tmp/nccl jacobi \
        >"$out/ref/build_$v.txt" 2>&1; echo "rc=$?" >>"$out/ref/build_$v.txt" ) &
  done
fi

want tests && step gpu-tests 120 python3 -m pytest -q -p no:cacheprovider tests/test_jacobi_gpu.py \
  tests/test_jacobi_grid.py tests/test_jacobi_fake.py tests/test_cu_compile.py
# the stencil's block shape: measured here, the best one used below
if want sweep; then
  step kernel-sweep 60 python3 benchmarks/jacobi_kernel_sweep.py "$NX" "$NY"
  best=$(grep -o 'best NODEMAP_JACOBI_BLOCK=[0-9x]*' "$log" | tail -1 | cut -d= -f2)
  [ -n "$best" ] && export NODEMAP_JACOBI_BLOCK=$best && echo "=== using NODEMAP_JACOBI_BLOCK=$best" >>"$log"
fi
# one process, one GPU: every single-process variant (and the graph: one slab)
want single && step single-1gpu 100 nodemap bench jacobi --mode single --gpus 0 --dtype "$DTYPES" "${GRID[@]}" \
  -o "$j/jacobi_single_1gpu.json"

if want ref; then
  wait  # the builds
  cat "$out"/ref/build_*.txt >>"$log"
  for v in "${REF_VARIANTS[@]}"; do
    exe="$ref/$v/jacobi"
    [ -x "$exe" ] || { echo "=== ref $v: not built" >>"$log"; continue; }
    args=(-nx "$NX" -ny "$NY" -niter "$ITERS" -csv)
    case $v in  # these two accept only -nccheck 1 (a norm every step)
      single_gpu|multi_threaded_p2p_opt) args+=(-nccheck 1) ;;
      *) args+=(-nccheck "$ITERS") ;;
    esac
    for rep in 1 2; do
      case $v in
        nccl*) step "ref-$v-$rep" 30 "${MPIRUN[@]}" -np 1 "$exe" "${args[@]}" ;;
        *) step "ref-$v-$rep" 30 "$exe" "${args[@]}" ;;
      esac
    done
  done
  grep -E '^(single_gpu|multi_threaded|nccl|mpi)[a-z0-9_]*, ' "$log" >"$out/ref/reference_csv.txt" || true
fi
# one rank: NCCL to itself, NCCL graph, MPI staged, beside the reference's NCCL variants
want mpi1 && step mpi-1rank 80 "${MPIRUN[@]}" -np 1 nodemap bench jacobi --mode mpi --dtype fp32 "${GRID[@]}" \
  -o "$j/jacobi_mpi_1rank.json"
# two slabs on one GPU in one process: peer copies between slabs
want shared && step single-2slabs 60 nodemap bench jacobi --mode single --gpus 0,0 --dtype fp32 "${GRID[@]}" \
  -o "$j/jacobi_single_2slabs.json"
# two ranks sharing one GPU: MPI staged (+overlap); NCCL refuses (said in the notes)
want mpi2 && step mpi-2ranks 80 "${MPIRUN[@]}" -np 2 nodemap bench jacobi --mode mpi --dtype fp32 "${GRID[@]}" \
  -o "$j/jacobi_mpi_2ranks.json"
want summary && step summary 30 python3 benchmarks/jacobi_vs_reference.py "$out/ref/reference_csv.txt" "$j"/*.json \
  && sed -n '/=== summary: python3/,/=== summary: rc/p' "$log" | tail -n +2 >"$out/summary.txt"
echo "=== done in $SECONDS s" >>"$log"
tar -C "$out" -czf "$out/jacobi_results.tar.gz" json ref
