#!/usr/bin/env bash
# nodemap check on a GPU node: quick and full on the same node, beside the
# dedicated kinds and BabelStream / nvbandwidth built from source.
#
#   benchmarks/check_device.sh OUT [SECONDS]
#
# In order, each stage only while time is left of SECONDS (default 225):
#   1. nodemap check --level quick -o OUT/quick
#   2. BabelStream (CUDA, float64, 1 GiB arrays as nodemap's default),
#      built from .peers/BabelStream -> OUT/babelstream.csv
#   3. the dedicated kinds at their defaults: nodemap bench gpu, bench copies
#      -> OUT/bench_gpu.json, OUT/bench_copies.json
#   4. nodemap check --level full -o OUT/full (cut short by SIGINT when time
#      runs out: written marked incomplete)
#   5. nvbandwidth (host<->device CE) built from .peers/nvbandwidth with
#      Boost program_options from .peers/boost/*.deb, if 90 s are left
# .peers/ is ignored and carried; make it on a machine with network:
#   git clone https://github.com/UoB-HPC/BabelStream .peers/BabelStream
#   git clone https://github.com/NVIDIA/nvbandwidth .peers/nvbandwidth
#   (mkdir -p .peers/boost && cd .peers/boost && apt-get download \
#      libboost-program-options1.74-dev libboost-program-options1.74.0 libboost1.74-dev)   # Debian 12
# Then, on any machine: python3 benchmarks/check_vs_peers.py OUT
# On the lent GPU machine start with `source benchmarks/device_setup.sh &&`.
set -u
out=${1:?output folder}
budget=${2:-225}
mkdir -p "$out"
t0=$SECONDS
log="$out/log.txt"
say() { echo "[$((SECONDS - t0))s] $*" | tee -a "$log"; }
left() { echo $((budget - (SECONDS - t0))); }
nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.max,pcie.link.width.max --format=csv \
  >>"$log" 2>&1
say "nodemap $(python3 -c 'import nodemap; print(nodemap.__version__)'), $(python3 -V 2>&1), nvcc $(nvcc --version \
  2>/dev/null | grep -o 'release [0-9.]*')"

say "1. quick check"
timeout -s INT "$(left)" nodemap check --level quick -o "$out/quick" -q >>"$log" 2>&1
say "quick check rc=$?"
rm -f "$out/quick/check.html"  # eight files come back from the lent machine: keep the full one's

if [ -d .peers/BabelStream ] && [ "$(left)" -gt 60 ]; then
  say "2. build BabelStream"
  cmake -S .peers/BabelStream -B /tmp/bs -DMODEL=cuda -DCMAKE_CUDA_COMPILER="$(command -v nvcc)" \
    -DCUDA_ARCH=sm_90 -DCMAKE_BUILD_TYPE=Release >>"$log" 2>&1 && cmake --build /tmp/bs -j 16 >>"$log" 2>&1
  if [ -x /tmp/bs/cuda-stream ]; then
    say "run BabelStream"
    /tmp/bs/cuda-stream --arraysize 134217728 --numtimes 100 --csv >"$out/babelstream.csv" 2>>"$log" \
      || say "BabelStream rc=$?"
  else
    say "BabelStream did not build (see the log)"
  fi
fi

for k in gpu copies; do
  say "3. dedicated: nodemap bench $k"
  timeout -s INT "$(left)" nodemap bench "$k" --output "$out/bench_$k.json" >>"$log" 2>&1 || say "bench $k rc=$?"
done

say "4. full check, $(left) s left"
timeout -s INT "$(($(left) - 5))" nodemap check --level full -o "$out/full" -q >>"$log" 2>&1
say "full check rc=$?"

if [ -d .peers/nvbandwidth ] && [ "$(left)" -gt 90 ]; then
  say "5. build nvbandwidth"
  mkdir -p /tmp/boost && for f in .peers/boost/*.deb; do dpkg -x "$f" /tmp/boost; done
  timeout "$(($(left) - 20))" cmake -S .peers/nvbandwidth -B /tmp/nvbw -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_PREFIX_PATH=/tmp/boost/usr -DBoost_USE_STATIC_LIBS=ON \
    -DBoost_DIR=/tmp/boost/usr/lib/x86_64-linux-gnu/cmake/Boost-1.74.0 >>"$log" 2>&1 \
    && timeout "$(($(left) - 15))" cmake --build /tmp/nvbw -j 16 >>"$log" 2>&1
  if [ -x /tmp/nvbw/nvbandwidth ]; then
    say "run nvbandwidth"
    timeout "$(left)" /tmp/nvbw/nvbandwidth -t host_to_device_memcpy_ce device_to_host_memcpy_ce -j \
      >"$out/nvbandwidth.json" 2>>"$log" || say "nvbandwidth rc=$?"
  else
    say "nvbandwidth did not build in time (see the log)"
  fi
else
  say "5. nvbandwidth skipped: $(left) s left, its build needs about 90"
fi
say "done"
