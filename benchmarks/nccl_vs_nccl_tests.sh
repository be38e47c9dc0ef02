#!/usr/bin/env bash
# `nodemap bench nccl` beside NVIDIA nccl-tests built from its source, same
# node, same run, alternating blocks; the ratio per size (issue 21).
#   source benchmarks/device_setup.sh && bash benchmarks/nccl_vs_nccl_tests.sh OUTDIR NCCLTESTS_SRC
# NCCLTESTS_SRC: an nccl-tests source tree (e.g. v2.19.6, with a COMMIT file).
# It is built twice, out of tree under BUILD_DIR (default /tmp/nccl_vs_nccl_tests,
# kept out of OUTDIR so binaries do not travel back): MPI=0 (one process, -g N)
# and MPI=1 (one process per GPU), for sm_90, against the nvidia-nccl wheel
# that CuPy uses, so both tools run the same libnccl.
# Blocks: for each round, mode (single: one process for every GPU; mpi: one
# rank per GPU) and op, nodemap then nccl-tests in even rounds, the reverse in
# odd ones. Both tools: float, sum, SIZES (LO:HI:FACTOR, default 8:2G:4 = 15
# sizes), 20 operations per timing (nccl-tests -n 20 -w 5), REPEATS (5)
# timings per size (nodemap --repeats, nccl-tests -N), data checked after
# timing (nodemap always, nccl-tests -c 1); the time of the slowest rank
# (nodemap's rule; nccl-tests -a 3). NCCL_NVLS_ENABLE=0 always. Left as each
# tool has it: nodemap times with CUDA events, nccl-tests with the host clock.
# Output: OUTDIR/blocks/{nodemap,nccltests}_MODE_OP_rR.{json,txt}, the log
# OUTDIR/nccl_log.txt, OUTDIR/machine.txt, packed into OUTDIR/nccl_results.tar.gz
# after every step; the summary (benchmarks/nccl_vs_nccl_tests.py) last.
# Time on 2 H100 (estimate, not measured): builds ~60-120 s (in parallel with a
# warm-up nodemap run), 40 blocks of ~4-7 s (process start, NCCL init, 2 GiB
# buffers, 15 sizes) ~200-260 s: ~270-330 s in all. Shorter: ROUNDS=1 (halves
# the blocks), SIZES=1M:2G:4, OPS=all_reduce,all_gather. Once SECONDS passes
# BUDGET (480 s; steps are cut to what is left) no block starts, and the
# summary still runs: the whole call stays under 10 minutes with the setup.
# Environment: SIZES, ROUNDS (2), REPEATS (5), OPS, MODES (single,mpi), BUDGET, BUILD_DIR,
# NM_ARGS (more nodemap options, e.g. "--graph"), NT_ARGS (more nccl-tests options, e.g. "-G 1").
set -u
out=${1:?usage: nccl_vs_nccl_tests.sh OUTDIR NCCLTESTS_SRC}
src=${2:?usage: nccl_vs_nccl_tests.sh OUTDIR NCCLTESTS_SRC}
src=$(cd "$src" && pwd) || { echo "nccl_vs_nccl_tests.sh: no folder $2" >&2; exit 2; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SIZES=${SIZES:-8:2G:4} ROUNDS=${ROUNDS:-2} REPEATS=${REPEATS:-5} BUDGET=${BUDGET:-480}
OPS=${OPS:-all_reduce,all_gather,reduce_scatter,alltoall,sendrecv} MODES=${MODES:-single,mpi}
read -r -a NM_ARGS <<<"${NM_ARGS:-}"
read -r -a NT_ARGS <<<"${NT_ARGS:-}"
ITERS=20 WARMUP=5 cuda=${CUDA_HOME:-/usr/local/cuda}
bld=${BUILD_DIR:-/tmp/nccl_vs_nccl_tests}
mkdir -p "$out/blocks" "$bld"
out=$(cd "$out" && pwd)
log="$out/nccl_log.txt"
blk="$out/blocks"
. "$here/lib/campaign.sh"
budget=$BUDGET step_cap=1  # steps are cut to what is left of BUDGET
campaign_start
pack_into "$out/nccl_results.tar.gz" "$out" blocks machine.txt nccl_log.txt 'build_*.txt' nccl_vs_nccl_tests.md \
  nccl_vs_nccl_tests.json
to_bytes() {  # 8, 64K, 2G (1024^n, as nccl-tests reads them) -> bytes
  local v=${1%[KkMmGg]} u=${1##*[0-9]}
  case $u in K|k) echo $((v << 10)) ;; M|m) echo $((v << 20)) ;; G|g) echo $((v << 30)) ;; *) echo "$v" ;; esac
}
IFS=: read -r LO HI FACTOR <<<"$SIZES"
lo=$(to_bytes "$LO") hi=$(to_bytes "${HI:-$LO}") f=${FACTOR:-4}
[ "$lo" -ge 1 ] && [ "$f" -ge 2 ] || { echo "nccl_vs_nccl_tests.sh: SIZES=$SIZES: give LO:HI:FACTOR, e.g. 8:2G:4" >&2; exit 2; }
list=() s=$lo
while [ "$s" -le "$hi" ]; do list+=("$s"); s=$((s * f)); done
NM_SIZES=$(IFS=,; echo "${list[*]}")  # nodemap has no factor option: the same sizes, listed
NT_SIZES=(-b "$lo" -e "$hi" -f "$f")

ngpu=$(gpu_count)
[ "$ngpu" -ge 1 ] || { echo "nccl_vs_nccl_tests.sh: nvidia-smi -L lists no GPU" >&2; exit 2; }

# NCCL from the nvidia-nccl wheel (CuPy's): headers, and a lib folder with the
# unversioned libnccl.so the nccl-tests link line asks for
nccl_home=$bld/nccl
nccl_dir=$(nccl_wheel "$nccl_home")
[ -z "$nccl_dir" ] || export LD_LIBRARY_PATH="$nccl_dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# Open MPI's headers and library, where the MPI=1 build looks (MPI_HOME/include, MPI_HOME/lib)
mpi_home=$bld/mpihome
mkdir -p "$mpi_home"
for d in $(mpicc --showme:incdirs 2>/dev/null) "$(dirname "$(dirname "$(command -v mpicc)")")/include"; do
  [ -f "$d/mpi.h" ] && { ln -sfn "$d" "$mpi_home/include"; break; }
done
for d in $(mpicc --showme:libdirs 2>/dev/null) "$(dirname "$(dirname "$(command -v mpicc)")")/lib"; do
  ls "$d"/libmpi.so* >/dev/null 2>&1 && { ln -sfn "$d" "$mpi_home/lib"; export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d"; break; }
done

{ machine_record; nvidia-smi topo -m; "$cuda/bin/nvcc" --version | tail -1
  echo "nccl wheel: $nccl_dir"; echo "mpi: $(readlink "$mpi_home/include") $(readlink "$mpi_home/lib")"
  echo "nccl-tests: $(cat "$src/COMMIT" 2>/dev/null)"
  echo "SIZES=$SIZES ($NM_SIZES) ROUNDS=$ROUNDS REPEATS=$REPEATS ITERS=$ITERS OPS=$OPS MODES=$MODES GPUs=$ngpu" \
    "NM_ARGS=${NM_ARGS[*]} NT_ARGS=${NT_ARGS[*]}"
} >"$out/machine.txt" 2>&1
cat "$out/machine.txt" >>"$log"
cp "$src/COMMIT" "$out/COMMIT" 2>/dev/null
mpirun_setup -np "$ngpu"

# both builds at once, out of tree (the two share object names: separate folders)
GENCODE="-gencode=arch=compute_90,code=sm_90"
build() {  # build single|mpi MAKE-ARGS...
  local kind=$1; shift
  ( timeout 300 make -C "$src" -j16 BUILDDIR="$bld/$kind" NCCL_HOME="$nccl_home" CUDA_HOME="$cuda" \
      "$@" >"$out/build_$kind.txt" 2>&1; echo "rc=$?" >>"$out/build_$kind.txt" ) &
}
build single MPI=0 NVCC_GENCODE="$GENCODE"
# C++ MPI bindings (mpicxx.h, pulled in by mpi.h where Open MPI has them)
# would need -lmpi_cxx; nccl-tests uses the C API only
build mpi MPI=1 MPI_HOME="$mpi_home" NAME_SUFFIX=_mpi NVCC_GENCODE="$GENCODE -DOMPI_SKIP_MPICXX -DMPICH_SKIP_MPICXX"
# meanwhile a small nodemap run per mode, recorded nowhere: CuPy's kernels
# compiled and cached, NCCL's first start paid, before any block is timed
step warmup-single 90 nodemap bench nccl --mode single --ops all_reduce --sizes 8,1M --repeats 1 -q
step warmup-mpi 90 "${MPIRUN[@]}" nodemap bench nccl --mode mpi --ops all_reduce --sizes 8,1M --repeats 1 -q
wait
cat "$out"/build_*.txt >>"$log"
NT_SINGLE=$bld/single NT_MPI=$bld/mpi
# nccl-tests links libcudart.so: CUDA's lib64 last, for its blocks only (nodemap's CuPy keeps its own search)
NT_LD="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$cuda/lib64"
for exe in "$NT_SINGLE/all_reduce_perf" "$NT_MPI/all_reduce_perf_mpi"; do
  echo "=== ldd $exe" >>"$log"; LD_LIBRARY_PATH=$NT_LD ldd "$exe" 2>&1 | grep -E 'nccl|cudart|mpi|not found' >>"$log"
done
pack

nodemap_block() {  # MODE OP ROUND
  local m=$1 op=$2 r=$3 cmd=()
  [ "$m" = mpi ] && cmd=("${MPIRUN[@]}")
  step "nodemap-$m-$op-r$r" 60 "${cmd[@]}" nodemap bench nccl --mode "$m" --ops "$op" \
    --sizes "$NM_SIZES" --iters "$ITERS" --repeats "$REPEATS" "${NM_ARGS[@]}" -q -o "$blk/nodemap_${m}_${op}_r$r.json"
}
nccltests_block() {  # MODE OP ROUND
  local m=$1 op=$2 r=$3 exe cmd=()
  if [ "$m" = mpi ]; then exe=$NT_MPI/${op}_perf_mpi cmd=("${MPIRUN[@]}" "$exe" -g 1)
  else exe=$NT_SINGLE/${op}_perf cmd=("$exe" -g "$ngpu"); fi
  [ -x "$exe" ] || { echo "=== nccltests-$m-$op-r$r: $exe not built" >>"$log"; return 1; }
  step_out "nccltests-$m-$op-r$r" 60 "$blk/nccltests_${m}_${op}_r$r.txt" env LD_LIBRARY_PATH="$NT_LD" "${cmd[@]}" \
    "${NT_SIZES[@]}" \
    -n "$ITERS" -w "$WARMUP" -N "$REPEATS" -c 1 -d float -o sum -a 3 "${NT_ARGS[@]}"
}
IFS=, read -r -a ops <<<"$OPS"
IFS=, read -r -a modes <<<"$MODES"
for ((r = 0; r < ROUNDS; r++)); do
  for m in "${modes[@]}"; do
    for op in "${ops[@]}"; do
      if ((r % 2 == 0)); then nodemap_block "$m" "$op" "$r"; nccltests_block "$m" "$op" "$r"
      else nccltests_block "$m" "$op" "$r"; nodemap_block "$m" "$op" "$r"; fi
    done
  done
done
budget=$((budget + 30)) step summary 30 python3 "$here/nccl_vs_nccl_tests.py" "$out"
campaign_done
cat "$out/nccl_vs_nccl_tests.md" 2>/dev/null
