#!/usr/bin/env bash
source benchmarks/device_setup.sh
R=/tmp/rd; mkdir -p $R; T0=$SECONDS
say() { echo "[$((SECONDS - T0))s] $*" | tee -a $R/log.txt; }
x() { local name=$1 secs=$2; shift 2; say "== $name"; timeout $secs "$@" >> $R/log.txt 2>&1; say "== $name rc=$?"; }
x E1-standalone-copies 60 nodemap bench copies -q --latency
x E3-inproc-copies 60 python3 .peers/repro.py "copies -q --latency"
x E2-inproc-gpu-then-copies 90 python3 .peers/repro.py "gpu -q" "copies -q --latency"
x E5-inproc-gpu-triad-then-copies 60 python3 .peers/repro.py "gpu -q --kernels triad --dtype float64" "copies -q --latency"
x E4-E2-blocking 90 env CUDA_LAUNCH_BLOCKING=1 python3 .peers/repro.py "gpu -q" "copies -q --latency"
x E6-sanitizer 150 compute-sanitizer --tool memcheck --print-limit 5 python3 .peers/repro.py "gpu -q --kernels triad --dtype float64 --size 256MiB" "copies -q --latency --size 64MiB --repeats 1 --cases d2d --engine ce"
say done
cp $R/log.txt $OUT/
