#!/usr/bin/env bash
# `nodemap bench jacobi` beside NVIDIA's multi-gpu-programming-models (the
# reference) on the same GPUs, grids and step count, in one call (issues 19, 21).
#   source benchmarks/device_setup.sh && bash benchmarks/jacobi_vs_reference.sh OUTDIR REFDIR [PARTS]
# REFDIR holds the reference's variant folders (single_gpu, nccl, ...), e.g.
# extracted from github.com/NVIDIA/multi-gpu-programming-models with
#   git archive HEAD LICENSE.md single_gpu nccl nccl_overlap nccl_graphs multi_threaded_copy \
#     multi_threaded_copy_overlap multi_threaded_p2p multi_threaded_p2p_opt mpi mpi_overlap | tar -x -C REFDIR
# PARTS (comma list; default info,build,strong,weak,summary), estimates on 2 H100s:
#   info     machine, versions, nvidia-smi topo -m (~5 s)
#   build    the reference variants, in the background while nodemap runs (~60 s, hidden)
#   strong   for G in GPUS: nodemap single mode `--gpus 0..G-1` (every single-process
#            variant, ~15 s: CuPy, NVRTC and NCCL start-up dominate) and `mpirun -np G --mode mpi`
#            (nccl*, mpi-staged*, ~12 s) at NXxNY; then every built reference variant on G GPUs at
#            NXxNY (~4 s a run, 8 at G=1, 7 after: single_gpu runs on one GPU only): ~55 s per G
#   weak     the same with `--weak --size WEAK_NXxWEAK_NY` (each GPU's slab) and the reference
#            at nodemap's global grid WEAK_NX x ((WEAK_NY-2)*G+2): ~50 s per G
#   summary  benchmarks/jacobi_vs_reference.py: the pairs table, the strong and weak tables per G
#            (markdown, also OUTDIR/summary.md; the whole output in OUTDIR/summary.txt)
# Total with GPUS="1 2": ~220-260 s (from the 1-GPU call of issue 19: 3-5 s a reference
# run, 32 s for nodemap's 6 variants x fp32+fp64 x 5 repeats). The 1-GPU comparison's parts, by name:
#   tests (GPU tests, ~30 s), sweep (stencil block shapes, used after), single (DTYPES on GPU 0),
#   ref (the reference on GPU 0 at NXxNY), mpi1 / mpi2 (1 and 2 ranks on GPU 0), shared (2 slabs on GPU 0)
# The reference runs one rank per GPU (nccl*, under mpirun -np G) or one thread per
# visible GPU (multi_threaded_*), so each G runs with CUDA_VISIBLE_DEVICES=0..G-1; its
# mpi and mpi_overlap need CUDA-aware MPI (not here: not built, not run), nodemap's
# mpi-aware is left out for the same reason. Environment: NX, NY (16384), WEAK_NX (16384),
# WEAK_NY (8192), ITERS (200), REPEATS (3), REF_REPEATS (1), DTYPES (fp32), GPUS (1..the
# visible GPUs, e.g. "1 2 4 8"), BUDGET (540 s: a G whose estimate no longer fits is
# skipped, said in the log). Each step has its own time limit; its command, output and
# exit code go to OUTDIR/jacobi_log.txt, result sets to OUTDIR/json/, reference lines to
# OUTDIR/ref/reference_csv.txt, packed into OUTDIR/jacobi_results.tar.gz after every step.
set -u
out=${1:?usage: jacobi_vs_reference.sh OUTDIR REFDIR [PARTS]}
ref=${2:?usage: jacobi_vs_reference.sh OUTDIR REFDIR [PARTS]}
parts=${3:-info,build,strong,weak,summary}
NX=${NX:-16384} NY=${NY:-16384} WEAK_NX=${WEAK_NX:-16384} WEAK_NY=${WEAK_NY:-8192} ITERS=${ITERS:-200}
REPEATS=${REPEATS:-3} REF_REPEATS=${REF_REPEATS:-1} DTYPES=${DTYPES:-fp32} BUDGET=${BUDGET:-540}
. "$(dirname "${BASH_SOURCE[0]}")/lib/campaign.sh"
ngpu=$(gpu_count)
[ "${ngpu:-0}" -ge 1 ] 2>/dev/null || ngpu=1
GPUS=${GPUS:-$(seq -s ' ' 1 "$ngpu")}
mkdir -p "$out/json" "$out/ref"
log="$out/jacobi_log.txt"
j="$out/json"
budget=$BUDGET
campaign_start
after_step=ref_lines  # the reference's lines so far, packed with the results
pack_into "$out/jacobi_results.tar.gz" "$out" json ref
SINGLE_VARIANTS=single,peer,peer-overlap,peer-graph,peer-overlap-graph,nccl,nccl-overlap,nccl-graph,nccl-overlap-graph
MPI_VARIANTS=single,mpi-staged,mpi-staged-overlap,nccl,nccl-overlap,nccl-graph,nccl-overlap-graph  # not mpi-aware: no CUDA-aware MPI
ref_lines() {  # the reference's -csv lines so far, for the summary
  grep -E '^(single_gpu|multi_threaded|nccl|mpi)[a-z0-9_]*, ' "$log" >"$out/ref/reference_csv.txt" || true
}
devices() { seq -s, 0 $(($1 - 1)); }  # devices G: "0,1,...,G-1"
on_gpus() {  # on_gpus G: command prefixes (step runs commands, not functions) for GPUs 0..G-1:
  ON=(env CUDA_VISIBLE_DEVICES="$(devices "$1")")                      # one process sees them
  RANKS=("${ON[@]}" "${MPIRUN[@]}" -x CUDA_VISIBLE_DEVICES -np "$1")  # G ranks, one per GPU
}
TIMING=(--iters "$ITERS" --repeats "$REPEATS")

# NCCL from the nvidia-nccl wheel, where the reference's Makefiles look for it
nccl_dir=$(nccl_wheel /tmp/nccl)
[ -z "$nccl_dir" ] || export LD_LIBRARY_PATH="$nccl_dir/lib:/tmp/nccl/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
{ machine_record; nvcc --version | tail -1; echo "nccl wheel: $nccl_dir"; cat "$ref/COMMIT" 2>/dev/null
  echo "GPUS=$GPUS NX=$NX NY=$NY WEAK_NX=$WEAK_NX WEAK_NY=$WEAK_NY ITERS=$ITERS REPEATS=$REPEATS" \
    "REF_REPEATS=$REF_REPEATS DTYPES=$DTYPES PARTS=$parts"; } >>"$log" 2>&1
want info && step nvidia-smi-topo 20 nvidia-smi topo -m
mpirun_setup
# nodemap's own default stencil block unless set (or chosen by the sweep)
[ -n "${NODEMAP_JACOBI_BLOCK:-}" ] && export NODEMAP_JACOBI_BLOCK && MPIRUN+=(-x NODEMAP_JACOBI_BLOCK)

# the reference builds in the background while nodemap runs (16+ cores)
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
built=0
await_builds() {  # once, before the first reference run
  [ "$built" = 1 ] && return
  wait
  cat "$out"/ref/build_*.txt >>"$log" 2>/dev/null
  built=1
}

ref_at() {  # ref_at TAG G NX NY: every built reference variant on GPUs 0..G-1 at NXxNY
  local tag=$1 g=$2 nx=$3 ny=$4 v exe rep
  await_builds
  on_gpus "$g"
  for v in "${REF_VARIANTS[@]}"; do
    [ "$v" = single_gpu ] && [ "$g" -ne 1 ] && continue  # one GPU whatever is visible
    exe="$ref/$v/jacobi"
    [ -x "$exe" ] || { echo "=== ref $v: not built" >>"$log"; continue; }
    local args=(-nx "$nx" -ny "$ny" -niter "$ITERS" -csv)
    case $v in  # these two accept only -nccheck 1 (a norm every step)
      single_gpu|multi_threaded_p2p_opt) args+=(-nccheck 1) ;;
      *) args+=(-nccheck "$ITERS") ;;
    esac
    for ((rep = 1; rep <= REF_REPEATS; rep++)); do
      case $v in  # one rank per GPU (nccl*), else one thread per visible GPU
        nccl*) step "ref-$tag-$v-${g}gpu-$rep" 40 "${RANKS[@]}" "$exe" "${args[@]}" ;;
        *) step "ref-$tag-$v-${g}gpu-$rep" 40 "${ON[@]}" "$exe" "${args[@]}" ;;
      esac
    done
  done
}
nodemap_at() {  # nodemap_at TAG G NXxNY [OPTIONS]: one process on GPUs 0..G-1, then one rank per GPU
  local tag=$1 g=$2 size=$3; shift 3
  on_gpus "$g"
  step "$tag-single-${g}gpu" 120 "${ON[@]}" nodemap bench jacobi --mode single --gpus "$(devices "$g")" \
    --variants "$SINGLE_VARIANTS" --dtype "$DTYPES" --size "$size" "${TIMING[@]}" "$@" \
    -o "$j/jacobi_${tag}_single_${g}gpu.json"
  step "$tag-mpi-${g}gpu" 120 "${RANKS[@]}" nodemap bench jacobi --mode mpi --variants "$MPI_VARIANTS" \
    --dtype "$DTYPES" --size "$size" "${TIMING[@]}" "$@" -o "$j/jacobi_${tag}_mpi_${g}gpu.json"
}
weak_ny() {  # weak_ny G: the global rows nodemap --weak runs on G row slabs (its weak_grid: halo rows once)
  python3 -c "from nodemap.bench.app.jacobi_grid import weak_grid; print(weak_grid($WEAK_NX, $WEAK_NY, 1, $1)[1])"
}

want tests && step gpu-tests 120 python3 -m pytest -q -p no:cacheprovider tests/test_jacobi_gpu.py \
  tests/test_jacobi_grid.py tests/test_jacobi_fake.py tests/test_cu_compile.py
# the stencil's block shape: measured here, the best one used below
if want sweep; then
  step kernel-sweep 120 python3 benchmarks/jacobi_kernel_sweep.py "$NX" "$NY"
  best=$(grep -o 'best shape for both.*NODEMAP_JACOBI_BLOCK=[0-9x]*' "$log" | tail -1 | sed 's/.*=//')
  if [ -n "$best" ]; then
    export NODEMAP_JACOBI_BLOCK=$best && MPIRUN+=(-x NODEMAP_JACOBI_BLOCK)
    echo "=== using NODEMAP_JACOBI_BLOCK=$best" >>"$log"
  fi
fi
# strong scaling: nodemap at every G first (the builds finish meanwhile), then the reference
if want strong; then
  for g in $GPUS; do fits "strong nodemap ${g} GPU(s)" 40 && nodemap_at strong "$g" "${NX}x${NY}"; done
  for g in $GPUS; do fits "strong reference ${g} GPU(s)" 35 && ref_at strong "$g" "$NX" "$NY"; done
fi
# weak scaling: each GPU keeps a WEAK_NX x WEAK_NY slab
if want weak; then
  for g in $GPUS; do
    fits "weak ${g} GPU(s)" 60 || continue
    nodemap_at weak "$g" "${WEAK_NX}x${WEAK_NY}" --weak
    rows=$(weak_ny "$g" 2>>"$log")
    if [ -n "$rows" ]; then ref_at weak "$g" "$WEAK_NX" "$rows"; else echo "=== ref weak: no global grid" >>"$log"; fi
  done
fi

# --- the 1-GPU comparison (issue 19), parts asked for by name ---
on_gpus 1  # the 1-GPU parts below run on GPU 0
# one process, one GPU: every single-process variant (and the graph: one slab)
want single && step single-1gpu 100 "${ON[@]}" nodemap bench jacobi --mode single --gpus 0 --dtype "$DTYPES" \
  --size "${NX}x${NY}" "${TIMING[@]}" -o "$j/jacobi_single_1gpu.json"
want ref && ref_at 1gpu 1 "$NX" "$NY"
# one rank: NCCL to itself, NCCL graph, MPI staged, beside the reference's NCCL variants
want mpi1 && step mpi-1rank 80 "${RANKS[@]}" nodemap bench jacobi --mode mpi --dtype fp32 \
  --size "${NX}x${NY}" "${TIMING[@]}" -o "$j/jacobi_mpi_1rank.json"
# two slabs on one GPU in one process: peer copies between slabs
want shared && step single-2slabs 60 "${ON[@]}" nodemap bench jacobi --mode single --gpus 0,0 --dtype fp32 \
  --size "${NX}x${NY}" "${TIMING[@]}" -o "$j/jacobi_single_2slabs.json"
# two ranks sharing one GPU: MPI staged (+overlap); NCCL refuses (said in the notes)
want mpi2 && step mpi-2ranks 80 "${ON[@]}" "${MPIRUN[@]}" -x CUDA_VISIBLE_DEVICES -np 2 nodemap bench jacobi \
  --mode mpi --dtype fp32 --size "${NX}x${NY}" "${TIMING[@]}" -o "$j/jacobi_mpi_2ranks.json"

if want summary; then
  step summary 60 python3 benchmarks/jacobi_vs_reference.py "$out/ref/reference_csv.txt" "$j"/*.json \
    --strong "${NX}x${NY}" --weak "${WEAK_NX}x${WEAK_NY}" --markdown "$out/summary.md"
  sed -n '/=== summary \[.*python3/,/=== summary: rc/p' "$log" | sed '1d;$d' >"$out/summary.txt"
fi
campaign_done json ref jacobi_log.txt summary.md summary.txt
