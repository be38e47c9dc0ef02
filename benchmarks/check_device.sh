#!/usr/bin/env bash
# nodemap check on a GPU node, beside the dedicated benches and peers.
#
#   benchmarks/check_device.sh checks OUT [SECONDS]
#       nodemap check --level quick, then nodemap check --level full with
#       the time left of SECONDS (default 225; a full check cut short by
#       SIGINT is written marked incomplete).
#   benchmarks/check_device.sh peers OUT
#       The dedicated kinds at their defaults (bench gpu, bench copies,
#       bench memory), BabelStream (CUDA, float64, 1 GiB arrays as nodemap's default) and
#       nvbandwidth (host<->device CE) built from sources in .peers/
#       (BabelStream/, nvbandwidth/, boost/*.deb for nvbandwidth's
#       program_options), then a second quick check.
#       Make .peers/ (ignored, carried) on a machine with network:
#         git clone https://github.com/UoB-HPC/BabelStream .peers/BabelStream
#         git clone https://github.com/NVIDIA/nvbandwidth .peers/nvbandwidth
#         (cd .peers/boost && apt-get download libboost-program-options1.74-dev \
#            libboost-program-options1.74.0 libboost1.74-dev)      # Debian 12
# Then, on any machine: python3 benchmarks/check_vs_peers.py OUT
# On the lent GPU machine start with `source benchmarks/device_setup.sh &&`.
set -u
mode=${1:?checks or peers}
out=${2:?output folder}
budget=${3:-225}
mkdir -p "$out"
t0=$SECONDS
log="$out/log_$mode.txt"
say() { echo "[$((SECONDS - t0))s] $*" | tee -a "$log"; }
nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.max,pcie.link.width.max --format=csv \
  >>"$log" 2>&1
say "nodemap $(python3 -c 'import nodemap; print(nodemap.__version__)'), python $(python3 -V 2>&1)"

if [ "$mode" = checks ]; then
  say "quick check"
  nodemap check --level quick -o "$out/quick" -q >>"$log" 2>&1
  say "quick check rc=$?"
  left=$((budget - (SECONDS - t0)))
  say "full check, $left s left"
  timeout -s INT "$left" nodemap check --level full -o "$out/full" -q \
    >>"$log" 2>&1
  say "full check rc=$?"
elif [ "$mode" = peers ]; then
  for k in gpu copies memory; do
    say "dedicated: nodemap bench $k"
    nodemap bench "$k" --output "$out/bench_$k.json" >>"$log" 2>&1 || say "bench $k rc=$?"
  done
  if [ -d .peers/BabelStream ]; then
    say "build BabelStream"
    cmake -S .peers/BabelStream -B /tmp/bs -DMODEL=cuda -DCMAKE_CUDA_COMPILER="$(command -v nvcc)" \
      -DCUDA_ARCH=sm_90 -DCMAKE_BUILD_TYPE=Release >>"$log" 2>&1 && cmake --build /tmp/bs -j 16 >>"$log" 2>&1
    bs=$(ls /tmp/bs/cuda-stream 2>/dev/null)
    if [ -n "$bs" ]; then
      say "run BabelStream"
      "$bs" --arraysize 134217728 --numtimes 100 --csv >"$out/babelstream.csv" 2>>"$log" || say "BabelStream rc=$?"
    else
      say "BabelStream did not build (see the log)"
    fi
  fi
  if [ -d .peers/nvbandwidth ]; then
    say "build nvbandwidth"
    mkdir -p /tmp/boost && for f in .peers/boost/*.deb; do dpkg -x "$f" /tmp/boost; done
    cmake -S .peers/nvbandwidth -B /tmp/nvbw -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
      -DCMAKE_PREFIX_PATH=/tmp/boost/usr -DBoost_USE_STATIC_LIBS=ON \
      -DBoost_DIR=/tmp/boost/usr/lib/x86_64-linux-gnu/cmake/Boost-1.74.0 >>"$log" 2>&1 \
      && cmake --build /tmp/nvbw -j 16 >>"$log" 2>&1
    if [ -x /tmp/nvbw/nvbandwidth ]; then
      say "run nvbandwidth"
      /tmp/nvbw/nvbandwidth -t host_to_device_memcpy_ce device_to_host_memcpy_ce -j >"$out/nvbandwidth.json" \
        2>>"$log" || say "nvbandwidth rc=$?"
    else
      say "nvbandwidth did not build (see the log)"
    fi
  fi
  say "second quick check"
  nodemap check --level quick -o "$out/quick2" -q >>"$log" 2>&1
  say "quick check rc=$?"
fi
say "done"
