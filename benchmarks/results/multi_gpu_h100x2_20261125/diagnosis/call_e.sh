#!/usr/bin/env bash
source benchmarks/device_setup.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
R=/tmp/re; mkdir -p $R; T0=$SECONDS
say() { echo "[$((SECONDS - T0))s] $*" | tee -a $R/log.txt; }
say "E2 again after the fix"; timeout 60 python3 .peers/repro.py "gpu -q --kernels triad --dtype float64" "copies -q --latency" >> $R/log.txt 2>&1; say "E2 rc=$?"
say "qvf"; timeout -s INT 230 python3 benchmarks/check_quick_vs_full.py --gpu --pairs 2 --keep $R/qvf_runs --out $R/qvf >> $R/log.txt 2>&1; say "qvf rc=$?"
full=$(ls -d $R/qvf_runs/*-full 2>/dev/null | head -1); [ -n "$full" ] && nodemap report $full/check.json --html $R/check_full.html >> $R/log.txt 2>&1
rm -f $R/qvf_runs/*/check.html; cd /tmp && tar czf $OUT/calle.tar.gz re && cp re/log.txt $OUT/
