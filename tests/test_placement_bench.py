"""The placement benchmark's pure parts, on the CPU: per-GPU rates and --gpus."""

from types import SimpleNamespace

import pytest

from nodemap.bench import options
from nodemap.bench.app import placement as pb
from nodemap.errors import NodemapError


def test_per_gpu_rates_are_medians_of_each_gpus_own_time():
    # three repetitions, two GPUs: GPU 1 always twice as slow
    per_gpu = [[1.0, 2.0], [0.5, 1.0], [2.0, 4.0]]
    assert pb.per_gpu_rates(100, per_gpu) == [100.0, 50.0]


def _cp(n):
    return SimpleNamespace(cuda=SimpleNamespace(runtime=SimpleNamespace(getDeviceCount=lambda: n)))


@pytest.mark.parametrize("spec, words", [("0,0", "twice"), ("0,2", "0-1"), ("a,b", "ordinals")])
def test_bad_gpu_lists_are_named(spec, words):
    with pytest.raises(NodemapError, match=words):
        options.gpus(spec, _cp(2).cuda.runtime.getDeviceCount())


def test_gpu_lists():
    assert options.gpus(None, 3) == [0, 1, 2]
    assert options.gpus("2,0", 3) == [2, 0]


class _FakeBench:
    """A Bench whose data and placement are stand-ins (no GPU): two GPUs."""

    def __init__(self, fits=True):
        self.fits, self.cp = fits, SimpleNamespace(get_default_memory_pool=lambda: SimpleNamespace(
            free_all_blocks=lambda: None))

    def data(self, s):
        return [], ["k0", "k1"], [10, 11]

    def prepare(self, strat, keys, expected, analysis, costs):
        if not self.fits:
            raise NodemapError("full replication does not fit the per-GPU budget")
        return pb.Tables([1, 1], [], costs={"first_iteration_s": 0.5})

    def _timed(self, tables, keys, expected, per_gpu):
        per_gpu.append([1.0, 2.0])
        return 2.0


def test_a_strategy_that_does_not_fit_is_skipped_with_its_reason():
    from nodemap.bench import driver

    with pytest.raises(driver.Skipped, match=r"^s=1.0 replicate-all: skipped: full replication does not fit"):
        pb.Lookups(_FakeBench(fits=False), 1.0, "replicate-all").setup()


def test_a_repetition_is_the_slowest_gpu_and_keeps_each_gpus_seconds():
    case = pb.Lookups(_FakeBench(), 0.0, "round-robin")
    case.setup()
    assert case.run() == (2.0, [1.0, 2.0]) and case.figure(case.run()) == 2.0
    case.teardown()
    assert case.t is None


def _gpu_standins(got):
    """A Bench on stand-ins for CuPy and the kernels: two GPUs whose gathers give `got`."""
    from contextlib import nullcontext

    arr = SimpleNamespace(data=SimpleNamespace(ptr=1), get=lambda: [got.pop(0)])
    event = SimpleNamespace(record=lambda: None, synchronize=lambda: None)
    cp = SimpleNamespace(
        uint64=int, empty=lambda *a, **k: arr, zeros=lambda *a, **k: SimpleNamespace(get=arr.get),
        get_default_memory_pool=lambda: SimpleNamespace(free_all_blocks=lambda: None),
        cuda=SimpleNamespace(Device=lambda dev: nullcontext(), Event=lambda: event,
                             get_elapsed_time=lambda a, b: 1.0))
    b = object.__new__(pb.Bench)
    b.cp, b.cfg, b.rows, b.words = cp, SimpleNamespace(devices=[0, 1], table=64), 4, 2
    b._fill = lambda *a, **k: None
    b._launch = lambda *a, **k: None
    b.data = lambda s: ([], ["k0", "k1"], [10, 11])
    return b


def test_a_checksum_mismatch_is_a_failed_verification_not_a_crash_or_a_skip():
    # setup's checked gather: GPU 1 gathers 12 where the row formula says 11
    with pytest.raises(pb.ChecksumMismatch, match=r"copies: .*\[10, 12\] differ from the row formula's \[10, 11\]"):
        pb.Lookups(_gpu_standins([10, 12]), 0.0, "copies").setup()
    assert issubclass(pb.ChecksumMismatch, NodemapError)  # what check records as the kind's failure


def test_a_checksum_that_changes_between_repetitions_fails_verification():
    case = pb.Lookups(_gpu_standins([10, 11, 10, 13]), 0.0, "copies")
    case.setup()
    with pytest.raises(pb.ChecksumMismatch, match=r"GPU 1: .*changed between repetitions \(13 != 11\)"):
        case.run()
