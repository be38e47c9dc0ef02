#!/usr/bin/env bash
# ring 1MiB peer+nccl: 04fa13d vs HEAD trees, both python -S with the tree on PYTHONPATH, GC on and off; objects tracked at exit
source benchmarks/device_setup.sh
cd "$(dirname "$0")/.."
P=$(python3 -c 'import sysconfig;print(sysconfig.get_paths()["purelib"])')
export NODEMAP_NATIVE_LIB=$(python3 -c "import nodemap.native as n,os;print([p for p in n._candidates() if p and os.path.exists(p)][0])")
mkdir -p /tmp/gcp6
for round in 1 2 3 4 5 6; do
 for tree in $( [ $((round%2)) = 0 ] && echo "b_427d6f5 b_04fa13d" || echo "b_04fa13d b_427d6f5" ); do
  for gcm in on; do
   PYTHONPATH=.whl/$tree/src:$P:/tmp/site python3 -S -c "
import gc, sys, atexit
if '$gcm' == 'off': gc.disable()
atexit.register(lambda: print('TRACKED', len(gc.get_objects()), 'COUNTS', gc.get_stats(), file=sys.stderr))
sys.argv = ['nodemap', 'bench', 'ring', '--sizes', '1MiB', '--transports', 'peer,nccl', '--repeats', '9', '--json', '-q']
import runpy; runpy.run_module('nodemap', run_name='__main__')
" > /tmp/gcp6/$tree.$gcm.$round.json 2> /tmp/gcp6/$tree.$gcm.$round.err
   python3 -c "
import json,sys; d=json.load(open('/tmp/gcp6/$tree.$gcm.$round.json'))
print('$tree $gcm $round', [(r['metric'], round(r['stats']['median'],1), round(r['params']['t_comm_us'],1)) for r in d['results']])"
   grep TRACKED /tmp/gcp6/$tree.$gcm.$round.err | cut -c1-300
  done
 done
done
tar -czf $OUT/gcp6.tgz -C /tmp gcp6
