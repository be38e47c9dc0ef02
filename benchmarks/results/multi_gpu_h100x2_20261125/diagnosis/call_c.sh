#!/usr/bin/env bash
# device call C (2026-11-25, nvidia-h100-x2): check full with stderr (why it stopped after step 1 in call A),
# jacobi 1..2 GPUs beside mgpm, nodemap bench nccl beside nccl-tests (built in the background from the start).
source benchmarks/device_setup.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
R=/tmp/rc; mkdir -p $R; T0=$SECONDS
say() { echo "[$((SECONDS - T0))s] $*" | tee -a $R/log.txt; }
( BUDGET=1 bash benchmarks/nccl_vs_nccl_tests.sh /tmp/ncclpre .peers/nccl-tests > /tmp/ncclpre.txt 2>&1 ) & PRE=$!
say "1 check full"
timeout -s INT 150 nodemap check --level full -o $R/check_full > $R/check_full.txt 2>&1; say "check full rc=$?"
grep -B2 -A25 Traceback $R/check_full.txt | head -60 >> $R/log.txt
say "2 jacobi"
GPUS="1 2" BUDGET=${JB:-220} bash benchmarks/jacobi_vs_reference.sh $R/j .peers/mgpm; say "jacobi rc=$?"
cat $R/j/summary.md >> $R/log.txt 2>/dev/null
wait $PRE; say "nccl-tests prebuilt: $(grep -h rc= /tmp/ncclpre/build_*.txt | tr '\n' ' ')"
say "3 nccl"
BUDGET=$(( ${TOTAL:-560} - (SECONDS - T0) )) bash benchmarks/nccl_vs_nccl_tests.sh $R/nccl .peers/nccl-tests; say "nccl rc=$?"
say "done"
rm -f $R/check_full/check.html.tmp*
cd /tmp && tar czf $OUT/callc.tar.gz rc && cp rc/log.txt $OUT/
