"""`nodemap compare` as a user runs it: the bindings of a fixture machine
(dry run), real probes on this node, and bad input."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def compare(*args, timeout=240):
    return subprocess.run([sys.executable, "-m", "nodemap", "compare", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_dry_run_on_lassen_lists_every_binding_with_its_resources(fixtures):
    xml = fixtures / "mpibind/topo-xml/coral-lassen.xml"
    if not xml.exists():
        pytest.skip("lassen fixture missing")
    p = compare("--topology", str(xml), "--dry-run", "--tasks", "4", "--json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    names = [b["name"] for b in d["bindings"]]
    assert names == ["none", "launcher", "plan", "remote-gpu", "packed", "far-nic"]
    remote = d["bindings"][3]
    assert "drives GPU2 on NUMA 8" in remote["bad"] and len(remote["ranks"]) == 4
    assert all(not b["probes"] for b in d["bindings"])


@pytest.mark.parametrize("flag", ["--input", "--topology"])
def test_input_is_accepted_as_by_every_command(fixtures, flag):
    # was: "unrecognized arguments: --input" (compare alone took only --topology)
    xml = fixtures / "mpibind/topo-xml/coral-lassen.xml"
    if not xml.exists():
        pytest.skip("lassen fixture missing")
    p = compare(flag, str(xml), "--dry-run", "--tasks", "4", "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["topology"].endswith("coral-lassen.xml")


def test_stream_under_each_binding_on_this_node(tmp_path):
    out = tmp_path / "c.json"
    p = compare("--probes", "stream", "--size", "4M", "--tasks", "2", "-q", "-o", str(out))
    assert p.returncode == 0, p.stderr + p.stdout
    d = json.loads(out.read_text())
    by = {b["name"]: b for b in d["bindings"]}
    assert {"none", "launcher", "plan"} <= set(by)
    for b in by.values():
        s = b["probes"]["stream"]
        assert s["total"] > 0 and len(s["per_rank"]) == 2 and s["verdict"].startswith("stream: ")
        # two rounds of 5 repetitions of the whole binding, each started together by both ranks
        assert s["rounds"] == 2 and len(s["repetitions"]) == 10 and s["started_together"] == 10, s
        assert s["interval"][0] <= s["total"] <= s["interval"][1]
    assert "(the reference;" in by["plan"]["probes"]["stream"]["verdict"]
    assert "-> stream:" in p.stdout and "not started together" not in p.stdout
    table = p.stdout.split("\nplan:")[1].splitlines()  # the per-rank table: resources and the figure
    heads = table[1].split()
    assert heads[:5] == ["rank", "PUs", "NUMA", "memory", "GPU"] and heads[-2:] == ["stream", "GB/s"]
    assert table[3].split()[0] == "0" and table[4].split()[0] == "1"
    assert all(b["resources"][0]["rank"] == 0 for b in d["bindings"])


@pytest.mark.parametrize("args,words", [
    (["--bindings", "plan,worst"], "choose from"),
    (["--probes", "flops"], "choose from"),
    (["--topology", "x.xml"], "--dry-run"),
    (["--input", "x.xml"], "--dry-run"),
])
def test_bad_input_is_one_line_exit_2(args, words):
    p = compare(*args)
    assert p.returncode == 2 and words in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_bindings_run_in_alternating_order(monkeypatch):
    """Each probe: the bindings forwards, then backwards (A B C C B A ...), so
    a drift over the run moves every binding alike; rounds join per binding."""
    import argparse

    from nodemap.commands import compare as cmd
    from nodemap.compare import probes as pr

    assert [x for _, x in cmd.alternating(["A", "B"], 4)] == list("ABBAABBA")
    assert [(r, x) for r, x in cmd.alternating(["A", "B", "C"], 2)] == [(0, "A"), (0, "B"), (0, "C"), (1, "C"),
                                                                      (1, "B"), (1, "A")]
    ran = []

    def fake(topo, b, probe, size, timeout):
        ran.append((probe, b.name))
        x = float(len(ran))
        return pr.Row(b.name, probe, [x], [], [], [], [(0,)], [[x, x + 0.5]], [x, x + 0.5], together=2)

    monkeypatch.setattr(pr, "run_binding", fake)
    bs = [argparse.Namespace(name=n, tasks=(0,)) for n in ("plan", "none", "launcher")]
    args = argparse.Namespace(rounds=3, quiet=True, size=None, timeout=10.0)
    rows = cmd.measure(None, bs, ["stream", "gpu"], args)
    order = ["plan", "none", "launcher", "launcher", "none", "plan", "plan", "none", "launcher"]
    assert ran == [("stream", n) for n in order] + [("gpu", n) for n in order]
    plan = rows["plan", "stream"]
    assert plan.rounds == 3 and plan.totals == [1.0, 1.5, 6.0, 6.5, 7.0, 7.5] and plan.together == 6


def test_rounds_below_one_is_an_error():
    p = compare("--rounds", "0", "--probes", "stream")
    assert p.returncode == 2 and "--rounds 0: need at least 1" in p.stderr and "Traceback" not in p.stderr


def test_dry_run_on_karolina_gives_remote_gpu_one_rank_per_gpu(karolina_json):
    p = compare("--input", karolina_json, "--dry-run", "--json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    remote = next(b for b in d["bindings"] if b["name"] == "remote-gpu")
    gpus = [g for r in remote["resources"] for g in r["gpus"]]
    assert d["tasks"] == 8 and len(gpus) == 8 and len(set(gpus)) == 8, gpus  # was: 2,3,6,7 twice, 0,1,4,5 idle


def test_ranks_that_all_hang_are_ended_by_one_deadline():
    """--timeout is the probe's: three hung ranks waited one after another took three times it."""
    import sys
    import time

    from nodemap.compare import probes
    from nodemap.proc import start_group

    procs = [start_group([sys.executable, "-c", "import time; time.sleep(30)"], None) for _ in range(3)]
    done = start_group([sys.executable, "-c", "print('kept')"], None)
    t = time.monotonic()
    answers = probes.answers_within([*procs, done], 1.5)
    assert time.monotonic() - t < 1.5 + 1.0
    assert [err for _, _, err in answers[:3]] == ["no answer in 1.5 s"] * 3
    assert answers[3] == (0, "kept\n", "")  # a rank that ended is still heard after the deadline


@pytest.mark.parametrize("size", ["abc", "1P", "0"])
def test_a_bad_size_is_refused_before_any_binding_runs(size):
    # was: every rank of every binding failed with bench memory's error, exit 1 after the whole run
    from hostile import refused

    refused(compare("--probes", "stream", "--rounds", "1", "--size", size, "--bindings", "none"), "--size")


def test_the_dry_run_json_reads_back_as_the_class_that_wrote_it(fixtures):
    """One class both ways: nodemap compare's JSON is compare/bindings.py's Comparison, decoded by
    nodemap.records (a damaged one: one line naming the field path)."""
    from nodemap import records
    from nodemap.compare import bindings as cb
    from nodemap.errors import InputError

    p = compare("--topology", str(fixtures / "mpibind/topo-xml/coral-lassen.xml"), "--dry-run", "--json")
    assert p.returncode == 0, p.stderr
    back = records.decode("c.json", p.stdout.encode(), cb.Comparison, "comparison")
    assert [e.name for e in back.bindings][:3] == ["none", "launcher", "plan"]
    assert isinstance(back.bindings[0].resources[0], cb.Resources) and back.bindings[0].probes == {}
    bad = json.loads(p.stdout)
    bad["bindings"][1]["resources"][0]["rank"] = "0"
    with pytest.raises(InputError, match=r"^c.json: field bindings\[1\].resources\[0\].rank is str, not an integer"):
        records.decode("c.json", json.dumps(bad).encode(), cb.Comparison, "comparison")
