"""Placement on real GPUs: profiler counts, applier hints, the benchmark. Skips without CUDA."""

import numpy as np
import pytest

cp = pytest.importorskip("cupy")
try:
    NGPU = cp.cuda.runtime.getDeviceCount()
except Exception:  # no driver
    NGPU = 0
pytestmark = pytest.mark.skipif(NGPU < 1, reason="no CUDA GPU visible")

from nodemap.placement.apply import apply_plan  # noqa: E402
from nodemap.placement.planner import MiB, REPLICATED, Layout, Replication, plan_placement  # noqa: E402
from nodemap.placement.profiler import Profiler, header  # noqa: E402

COUNT_SRC = header() + r"""
extern "C" __global__ void touch(const long long *offs, unsigned long long n, unsigned long long *counts, unsigned int shift) {
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    if (i < n) nm_count_access(counts, offs[i], shift);
}
"""


def test_profiler_counts_every_access_exactly():
    lay = Layout((64 * MiB,), 2 * MiB)
    prof = Profiler(lay, [0])
    rng = np.random.default_rng(1)
    offs = rng.integers(0, 64 * MiB, 1 << 20)
    offs[: 1 << 16] = 5 * MiB  # a hot chunk hit by whole warps
    want = np.bincount(offs // (2 * MiB), minlength=lay.n_chunks)
    f = cp.RawModule(code=COUNT_SRC).get_function("touch")
    d = cp.asarray(offs)
    f(((len(offs) + 255) // 256,), (256,), (d, cp.uint64(len(offs)), cp.uint64(prof.counts_ptr(0)), cp.uint32(prof.chunk_shift)))
    got = prof.collect().counts[:, 0]
    assert (got == want).all()


@pytest.mark.skipif(NGPU < 2, reason="needs 2 GPUs")
def test_apply_sets_and_verifies_hints():
    lay = Layout((64 * MiB,), 2 * MiB)
    counts = np.zeros((32, 2), dtype=np.int64)
    counts[:16, 0] = 5
    counts[16:, 1] = 5
    counts[0] = [100, 100]  # the hottest: replicated
    plan = plan_placement(lay, counts, [40 * MiB, 40 * MiB], Replication("bytes", 2 * MiB))
    assert plan.decision[0] == REPLICATED
    mem = cp.cuda.malloc_managed(64 * MiB)
    rep = apply_plan(plan, [(mem.ptr, 64 * MiB)], [0, 1])
    assert rep.verified, rep.problems
    assert rep.ranges == 3


def _bench(tmp_path, *extra):
    import json
    import subprocess
    import sys

    out = tmp_path / f"p{len(list(tmp_path.iterdir()))}.json"
    cmd = [sys.executable, "-m", "nodemap", "bench", "placement", "--table", "1GiB", "--lookups", "1048576",
           "--zipf", "1.0", "--chunks", "2MiB", "--replication", "0,5%", "--iterations", "2",
           "--gpus", "0,1", "-o", str(out), *extra]
    subprocess.run(cmd, check=True, timeout=600)
    return json.loads(out.read_text())


@pytest.mark.skipif(NGPU < 2, reason="needs 2 GPUs")
def test_bench_placement_end_to_end(tmp_path):
    """The CLI as a user runs it: every strategy verified, analysis predicts what it measures."""
    rs = _bench(tmp_path)
    res = rs["results"]
    strategies = {r["params"]["strategy"] for r in res}
    assert {"round-robin", "copies", "analysis chunk=2MiB rep=5%"} <= strategies, (strategies, rs["messages"])
    assert all(r["verified"] for r in res)
    for r in res:
        p = r["params"]
        per = p["lookups_per_s_per_gpu"]  # each GPU's own rate; the total is set by the slowest
        assert len(per) == 2 and min(per) > 0
        assert 0.9 * len(per) * min(per) <= r["stats"]["median"] <= 1.1 * sum(per), (per, r["stats"])
        if p["strategy"].startswith("analysis"):
            assert abs(p["predicted_local_fraction"] - p["measured_local_fraction"]) < 0.05


@pytest.mark.skipif(NGPU < 2, reason="needs 2 GPUs")
def test_bench_placement_objects_keep_hot_rows_together(tmp_path):
    """Hot rows in chunk-sized objects: chunks inherit the skew, so the plan
    serves more lookups locally than with every row scattered on its own."""
    def local(rs):
        return {r["params"]["strategy"]: r["params"]["measured_local_fraction"] for r in rs["results"]}

    rows = local(_bench(tmp_path, "--strategies", "analysis"))
    objects = local(_bench(tmp_path, "--strategies", "analysis", "--object-bytes", "2MiB"))
    key = "analysis chunk=2MiB rep=5%"
    assert objects[key] > rows[key] + 0.05, (rows, objects)
