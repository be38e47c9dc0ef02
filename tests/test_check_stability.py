"""benchmarks/check_stability.py: its scenarios, records and targets, run
--dry-run against a stand-in nodemap (no load, taskset or test double)."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import check_stability as cs  # noqa: E402

# A stand-in `nodemap check -o DIR [--expect FILE]`: a check.json whose verdict
# follows the scenario ($NODEMAP_STABILITY_SCENARIO), and its exit status.
STAND_IN = r'''
import json, os, sys
a = sys.argv[1:]
out = a[a.index("-o") + 1]
os.makedirs(out, exist_ok=True)
s = os.environ["NODEMAP_STABILITY_SCENARIO"]
flaky = os.environ.get("FLAKY_IDLE") and out.endswith("idle-1")
verdict, rc, busy = {"idle": ("warn", 0, False), "load": ("inconclusive", 2, True)}.get(s, ("fail", 1, False))
if flaky:
    verdict, rc = "fail", 1
expect = a[a.index("--expect") + 1] if "--expect" in a else ""
node = "fail" if rc == 1 else verdict
doc = {"schema": "nodemap.check/1", "complete": True, "summary": {"verdict": verdict, "node": node},
       "busy": {"busy": busy, "reasons": ["STREAM placement sweep: other processes used 1.9 cores"] if busy else []},
       "figures": [{"key": "host/stream/triad", "value": 20.0, "verdict": "pass"},
                   {"key": "host/latency/L1d", "value": 1.2, "verdict": verdict if s != "load" else "inconclusive"}],
       "checks": [], "findings": [{"verdict": "fail", "cause": "hardware", "text": "x"}] if rc == 1 else [],
       "expect": open(expect).read() if expect else ""}
open(os.path.join(out, "check.json"), "w").write(json.dumps(doc))
sys.exit(rc)
'''


def campaign(tmp_path, *extra, env=None, monkeypatch=None):
    stand_in = tmp_path / "stand_in.py"
    stand_in.write_text(STAND_IN)
    out = tmp_path / "result"
    cs.main(["--dry-run", "--nodemap", f"{sys.executable} {stand_in}", "--idle", "3", "--load", "2", "--faults", "2",
             "--out", str(out), "--keep", str(tmp_path / "keep"), "--note", "a shared VM", *extra])
    return json.loads((tmp_path / "result.json").read_text()), (tmp_path / "result.md").read_text()


def test_every_scenario_runs_and_its_target_is_judged(tmp_path):
    doc, md = campaign(tmp_path)
    assert [r["scenario"] for r in doc["runs"]] == ["idle"] * 3 + ["load"] * 2 + ["fault-limit"] * 2 + \
        ["fault-cpuset"] * 2 + ["fault-slow"] * 2
    t = {t["scenario"]: t for t in doc["targets"]}
    assert t["idle"]["verdicts"] == {"warn": 3} and t["idle"]["met"]
    assert t["load"]["busy"] == 2 and t["load"]["exit"] == {"2": 2} and t["load"]["met"]
    assert all(t[s]["met"] and t[s]["exit"] == {"1": 2} for s in ("fault-limit", "fault-cpuset", "fault-slow"))
    load = next(r for r in doc["runs"] if r["scenario"] == "load")
    assert load["inconclusive"] == ["host/latency/L1d"] and load["busy_reasons"]
    keep = tmp_path / "keep"
    assert "--expect" in doc["runs"][5]["command"]
    assert "peak = 400.000" in (keep / "fault-limit.toml").read_text()  # 20x the idle runs' 20 GB/s
    full = (keep / "fault-cpuset.toml").read_text()
    assert "peak = 20.000" in full and "fail = 0.90" in full  # the idle runs' STREAM is the full node's
    assert "peak = 20.000" in (keep / "fault-slow.toml").read_text()
    assert "| idle | 3 | warn 3 | 0: 3 | 0 | 0 | no fail; one node verdict among the runs not busy | yes |" in md
    assert "- note: a shared VM" in md


def test_one_idle_fail_misses_the_idle_target(tmp_path, monkeypatch):
    monkeypatch.setenv("FLAKY_IDLE", "1")
    doc, md = campaign(tmp_path)
    idle = next(t for t in doc["targets"] if t["scenario"] == "idle")
    assert idle["verdicts"] == {"warn": 2, "fail": 1} and not idle["met"] and "| **no** |" in md


def test_busy_idle_runs_say_so_and_the_others_must_agree(tmp_path):
    """A shared node: two runs busy (exit 2), one not: the target holds on the run that was not."""
    runs = [{"scenario": "idle", "node": v, "rc": rc, "busy": b} for v, rc, b in
            (("inconclusive", 2, True), ("pass", 0, False), ("inconclusive", 2, True))]
    (t,) = cs.targets(runs)
    assert t["met"] and not t["one_verdict_every_run"]
    runs.append({"scenario": "idle", "node": "warn", "rc": 0, "busy": False})
    assert not cs.targets(runs)[0]["met"]  # two runs not busy disagree
    saved = tmp_path / "r.json"
    saved.write_text(json.dumps({"machine": {"host": "vm", "cpu": "x", "cpus": 2, "commit": "c", "date": "d"},
                                 "command": "c", "runs": [dict(r, index=i, wall_s=1, load_before=0.0)
                                                          for i, r in enumerate(runs)]}))
    assert cs.main(["--from", str(saved)]) == 0 and "| idle | 4 |" in (tmp_path / "r.md").read_text()


def test_the_test_double_halves_stream_only(monkeypatch):
    from nodemap.check import node

    import check_synth as syn

    sets = {"memory": syn.stream({"1/core": (2, 20.0)}), "latency": syn.latency({"L1d": (32, 1.2)})}
    monkeypatch.setattr(node, "measure", lambda kind, *a, **k: sets[kind])
    got = {}

    def main(argv):
        for kind in sets:
            got[kind] = node.measure(kind, []).results[0].stats.best
        return 0

    from nodemap import cli

    monkeypatch.setattr(cli, "main", main)
    assert cs.slow_nodemap(["check"]) == 0
    assert got == {"memory": 20.0 * cs.SLOW_FACTOR, "latency": 1.2}


def test_the_full_node_is_the_best_idle_run():
    """A shared node's idle STREAM ranged 6.4-18.3 GB/s: the median made a 'full node' that half the CPUs beat."""
    runs = [{"scenario": "idle", "figures": {"host/stream/triad": v}} for v in (18.3, 8.5, 6.4)]
    assert cs.full_node_stream(runs + [{"scenario": "load", "figures": {"host/stream/triad": 30.0}}]) == 18.3
    assert cs.full_node_stream([]) is None


def test_recorded_commands_name_checkout_paths_relative(tmp_path, monkeypatch):
    monkeypatch.setattr(cs, "ROOT", str(tmp_path))
    doc, _ = campaign(tmp_path)
    assert all(str(tmp_path) not in r["command"] for r in doc["runs"])
    assert doc["runs"][0]["command"].split()[1] == "stand_in.py"
