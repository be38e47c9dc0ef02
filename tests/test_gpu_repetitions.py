"""The GPU kinds' repetitions go through the driver's loop (driver.samples).
bench gpu: every kernel once per round, --repeats rounds, the gold replay
over exactly the rounds run, a Ctrl-C that keeps what was measured. bench copies: a warm-up then --repeats, every word checked after; a
Ctrl-C keeps the repetitions timed. GPU work is replaced by
stand-ins: no GPU here."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from nodemap.bench import driver, interrupt
from nodemap.bench.gpu import devices
from nodemap.bench.gpu import memory as gm


class FakeArrays:
    checked: list = []

    def __init__(self, cp, dev, dtype, n):
        self.dev, self.n = dev, 1 << 20

    def fn(self, name, unroll):
        return SimpleNamespace(max_threads_per_block=1024)

    def check(self, expect, kernels):
        FakeArrays.checked.append(expect)
        return "checked"

    def free(self):
        pass


@pytest.fixture
def fake(monkeypatch):
    rounds = []
    FakeArrays.checked = []

    def run_all(cp, gate, arrs, kernels, blocks, unroll=1, grid_per_sm=0):
        rounds.append(tuple(kernels))
        return {k: [1e-3] for k in kernels}

    monkeypatch.setattr(gm, "Arrays", FakeArrays)
    monkeypatch.setattr(gm, "_run_all", run_all)
    interrupt.reset()
    yield rounds
    interrupt.reset()


def _gpu():
    return devices.Gpu(0, "fake", 80 << 30, 132, 50 << 20, "0000:00:00.0", key="GPU0")


def _stream(kernels, repeats, block=256):
    s = gm.Settings(tuple(kernels), 1 << 23, repeats, block)
    return gm.Stream(SimpleNamespace(dtype=np.dtype), None, [_gpu()], "float64", s)


def test_every_kernel_once_a_round_and_the_gold_over_those_rounds(fake):
    rs = driver.measure_case(_stream(gm.KERNELS, 4), driver.Repeats(count=4))
    assert [r.metric for r in rs] == list(gm.KERNELS) and all(r.stats.n == 4 for r in rs)
    # init, 4 classic rounds, 4 nstream rounds; no warm-up (fixed --block: no calibration either)
    assert fake == [("init",)] + [gm.CLASSIC] * 4 + [("nstream",)] * 4
    assert FakeArrays.checked == [gm.gold("float64", [gm.CLASSIC] * 4 + [("nstream",)] * 4, 1 << 20)]


def test_auto_blocks_calibrate_each_part_before_its_rounds_and_the_gold_counts_them(fake):
    rs = driver.measure_case(_stream(gm.KERNELS, 3, block=0), driver.Repeats(count=3))
    cal = 1 + len(gm.AUTO_BLOCKS) * gm.CALIBRATION_LAUNCHES  # one settling round, then every candidate
    assert fake == [("init",)] + [gm.CLASSIC] * (cal + 3) + [("nstream",)] * (cal + 3)
    assert FakeArrays.checked == [gm.gold("float64", fake[1:], 1 << 20)]
    assert all(r.stats.n == 3 and r.params["block_choice"].startswith("auto") for r in rs)


def test_ctrl_c_in_the_rounds_keeps_what_was_measured(fake, monkeypatch):
    real = gm._run_all

    def stop_in_round_2(*a, **k):
        if len(fake) == 2:
            interrupt.request()
        return real(*a, **k)

    monkeypatch.setattr(gm, "_run_all", stop_in_round_2)
    rs = driver.measure_case(_stream(("triad", "nstream"), 5), driver.Repeats(count=5))
    assert len(fake) == 3  # init + 2 triad rounds, then stopped: no nstream round
    assert [(r.metric, r.stats.n) for r in rs] == [("triad", 2)] and "interrupted after 2 of 5" in rs[0].notes[-1]
    assert FakeArrays.checked == [gm.gold("float64", [("triad",)] * 2, 1 << 20)]  # checked over the rounds run


def test_ranks_repeating_together_alternate_the_parts_and_the_gold_follows(fake, monkeypatch):
    from nodemap.bench import barrier

    monkeypatch.setattr(barrier, "active", lambda: True)
    monkeypatch.setattr(barrier, "wait", lambda: None)
    rs = driver.measure_case(_stream(("copy", "nstream"), 2), driver.Repeats(count=2))
    assert fake == [("init",), ("copy",), ("nstream",), ("copy",), ("nstream",)]
    assert FakeArrays.checked[-1] == gm.gold("float64", fake[1:], 1 << 20)
    assert [r.stats.n for r in rs] == [2, 2]


def _copy_pattern(calls, stop_at=None, bad=0):
    from nodemap.bench.gpu import copies

    def timed():
        calls.append("copy")
        if stop_at is not None and len(calls) == stop_at:
            interrupt.request()
        return 1e-3

    bench = SimpleNamespace(repeats=3, iters=1, size=1 << 20, words=1 << 18, cp=None, gate=None, messages=[])
    copy = copies.Copy("h2d_ce", "NUMA0", "GPU0", "NUMA0 -> GPU0", "PCIe", None, 1 << 20, [],
                       [lambda: bad], host_timed=timed)
    return copies.Pattern(bench, lambda: copy)


def test_copies_time_a_warm_up_then_the_repeats_through_the_driver():
    interrupt.reset()
    calls: list = []
    (r,) = driver.measure_case(_copy_pattern(calls), driver.Repeats(count=3))
    assert len(calls) == 4 and r.stats.n == 3 and r.stats.best == pytest.approx(1.048576)  # 1 MiB per ms
    calls = []
    (r,) = driver.measure_case(_copy_pattern(calls, stop_at=3), driver.Repeats(count=3))  # Ctrl-C in repetition 2
    assert len(calls) == 3 and r.stats.n == 2 and "interrupted after 2 of 3" in r.notes[-1]
    calls = []
    with pytest.raises(driver.Stopped):  # Ctrl-C in the warm-up: nothing timed, the case ends (the run keeps the rest)
        driver.measure_case(_copy_pattern(calls, stop_at=1), driver.Repeats(count=3))
    interrupt.reset()


def test_copies_refuse_a_destination_that_differs_from_the_source():
    from nodemap.errors import NodemapError

    interrupt.reset()
    with pytest.raises(NodemapError, match="3 words differ"):
        driver.measure_case(_copy_pattern([], bad=3), driver.Repeats(count=2))


def test_a_plan_that_fails_frees_the_gate_and_the_pools(monkeypatch):
    """bench copies refused for want of GPU memory (check goes on to its next
    step in the same process): the spin gate's pinned memory and CuPy's pools
    are given back, not held until the process ends."""
    from nodemap.bench.gpu import common as gc, copies
    from nodemap.errors import NodemapError

    released: list = []

    class track:  # no generator: one dropped unclosed would run its finally when collected
        def __init__(self, what):
            self.what = what

        def __enter__(self):
            return self.what

        def __exit__(self, *exc):
            released.append(self.what)

    class NoRoom:
        def __init__(self, *a):
            self.messages = []

        def __enter__(self):
            raise NodemapError("bench copies needs 3 GiB on CUDA device 0 but only 1 GiB are free")

        def __exit__(self, *exc):
            pass

    monkeypatch.setattr(gc, "open_bench", lambda opts, what: (None, None, [_gpu()], SimpleNamespace(
        environment={}, messages=[])))
    monkeypatch.setattr(gc, "device_memory", lambda cp: track("pools"))
    monkeypatch.setattr(gc, "gate", lambda cp: track("gate"))
    monkeypatch.setattr(copies, "Bench", NoRoom)
    with pytest.raises(NodemapError, match="free"):
        copies.plan(copies.Options())
    assert sorted(released) == ["gate", "pools"]
    released.clear()
    monkeypatch.setattr(gm, "Stream", lambda *a: (_ for _ in ()).throw(NodemapError("bad dtype")))
    with pytest.raises(NodemapError, match="bad dtype"):
        gm.plan(gm.Options())
    assert sorted(released) == ["gate", "pools"]
