"""Reports say what happened (issue 35, defect 9): inconclusive figures are
not compared ("6 of 7 figures regressed" for two busy documents, exit 1);
an area's headline names the judged median of its worst figure, not its
best repetition outside its own interval; a check that judged nothing does
not say every figure passed; a healthy health level is "pass", apart from
"not judged", on screen and in Prometheus; a VM's memory latency is the
platform's, not the job environment's."""

from __future__ import annotations

import json

import check_synth as syn
import nodes
from nodemap.bench.results import ResultSet, make_result
from nodemap.check import expectations
from nodemap.check.busy import Sample
from nodemap.check.document import Busy, CheckDoc, Environment, exit_status
from nodemap.check.node import virtual_machine
from nodemap.cli import main
from nodemap.report import html, prom, terminal
from nodemap.text import number
from nodemap.topology.root import Root

BUSY = Sample(busy=True, cpus=2, other_cores=1.2,
              reasons=["other processes used 1.2 cores of the 2 measured (at least 0.5 is busy): make (pid 9) 1.2"])


def _doc(*sets, busy=False, environment=None, level="quick", checks=()):
    for rs in sets:
        if busy:
            rs.environment["busy"] = BUSY
    doc = CheckDoc(level=level, topology=nodes.karolina(), expectations=expectations.shipped(), results=list(sets),
                   checks=list(checks), busy=Busy(True, BUSY.reasons) if busy else None,
                   environment=Environment(**(environment or {})))
    doc.rejudge()
    return doc


def test_two_busy_documents_could_not_be_compared(tmp_path, capsys):
    before = _doc(syn.hbm({g: 1400.0 for g in range(8)}), busy=True)
    after = _doc(syn.hbm({g: 1000.0 + 40 * g for g in range(8)}), busy=True)  # slowed by the other work
    paths = []
    for name, doc in (("before.json", before), ("after.json", after)):
        (tmp_path / name).write_text(doc.to_json())
        paths.append(str(tmp_path / name))
    assert main(["report", "--compare", *paths]) == 2  # could not judge, as check's for a busy node
    out = capsys.readouterr().out
    assert "regressed" not in out, out
    assert out.strip().splitlines()[-1].startswith("could not compare: the 8 figures measured on both sides are "
                                                   "inconclusive on a side")
    assert main(["report", "--compare", *paths, "--json"]) == 2
    rows = json.loads(capsys.readouterr().out)["changes"]
    assert {r["verdict"] for r in rows} == {"inconclusive"}
    assert all(r["rule"].startswith("could not compare: before measured while the node was busy; after measured")
               for r in rows)
    # an idle after: what regressed against a busy before is still not compared, nothing is said to regress
    idle = _doc(syn.hbm({g: 1000.0 for g in range(8)}))
    (tmp_path / "idle.json").write_text(idle.to_json())
    assert main(["report", "--compare", paths[0], str(tmp_path / "idle.json")]) == 2
    assert "regressed" not in capsys.readouterr().out
    # two idle documents compare as before
    assert main(["report", "--compare", str(tmp_path / "idle.json"), str(tmp_path / "idle.json")]) == 0
    assert "no regression among the 8 figures measured on both sides" in capsys.readouterr().out


def _mpi_latency(samples):
    rs = ResultSet("bench mpi sizes=1")
    rs.add(make_result("mpi", "latency", "us", samples, verified=True,
                       params={"size": 1, "buffers": "HH", "transport": "host"}, path_class="same-numa"))
    return rs


def test_an_areas_headline_is_its_worst_figures_judged_median():
    """'worst MPI latency ...: 2.95 us (median 13.1 [10.7, 23.7])': the best repetition, labelled worst."""
    doc = _doc(_mpi_latency([2.95, 10.7, 11.2, 12.0, 13.1, 14.4, 17.9, 21.0, 23.7]))
    (line,) = [ln for ln in terminal.summary(doc, width=200).splitlines() if ln.strip().startswith("MPI")]
    j = doc.judged[0]
    assert j.verdict in ("warn", "inconclusive", "fail")
    f = j.figure
    assert f.low <= f.median <= f.high and not f.low <= f.value <= f.high  # the best lies outside: said as best
    assert line.endswith(f"worst: {f.label}: median {number(f.median)} us [{number(f.low)}, {number(f.high)}], "
                         "best 2.95"), line


def test_the_worst_latency_is_the_slowest_against_its_peers():
    from nodemap.check.verdicts import Bounds, Judged

    f = _doc(_mpi_latency([6.0, 6.1, 6.2])).judged[0].figure
    slow, fast = (Judged.of(f, "warn", "", Bounds(), r) for r in (3.0, 1.5))
    assert terminal._badness(slow) > terminal._badness(fast)  # 3x its peers' minimum is worse (was: the 1.5x)


def test_a_check_that_judged_nothing_does_not_say_everything_passed():
    busy = _doc(syn.hbm({g: 1000.0 for g in range(8)}), busy=True)
    assert not busy.findings and exit_status(busy) == 2
    page = html.findings(busy)
    assert "every judged figure and check passed" not in page
    assert "None: nothing was judged, the node could not be (busy)." in page
    assert "findings: none: nothing was judged, the node could not be (busy)" in terminal.summary(busy)
    idle = _doc(syn.hbm({g: 1400.0 for g in range(8)}))
    assert "None: every judged figure and check passed." in html.findings(idle)


def test_a_healthy_health_level_is_pass_and_not_judged_is_apart(tmp_path, capsys):
    node = tmp_path / "node.json"
    node.write_text(nodes.two_socket_four_nics().to_json())
    out = tmp_path / "n.prom"
    assert main(["check", "--level", "health", "--input", str(node), "--expect-topology", str(node), "--prom",
                 str(out)]) == 0
    assert "node: healthy (PASS)" in capsys.readouterr().out
    assert 'nodemap_check_verdict{node="' in out.read_text()
    verdicts = {ln.split('of="')[1].split('"')[0]: ln.split()[-1] for ln in out.read_text().splitlines()
                if ln.startswith("nodemap_check_verdict{")}
    assert verdicts["node"] == "1"  # pass: not 0, which is info
    busy = _doc(syn.hbm({g: 1400.0 for g in range(8)}), busy=True)  # every figure passed, yet busy: not judged
    assert busy.node_verdict() == "inconclusive" and 'of="node"} 2' in prom.render(busy, exit_status(busy))
    assert "node: could not judge (busy) (INCONCLUSIVE)" in terminal.summary(busy)


def test_a_vms_memory_latency_is_the_platforms_not_the_job_environments():
    slow = syn.latency({"DRAM": (1 << 30, 547.0)})
    vm = _doc(slow, environment={"virtual_machine": True, "transparent_hugepage": "madvise"})
    (f,) = [f for f in vm.findings if "load latency" in f.text]
    assert f.cause == "hardware" and "nested paging" in f.text and "the job" in f.text
    assert vm.environment_verdict() == "pass"  # not "job environment: FAIL (load latency, DRAM)"
    assert f.verdict == "warn" and "on a VM" in vm.judged[0].rule and exit_status(vm) == 0  # never drained for it
    metal = _doc(syn.latency({"DRAM": (1 << 30, 547.0)}),
                 environment={"virtual_machine": False, "transparent_hugepage": "madvise"})
    assert metal.findings[0].cause == "hardware" and exit_status(metal) == 1  # huge pages in effect: the memory
    off = _doc(syn.latency({"DRAM": (1 << 30, 547.0)}),
               environment={"virtual_machine": False, "transparent_hugepage": "never"})
    assert off.findings[0].cause == "configuration" and "enable them for madvise" in off.findings[0].fix


def test_a_vm_is_known_by_its_cpu_flag_its_hypervisor_or_its_dmi_name(tmp_path):
    def node(cpuinfo="", vendor="", product=""):
        root = tmp_path / f"r{len(list(tmp_path.iterdir()))}"
        (root / "proc").mkdir(parents=True)
        (root / "proc" / "cpuinfo").write_text(cpuinfo)
        dmi = root / "sys" / "class" / "dmi" / "id"
        dmi.mkdir(parents=True)
        (dmi / "sys_vendor").write_text(vendor)
        (dmi / "product_name").write_text(product)
        return virtual_machine(Root(str(root)), str(root))

    assert node("processor\t: 0\nflags\t\t: fpu vme hypervisor avx2\n")
    assert not node("processor\t: 0\nflags\t\t: fpu vme avx2\n", "Dell Inc.", "PowerEdge XE9680")
    assert node("", "QEMU", "Standard PC (Q35 + ICH9, 2009)")
    assert node("", "Microsoft Corporation", "Virtual Machine")


def test_the_compare_json_reads_back_as_the_class_that_wrote_it(tmp_path, capsys):
    """One class both ways: report --compare --json is report/compare.py's Comparison, decoded by nodemap.records
    (a damaged one: one line naming the field path)."""
    import pytest

    from nodemap import records
    from nodemap.errors import InputError
    from nodemap.report import compare

    paths = []
    for name, doc in (("before.json", _doc(syn.hbm({g: 1400.0 for g in range(8)}))),
                      ("after.json", _doc(syn.hbm({g: 1000.0 + 40 * g for g in range(7)})))):
        (tmp_path / name).write_text(doc.to_json())
        paths.append(str(tmp_path / name))
    assert main(["report", "--compare", *paths, "--json"]) == 1
    out = capsys.readouterr().out
    back = records.decode("c.json", out.encode(), compare.Comparison, "comparison")
    assert back.before == paths[0] and back.incomplete == [] and "regressed" in back.summary
    gone = next(c for c in back.changes if c.after is None)
    assert gone.verdict == "fail" and gone.ratio is None and isinstance(back.changes[0], compare.Change)
    bad = json.loads(out)
    bad["changes"][2]["ratio"] = "x"
    with pytest.raises(InputError, match=r"^c.json: field changes\[2\].ratio is str, not a number or null"):
        records.decode("c.json", json.dumps(bad).encode(), compare.Comparison, "comparison")
