"""Pair test buffers: host, device handed to a CUDA-aware MPI, device staged
through pinned host memory; which one a pair uses. Device memory is
tests/fake_cupy.py's host memory here (the GPU campaign runs the real one:
docs/fleet.md); the copies, poisoning and the decision are the logic."""

import sys

import pytest

import fake_cupy
from nodemap.fleet import pairtest

AWARE = {"gpu": True, "aware": True, "how": "MPIX_Query_cuda_support() = 1"}
PLAIN = {"gpu": True, "aware": False, "how": "MPIX_Query_cuda_support() = 0"}
NOGPU = {"gpu": False, "aware": False, "how": "no GPU visible to CuPy"}


@pytest.fixture
def cupy(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy)
    return fake_cupy


def wire(src, dst, n):
    """What MPI does: bytes from the sender's view into the receiver's."""
    dst.view(0, n)[:] = src.view(0, n)


@pytest.mark.parametrize("kind", [pairtest.HostBuf, pairtest.DeviceBuf, pairtest.StagedBuf])
def test_a_buffer_kind_carries_the_pattern_and_poison_hides_stale_data(cupy, kind):
    n = 1000
    want = pairtest.pattern(n, 7)
    a, b = kind(n), kind(n)
    a.load(want)
    b.poison()
    assert b.read() == bytes([pairtest.POISON]) * n
    a.to_wire(0, n)
    wire(a, b, n)
    b.from_wire(0, n)
    assert b.read() == want


def test_staged_device_memory_goes_through_its_host_copy_both_ways(cupy):
    n = 512
    want = pairtest.pattern(n, 3)
    a, b = pairtest.StagedBuf(n), pairtest.StagedBuf(n)
    a.load(want)
    assert bytes(a.view(0, n)) != want  # MPI sees the pinned copy, filled only by to_wire
    a.to_wire(0, n)
    wire(a, b, n)
    assert b.read() != want  # arrived on the host, not yet on the device
    b.from_wire(0, n)
    assert b.read() == want and pairtest.StagedBuf.transport == "staged (pinned host)"


@pytest.mark.parametrize("mine, theirs, mode, says", [
    (AWARE, AWARE, "cuda-aware", "CUDA-aware"),
    (AWARE, PLAIN, "staged", "not CUDA-aware"),
    (PLAIN, AWARE, "staged", "not CUDA-aware"),
    (PLAIN, PLAIN, "staged", "MPIX_Query_cuda_support() = 0"),
    (AWARE, NOGPU, None, "no GPU visible on one side"),
    (NOGPU, NOGPU, None, "no GPU visible on both sides"),
    (None, AWARE, None, "skipped"),
])
def test_device_mode_is_the_same_on_both_sides(mine, theirs, mode, says):
    got, why = pairtest.device_mode(mine, theirs)
    assert got == mode and says in why
    assert pairtest.device_mode(theirs, mine)[0] == mode


def test_no_gpu_no_cupy_is_a_capability_not_an_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy raises
    pairtest.device_capability.cache_clear()
    try:
        assert pairtest.device_capability() == NOGPU
    finally:
        pairtest.device_capability.cache_clear()


def test_tags_of_a_round_stay_inside_it():
    used = [o for o in pairtest.OFFSET.values()] + [pairtest.PROOF]
    assert max(used) + pairtest.AGREE < pairtest.STEP and min(used) > 0
