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
log="$out/log.txt"
. "$(dirname "${BASH_SOURCE[0]}")/lib/campaign.sh"
campaign_start
{ nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.max,pcie.link.width.max --format=csv
  machine_record; nvcc --version | grep -o 'release [0-9.]*'; } >>"$log" 2>&1

step quick-check "$(campaign_left)" nodemap check --level quick -o "$out/quick" -q
rm -f "$out/quick/check.html"  # eight files come back from the lent machine: keep the full one's

if [ -d .peers/BabelStream ] && fits babelstream 60; then
  step babelstream-cmake "$(campaign_left)" cmake -S .peers/BabelStream -B /tmp/bs -DMODEL=cuda \
    -DCMAKE_CUDA_COMPILER="$(command -v nvcc)" -DCUDA_ARCH=sm_90 -DCMAKE_BUILD_TYPE=Release \
    && step babelstream-build "$(campaign_left)" cmake --build /tmp/bs -j 16
  if [ -x /tmp/bs/cuda-stream ]; then
    step_out babelstream "$(campaign_left)" "$out/babelstream.csv" /tmp/bs/cuda-stream --arraysize 134217728 --numtimes 100 --csv
  else
    echo "=== BabelStream did not build (see the log)" >>"$log"
  fi
fi

for k in gpu copies; do
  step "bench-$k" "$(campaign_left)" nodemap bench "$k" --output "$out/bench_$k.json"
done

step full-check "$(($(campaign_left) - 5))" nodemap check --level full -o "$out/full" -q

if [ -d .peers/nvbandwidth ] && fits nvbandwidth 90; then
  mkdir -p /tmp/boost && for f in .peers/boost/*.deb; do dpkg -x "$f" /tmp/boost; done
  step nvbandwidth-cmake "$(($(campaign_left) - 20))" cmake -S .peers/nvbandwidth -B /tmp/nvbw -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_PREFIX_PATH=/tmp/boost/usr -DBoost_USE_STATIC_LIBS=ON \
    -DBoost_DIR=/tmp/boost/usr/lib/x86_64-linux-gnu/cmake/Boost-1.74.0 \
    && step nvbandwidth-build "$(($(campaign_left) - 15))" cmake --build /tmp/nvbw -j 16
  if [ -x /tmp/nvbw/nvbandwidth ]; then
    step_out nvbandwidth "$(campaign_left)" "$out/nvbandwidth.json" /tmp/nvbw/nvbandwidth \
      -t host_to_device_memcpy_ce device_to_host_memcpy_ce -j
  else
    echo "=== nvbandwidth did not build in time (see the log)" >>"$log"
  fi
fi
campaign_done
grep '^=== ' "$log"
