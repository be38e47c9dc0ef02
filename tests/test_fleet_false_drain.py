"""benchmarks/fleet_false_drain.py, small: 20 nodes, 3 seeds. Its noise
comes from the recorded H100 check documents and its judging is the
fleet's own (remeasure.suspects, a re-measure, merge.merge)."""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import fleet_false_drain as bench  # noqa: E402

GPU_KEYS = ("gpu/0/hbm_triad", "h2d/numa0->gpu0", "d2h/gpu0->numa0")  # repetitions within 1.2%


def test_small_fleet_no_false_drain_and_quiet_figures_faults_found():
    r = bench.scenario("h100", 20, 3, 2)
    assert r["injected"] == 6 and r["false_drains"] == 0, [x["false_drain_reasons"] for x in r["runs"]]
    assert r["spreads"]["gpu/0/hbm_triad"] < 0.01 and r["spreads"]["host/stream/triad"] > 0.04  # the real files'
    quiet = [(h, k) for run in r["runs"] for h, (k, _) in run["injected"].items() if k in GPU_KEYS]
    assert quiet  # these seeds put faults on the quiet figures
    for run in r["runs"]:
        for host, (key, scale) in run["injected"].items():
            assert 0.8 <= scale <= 0.9
            if key in GPU_KEYS:
                assert host in run["found"], (key, scale, run)


def test_writes_json_and_markdown(tmp_path):
    out = tmp_path / "fd"
    assert bench.main(["--nodes", "20", "--seeds", "1", "--faults", "1", "--scenarios", "h100", "--out", str(out),
                       "--machine", "2-vCPU CI VM", "--date", "20261127"]) == 0
    md = (tmp_path / "fd.md").read_text()
    assert "2-vCPU CI VM" in md and "| h100 | 20 | 1 | 1 |" in md and (tmp_path / "fd.json").exists()
