# What every benchmarks/ script shares (source it; it runs nothing itself):
# one step, one budget rule, one packing rule, one mpirun, one machine record.
# A script sets, before using them:
#   log     the file every command, its output and its exit code go to
#   parts   the comma list of parts asked for (want)
#   budget  seconds the whole call may take (want's and fits' estimates, step_cap); unset: no budget,
#           every estimate fits and steps keep their own limits
# and calls campaign_start once: the call's clock and the environment.
# Its functions are named for what they do (step, want, pack...) or campaign_*: device_setup.sh sources
# this into the shell a device command runs in, where a generic name (left, elapsed) would replace
# the command's own.
# Tested with stand-in tools by tests/test_device_scripts.py.

campaign_start() {  # the call's clock, the environment every GPU process needs
  campaign_t0=$SECONDS
  campaign_env
}

campaign_env() {
  # NVLink multicast stays off: the lent machines refuse it (KINDS.md)
  export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
}

campaign_elapsed() { echo $((SECONDS - ${campaign_t0:-0})); }
campaign_left() {  # seconds left of the budget (none set: more than any step asks)
  [ -n "${budget:-}" ] || { echo $((1 << 30)); return; }
  echo $((budget - $(campaign_elapsed)))
}

want() {  # want PART [SECONDS]: asked for in $parts and, given an estimate, it fits in what is left
  [[ ",$parts," == *",$1,"* ]] || return 1
  [ $# -lt 2 ] || fits "$1" "$2"
}

fits() {  # fits WHAT SECONDS: the estimate fits in what is left of the budget (else logged as skipped)
  local left
  left=$(campaign_left)
  [ "$left" -ge "$2" ] && return 0
  echo "=== $1: skipped, ${left} s left of the budget, needs ~$2 s" >>"$log"
  return 1
}

# step NAME SECONDS CMD...: the command, its output, its exit code and time in
# the log, then pack. SIGINT first (nodemap and the Python tools save what they
# measured), SIGKILL 10 s later. With step_cap set, the limit is cut to what is
# left of the budget and no step starts in its last 5 s. Runs `$after_step`
# (a function name), if set, before packing. Returns the command's status.
step() {
  local name=$1 secs=$2 rc s=$SECONDS left
  shift 2
  if [ -n "${step_cap:-}" ]; then
    left=$(campaign_left)
    if [ "$left" -le 5 ]; then echo "=== $name: skipped, budget ${budget} s spent" >>"$log"; return 1; fi
    [ "$secs" -gt "$left" ] && secs=$left
  fi
  if [ "$secs" -le 0 ]; then echo "=== $name: skipped, no time left (${secs} s)" >>"$log"; return 1; fi
  echo "=== $name [$(campaign_elapsed) s]: $*" >>"$log"
  timeout -k 10 -s INT "$secs" "$@" >>"$log" 2>&1
  rc=$?
  echo "=== $name: rc=$rc in $((SECONDS - s)) s" >>"$log"
  [ -z "${after_step:-}" ] || "$after_step"
  pack
  return $rc
}

campaign_done() {  # campaign_done [ITEM...]: the call's time in the log, the last pack (of ITEMs if given)
  echo "=== done in $(campaign_elapsed) s" >>"$log"
  pack "$@"
}

step_out() {  # step_out NAME SECONDS FILE CMD...: step, with the command's stdout (a table, a CSV) in FILE, its tail in the log
  local name=$1 secs=$2 file=$3
  shift 3
  step "$name" "$secs" bash -c '"$@" >"$0"; rc=$?; tail -n 30 "$0"; exit $rc' "$file" "$@"
}

pack_into() {  # pack_into TARBALL DIR ITEM...: what pack puts where (ITEMs relative to DIR, globs allowed)
  pack_tar=$1 pack_dir=$2
  shift 2
  pack_items=("$@")
}

pack() {  # pack [ITEM...]: the items (default pack_into's) that exist into the tarball, so a call cut short brings back what ran
  [ -n "${pack_tar:-}" ] || return 0
  local items=() found=() i f
  [ $# -gt 0 ] && items=("$@") || items=("${pack_items[@]}")
  for i in "${items[@]}"; do
    if [[ $i == *[*?[]* ]]; then
      for f in "$pack_dir"/$i; do [ -e "$f" ] && found+=("${f#"$pack_dir"/}"); done
    elif [ -e "$pack_dir/$i" ]; then
      found+=("$i")
    fi
  done
  [ ${#found[@]} -gt 0 ] && tar -C "$pack_dir" -czf "$pack_tar" "${found[@]}"
}

gpu_count() { nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true; }

# mpirun_setup [OPTION...]: MPIRUN=(mpirun as root, oversubscribed, unbound,
# passing the environment on, OPTIONs). A 2-rank barrier (the OPTIONs' -np if
# given) tries the default transport; where it fails (no UCX/IB), plain shared
# memory: --mca pml ob1 --mca btl self,vader, said in the log.
mpirun_setup() {
  local v probe
  for v in LD_LIBRARY_PATH PYTHONPATH; do export "$v=${!v:-}"; done  # -x of an unset variable fails
  MPIRUN=(mpirun --allow-run-as-root --oversubscribe --bind-to none -x NCCL_NVLS_ENABLE
          -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS -x PYTHONUNBUFFERED -x LD_LIBRARY_PATH
          -x PYTHONPATH -x PATH "$@")
  probe=("${MPIRUN[@]}")
  [[ " $* " == *" -np "* ]] || probe+=(-np 2)
  if ! "${probe[@]}" python3 -c 'from mpi4py import MPI; MPI.COMM_WORLD.Barrier()' >>"$log" 2>&1; then
    MPIRUN+=(--mca pml ob1 --mca btl self,vader)
    echo "=== mpirun: falling back to ${MPIRUN[*]}" >>"$log"
  fi
}

machine_record() {  # the machine and the versions, to stdout: date, host, CPUs, GPUs, MPI, Python packages, nodemap
  echo "=== machine"; date -u; hostname; nproc; lscpu | grep -E 'Model name|^NUMA node'
  nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv
  mpirun --version | head -1
  python3 -c 'import sys, cupy, mpi4py, numpy; from cupy.cuda import nccl
print("python", sys.version.split()[0], "cupy", cupy.__version__, "cuda runtime", cupy.cuda.runtime.runtimeGetVersion(),
      "mpi4py", mpi4py.__version__, "nccl", nccl.get_version(), "numpy", numpy.__version__)'
  git log -1 --format='nodemap %h %cI' 2>/dev/null || nodemap --version
}

nccl_wheel() {  # nccl_wheel DIR: CuPy's nvidia-nccl wheel as an NCCL_HOME in DIR (include, lib/libnccl.so); prints the wheel's folder
  local w
  w=$(python3 -c 'import nvidia.nccl as n; print(list(n.__path__)[0])' 2>/dev/null || true)
  mkdir -p "$1/lib"
  if [ -n "$w" ]; then
    ln -sfn "$w/include" "$1/include"
    ln -sf "$(ls "$w"/lib/libnccl.so* | head -1)" "$1/lib/libnccl.so"
  fi
  echo "$w"
}

need_tool() {  # need_tool COMMAND PACKAGE: install Debian's PACKAGE when COMMAND is missing (as root or with sudo)
  command -v "$1" >/dev/null 2>&1 && return 0
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo=sudo
  echo "installing $2 (Debian package) for $1..." >&2
  $sudo apt-get install -y -q "$2" >/dev/null 2>&1 \
    || { $sudo apt-get update -q >/dev/null && $sudo apt-get install -y -q "$2" >/dev/null; } \
    || { echo "cannot install $2: install it (apt-get install $2) and rerun" >&2; exit 2; }
}
