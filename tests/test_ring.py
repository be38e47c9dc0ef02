"""`nodemap bench ring`: overlap arithmetic, neighbours, transport choice,
and a GPU run that skips without one."""

import subprocess
import sys

import pytest

from nodemap.bench.comm import mpi_common as mc
from nodemap.bench.comm import ring


def test_overlap_efficiency_bounds():
    assert ring.overlap_efficiency(10, 10, 10) == pytest.approx(1.0)  # fully hidden
    assert ring.overlap_efficiency(10, 10, 20) == pytest.approx(0.0)  # serialized
    assert ring.overlap_efficiency(30, 10, 35) == pytest.approx(0.5)
    assert ring.overlap_efficiency(0, 10, 10) == 0.0


@pytest.mark.parametrize("n", [1, 2, 5])
def test_neighbours_are_periodic(n):
    for r in range(n):
        left, right = ring.neighbours(r, n)
        assert ring.neighbours(right, n)[0] == r and ring.neighbours(left, n)[1] == r


def FakeCtx(comm, nccl_why=""):
    from nodemap.bench.comm.world import World

    return World(comm, nccl_why=nccl_why)


def test_transports_are_chosen_by_mode_and_awareness():
    run, why = ring.usable(FakeCtx(None), list(ring.TRANSPORTS), None)
    assert run == ["peer", "nccl"] and len(why) == 2 and "mpiexec" in why[0]
    not_aware = mc.Awareness(gpu=True, aware=False, how="MPIX_Query_cuda_support() = 0")
    run, why = ring.usable(FakeCtx(object()), list(ring.TRANSPORTS), not_aware)
    assert run == ["nccl", "mpi-staged"]
    assert any("MPI is not CUDA-aware: measuring the staged path instead" in w for w in why)
    aware = mc.Awareness(gpu=True, aware=True, how="", proven=True)
    assert ring.usable(FakeCtx(object()), ["mpi-aware"], aware)[0] == ["mpi-aware"]
    # ranks sharing a GPU: NCCL refuses them, so nccl is skipped with the world's reason
    run, why = ring.usable(FakeCtx(object(), "ranks 0,1 share n:GPU0: NCCL refuses"), ["nccl", "mpi-staged"], aware)
    assert run == ["mpi-staged"] and why == ["nccl: ranks 0,1 share n:GPU0: NCCL refuses"]


def test_halo_addresses_lie_at_the_field_ends():
    class Buf:
        class data:
            ptr = 1000

    f = ring.Field(lo=None, h=4, interior=16, data=Buf(), work=None, comp=None)
    assert [f.addr(p) for p in ("halo_l", "edge_l", "edge_r", "halo_r")] == [1000, 1016, 1064, 1080]


def test_ring_on_gpus():
    cp = pytest.importorskip("cupy")
    try:  # CuPy installed on a machine without a driver raises here: skip, not fail
        count = cp.cuda.runtime.getDeviceCount()
    except Exception:
        count = 0
    if count < 1:
        pytest.skip("no GPU")
    p = subprocess.run([sys.executable, "-m", "nodemap.cli", "bench", "ring", "--sizes", "64KiB", "--steps", "2",
                        "--repeats", "2", "-q"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "peer" in p.stdout and "nccl" in p.stdout
