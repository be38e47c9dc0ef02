"""Verdict rules and findings on synthetic results over fixture topologies:
a slow GPU, a slow pair, a Gen4 link, a remote-NUMA binding each give the
right verdict and finding; a site file changes them."""


import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import check_synth as syn
import nodes
from nodemap.check import busy, expectations, figures, inventory
from nodemap.check.document import CheckDoc
from nodemap.check.findings import derive
from nodemap.check.verdicts import judge

GPU_NUMA = dict(enumerate(nodes.KAROLINA_GPU_NUMA))


def doc_of(*sets, checks=(), exp=None, topo=None):
    doc = CheckDoc(level="quick", topology=topo or nodes.karolina(), expectations=exp or expectations.shipped(),
                   results=list(sets), checks=list(checks))
    doc.rejudge()
    return doc


def by_key(doc):
    return {j.figure.key: j for j in doc.judged}


def test_healthy_gpus_pass():
    doc = doc_of(syn.hbm({g: 1400.0 for g in range(8)}))
    assert {j.verdict for j in doc.judged} == {"pass"}
    assert doc.findings == []


def test_slow_gpu_fails_against_datasheet_and_peers():
    vals = {g: 1400.0 for g in range(8)}
    vals[5] = 1100.0  # 71% of 1555, 79% of the median
    doc = doc_of(syn.hbm(vals))
    j = by_key(doc)["gpu/5/hbm_triad"]
    assert j.verdict == "fail"
    assert j.relative == pytest.approx(1100 / 1400)
    assert all(by_key(doc)[f"gpu/{g}/hbm_triad"].verdict == "pass" for g in range(8) if g != 5)
    f = doc.findings[0]
    assert f.verdict == "fail" and f.cause == "hardware" and "GPU5" in f.text and "gpu/5/hbm_triad" in f.keys
    assert "79%" in f.text  # of the median of its peers


def test_slightly_slow_gpu_warns_on_peers_only():
    vals = {g: 1400.0 for g in range(8)}
    vals[2] = 1310.0  # 84% of datasheet (>= 80% warn for A100), 93.6% of median
    j = by_key(doc_of(syn.hbm(vals)))["gpu/2/hbm_triad"]
    assert j.verdict == "warn"
    assert "median" in j.rule


def test_slow_pair_fails_and_names_the_pair():
    d2d = {(a, b): 250.0 for a in range(4) for b in range(4) if a != b}
    d2d[(1, 3)] = 180.0
    doc = doc_of(syn.copies({}, GPU_NUMA, d2d))
    j = by_key(doc)["d2d/gpu1->gpu3"]
    assert j.verdict == "fail"
    assert by_key(doc)["d2d/gpu3->gpu1"].verdict == "pass"
    f = next(f for f in doc.findings if "d2d/gpu1->gpu3" in f.keys)
    assert f.cause == "hardware" and "GPU1 -> GPU3" in f.text and "nvlink" in f.fix


def _gen5_links(topo, slow_gpu):
    return nodes.with_links(topo, {g.pci_bus_id: (4 if g.index == slow_gpu else 5, 16, 5, 16) for g in topo.gpus})


def test_gen4_link_is_a_hardware_finding():
    topo = _gen5_links(nodes.karolina(), slow_gpu=3)
    checks = inventory.pcie_links(topo)
    link = {c.key: c for c in checks}
    assert link["inventory/pcie/gpu3"].value == "Gen4 x16" and link["inventory/pcie/gpu3"].expected == "Gen5 x16"
    assert link["inventory/pcie/gpu3"].verdict == "warn"  # idle GPUs drop their generation: the copies decide
    assert link["inventory/pcie/gpu0"].verdict == "pass"
    h2d = {(GPU_NUMA[g], g): 52.0 for g in range(8)}
    h2d[(GPU_NUMA[3], 3)] = 24.1
    doc = doc_of(syn.copies(h2d, GPU_NUMA, link=syn.GEN5), checks=checks, topo=topo)
    j = by_key(doc)[f"h2d/numa{GPU_NUMA[3]}->gpu3"]
    assert j.verdict == "fail"  # below 48 GB/s (Azure NHC floor for Gen5 x16)
    f = doc.findings[0]
    assert f.cause == "hardware" and f.verdict == "fail"
    assert "GPU3's PCIe link runs Gen4 x16 (capable of Gen5 x16)" in f.text and "46%" in f.text
    assert "reseat" in f.fix
    assert "inventory/pcie/gpu3" in f.keys  # the link check is folded into the figure's finding
    assert sum("gpu3" in k for f in doc.findings for k in f.keys) == 2


def test_narrow_link_fails():
    topo = nodes.karolina()
    topo = nodes.with_links(topo, {g.pci_bus_id: (5, 8 if g.index == 6 else 16, 5, 16) for g in topo.gpus})
    c = {c.key: c for c in inventory.pcie_links(topo)}["inventory/pcie/gpu6"]
    assert c.verdict == "fail" and c.value == "Gen5 x8" and c.cause == "hardware"


def test_links_without_a_maximum_are_not_judged():
    topo = nodes.karolina()
    assert inventory.pcie_links(topo) == []  # hwloc XML and NVML say the current link only
    topo = nodes.with_links(topo, {topo.gpus[0].pci_bus_id: (4, 16, 0, 0)})
    assert inventory.pcie_links(topo) == []


def test_remote_numa_binding_is_a_configuration_finding():
    topo = nodes.karolina()
    numa0 = topo.numa(0).cpuset
    checks = inventory.binding(topo, numa0)
    assert checks[0].verdict == "warn" and checks[0].cause == "configuration"
    assert "GPU0 (NUMA3)" in checks[0].rule
    # the h2d matrix shows what that binding costs
    h2d = {(3, 0): 24.0, (0, 0): 12.0, (1, 0): 20.0}
    doc = doc_of(syn.copies(h2d, GPU_NUMA), checks=checks, topo=topo)
    remote = by_key(doc)["h2d/numa0->gpu0"]
    assert remote.figure.kind == "h2d_remote" and remote.verdict == "fail"  # 50% of local
    assert by_key(doc)["h2d/numa1->gpu0"].verdict == "pass"  # 83% of local
    causes = {f.keys[0]: f for f in doc.findings}
    assert causes["h2d/numa0->gpu0"].cause == "configuration" and "NUMA node" in causes["h2d/numa0->gpu0"].fix
    assert causes["inventory/binding"].cause == "configuration" and "nodemap run" in causes["inventory/binding"].fix


def test_binding_near_gpus_passes_and_unbound_is_silent():
    topo = nodes.karolina()
    assert inventory.binding(topo, topo.numa(3).cpuset | topo.numa(1).cpuset | topo.numa(7).cpuset
                             | topo.numa(5).cpuset)[0].verdict == "pass"
    assert inventory.binding(topo, topo.allowed_cpus) == []


def test_stream_placement_finding_is_configuration():
    doc = doc_of(syn.stream({"1/L3": (16, 339.0), "1/core": (128, 298.0), "spread 1": (1, 30.0)}))
    j = by_key(doc)["host/stream/triad"]
    assert j.verdict == "warn" and j.figure.peak == 339.0
    f = doc.findings[0]
    assert f.cause == "configuration" and "STREAM peaks at 339 GB/s with 1 thread per L3 cache (16 threads);" in f.text and "88%" in f.text
    places = ",".join(f"{{{c}}}" for c in range(16))  # the recommended placement's CPUs, inline in the fix
    assert f'OMP_NUM_THREADS=16 OMP_PLACES="{places}" OMP_PROC_BIND=close' in f.fix


def test_numa_remote_pair_and_slow_node():
    bw = {(i, j): (40.0 if i == j else 21.0) for i in range(2) for j in range(2)}
    topo = nodes.build(nodes.Spec(2, 1, 1, 4))
    doc = doc_of(syn.numa(bw), topo=topo)
    assert by_key(doc)["numa/bw/numa0->numa1"].verdict == "warn"  # 0.525 of local < 0.55
    bw[(1, 1)] = 30.0
    bw[(0, 1)] = 25.0
    doc = doc_of(syn.numa(bw), topo=topo)
    assert by_key(doc)["numa/bw/numa1->numa1"].verdict == "fail"  # against the other local node


def test_latency_limits_and_unknown_part_is_info():
    doc = doc_of(syn.latency({"L1d": (16384, 1.2), "DRAM": (1 << 30, 180.0)}))
    assert by_key(doc)["host/latency/L1d"].verdict == "pass"
    assert by_key(doc)["host/latency/DRAM"].verdict == "warn"
    rs = syn.hbm({0: 900.0}, peak=(0.0, ""))  # unknown GPU model: no datasheet peak
    rs.results[0] = type(rs.results[0])(**{**rs.results[0].__dict__, "peak": None, "peak_source": ""})
    j = by_key(doc_of(rs))["gpu/0/hbm_triad"]
    assert j.verdict == "info" and "no practical limit" in j.rule


def test_unknown_gpu_model_with_peers_says_its_verdict_is_relative_only():
    rs = syn.hbm({0: 900.0, 1: 910.0, 2: 700.0})
    rs.results[:] = [type(r)(**{**r.__dict__, "peak": None, "peak_source": ""}) for r in rs.results]
    j = by_key(doc_of(rs))
    assert j["gpu/2/hbm_triad"].verdict == "fail" and j["gpu/0/hbm_triad"].verdict == "pass"
    assert all("no datasheet limit known for this GPU model: relative verdict only" in j[f"gpu/{g}/hbm_triad"].rule
               for g in range(3))
    known = by_key(doc_of(syn.hbm({0: 1400.0, 1: 1400.0})))["gpu/0/hbm_triad"]
    assert "relative verdict only" not in known.rule


def test_dram_peak_unknown_is_listed_as_skipped(monkeypatch):
    from nodemap.bench.peaks import PEAK_UNKNOWN
    from nodemap.check import node, suite

    def fake(kind, argv, level="full", *job_and_topology):
        rs = syn.stream({"1/core": (4, 20.0)})
        rs.messages.append(PEAK_UNKNOWN)
        return rs

    monkeypatch.setattr(node, "measure", fake)
    monkeypatch.setenv(suite.TINY_ENV, "1")
    doc = node.run_check("quick", expectations.shipped())
    (skip,) = [s for s in doc.skipped if s.what.startswith("STREAM against the DRAM peak")]
    assert skip.reason.startswith(PEAK_UNKNOWN.split("; give it")[0])
    # the advice is one the check takes: `nodemap check` has no --peak, a site file's stream row works
    assert "--peak" not in skip.reason and "--expect FILE" in skip.reason and 'kind = "stream"' in skip.reason
    from nodemap.report import terminal

    assert "skipped: STREAM against the DRAM peak" in terminal.summary(doc)


def test_a_site_file_with_the_dram_peak_judges_stream_against_it(monkeypatch, tmp_path):
    """The advice followed: the site row's peak judges the best placement, nothing is skipped."""
    from nodemap.bench.peaks import PEAK_UNKNOWN
    from nodemap.check import node, suite

    def fake(kind, argv, level="full", *job_and_topology):
        rs = syn.stream({"1/L3": (1, 15.5), "1/core": (2, 19.7)})
        rs.messages.append(PEAK_UNKNOWN)
        return rs

    site = tmp_path / "site.toml"
    site.write_text('[[limit]]\nkind = "stream"\nmatch = "."\npeak = 40.0\nwarn = 0.72\nfail = 0.60\n'
                    'source = "our DIMMs: 2 channels x 2500 MT/s x 8 B"\n')
    monkeypatch.setattr(node, "measure", fake)
    monkeypatch.setenv(suite.TINY_ENV, "1")
    quiet = busy.Detector(str(tmp_path), gpus=None, sleep=lambda s: None)  # an idle node: no /proc to read
    doc = node.run_check("quick", expectations.load(str(site)), detector=quiet)
    assert not any(s.what.startswith("STREAM against the DRAM peak") for s in doc.skipped)
    best = by_key(doc)["host/stream/best"]
    assert best.figure.peak == 40.0 and best.expectation.peak == 40.0
    assert best.verdict == "fail" and "49% of 40" in best.rule  # 19.7 of 40 GB/s
    assert "host/stream/best" not in by_key(doc_of(syn.stream({"1/core": (2, 19.7)})))  # no peak, no figure


def test_site_file_changes_verdicts(tmp_path):
    vals = {g: 1400.0 for g in range(8)}
    vals[2] = 1310.0
    site = tmp_path / "site.toml"
    site.write_text('[thresholds]\nrelative_warn = 0.90\nrelative_fail = 0.85\n\n'
                    '[[limit]]\nkind = "hbm"\nmatch = "A100"\nwarn = 0.95\nfail = 0.90\n'
                    'source = "our acceptance test"\n')
    exp = expectations.load(str(site))
    assert by_key(doc_of(syn.hbm(vals)))["gpu/2/hbm_triad"].verdict == "warn"
    j = by_key(doc_of(syn.hbm(vals), exp=exp))["gpu/2/hbm_triad"]
    assert j.verdict == "fail" and j.expectation.origin == str(site)  # 84% < 90% of datasheet
    assert j.expectation.source == "our acceptance test"
    site.write_text('[thresholds]\nrelative_warn = 0.90\n')
    assert by_key(doc_of(syn.hbm(vals), exp=expectations.load(str(site))))["gpu/2/hbm_triad"].verdict == "pass"


def test_keys_are_node_independent():
    a = figures.extract([syn.hbm({0: 1400.0, 1: 1390.0})], nodes.karolina())
    b = figures.extract([syn.hbm({0: 1400.0, 1: 1390.0})], nodes.perlmutter())
    assert [f.key for f in a] == [f.key for f in b] == ["gpu/0/hbm_triad", "gpu/1/hbm_triad"]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(100, 2000), min_size=2, max_size=8), st.floats(0.5, 2.0))
def test_relative_verdicts_do_not_depend_on_scale(values, scale):
    """Scaling every GPU by the same factor keeps each one's ratio to the median."""
    exp = expectations.Expectations(expectations.shipped().thresholds, ())
    a = judge(figures.extract([syn.hbm(dict(enumerate(values)))]), exp)
    b = judge(figures.extract([syn.hbm({i: v * scale for i, v in enumerate(values)})]), exp)
    assert [j.verdict for j in a] == [j.verdict for j in b]
    assert all(j.relative == pytest.approx(k.relative) for j, k in zip(a, b))


def test_findings_are_ranked_fail_first():
    vals = {g: 1400.0 for g in range(8)}
    vals[1], vals[4] = 1300.0, 900.0  # 1300: its interval wholly below 95% of the peers
    fs = doc_of(syn.hbm(vals)).findings
    assert [f.verdict for f in fs] == ["fail", "warn"] and "GPU4" in fs[0].text
    assert derive([], []) == []


def test_suite_follows_the_topology():
    from nodemap.bench.host import latency
    from nodemap.check import suite

    steps, skipped = suite.plan(nodes.karolina(), "quick", env={})
    kinds = [s.kind for s in steps if s.kind != "mpi"]
    assert kinds[-3:] == ["memory", "latency", "numa"]  # most telling first: GPU kinds first when CuPy is here
    lat = next(s for s in steps if s.kind == "latency")
    # full's DRAM working set, no transition: typed options, the command line only shown
    assert lat.options == latency.Options(dram_top_only=True, repeats=2)
    assert lat.argv == ("--repeats", "2", "--dram-top-only")
    full, _ = suite.plan(nodes.karolina(), "full", env={})
    same = {s.kind: s.options for s in full if s.kind in ("memory", "latency")}
    mem = next(s for s in steps if s.kind == "memory").options
    assert mem.repeats == 3 and mem.size is None  # full's arrays, fewer repetitions
    assert dataclasses.replace(mem, repeats=same["memory"].repeats) == same["memory"]
    assert same["latency"] == latency.Options()
    one = nodes.build(nodes.Spec(1, 1, 1, 4))
    steps, skipped = suite.plan(one, "full", env={"PMI_RANK": "0"})
    assert [s.kind for s in steps] == ["memory", "latency"]
    assert any(s.what == "NUMA matrices" and "one NUMA node" in s.reason for s in skipped)
    assert any("no GPU" in s.reason for s in skipped)
    assert any(s.what.startswith("MPI") and "PMI_RANK" in s.reason for s in skipped)  # a rank starts no ranks


def test_a_failing_kind_is_skipped_and_an_interrupted_one_ends_incomplete(monkeypatch):
    from nodemap.check import node, suite

    def fake(kind, argv, level="full", *job_and_topology):
        if kind == "latency":
            raise suite.KindFailed("latency: no memory to chase through")
        return syn.stream({"1/core": (4, 20.0)})

    monkeypatch.setattr(node, "measure", fake)
    monkeypatch.setenv(suite.TINY_ENV, "1")
    saved = []
    doc = node.run_check("quick", expectations.shipped(), on_update=lambda d: saved.append(d.complete))
    assert doc.complete and saved[-1] is True and len(saved) >= 3
    assert any("no memory to chase" in s.reason for s in doc.skipped)
    assert {j.figure.key for j in doc.judged} == {"host/stream/triad"}

    def interrupted(kind, argv, level="full", *job_and_topology):
        from nodemap.bench.harness import INTERRUPTED

        rs = syn.stream({"1/core": (4, 20.0)})
        rs.complete = False
        rs.messages.append(INTERRUPTED)  # the harness's line for a kind the user stopped (a failed part is not)
        return rs

    monkeypatch.setattr(node, "measure", interrupted)
    doc = node.run_check("quick", expectations.shipped())
    assert not doc.complete and len(doc.results) == 1 and doc.judged


def test_a_kind_that_crashes_costs_only_its_own_figures(monkeypatch, capsys):
    """A bug in one kind (not a user error) is reported with its traceback and
    the check goes on: on 2 H100s a crash in one step once left a full check
    with the first step's figures only."""
    from nodemap.check import node, suite

    def fake(kind, argv, level="full", *job_and_topology):
        if kind == "memory":
            raise ZeroDivisionError("a bug in one kind")
        if kind == "latency":
            return syn.stream({"1/core": (4, 20.0)})
        raise suite.KindFailed(f"{kind}: not here")

    monkeypatch.setattr(node, "measure", fake)
    monkeypatch.setenv(suite.TINY_ENV, "1")
    doc = node.run_check("quick", expectations.shipped())
    assert doc.complete and len(doc.results) == 1
    crash = [s for s in doc.skipped if "crashed" in s.reason]
    assert len(crash) == 1 and "(bench memory)" in crash[0].what
    assert "ZeroDivisionError: a bug in one kind" in crash[0].reason
    assert "Traceback" in capsys.readouterr().err


def test_figures_of_thousands_print_without_exponent():
    """H100 HBM is ~3000 GB/s: finding, rule and tables print '2400 GB/s', never '2.4e+03'."""
    h100 = (3350.0, "H100 SXM datasheet HBM3 3.35 TB/s")
    vals = {g: 3080.0 for g in range(8)}
    vals[3] = 2400.0
    doc = doc_of(syn.hbm(vals, peak=h100))
    f = doc.findings[0]
    assert "2400 GB/s" in f.text and "3350 GB/s" in f.evidence
    from nodemap.report import html, terminal

    text = " ".join([f.text, f.evidence, terminal.summary(doc), html.figures_table(doc)])
    assert "e+" not in text


def test_compare_fails_a_figure_gone_after():
    """A GPU lost during maintenance: its figures were measured before and are missing after."""
    from nodemap.report.compare import compare

    before = doc_of(syn.hbm({g: 1400.0 for g in range(8)}))
    after = doc_of(syn.hbm({g: 1400.0 for g in range(8) if g != 6}))
    after_new = doc_of(syn.hbm({g: 1400.0 for g in range(9)}))
    t = expectations.shipped().thresholds
    ch = {c.key: c for c in compare([j.figure for j in before.judged], [j.figure for j in after.judged], t)}
    gone = ch["gpu/6/hbm_triad"]
    assert gone.verdict == "fail" and gone.after is None and "missing after" in gone.rule and "GPU6" in gone.rule
    assert all(ch[f"gpu/{g}/hbm_triad"].verdict == "pass" for g in range(8) if g != 6)
    new = compare([j.figure for j in before.judged], [j.figure for j in after_new.judged], t)
    assert {c.key: c.verdict for c in new}["gpu/8/hbm_triad"] == "info"


def test_gpu_latency_matrix_is_judged_against_the_node_minimum():
    """copies --latency: one pair at 2.5x the fastest pair's load latency fails, 1.7x warns."""
    load = {(a, b): 800.0 for a in range(4) for b in range(4) if a != b}
    load[(2, 3)], load[(3, 1)] = 2000.0, 1360.0
    copy = {(a, b): 6.0 for a in range(4) for b in range(4) if a != b}
    copy[(0, 1)] = 13.0
    j = by_key(doc_of(syn.gpu_latency(load, copy)))
    assert j["d2d_latency/gpu2->gpu3"].verdict == "fail" and "2.50x the minimum" in j["d2d_latency/gpu2->gpu3"].rule
    assert j["d2d_latency/gpu3->gpu1"].verdict == "warn"
    assert j["d2d_latency/gpu0->gpu1"].verdict == "pass" and j["d2d_latency/gpu0->gpu1"].figure.area == "GPU<->GPU"
    assert j["d2d_copy_latency/gpu0->gpu1"].verdict == "fail"
    assert not any(k.startswith("d2d_latency/gpu0->gpu0") for k in j)  # a GPU's own HBM is not a pair


def test_nccl_all_reduce_is_judged_by_gpu_count_on_nvlink():
    """2 GPUs on NV18 reach 70-76% of the link in nccl-tests itself (measured
    on 2 H100s): the 8-GPU ring rule (warn below 78%) flagged that healthy
    node. 329 GB/s of 450 passes with 2 GPUs and warns with 8."""
    nv18 = (450.0, "NV18 NVLink, 450 GB/s per direction")
    pair = syn.copies({}, {0: 0, 1: 0}, d2d={(0, 1): 397.0, (1, 0): 397.0}, pair=nv18)

    def verdict(busbw, ranks):
        j = by_key(doc_of(pair, syn.nccl_all_reduce(busbw, ranks)))["nccl/all_reduce"]
        return j.verdict, j.figure.part

    assert verdict(329.0, 2) == ("pass", "NV12, 2 GPUs")  # the synthetic pair's class
    assert verdict(300.0, 2)[0] == "warn" and verdict(270.0, 2)[0] == "fail"
    assert verdict(329.0, 8)[0] == "warn" and verdict(365.0, 8)[0] == "pass"


def test_mpi_device_peak_says_which_pairs_it_is_the_median_of():
    from nodemap.bench.comm.mpi_p2p import device_peak
    from nodemap.bench.figures import Figure

    d2d = [Figure(f"d2d/{i}", "GPU<->GPU", "copy", "p", "GB/s", v, True, kind="d2d", path_class="NV12")
           for i, v in enumerate((200.0, 220.0))]
    mpi = Figure("mpi/DD/bw", "MPI", "MPI device", "p", "GB/s", 7.0, True, kind="mpi_device", path_class="SYS")
    got = device_peak([*d2d, mpi])[-1]
    assert got.peak == 210.0 and "over all GPU pairs" in got.peak_source  # no SYS pair measured
    same = device_peak([*d2d, Figure(**{**mpi.__dict__, "path_class": "NV12"})])[-1]
    assert "over NV12" in same.peak_source


def test_compare_prints_after_over_before_for_latency_too():
    """The issue's run: DRAM latency 161 -> 516 ns printed 0.313 under an "after/before" header."""
    from nodemap.report.compare import compare, text

    t = expectations.shipped().thresholds
    before = doc_of(syn.latency({"L1d": (32, 1.2), "DRAM": (1 << 20, 161.0)}))
    after = doc_of(syn.latency({"L1d": (32, 1.2), "DRAM": (1 << 20, 516.0)}))
    ch = compare([j.figure for j in before.judged], [j.figure for j in after.judged], t)
    out = text(ch, "b.json", "a.json")
    row = next(ln for ln in out.splitlines() if ln.startswith("host/latency/DRAM"))
    assert "3.205" in row and "0.313" not in row and "fail" in row
    assert "after/before = 3.205 (latency: slower" in next(c for c in ch if c.key == "host/latency/DRAM").rule


def test_compare_counts_only_figures_measured_on_both_sides():
    """1 of 7 figures with a before value said "no regression among 7 figures"."""
    from nodemap.report.compare import compare, text

    t = expectations.shipped().thresholds
    before = doc_of(syn.hbm({0: 1400.0}))
    after = doc_of(syn.hbm({g: 1400.0 for g in range(7)}))
    out = text(compare([j.figure for j in before.judged], [j.figure for j in after.judged], t), "b", "a")
    last = out.splitlines()[-1]
    assert "among 7" not in last
    assert last == "no regression among the 1 figure measured on both sides; 6 measured only after (new, not compared)"


def test_compare_against_an_interrupted_check_says_it_is_incomplete():
    from nodemap.report.compare import compare, text

    t = expectations.shipped().thresholds
    before = doc_of(syn.hbm({g: 1400.0 for g in range(4)}))
    after = doc_of(syn.hbm({0: 1400.0, 1: 1400.0}))
    ch = compare([j.figure for j in before.judged], [j.figure for j in after.judged], t, after_complete=False)
    assert {c.key: c.verdict for c in ch}["gpu/3/hbm_triad"] == "info"  # not measured, not gone
    out = text(ch, "b", "a", incomplete=["after"])
    assert "after is INCOMPLETE (an interrupted check)" in out and out.splitlines()[-1].endswith("after incomplete")


def test_the_stream_finding_names_the_best_placement_in_words():
    # was "STREAM peaks with 1/L3 = 1/NUMA = spread 1 (1 threads)": the sweep's labels, joined
    rs = syn.stream({"1/L3 = 1/NUMA = spread 1": (1, 40.0), "1/core": (8, 20.0)})
    f = doc_of(rs).findings[0]
    assert f.text.startswith("STREAM peaks at 40.0 GB/s with 1 thread per L3 cache (1 thread); one thread per core "
                             "gives 20.0 GB/s"), f.text
