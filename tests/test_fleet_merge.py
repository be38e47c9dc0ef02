"""Fleet verdicts on synthetic node documents: injected faults found, no
false positives, thresholds from data and a site file, topology facts."""

import dataclasses
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import msgspec
from fleet_docs import fleet_docs, node_doc, topology
from nodemap.errors import NodemapError
from nodemap.fleet import facts, merge, output, pairs
from nodemap.check import expectations
from nodemap.fleet import nodes as fnodes
from nodemap.fleet import nodefile
from nodemap.fleet.nodefile import Fig, PairResult


def fleet_of(docs, pairs=(), th=expectations.fleet_defaults()):
    return merge.merge([fnodes.node_from_doc(d) for d in docs], pairs, th)


def test_every_injected_fault_is_drained_and_nothing_else():
    docs, faults = fleet_docs(300, seed=3)
    f = fleet_of(docs)
    assert {d.node for d in f.drain} == set(faults)
    assert len(set(faults.values())) == 8
    reasons = {d.node: d.reason for d in f.drain}
    for node, kind in faults.items():
        want = {"hbm": "GPU5 HBM triad", "h2d": "H2D NUMA0 -> GPU2", "p2p": "D2D GPU5 -> GPU6",
                "latency": "x the fleet median", "absent": "GPUs 7 where", "nvlink": "NVLink GPU5-NVSwitch 12",
                "numa": "NIC mlx5_0 NUMA 1", "width": "GPU3 PCIe Gen5 x8"}[kind]
        assert want in reasons[node], (kind, reasons[node])


def test_slow_node_ranks_by_its_worst_ratio_with_evidence():
    rng = random.Random(0)
    docs = [node_doc(f"n{i}", rng) for i in range(9)]
    docs.append(node_doc("acn17", rng, slow={"gpu/5/hbm_triad": 0.81}, nvlink={5: 12}))
    docs.append(node_doc("acn18", rng, slow={"gpu/1/hbm_triad": 0.93}))
    noisy = next(x for x in docs[-1]["figures"] if x["key"] == "gpu/1/hbm_triad")
    noisy["spread"] = 0.12  # its repetitions ranged 12%: 93% is within its own noise
    f = fleet_of(docs)
    assert [d.node for d in f.drain] == ["acn17"]
    top = f.drain[0]
    assert top.reason.startswith("GPU5 HBM triad") and "81% of the fleet median" in top.reason
    assert any("NVLink GPU5-NVSwitch 12 where 10 of 11 nodes have 18" in e for e in top.evidence)
    assert f.verdict("acn18") == "warn" and f.verdict("n0") == "pass"
    assert "within the noise" not in top.reason and "beyond the noise" in top.reason
    (why,) = [x.text for x in f.findings if x.node == "acn18"]
    assert "its own repetitions (spread 12.0%)" in why and "robust z -1." in why
    ratio = f.ratios["acn17"][f.keys.index("gpu/5/hbm_triad")]
    assert 0.78 < ratio < 0.84


def test_latency_is_judged_inverted():
    rng = random.Random(1)
    docs = [node_doc(f"n{i}", rng, noise=0) for i in range(5)]
    docs.append(node_doc("slowlat", rng, noise=0, slow={"host/latency/DRAM": 1.08}))
    docs.append(node_doc("fastlat", rng, noise=0, slow={"host/latency/DRAM": 0.7}))
    f = fleet_of(docs)
    assert f.verdict("slowlat") == "warn" and f.verdict("fastlat") == "pass"
    assert "1.08x the fleet median" in next(x.text for x in f.findings if x.node == "slowlat")


def test_missing_node_ranks_first_with_its_last_state():
    rng = random.Random(2)
    nodes = [fnodes.node_from_doc(node_doc(f"n{i}", rng)) for i in range(3)]
    nodes.append(fnodes.missing_node("ghost", "joined, running its node check"))
    f = merge.merge(nodes)
    assert f.drain[0].node == "ghost" and "last known state: joined" in f.drain[0].reason
    assert not f.complete


def test_thresholds_per_figure_from_a_site_file(tmp_path):
    rng = random.Random(4)
    docs = [node_doc(f"n{i}", rng, noise=0) for i in range(5)]
    docs.append(node_doc("x", rng, noise=0, slow={"gpu/0/hbm_triad": 0.96}))
    assert fleet_of(docs).verdict("x") == "pass"
    site = tmp_path / "site.toml"
    site.write_text('[fleet]\nlink_bad = 0.9\n[[fleet.rule]]\nkey = "gpu/*/hbm*"\nclass = "*H100*"\n'
                    'warn = 0.98\nfail = 0.97\n')
    th = expectations.load(str(site)).fleet_rules()
    assert th.link_bad == 0.9 and th.for_figure("gpu/0/hbm_triad", "NVIDIA H100 80GB HBM3") == (0.98, 0.97)
    f = fleet_of(docs, th=th)
    assert f.verdict("x") == "fail" and "fail below 97%" in f.drain[0].reason


@pytest.mark.parametrize("text, says", [
    ("[fleet]\nwarm = 0.9\n", "unknown key fleet.warm"),
    ("[fleet]\nwarn = 'high'\n", "fleet.warn = 'high' must be a float"),
    ("[fleet]\nwarn = 0.8\nfail = 0.9\n", "0 < fail <= warn <= 1"),
    ("[fleet\n", "not valid TOML"),
])
def test_a_bad_site_file_is_one_line_naming_file_and_key(tmp_path, text, says):
    site = tmp_path / "site.toml"
    site.write_text(text)
    with pytest.raises(NodemapError) as e:
        expectations.load(str(site)).fleet_rules()
    assert says in str(e.value) and str(site) in str(e.value) and "\n" not in str(e.value)


def recorded_pair_tests(n, bad_node=None, bad_link=None, slow_latency=None, seed=0):
    """`pairs.isolate` over n simulated nodes, its results recorded as the
    driver records them (latency, then the bandwidth total, per test)."""
    rng = random.Random(seed)
    names = [f"n{i:02d}" for i in range(n)]
    results = []

    def measure(rnd):
        out = {}
        for p in rnd:
            bw, lat = 24.0 * rng.gauss(1, 0.005), 2.0 * rng.gauss(1, 0.005)
            bw *= 0.7 if bad_node in p else 0.6 if p == bad_link else 1.0
            lat *= 3.0 if slow_latency in p else 1.0
            a, b = names[p[0]], names[p[1]]
            results.append(PairResult(a=a, b=b, key="mpi latency host", unit="us", value=lat,
                            higher_is_better=False))
            results.append(PairResult(a=a, b=b, key="mpi bw host", unit="GB/s", value=bw,
                            higher_is_better=True))
            out[p] = {"mpi latency host": lat, "mpi bw host": bw}
        return out

    iso = pairs.isolate(n, measure, directions={"mpi latency host": False, "mpi bw host": True})
    return names, results, iso


@pytest.mark.parametrize("case", [{"bad_node": 3}, {"bad_link": (0, 1)}, {"bad_link": (4, 6)},
                                  {"slow_latency": 5}, {"bad_node": 7, "bad_link": (1, 2)}, {}])
def test_the_drain_list_is_the_isolations_conclusion(case):
    names, results, iso = recorded_pair_tests(12, seed=len(str(case)), **case)
    said = pairs.conclusion(iso, names)
    drained = {d.node for d in merge.merge([fnodes.Node(x) for x in names], results, isolation=said).drain}
    assert drained == set(said.bad_nodes) | {x for link in said.bad_links for x in link}
    want_nodes = {names[case[k]] for k in ("bad_node", "slow_latency") if k in case}
    want_links = [tuple(sorted(names[i] for i in case["bad_link"]))] if "bad_link" in case else []
    assert set(said.bad_nodes) == want_nodes and said.bad_links == want_links
    # saved without the conclusion (--from an older pairs.jsonl): replayed, the same
    assert pairs.replay(results) == said
    assert {d.node for d in merge.merge([fnodes.Node(x) for x in names], results).drain} == drained


def test_a_latency_suspect_is_re_tested():
    names, results, iso = recorded_pair_tests(12, slow_latency=5)
    ring = len(pairs.ring_pairs(12))
    assert len(iso.tests) > ring and iso.bad_nodes == {5}
    f = merge.merge([fnodes.Node(x) for x in names], results)
    assert f.drain[0].node == "n05" and "mpi latency host" in f.drain[0].reason and "x the lowest" in f.drain[0].reason
    assert not any(x.node != "n05" for x in f.findings)  # its partners are spared


def test_bad_pairs_no_re_test_settled_are_a_warning_not_a_drain():
    names = [f"n{i}" for i in range(6)]
    res = []
    for i in range(6):  # the ring only: no re-test was recorded
        for s in (1, 2):
            a, b = names[i], names[(i + s) % 6]
            res.append(PairResult(a=a, b=b, key="mpi bw host", unit="GB/s", value=18.0 if "n3" in (a, b) else 24.0,
                        higher_is_better=True))
    f = merge.merge([fnodes.Node(n) for n in names], res)
    assert not f.drain and f.isolation.unsettled == ["n1", "n2", "n3", "n4", "n5"]  # n0 met no bad pair
    assert {x.verdict for x in f.findings} == {"warn"} and all("no re-test" in x.text for x in f.findings)


def test_lone_class_gets_no_fleet_verdict():
    rng = random.Random(5)
    docs = [node_doc(f"n{i}", rng) for i in range(4)]
    odd = node_doc("odd", rng, slow={"gpu/0/hbm_triad": 0.5})
    for g in odd["topology"]["gpus"]:
        g["model"] = "NVIDIA H200"
    f = fleet_of(docs + [odd])
    assert f.verdict("odd") == "pass"
    assert {b.node_class for b in f.baselines} == {"NVIDIA H100 80GB HBM3", "NVIDIA H200"}


def view(t):
    return nodefile.typed_node("test", {"schema": "nodemap.check/2", "complete": True, "topology": t}).topology


def test_facts_and_class_of_a_topology():
    t = view(topology(8, absent=7, nvlink={5: 12}, nic_numa={"mlx5_0": 1}, width={3: 8}))
    got = facts.facts(t)
    assert got["GPUs"] == 7 and "GPU7" not in got and got["GPU3 PCIe"] == "Gen5 x8"
    assert got["NVLink GPU5-NVSwitch"] == 12 and got["NIC mlx5_0 NUMA"] == 1
    assert got["NIC mlx5_1 port 1"] == "ACTIVE 400 Gb/s"
    assert facts.node_class(t) == "NVIDIA H100 80GB HBM3"
    assert facts.node_class(view({"packages": [{"cpu_model": "EPYC"}], "gpus": []})) == "EPYC"
    assert facts.facts(None) == {} and facts.node_class(None) == "unknown"


def test_cpus_online_are_counted_from_the_pus_json_and_a_bad_pu_is_named():
    # the fleet reads only how many PUs are online: it keeps their JSON (TopologyView.pus) and counts each
    # distinct list once, rather than decoding 256 records a node (2.56 M at 10,000: benchmarks/fleet_scale.py)
    import json
    import typing

    from nodemap.errors import InputError

    assert typing.get_type_hints(nodefile.TopologyView)["pus"] is msgspec.Raw
    t = topology(8)
    t["pus"][5]["online"] = False

    def saved(t):  # as --from reads a file
        doc = {"schema": "nodemap.check/2", "complete": True, "topology": t}
        return nodefile.node_document("n1.json", json.dumps(doc).encode()).topology

    assert facts.facts(view(t))["CPUs online"] == facts.facts(saved(t))["CPUs online"] == len(t["pus"]) - 1
    assert facts.facts(view({"pus": []})) == facts.facts(view({})) == {}  # an empty topology: unknown
    assert facts.facts(view({"pus": [{"online": False}]}))["CPUs online"] == 0
    t["pus"][7]["online"] = "no"
    for read in (view, saved):
        with pytest.raises(InputError, match=r"field topology\.pus\[7\]\.online is str"):
            read(t)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0.5, 2.0), min_size=3, max_size=30), st.booleans())
def test_ratio_below_one_is_always_worse_and_the_median_node_passes(values, hib):
    nodes = [fnodes.Node(f"n{i}", figures={"k": Fig(key="k", value=v, unit="u", higher_is_better=hib)})
             for i, v in enumerate(values)]
    f = merge.merge(nodes)
    (b,) = f.baselines
    for n, v in zip(nodes, values):
        r = f.ratios[n.name][0]
        assert (r < 1) == ((v < b.median) if hib else (v > b.median))
        assert (f.verdict(n.name) == "pass") == (r >= 0.95)


@pytest.mark.slow
def test_fleet_html_opens_offline_in_headless_chromium(tmp_path):
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    from nodemap.fleet import html

    pytest.importorskip("matplotlib")
    if not any(shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome")):
        pytest.skip("no chromium here (benchmarks/html_in_browser.py installs it)")
    docs, _ = fleet_docs(24, seed=2)
    names = [d["host"] for d in docs]
    pairs = [PairResult(a=names[i], b=names[(i + 1) % 24], key="mpi bw host", unit="GB/s",
              value=20.0 if i == 3 else 25.0, higher_is_better=True) for i in range(24)]
    page = tmp_path / "fleet.html"
    page.write_text(html.page(fleet_of(docs, pairs), ["note"]))
    root = Path(__file__).resolve().parent.parent
    r = subprocess.run([sys.executable, str(root / "benchmarks" / "html_in_browser.py"), str(page), "--no-install",
                        "--screenshot", str(tmp_path / "shot.png")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "3 plots promised (figures, links, distributions)" in r.stdout


def test_two_nodes_get_no_fleet_relative_verdict_only_their_own_checks():
    # The median of two is their mean: the 2-node H100 run drained both nodes against it.
    rng = random.Random(11)
    two = [node_doc("a", rng), node_doc("b", rng, slow={"gpu/0/hbm_triad": 0.8})]
    f = fleet_of(two)
    assert not f.drain and not f.findings
    assert any("need >= 3 nodes" in n for n in f.notes) and f.file([]).notes == f.notes
    assert "fleet-relative verdicts need >= 3 nodes" in output.summary(f, [])
    two[1]["findings"] = [{"verdict": "fail", "text": "GPU0 HBM triad 1,211 GB/s is below its floor"}]
    f = fleet_of(two)
    assert [(d.node, d.reason) for d in f.drain] == [("b", "its own check: GPU0 HBM triad 1,211 GB/s is below its floor")]
    three = two + [node_doc("c", rng)]
    three[1]["findings"] = []
    assert [d.node for d in fleet_of(three).drain] == ["b"] and not fleet_of(three).notes


def _noisy_fleet(n, keys=6, seed=1, sd=0.03):
    rng = random.Random(seed)
    nodes = [fnodes.Node(f"n{i:05d}", figures={f"gpu/{k}/hbm_triad": Fig(key=f"gpu/{k}/hbm_triad", unit="GB/s",
                                                                      value=3000 * rng.gauss(1, sd))
                                              for k in range(keys)}) for i in range(n)]
    return merge.merge(nodes)


def test_distributions_draw_every_figure_even_a_healthy_one_bounded_by_summaries():
    pytest.importorskip("matplotlib")
    from nodemap.fleet import html

    f = _noisy_fleet(40, sd=0.005)
    assert not f.findings
    svg = html.distributions(f)
    assert all(k in svg for k in f.keys)  # every figure, not only those with findings
    small, big = (len(html.distributions(_noisy_fleet(n, seed=2))) for n in (4000, 12000))
    assert big < 1.2 * small  # boxes and the 20 farthest points per figure: not 3x the points


def test_saved_conclusion_is_read_back_and_wins_over_a_replay(tmp_path):
    names, results, iso = recorded_pair_tests(12, bad_node=3, seed=4)
    said = pairs.conclusion(iso, names)
    out = output.FleetOutput(str(tmp_path))
    for r in results:
        out.pair_line(r)
    out.isolation(said)
    _, got, isolation = output.read_saved([str(tmp_path)])
    assert got == results and isolation == said
    said_other = msgspec.structs.replace(said, bad_nodes=["n05"])  # the run's own conclusion is the one drained by
    f = merge.merge([fnodes.Node(x) for x in names], got, isolation=said_other)
    assert [d.node for d in f.drain] == ["n05"] and f.file([]).isolation == said_other


def test_fleet_json_says_isolation_is_empty_without_pair_tests():
    """As fleet.json always has ({}), through both of its writers (msgspec, and json_text for --json)."""
    from nodemap.outfile import json_text

    f = merge.merge([fnodes.Node(x) for x in ("n0", "n1")]).file([])
    assert b'"isolation":{}' in msgspec.json.encode(f) and '"isolation": {}' in json_text(f, indent=None)


def test_two_runs_read_together_are_concluded_again_not_by_the_last(tmp_path):
    """--from jobA jobB: keeping jobB's conclusion alone would drop jobA's bad node."""
    for job, bad in (("a", 3), ("b", 7)):
        names, results, iso = recorded_pair_tests(12, bad_node=bad, seed=4)
        out = output.FleetOutput(str(tmp_path / job))
        for r in results:
            out.pair_line(r)
        out.isolation(pairs.conclusion(iso, names))
    _, got, isolation = output.read_saved([str(tmp_path / "a"), str(tmp_path / "b")])
    assert isolation is None and len(got) == 2 * len(results)


def test_figures_of_too_few_nodes_in_a_big_enough_class_are_named():
    """4 nodes of one class whose GPUs are numbered differently (two see GPU0,
    two GPU1, as ranks acting as nodes on a 2-GPU machine): the host figures
    get fleet verdicts, the GPU keys (2 nodes each) do not, and the note says
    which figures, not that the class has 2 nodes."""
    rng = random.Random(5)
    docs = [node_doc(name, rng) for name in "abcd"]
    for d in docs[2:]:
        for fig in d["figures"]:
            fig["key"] = fig["key"].replace("gpu/0/", "gpu/1/")
    (note,) = fleet_of(docs).notes
    assert note.startswith("NVIDIA H100 80GB HBM3: 4 nodes, but ") and "gpu/0/hbm_triad" in note
    assert "fewer than 3 of them" in note and "2 nodes;" not in note


def test_a_configuration_failure_every_node_shares_drains_none():
    """Without a CUDA-aware MPI every node's own check fails its device-buffer
    MPI figure: that is the fleet's stack to fix once, not 3 nodes to drain.
    A hardware failure on one node still drains it."""
    rng = random.Random(3)
    docs = [node_doc(name, rng) for name in "abc"]
    for d in docs:
        d["findings"] = [{"verdict": "fail", "cause": "configuration", "area": "MPI", "keys": ["mpi/DD/bw"],
                          "text": f"MPI is not CUDA-aware: device buffers are staged ({rng.uniform(5, 8):.2f} GB/s)"}]
    docs[1]["findings"].append({"verdict": "fail", "cause": "hardware", "area": "host<->GPU", "keys": ["h2d"],
                                "text": "GPU0's PCIe link runs Gen4 x16"})
    f = fleet_of(docs)
    assert [d.node for d in f.drain] == ["b"] and "Gen4" in f.drain[0].reason
    (note,) = [n for n in f.notes if n.startswith("every node (3)")]
    assert "MPI is not CUDA-aware" in note and "no node is drained" in note
    assert sum(1 for x in f.findings if "CUDA-aware" in x.text and x.verdict == "warn") == 3
    docs[2]["findings"] = []  # one node configured right: the others' failure is theirs
    assert {d.node for d in fleet_of(docs).drain} == {"a", "b"}


def test_a_failed_rails_record_is_read_back(tmp_path):
    """A rail whose test failed is recorded as 0 with its error (driver.take_reports): `--from` refused the
    pairs.jsonl it is in ("value is 0.0, not a measurement"); a 0 without an error still is refused."""
    out = output.FleetOutput(str(tmp_path))
    failed = PairResult(a="n1", b="n2", key="mpi bw host rail1", unit="GB/s", value=0.0, round=1,
                        nics=["rail1", "rail1"], error="rank 3 did not answer within 60 s")
    out.pair_line(failed)
    assert output.read_saved([str(tmp_path)])[1] == [failed]
    (tmp_path / "pairs.jsonl").write_text('{"a": "n1", "b": "n2", "key": "mpi bw host", "value": 0.0}\n')
    with pytest.raises(NodemapError, match="line 1: .*value is 0.0, not a measurement"):
        output.read_saved([str(tmp_path)])


def test_a_latency_record_s_ceilings_are_written_and_read_back_and_older_lines_read_without(tmp_path):
    """Each repetition's slowest half round trip (pairtest.CEILING) goes to pairs.jsonl beside its floors and
    `--from` reads it; a line written before ceilings were recorded reads with none."""
    out = output.FleetOutput(str(tmp_path))
    rec = PairResult(a="n1", b="n2", key="mpi latency host rail1", unit="us", value=210.0, higher_is_better=False,
                     samples=[200.0, 210.0], floors=[100.0, 105.0], ceilings=[9000.0, 230000.0], nics=["rail1"] * 2)
    out.pair_line(rec)
    assert '"ceilings":[9000.0,230000.0]' in (tmp_path / "pairs.jsonl").read_text().replace(" ", "")
    assert output.read_saved([str(tmp_path)])[1] == [rec]
    (tmp_path / "pairs.jsonl").write_text('{"a": "n1", "b": "n2", "key": "mpi latency host rail1", "value": 210.0, '
                                          '"higher_is_better": false, "floors": [100.0, 105.0]}\n')
    (old,) = output.read_saved([str(tmp_path)])[1]
    assert old.ceilings == [] and old.floors == [100.0, 105.0]


def test_a_weak_rail_is_judged_on_its_own_and_named_with_its_nics():
    """Three nodes, two rails: n2's rail1 at a tenth of its rate. The total over rails passes the 50% rule,
    the rail does not: n2 is a bad node (the ring alone decides among 3 nodes), its evidence the rail's
    figure with both sides' NICs, worst first, and what a one-line drain reason holds."""
    names = ["n1", "n2", "n3"]
    results = []
    for a, b in (("n1", "n2"), ("n2", "n3"), ("n1", "n3")):
        for k in (0, 1):
            v = 2.5 if k == 1 and "n2" in (a, b) else 25.0
            results.append(PairResult(a=a, b=b, key=f"mpi bw host rail{k}", unit="MB/s", value=v,
                            higher_is_better=True, nics=[f"rail{k}", f"rail{k}"]))
        total = sum(r.value for r in results[-2:])
        results.append(PairResult(a=a, b=b, key="mpi bw host", unit="MB/s", value=total, higher_is_better=True))
    th = dataclasses.replace(expectations.fleet_defaults(), link_bad=0.5)
    f = merge.merge([fnodes.Node(x) for x in names], results, th)
    assert [d.node for d in f.drain] == ["n2"]
    (link,) = [x for x in f.findings if x.kind == "link"]
    assert link.evidence == "mpi bw host rail1 n1 (rail1) <-> n2 (rail1) 2.5 MB/s = 10% of the best pair 25 MB/s"
    assert "mpi bw host n1 <->" not in link.text  # its total, 55% of the best, passes: the rail alone shows it
    from nodemap.fleet import drain

    assert drain.reason(link).startswith("nodemap: fleet: pairs mpi bw host rail1 n1 (rail1) <-> n2 (rail1) 2.5")
    assert len(drain.reason(link)) <= 100
    scope = drain.FleetScope(pairs=True)
    assert scope.covers(drain.reason(link)) and not scope.covers("nodemap: memory: stream triad 12 GB/s")
    assert not drain.FleetScope(pairs=False).covers(drain.reason(link))  # --no-pairs judged no pair


def test_a_rail_down_is_the_reason_not_the_slow_pairs_it_causes(monkeypatch):
    """n2's rail1 down: its NIC port is down where its peers' are up (topology), and both its ranks
    share rail0, so its rail0 pairs are slow too (the symptom). The merge's drain and the Slurm reason
    rank 0 writes name the cause, the port, first; the pairs follow it in the evidence."""
    names = ["n1", "n2", "n3"]
    results = []
    for a, b in (("n1", "n2"), ("n2", "n3"), ("n1", "n3")):
        for k in (0, 1):
            v = 2.0 if "n2" in (a, b) else 25.0  # rail1 fails, rail0 is shared by both of n2's ranks
            results.append(PairResult(a=a, b=b, key=f"mpi bw host rail{k}", unit="MB/s", value=v,
                            higher_is_better=True, nics=["rail0" if x == "n2" else f"rail{k}" for x in (a, b)]))
    nodes = []
    for name in names:
        port = "down 0" if name == "n2" else "up 0"
        nodes.append(fnodes.Node(name, facts={"NIC rail0": "Ethernet", "NIC rail0 port 1": "up 0 Gb/s",
                                             "NIC rail1": "Ethernet", "NIC rail1 port 1": f"{port} Gb/s"}))
    f = merge.merge(nodes, results, dataclasses.replace(expectations.fleet_defaults(), link_bad=0.5))
    (drain,) = f.drain
    assert drain.node == "n2" and drain.reason.startswith("NIC rail1 port 1 down 0 Gb/s where 2 of 3"), drain
    assert any("n2 (rail0)" in e for e in drain.evidence[1:]), drain.evidence  # the symptom after it

    from nodemap.fleet import drain
    from nodemap.slurm import drain as slurm

    monkeypatch.setattr(slurm, "show", lambda name, timeout=None: slurm.Node(name, "IDLE", ""))
    f.findings.sort(key=lambda x: x.kind != "link")  # whatever order the findings come in
    said = drain.act(f, pairs=True, dry_run=True, timeout=5)
    (n2,) = [s for s in said if s.startswith("n2:")]
    assert "nodemap: fleet: topology NIC rail1 port 1 down" in n2 and "mpi bw" not in n2, said


def test_a_rail_late_against_its_sibling_names_the_node_and_the_rail_from_saved_records():
    """pairs.jsonl as a networked fleet saves it (each rail's latency, then each rail against the
    pair's other rail): replayed with docs/fleet.md's loose rules (latency against the lowest pair
    unjudged), n2, whose pairs' rail 1 is 4-7x rail 0 in every repetition, is a bad node named with
    the rail; n1 and n3 are spared. Without the sibling records nothing is found."""
    from nodemap.fleet import links

    th = dataclasses.replace(expectations.fleet_defaults(), link_bad=0.5, link_latency=1e6)
    late = {("n1", "n2"): 6.7, ("n2", "n3"): 4.3, ("n1", "n3"): 0.7}
    results = []
    for (a, b), ratio in late.items():
        for k in (0, 1):
            results.append(PairResult(a=a, b=b, key=f"mpi latency host rail{k}", unit="us", value=300.0 + 2000 * k
                            * (ratio > 2), higher_is_better=False, nics=[f"rail{k}"] * 2))
        results.append(PairResult(a=a, b=b, key="mpi latency host rail1 vs rail0", unit="x", value=ratio,
                        higher_is_better=False, nics=["rail1"] * 2))
        results.append(PairResult(a=a, b=b, key="mpi latency host rail0 vs rail1", unit="x", value=1 / ratio,
                        higher_is_better=False, nics=["rail0"] * 2))
    judged, found = links.judge_links(results, th)
    assert [(f.node, f.verdict) for f in found] == [("n2", "fail")], found
    assert found[0].text.startswith("node n2: its pairs stay bad against other, good partners (mpi latency host rail1 "
                                    "vs rail0 n1 (rail1) <-> n2 (rail1) at least 6.7x the other rail's"), found[0].text
    assert not links.judge_links([r for r in results if " vs " not in r.key], th)[1]


def test_a_lossy_rail_is_found_by_its_slowest_round_trips_named_with_cause_and_fix():
    """pairs.jsonl of a networked fleet whose n2 loses 1% on rail0 (network_faults_20261202_ceilings: every
    figure of the lossy rail is its sibling's but its slowest round trips, 4.2x): n2 is a bad node, the
    reason names rail0 first and says what to check; n1 and n3 are spared. Without the tail records (the
    fleet before them) nothing is found."""
    from nodemap.fleet import drain, links

    th = dataclasses.replace(expectations.fleet_defaults(), link_bad=0.5, link_latency=1e6)
    tails = {("n1", "n2"): 4.32, ("n2", "n3"): 4.17, ("n1", "n3"): 0.16}
    results = []
    for (a, b), ratio in tails.items():
        for k in (0, 1):
            results.append(PairResult(a=a, b=b, key=f"mpi latency host rail{k}", unit="us", value=300.0,
                                      higher_is_better=False, nics=[f"rail{k}"] * 2))
        results.append(PairResult(a=a, b=b, key="mpi latency host rail0 vs rail1", unit="x", value=1.1,
                                  higher_is_better=False, nics=["rail0"] * 2))
        results.append(PairResult(a=a, b=b, key="mpi tail host rail0 vs rail1", unit="x", value=ratio,
                                  higher_is_better=False, nics=["rail0"] * 2))
        results.append(PairResult(a=a, b=b, key="mpi tail host rail1 vs rail0", unit="x", value=0.04,
                                  higher_is_better=False, nics=["rail1"] * 2))
    judged, found = links.judge_links(results, th)
    assert [(f.node, f.verdict) for f in found] == [("n2", "fail")], found
    text = found[0].text
    assert text.startswith("node n2: its pairs stay bad against other, good partners (mpi tail host rail0 vs rail1 "
                           "n1 (rail0) <-> n2 (rail0) its slowest round trips 4.3x the other rail's"), text
    assert "retransmits" in text and "cable or optics" in text and "error counters" in text and "bad above 3x" in text
    assert drain.reason(found[0]).startswith("nodemap: fleet: pairs mpi tail host rail0 vs rail1 n1 (rail0) <-> n2")
    assert not links.judge_links([r for r in results if " tail " not in r.key], th)[1]
    loose = dataclasses.replace(th, rail_tail=5.0)  # a site's rail_tail decides
    assert not links.judge_links(results, loose)[1]
