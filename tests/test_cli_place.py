"""`nodemap place` end to end, as a user runs it."""

import json
import subprocess
import sys

import numpy as np
import pytest

from nodemap.placement.counts import AccessCounts
from nodemap.placement.planner import MiB, Layout, PlacementPlan


def nodemap(*args):
    return subprocess.run([sys.executable, "-m", "nodemap", *args], capture_output=True, text=True, timeout=60)


@pytest.fixture
def counts_file(tmp_path):
    rng = np.random.default_rng(3)
    lay = Layout((64 * MiB, 30 * MiB), 2 * MiB)
    c = rng.zipf(1.3, (lay.n_chunks, 2))
    c[5] = 0
    f = tmp_path / "counts.npz"
    AccessCounts(lay, c).save(f)
    return f


def test_plan_prints_saves_and_reloads(counts_file, tmp_path):
    out = tmp_path / "plan.npz"
    r = nodemap("place", "plan", "--counts", str(counts_file), "--budget", "60MiB", "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert "predicted local fraction" in r.stdout and "saved:" in r.stdout
    plan = PlacementPlan.load(out)
    assert plan.layout.n_chunks == 47 and (plan.bytes_per_gpu() <= 60 * MiB).all()
    r = nodemap("place", "show", str(out), "--json")
    assert json.loads(r.stdout)["chunks"] == 47


def test_plan_json_rechunk_and_replication(counts_file):
    r = nodemap("place", "plan", "--counts", str(counts_file), "--budget", "60MiB,70MiB", "--chunk", "8MiB",
                "--replicate", "0%", "--json")
    s = json.loads(r.stdout)
    assert r.returncode == 0 and s["chunk_size"] == 8 * MiB and s["replicated_chunks"] == 0
    assert s["chunks"] == 8 + 4 and sum(s["owned_chunks_per_gpu"]) == 12


@pytest.mark.parametrize(
    "args,msg",
    [
        (["--budget", "40MiB"], "does not fit"),
        (["--budget", "1MiB,2MiB,3MiB"], "names 3 GPUs"),
        (["--budget", "60MiB", "--chunk", "3MiB"], "not a multiple"),
        (["--budget", "lots"], "--budget 'lots': not a size"),
    ],
)
def test_bad_requests_one_line_exit_2(counts_file, args, msg):
    r = nodemap("place", "plan", "--counts", str(counts_file), *args)
    assert r.returncode == 2 and msg in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


def test_missing_and_garbage_counts(tmp_path):
    r = nodemap("place", "plan", "--counts", str(tmp_path / "none.npz"), "--budget", "1GiB")
    assert r.returncode == 2 and "no such counts file" in r.stderr
    bad = tmp_path / "bad.npz"
    bad.write_text("not numpy")
    r = nodemap("place", "plan", "--counts", str(bad), "--budget", "1GiB")
    assert r.returncode == 2 and "cannot read" in r.stderr
