"""nodemap.env: the one list of launcher and visibility variables, one validated integer reader."""

import os
import subprocess
import sys

import pytest

from nodemap import env
from nodemap.errors import NodemapError


def test_integer_is_validated_in_one_line():
    assert env.integer({"PMI_SIZE": " 4 "}, "PMI_SIZE") == 4
    for bad in ("abc", "-1", "1e3", "", "١", "9" * 10):
        with pytest.raises(NodemapError, match="PMI_SIZE=.* is not a non-negative integer"):
            env.integer({"PMI_SIZE": bad}, "PMI_SIZE")


def test_world_size_and_global_rank():
    assert env.world_size({}) == 1
    assert env.world_size({"PMI_SIZE": "1", "OMPI_COMM_WORLD_SIZE": "4"}) == 4
    assert env.global_rank({}) is None
    assert env.global_rank({"PMI_RANK": "", "SLURM_PROCID": "3"}) == 3
    with pytest.raises(NodemapError, match="PMI_RANK"):
        env.global_rank({"PMI_RANK": "x"})


def _cli(args, **extra):
    e = {k: v for k, v in os.environ.items() if k not in env.MPI_JOB_VARS + env.WORLD_SIZE_VARS}
    return subprocess.run([sys.executable, "-m", "nodemap", *args], env=e | extra, capture_output=True,
                          text=True, timeout=60)


def test_malformed_world_size_is_one_line_exit_2():
    # was: ValueError traceback through collectives' own copy of the size variables
    r = _cli(["bench", "nccl"], PMI_SIZE="abc")
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "PMI_SIZE='abc'" in lines[0], r.stderr


def test_readers_use_the_one_list():
    # every reader of launcher rank variables takes them from nodemap.env
    from nodemap.check import mpi
    from nodemap.mapping import emit
    from nodemap.watch import monitor as watch

    assert mpi.RANK_VARS is env.MPI_JOB_VARS
    assert set(emit.VISIBILITY) <= set(env.GPU_VISIBILITY_VARS)
    assert env.global_rank_or({"PMIX_RANK": "7"}, 0) == 7


def test_every_visibility_variable_is_recorded():
    # the check's inventory and watch's header recorded CUDA/ROCR/HIP but not ZE_AFFINITY_MASK
    from nodemap.check.inventory import relevant_environment
    from nodemap.watch import monitor as watch

    given = {v: "0" for v in env.GPU_VISIBILITY_VARS} | {"ZE_ENABLE_PCI_ID_DEVICE_ORDER": "1"}
    assert set(relevant_environment(given)) == set(given)
    assert set(env.GPU_VISIBILITY_VARS) <= set(watch.ENV_KEYS)
