#!/usr/bin/env bash
# Source this at the start of every command on the lent GPU machine:
#   source benchmarks/device_setup.sh
# It installs nodemap from the working tree into the image's python3 (which
# has CuPy, mpi4py/Open MPI, NCCL, PyTorch) without any network: pure-Python
# dependencies travel as wheels in .whl (carry it), the C library is built there.
set -e
. "$(dirname "${BASH_SOURCE[0]}")/lib/campaign.sh"
campaign_env
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
python3 -m pip install -q --no-build-isolation --no-deps . >/tmp/nodemap-install.log 2>&1 || { cat /tmp/nodemap-install.log; exit 1; }
export PATH="$(python3 -c 'import sysconfig;print(sysconfig.get_path("scripts"))'):$PATH"
set +e
