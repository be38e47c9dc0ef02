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


def test_a_lossy_rail_s_sibling_gets_the_same_forwarder_losing_nothing():
    # the forwarder alone costs a rail as much as 1% loss (network_faults_20261202_rails.md): the loss row
    # forwards the node's other rails too, so rail against rail compares the loss alone
    rails = ["rail0", "rail1", "rail2"]
    assert bench.fault_links(("loss 1%", "n2", "rail1"), rails) == [
        ("n2", "rail1", ["loss=1%"]), ("n2", "rail0", ["delay=1us"]), ("n2", "rail2", ["delay=1us"])]
    assert bench.fault_links(("delay +2 ms", "n3", "rail0"), rails) == [("n3", "rail0", ["delay=2ms"])]
    assert bench.fault_links(None, rails) == []


def test_a_run_keeps_its_single_rail_pair_records(tmp_path):
    lines = ['{"a": "n1", "b": "n2", "key": "mpi bw host rail0", "value": 0.024, "round": 1, "samples": [0.024]}',
             '{"a": "n1", "b": "n2", "key": "mpi latency host rail1", "value": 200.0, "higher_is_better": false, '
             '"samples": [200.0, 210.0], "floors": [100.0, 105.0], "ceilings": [9000.0, 230000.0], '
             '"nics": ["rail1", "rail1"]}',
             '{"a": "n1", "b": "n2", "key": "mpi latency host", "value": 200.0, "higher_is_better": false}',
             '{"a": "n1", "b": "n2", "key": "mpi bw host rail1 vs rail0", "value": 0.9}']
    (tmp_path / "pairs.jsonl").write_text("\n".join(lines) + "\n")
    got = bench.rail_pairs(str(tmp_path))
    assert [r["key"] for r in got] == ["mpi bw host rail0", "mpi latency host rail1"]
    assert got[1]["floors"] == [100.0, 105.0] and got[1]["ceilings"] == [9000.0, 230000.0] and got[0]["round"] == 1
    assert bench.rail_pairs(str(tmp_path / "none")) == []
