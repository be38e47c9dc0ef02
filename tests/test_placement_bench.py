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
