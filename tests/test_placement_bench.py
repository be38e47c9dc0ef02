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
