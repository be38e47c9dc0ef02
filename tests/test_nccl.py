"""`nodemap bench nccl`: nccl-tests' formulas, the expected-value model of
every collective (checked against a numpy reference of its semantics), and
a GPU run that skips without one."""

import os
import subprocess
import sys

import numpy as np
import pytest

from nodemap.bench.comm import collectives as co
from nodemap.errors import NodemapError


@pytest.mark.parametrize("op,n,f", [("all_reduce", 2, 1.0), ("all_reduce", 8, 1.75), ("all_gather", 4, 0.75),
                                    ("reduce_scatter", 8, 0.875), ("alltoall", 2, 0.5), ("broadcast", 8, 1.0),
                                    ("reduce", 4, 1.0), ("sendrecv", 2, 1.0)])
def test_bus_factors_are_nccl_tests(op, n, f):
    assert co.bus_factor(op, n) == pytest.approx(f)


def test_counts_split_by_ranks_and_refuse_too_small():
    assert co.counts("all_gather", 64, 2) == (8, 16)
    assert co.counts("reduce_scatter", 64, 2) == (16, 8)
    assert co.counts("alltoall", 64, 4) == (16, 16)
    assert co.counts("all_reduce", 64, 4) == (16, 16)
    assert co.counts("all_gather", 8, 4) == (0, 0)


def reference(op, n, size):
    """What each rank receives, from numpy semantics of the collective."""
    sc, rc = co.counts(op, size, n)
    start = {"all_gather": lambda r: r * sc}.get(op, lambda r: 0)
    send = [co.values(np, r, start(r), sc) for r in range(n)]
    total = sum(send)
    part = sc // n
    return {
        "all_reduce": lambda r: total,
        "broadcast": lambda r: send[0],
        "reduce": lambda r: total if r == 0 else None,
        "all_gather": lambda r: np.concatenate(send),
        "reduce_scatter": lambda r: total[r * rc:(r + 1) * rc],
        "alltoall": lambda r: np.concatenate([send[j][r * part:(r + 1) * part] for j in range(n)]),
        "sendrecv": lambda r: send[(r - 1) % n],
    }[op]


@pytest.mark.parametrize("op", co.OPS)
@pytest.mark.parametrize("n", [1, 2, 3, 8])
def test_expected_values_match_the_collectives_semantics(op, n):
    size = 4 * 8 * 21  # divisible by every n here
    ref = reference(op, n, size)
    for r in range(n):
        want, got = ref(r), co.expected(np, op, r, n, size)
        if want is None:
            assert got is None
        else:
            np.testing.assert_array_equal(got, want)


def test_rank_data_differs_so_a_mixup_is_caught():
    assert not np.array_equal(co.values(np, 0, 0, 16), co.values(np, 1, 0, 16))


def test_bad_ops_are_one_line_errors():
    with pytest.raises(NodemapError, match="--ops"):
        co.parse_ops("all_reduce,allreduce")


def test_nvls_is_off_before_nccl_starts():
    code = ("import os; os.environ['NCCL_NVLS_ENABLE']='1'\n"
            "from nodemap.bench.comm import world\n"
            "try:\n    world.import_nccl()\nexcept Exception:\n    pass\n"
            "print(os.environ['NCCL_NVLS_ENABLE'])")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert p.stdout.strip() == "0"


def test_without_gpu_the_command_says_why():
    from nodemap import cli

    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() > 0:
            pytest.skip("a GPU is visible: the no-GPU path cannot be shown here")
    except Exception:
        pass
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    p = subprocess.run([sys.executable, "-m", "nodemap.cli", "bench", "nccl", "--mode", "single", "--sizes", "8"],
                       capture_output=True, text=True, timeout=30, env=env)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1
    assert "CuPy" in p.stderr or "GPU" in p.stderr
    assert cli  # imported for the module path


def test_single_process_all_gpus_on_a_gpu():
    cp = pytest.importorskip("cupy")
    try:  # CuPy installed on a machine without a driver raises here: skip, not fail
        count = cp.cuda.runtime.getDeviceCount()
    except Exception:
        count = 0
    if count < 1:
        pytest.skip("no GPU")
    p = subprocess.run([sys.executable, "-m", "nodemap.cli", "bench", "nccl", "--mode", "single", "--sizes",
                        "8:64KiB", "--iters", "2", "--repeats", "2", "-q"], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    assert "all_reduce" in p.stdout


def test_algbw_median_is_the_median_of_the_figures():
    # was sorted(algbw)[len // 2]: the upper middle for an even count, against Stats.median's mean of the two
    r = co.result("all_reduce", 10**9, 2, False, 20, [1.0, 0.5], "GPU0 <-> GPU1")
    assert r.params["algbw_median"] == 1.5
    assert r.stats.median == r.params["algbw_median"] * r.params["bus_factor"]
