"""The GPU benchmarks on a real GPU (skipped without CuPy and a device)."""

from __future__ import annotations

import argparse
import json

import pytest

cp = pytest.importorskip("cupy")
try:
    NGPU = cp.cuda.runtime.getDeviceCount()
except Exception:  # no driver
    NGPU = 0
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(NGPU == 0, reason="no CUDA GPU visible")]

from nodemap import cli  # noqa: E402
from nodemap.bench import resultfile  # noqa: E402
from nodemap.bench.gpu import copies, common as gc, memory as gpu_memory  # noqa: E402
from nodemap.errors import NodemapError  # noqa: E402


def _json(argv, capsys):
    assert cli.main(argv + ["--json", "--quiet"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("unroll", ["1", "4"])
def test_bench_gpu_small(capsys, unroll):
    d = _json(["bench", "gpu", "--size", "64MiB", "--repeats", "3", "--unroll", unroll], capsys)
    got = {(r["metric"], r["params"]["dtype"], r["params"]["mode"]) for r in d["results"]}
    for k in gpu_memory.KERNELS:
        for t in gpu_memory.DTYPES:
            assert (k, t, "single") in got
    assert all(r["verified"] and r["path_class"] == "HBM" for r in d["results"])
    for r in resultfile.convert("stdout", d).results:
        # above the datasheet means the timing is wrong, not the GPU fast (efficiency: best / peak,
        # derived by the reader, not written: docs/benchmarks.md)
        assert r.efficiency is None or r.efficiency < 1.02, r
        # auto block (the default): each kernel says which block it was timed with
        want = {1024} if r.metric == "dot" else set(gpu_memory.AUTO_BLOCKS)
        assert r.params["block"] in want and r.params["block_choice"].startswith("auto"), r.params


def test_bench_gpu_fixed_block_is_kept(capsys):
    d = _json(["bench", "gpu", "--size", "64MiB", "--repeats", "2", "--kernels", "copy,triad", "--block", "256"], capsys)
    assert {r["params"]["block"] for r in d["results"]} == {256}
    assert all(r["verified"] and r["params"]["block_choice"] == "fixed" for r in d["results"])


def test_gold_check_catches_wrong_values():
    g = gc.describe(cp, 0, None)
    with gc.device_memory(cp), gc.gate(cp) as gate:
        arrs = gpu_memory.Arrays(cp, g, "float32", gpu_memory.elements(g, 4, 1 << 20))
        try:
            gpu_memory._run_all(cp, gate, [arrs], ("init", "copy"), {"init": 256, "copy": 256})
            with pytest.raises(NodemapError, match="gold"):
                arrs.check((0.1, 0.2, 0.5, 0.0), ("copy",))  # c holds 0.1, not 0.5
            arrs.check((0.1, 0.2, 0.1, 0.0), ("copy",))
        finally:
            arrs.free()


def test_bench_copies_every_case(capsys):
    d = _json(["bench", "copies", "--size", "8MiB", "--repeats", "2", "--iters", "2", "--latency"], capsys)
    metrics = {r["metric"] for r in d["results"]}
    for e in ("ce", "sm"):
        assert {f"h2d_{e}", f"d2h_{e}", f"h2d+d2h_{e}", f"local_{e}"} <= metrics
        if NGPU > 1:
            assert {f"d2d_write_{e}", f"d2d_read_{e}", f"d2d_bidir_{e}"} <= metrics
    if NGPU > 1:
        assert "d2d_staged" in metrics
    assert {"load_latency", "h2d_copy_latency", "d2h_copy_latency"} <= metrics
    lat = [r for r in d["results"] if r["metric"] == "load_latency"]
    assert all(100 < r["stats"]["median"] < 50_000 for r in lat)  # ns: DRAM-like, not cache or hang


def test_copy_check_counts_poisoned_words():
    ns = argparse.Namespace(repeats=1, iters=1, host_memory="each")
    devs = [gc.describe(cp, 0, None)]
    with gc.device_memory(cp), gc.gate(cp) as gate, copies.Bench(cp, gate, devs, None, 1 << 20, ns) as b:
        buf = b.dst[0][0]
        b.fill(buf, copies.POISON_SEED)
        assert b.bad_words(buf, 0) == b.words
        b.fill(buf, copies.SRC_SEED)
        buf[7] += 1
        assert b.bad_words(buf, 0) == 1


def test_gate_times_queued_work():
    a = cp.ones(1 << 24, dtype="float32")
    cp.multiply(a, 1, out=a)  # compile and load outside the timed region

    def double(stream):
        with stream:
            cp.multiply(a, 2, out=a)  # no allocation: nothing waits for the spin kernel

    with gc.gate(cp) as gate:
        t = gc.time_streams(cp, gate, [gc.Job(0, cp.cuda.Stream(non_blocking=True), double)])
    assert len(t) == 1 and 0 < t[0] < 1.0
    assert float(a[0]) == 2.0


def test_refuses_more_than_free_memory():
    free, _ = cp.cuda.runtime.memGetInfo()
    with pytest.raises(NodemapError, match="free"):
        gc.ensure_free(cp, 2 * free, "test")
