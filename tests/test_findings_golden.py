"""Findings print the same words through every renderer: the check's
terminal summary, HTML findings, Prometheus file and Slurm drain reasons,
the fleet's summary and page, the watch summary and its HTML findings.
GOLDEN is their output before the three finding records became one
(nodemap/finding.py); a check document saved then (schema nodemap.check/1)
reads back into the same findings."""

from __future__ import annotations

import json
import re

import msgspec
import pytest

import findings_inputs as inputs
from nodemap.report import prom
from nodemap.check import expectations
from nodemap.check.document import exit_status, from_dict
from nodemap.fleet import html as fleet_html
from nodemap.fleet import merge, output
from nodemap.fleet import nodes as fnodes
from nodemap.report import html, terminal
from nodemap.report import watch as watch_report
from nodemap.slurm import verdict
from nodemap.watch import analysis, summary, timeline

RULES = expectations.shipped().table(expectations.WatchRules)


def check_outputs(doc) -> dict[str, str]:
    return {"terminal": terminal.summary(doc, top=10, width=100), "html": html.findings(doc),
            "prom": prom.render(doc, exit_status(doc)),
            "slurm": "\n".join(verdict.hardware_failures(doc) + [repr(verdict.health(doc))])}


def fleet_outputs(monkeypatch) -> dict[str, str]:
    docs = inputs.fleet_docs()
    nodes = [fnodes.node_from_doc(d) for d in docs] + [fnodes.missing_node("n99", "RUNNING")]
    fleet = merge.merge(nodes, inputs.fleet_pairs([d["host"] for d in docs]))
    monkeypatch.setattr(fleet_html, "_have_matplotlib", lambda: False)  # the page without its plots
    return {"summary": output.summary(fleet, []), "page": fleet_html.page(fleet, ["a message"])}


def watch_outputs(tmp_path) -> dict[str, str]:
    inputs.watch_dir(tmp_path / "w")
    tls = timeline.read_dir(str(tmp_path / "w"))
    a = analysis.analyse(tls, RULES)
    found = re.search(r"<ol id='watch-findings'>.*?</ol>", watch_report.section(tls, a).html, re.S)
    return {"summary": summary.render(a), "html": found.group(0) if found else ""}


def test_check_findings_print_as_before():
    assert check_outputs(inputs.check_doc()) == GOLDEN["check"]


def test_fleet_findings_print_as_before(monkeypatch):
    assert fleet_outputs(monkeypatch) == GOLDEN["fleet"]


def test_watch_findings_print_as_before(tmp_path):
    assert watch_outputs(tmp_path) == GOLDEN["watch"]


def test_a_check_document_saved_as_version_1_reads_into_the_same_findings():
    doc = from_dict(SAVED_V1)
    assert [f.text for f in doc.findings] == [f.text for f in inputs.check_doc().findings]
    assert html.findings(doc) == GOLDEN["check"]["html"]


def test_a_version_1_findings_severity_is_read_as_its_shortfall_and_written_so():
    doc = from_dict(SAVED_V1)
    assert [f.shortfall for f in doc.findings] == [f["severity"] for f in SAVED_V1["findings"]]
    again = json.loads(doc.to_json())
    assert again["schema"] == "nodemap.check/2"
    assert [f.get("shortfall", 0.0) for f in again["findings"]] == [f["severity"] for f in SAVED_V1["findings"]]
    assert not any("severity" in f for f in again["findings"])
    assert json.loads(msgspec.json.encode(from_dict(again).findings)) == again["findings"]


def test_node_documents_of_both_versions_are_read_and_their_findings_typed():
    from nodemap.errors import InputError
    from nodemap.fleet import nodefile

    (doc,) = inputs.fleet_docs()[4:5]
    for schema in ("nodemap.check/1", "nodemap.check/2"):
        nodefile.check("n.json", {**doc, "schema": schema})
    bad = {**doc, "findings": [{"verdict": "severe", "text": "x"}]}
    with pytest.raises(InputError, match=r"findings\[0\].verdict"):
        nodefile.check("n.json", bad)


# A check document's findings as nodemap saved them before nodemap.check/2 (the header it needs, no figures)
SAVED_V1 = {'schema': 'nodemap.check/1',
 'host': 'node7',
 'hostname': 'node7',
 'started': '2026-11-28T02:00:00+0000',
 'finished': '',
 'level': 'quick',
 'complete': True,
 'findings': [{'verdict': 'fail',
               'cause': 'hardware',
               'area': 'GPU memory',
               'text': 'GPU2 HBM triad (float64): 900 GB/s, 64% of the median of its peers on this node',
               'evidence': 'median 896 GB/s [891, 900] = 58% of 1555 GB/s (A100 40GB datasheet HBM2 1.555 TB/s), '
                           'below the 72% floor',
               'fix': 'check clocks, throttle reasons and remapped rows (nvidia-smi -q -d '
                      'PERFORMANCE,ROW_REMAPPER); rerun on an idle GPU; RMA if it persists',
               'keys': ['gpu/2/hbm_triad'],
               'severity': 0.4212218649517685},
              {'verdict': 'fail',
               'cause': 'hardware',
               'area': 'host<->GPU',
               'text': 'H2D NUMA3 -> GPU1 (copy engine): 12.0 GB/s, 67% of the median of its peers on this node, '
                       'below what a PCIe Gen4 x16 link delivers',
               'evidence': 'median 11.9 GB/s [11.9, 12.0], below the 23.0 GB/s limit',
               'fix': "check the GPU's PCIe link (lspci -vv LnkSta), the IOMMU setting and that the copy ran from "
                      "the GPU's own NUMA node",
               'keys': ['h2d/numa3->gpu1'],
               'severity': 0.3299832495812396},
              {'verdict': 'fail',
               'cause': 'hardware',
               'area': 'inventory',
               'text': 'GPU1 PCIe link: Gen4 x8 (expected Gen4 x16)',
               'evidence': 'link below its capability',
               'fix': 'reseat it',
               'keys': ['inventory/pcie/GPU1'],
               'severity': 0.0},
              {'verdict': 'fail',
               'cause': 'configuration',
               'area': 'latency',
               'text': 'load latency, DRAM (1024 KiB working set): 547 ns, slower than expected',
               'evidence': 'median 550 ns [547, 552], above the 250 ns limit',
               'fix': 'transparent huge pages are off (mode [never]): enable them for madvise (echo madvise > '
                      '/sys/kernel/mm/transparent_hugepage/enabled, or transparent_hugepage=madvise at boot); '
                      'check the BIOS memory and power settings',
               'keys': ['host/latency/DRAM'],
               'severity': 0.0},
              {'verdict': 'warn',
               'cause': 'hardware',
               'area': 'host<->GPU',
               'text': 'H2D NUMA3 -> GPU0 (copy engine): 24.0 GB/s, 133% of the median of its peers on this node, '
                       'below what a PCIe Gen4 x16 link delivers',
               'evidence': 'median 23.9 GB/s [23.8, 24.0], below the expected 25.0 GB/s',
               'fix': "check the GPU's PCIe link (lspci -vv LnkSta), the IOMMU setting and that the copy ran from "
                      "the GPU's own NUMA node",
               'keys': ['h2d/numa3->gpu0'],
               'severity': 0.0},
              {'verdict': 'warn',
               'cause': 'configuration',
               'area': 'inventory',
               'text': 'OMP_PROC_BIND: unset (expected close)',
               'evidence': 'threads unbound',
               'fix': 'export OMP_PROC_BIND=close',
               'keys': ['inventory/env/OMP'],
               'severity': 0.0}]}

# Written by the renderers before the finding records became one
GOLDEN = {'check': {'terminal': 'nodemap check --level quick on node7, 2026-11-28T02:00:00+0000: complete\n'
                       'node: UNHEALTHY (FAIL); job environment: FAIL (load latency, DRAM (1024 KiB working set))\n'
                       '  inventory    FAIL 2 checks; GPU1 PCIe link: Gen4 x8\n'
                       '  latency      FAIL 2 figures; worst: load latency, DRAM (1024 KiB working set): median '
                       '550 ns\n'
                       '                    [547, 552], best 547\n'
                       '  GPU memory   FAIL 4 figures; worst: GPU2 HBM triad (float64): median 896 GB/s [891, 900], '
                       'best 900\n'
                       '  host<->GPU   FAIL 2 figures; worst: H2D NUMA3 -> GPU1 (copy engine): median 11.9 GB/s\n'
                       '                    [11.9, 12.0], best 12.0\n'
                       'findings (6 of 6, worst first):\n'
                       '  1. FAIL [hardware] GPU2 HBM triad (float64): 900 GB/s, 64% of the median of its peers on '
                       'this node\n'
                       '     fix: check clocks, throttle reasons and remapped rows (nvidia-smi -q -d\n'
                       '       PERFORMANCE,ROW_REMAPPER); rerun on an idle GPU; RMA if it persists\n'
                       '  2. FAIL [hardware] H2D NUMA3 -> GPU1 (copy engine): 12.0 GB/s, 67% of the median of its '
                       'peers on\n'
                       '     this node, below what a PCIe Gen4 x16 link delivers\n'
                       "     fix: check the GPU's PCIe link (lspci -vv LnkSta), the IOMMU setting and that the "
                       'copy ran from\n'
                       "       the GPU's own NUMA node\n"
                       '  3. FAIL [hardware] GPU1 PCIe link: Gen4 x8 (expected Gen4 x16)\n'
                       '     fix: reseat it\n'
                       '  4. FAIL [configuration] load latency, DRAM (1024 KiB working set): 547 ns, slower than '
                       'expected\n'
                       '     fix: transparent huge pages are off (mode [never]): enable them for madvise (echo '
                       'madvise >\n'
                       '       /sys/kernel/mm/transparent_hugepage/enabled, or transparent_hugepage=madvise at '
                       'boot); check\n'
                       '       the BIOS memory and power settings\n'
                       '  5. WARN [hardware] H2D NUMA3 -> GPU0 (copy engine): 24.0 GB/s, 133% of the median of its '
                       'peers on\n'
                       '     this node, below what a PCIe Gen4 x16 link delivers\n'
                       "     fix: check the GPU's PCIe link (lspci -vv LnkSta), the IOMMU setting and that the "
                       'copy ran from\n'
                       "       the GPU's own NUMA node\n"
                       '  6. WARN [configuration] OMP_PROC_BIND: unset (expected close)\n'
                       '     fix: export OMP_PROC_BIND=close\n'
                       '8 figures and 2 checks: 4 pass, 2 warn, 4 fail, 0 inconclusive, 0 recorded without a rule',
           'html': "<h2 id='findings'>Findings (worst first)</h2><ol><li><span "
                   "class='fail'>&nbsp;fail&nbsp;</span> <b>[hardware]</b> GPU2 HBM triad (float64): 900 GB/s, 64% "
                   "of the median of its peers on this node<br><span class='note'>evidence: median 896 GB/s [891, "
                   '900] = 58% of 1555 GB/s (A100 40GB datasheet HBM2 1.555 TB/s), below the 72% '
                   'floor</span><br>fix: check clocks, throttle reasons and remapped rows (nvidia-smi -q -d '
                   'PERFORMANCE,ROW_REMAPPER); rerun on an idle GPU; RMA if it persists</li><li><span '
                   "class='fail'>&nbsp;fail&nbsp;</span> <b>[hardware]</b> H2D NUMA3 -&gt; GPU1 (copy engine): "
                   '12.0 GB/s, 67% of the median of its peers on this node, below what a PCIe Gen4 x16 link '
                   "delivers<br><span class='note'>evidence: median 11.9 GB/s [11.9, 12.0], below the 23.0 GB/s "
                   'limit</span><br>fix: check the GPU&#x27;s PCIe link (lspci -vv LnkSta), the IOMMU setting and '
                   'that the copy ran from the GPU&#x27;s own NUMA node</li><li><span '
                   "class='fail'>&nbsp;fail&nbsp;</span> <b>[hardware]</b> GPU1 PCIe link: Gen4 x8 (expected Gen4 "
                   "x16)<br><span class='note'>evidence: link below its capability</span><br>fix: reseat "
                   "it</li><li><span class='fail'>&nbsp;fail&nbsp;</span> <b>[configuration]</b> load latency, "
                   "DRAM (1024 KiB working set): 547 ns, slower than expected<br><span class='note'>evidence: "
                   'median 550 ns [547, 552], above the 250 ns limit</span><br>fix: transparent huge pages are off '
                   '(mode [never]): enable them for madvise (echo madvise &gt; '
                   '/sys/kernel/mm/transparent_hugepage/enabled, or transparent_hugepage=madvise at boot); check '
                   "the BIOS memory and power settings</li><li><span class='warn'>&nbsp;warn&nbsp;</span> "
                   '<b>[hardware]</b> H2D NUMA3 -&gt; GPU0 (copy engine): 24.0 GB/s, 133% of the median of its '
                   "peers on this node, below what a PCIe Gen4 x16 link delivers<br><span class='note'>evidence: "
                   'median 23.9 GB/s [23.8, 24.0], below the expected 25.0 GB/s</span><br>fix: check the '
                   'GPU&#x27;s PCIe link (lspci -vv LnkSta), the IOMMU setting and that the copy ran from the '
                   "GPU&#x27;s own NUMA node</li><li><span class='warn'>&nbsp;warn&nbsp;</span> "
                   "<b>[configuration]</b> OMP_PROC_BIND: unset (expected close)<br><span class='note'>evidence: "
                   'threads unbound</span><br>fix: export OMP_PROC_BIND=close</li></ol>',
           'prom': '# HELP nodemap_check_status exit status of the check: 0 healthy, 1 unhealthy (hardware), 2 '
                   'could not judge (busy), 130 interrupted, 143 ended by SIGTERM\n'
                   '# TYPE nodemap_check_status gauge\n'
                   'nodemap_check_status{node="node7",level="quick"} 1\n'
                   '# HELP nodemap_check_complete 1 when the check ran to its end (not interrupted); steps a '
                   '--budget left out are in left_out\n'
                   '# TYPE nodemap_check_complete gauge\n'
                   'nodemap_check_complete{node="node7",level="quick"} 1\n'
                   '# HELP nodemap_check_verdict verdict of the node (of=node: hardware; pass healthy, '
                   'inconclusive could not judge, fail unhealthy) and of the job '
                   'environment (of=environment: configuration) as a severity: info 0, pass 1, inconclusive 2, '
                   'warn 3, fail 4\n'
                   '# TYPE nodemap_check_verdict gauge\n'
                   'nodemap_check_verdict{node="node7",level="quick",of="node"} 4\n'
                   'nodemap_check_verdict{node="node7",level="quick",of="environment"} 4\n'
                   '# HELP nodemap_check_area_verdict worst verdict of an area as a severity: info 0, pass 1, '
                   'inconclusive 2, warn 3, fail 4\n'
                   '# TYPE nodemap_check_area_verdict gauge\n'
                   'nodemap_check_area_verdict{node="node7",level="quick",area="inventory"} 4\n'
                   'nodemap_check_area_verdict{node="node7",level="quick",area="latency"} 4\n'
                   'nodemap_check_area_verdict{node="node7",level="quick",area="GPU memory"} 4\n'
                   'nodemap_check_area_verdict{node="node7",level="quick",area="host<->GPU"} 4\n'
                   '# HELP nodemap_check_items figures and inventory checks with this verdict\n'
                   '# TYPE nodemap_check_items gauge\n'
                   'nodemap_check_items{node="node7",level="quick",verdict="pass"} 4\n'
                   'nodemap_check_items{node="node7",level="quick",verdict="info"} 0\n'
                   'nodemap_check_items{node="node7",level="quick",verdict="inconclusive"} 0\n'
                   'nodemap_check_items{node="node7",level="quick",verdict="warn"} 2\n'
                   'nodemap_check_items{node="node7",level="quick",verdict="fail"} 4\n'
                   '# HELP nodemap_check_figure a measured figure, in its unit (label unit): the best of its '
                   'repetitions\n'
                   '# TYPE nodemap_check_figure gauge\n'
                   'nodemap_check_figure{node="node7",level="quick",area="GPU '
                   'memory",key="gpu/0/hbm_triad",path_class="HBM",unit="GB/s"} 1400.0\n'
                   'nodemap_check_figure{node="node7",level="quick",area="GPU '
                   'memory",key="gpu/1/hbm_triad",path_class="HBM",unit="GB/s"} 1410.0\n'
                   'nodemap_check_figure{node="node7",level="quick",area="GPU '
                   'memory",key="gpu/2/hbm_triad",path_class="HBM",unit="GB/s"} 900.0\n'
                   'nodemap_check_figure{node="node7",level="quick",area="GPU '
                   'memory",key="gpu/3/hbm_triad",path_class="HBM",unit="GB/s"} 1405.0\n'
                   'nodemap_check_figure{node="node7",level="quick",area="latency",key="host/latency/L1d",path_class="",unit="ns"} '
                   '1.2\n'
                   'nodemap_check_figure{node="node7",level="quick",area="latency",key="host/latency/DRAM",path_class="",unit="ns"} '
                   '547.0\n'
                   'nodemap_check_figure{node="node7",level="quick",area="host<->GPU",key="h2d/numa3->gpu0",path_class="NODE",unit="GB/s"} '
                   '24.0\n'
                   'nodemap_check_figure{node="node7",level="quick",area="host<->GPU",key="h2d/numa3->gpu1",path_class="NODE",unit="GB/s"} '
                   '12.0\n'
                   "# HELP nodemap_check_figure_verdict a figure's verdict as a severity: info 0, pass 1, "
                   'inconclusive 2, warn 3, fail 4\n'
                   '# TYPE nodemap_check_figure_verdict gauge\n'
                   'nodemap_check_figure_verdict{node="node7",level="quick",area="GPU '
                   'memory",key="gpu/0/hbm_triad",path_class="HBM"} 1\n'
                   'nodemap_check_figure_verdict{node="node7",level="quick",area="GPU '
                   'memory",key="gpu/1/hbm_triad",path_class="HBM"} 1\n'
                   'nodemap_check_figure_verdict{node="node7",level="quick",area="GPU '
                   'memory",key="gpu/2/hbm_triad",path_class="HBM"} 4\n'
                   'nodemap_check_figure_verdict{node="node7",level="quick",area="GPU '
                   'memory",key="gpu/3/hbm_triad",path_class="HBM"} 1\n'
                   'nodemap_check_figure_verdict{node="node7",level="quick",area="latency",key="host/latency/L1d",path_class=""} '
                   '1\n'
                   'nodemap_check_figure_verdict{node="node7",level="quick",area="latency",key="host/latency/DRAM",path_class=""} '
                   '4\n'
                   'nodemap_check_figure_verdict{node="node7",level="quick",area="host<->GPU",key="h2d/numa3->gpu0",path_class="NODE"} '
                   '3\n'
                   'nodemap_check_figure_verdict{node="node7",level="quick",area="host<->GPU",key="h2d/numa3->gpu1",path_class="NODE"} '
                   '4\n',
           'slurm': 'nodemap: inventory: GPU1 PCIe link Gen4 x8 (limit Gen4 x16)\n'
                    'nodemap: GPU memory: gpu/2/hbm_triad 900 GB/s (limit 1120 GB/s)\n'
                    'nodemap: host<->GPU: h2d/numa3->gpu1 12.0 GB/s (limit 23.0 GB/s)\n'
                    "(False, 'nodemap: GPU memory: gpu/2/hbm_triad 900 GB/s (limit 1120 GB/s)')"},
 'fleet': {'summary': 'fleet: 9 nodes: 4 warn, 4 fail, 1 missing (incomplete)\n'
                      'drain (5):\n'
                      '    1. n99: did not answer; last known state: RUNNING\n'
                      '    2. n01: GPU2 HBM triad (float64) 2,090 GB/s = 70% of the fleet median 3,005 GB/s '
                      '(NVIDIA H100 80GB HBM3, 8 nodes; fail below 95% and beyond the noise (robust z -20.2, sigma '
                      "1.5%: the fleet's spread (1.4826 MAD / median); fail at z <= -4)); not re-measured (saved "
                      'documents)\n'
                      '    3. n02: GPUs 7 where 7 of 8 nodes have 8\n'
                      '    4. n03: NVLink GPU4-NVSwitch 12 where 7 of 8 nodes have 18\n'
                      '    5. n04: its own check: GPU1 HBM triad 1,211 GB/s is below its floor',
           'page': "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><meta "
                   'http-equiv=\'Content-Security-Policy\' content="default-src \'none\'; style-src '
                   '\'unsafe-inline\'; img-src data:; form-action \'none\'; base-uri \'none\'"><title>nodemap '
                   'fleet '
                   'check</title><style>td{overflow-wrap:anywhere}th,td.v{overflow-wrap:normal}body{font-family:sans-serif;margin:1.5em;max-width:1400px}table{border-collapse:collapse}\n'
                   'td,th{border:1px solid #ccc;padding:3px '
                   '6px;font-size:13px;vertical-align:top;text-align:left}\n'
                   '.fail{color:#b2182b;font-weight:bold}.warn{color:#b35806}.pass{color:#1b7837}.note{color:#555}\n'
                   'svg{max-width:100%;height:auto}</style></head><body><h1>nodemap fleet check</h1>\n'
                   "<p>9 nodes: <span class='fail'>4 fail</span>, <span class='fail'>1 missing</span>, <span "
                   "class='warn'>4 warn</span> <span class='fail'>(incomplete)</span></p>\n"
                   "<p class='note'>Rules: warn below 95%, fail below 90% of the fleet median of the same figure "
                   "on the same GPU (or CPU) model; latency inverted. Pairs: bad below 93% of the best pair's "
                   'bandwidth or above 2.1x the lowest latency; a rail, in every repetition, below 50% of the same pair\'s other rail\'s bandwidth or above 2x its latency; a rail whose slowest round trips stay above 3x the other rail\'s in most repetitions (lost packets).</p>\n'
                   '<h2>Nodes to drain</h2>\n'
                   '<table><tr><th>#</th><th>node</th><th>reason</th><th>evidence</th></tr><tr><td>1</td><td '
                   "class='fail'>n99</td><td>did not answer; last known state: "
                   "RUNNING</td><td></td></tr><tr><td>2</td><td class='fail'>n01</td><td>GPU2 HBM triad (float64) "
                   '2,090 GB/s = 70% of the fleet median 3,005 GB/s (NVIDIA H100 80GB HBM3, 8 nodes; fail below '
                   '95% and beyond the noise (robust z -20.2, sigma 1.5%: the fleet&#x27;s spread (1.4826 MAD / '
                   'median); fail at z &lt;= -4)); not re-measured (saved '
                   "documents)</td><td></td></tr><tr><td>3</td><td class='fail'>n02</td><td>GPUs 7 where 7 of 8 "
                   'nodes have 8</td><td>GPU5 absent where 7 of 8 nodes have NVIDIA H100 80GB HBM3<br>GPU5 PCIe '
                   'absent where 7 of 8 nodes have Gen5 x16<br>GPU5 NUMA absent where 7 of 8 nodes have '
                   '1<br>NVLink GPU5-NVSwitch absent where 7 of 8 nodes have 18<br>GPU0 -&gt; GPU5 NVLink D2D GPU0 '
                   '-&gt; GPU5 (copy engine) not measured where 7 of 8 NVIDIA H100 80GB HBM3 nodes measured it '
                   '(median 370 GB/s)<br>GPU1 -&gt; GPU5 NVLink D2D GPU1 -&gt; GPU5 (copy engine) not measured '
                   'where 7 of 8 NVIDIA H100 80GB HBM3 nodes measured it (median 367 GB/s)<br>GPU2 -&gt; GPU5 '
                   'NVLink D2D GPU2 -&gt; GPU5 (copy engine) not measured where 7 of 8 NVIDIA H100 80GB HBM3 nodes '
                   "measured it (median 372 GB/s)</td></tr><tr><td>4</td><td class='fail'>n03</td><td>NVLink "
                   'GPU4-NVSwitch 12 where 7 of 8 nodes have 18</td><td></td></tr><tr><td>5</td><td '
                   "class='fail'>n04</td><td>its own check: GPU1 HBM triad 1,211 GB/s is below its "
                   'floor</td><td></td></tr></table>\n'
                   "<p class='note'>No plots: matplotlib is not installed (pip install 'nodemap[report]').</p>\n"
                   '<h2>Warnings</h2><ul><li>n00: node n00: bad pairs that no re-test could settle (no good '
                   'partner left; mpi bw host n00 &lt;-&gt; n07 12 GB/s = 48% of the best pair 25 GB/s; bad below '
                   '93% of the best pair)</li><li>n04: its own check: a sentence of an older node '
                   'check</li><li>n05: its own check found the node busy (pid 77 used GPU3): its figures measured '
                   'then are not judged for speed; check it again when it is idle</li><li>n06: its check did not '
                   'complete (interrupted or a part failed): judged on what it measured</li><li>n06: node n06: bad '
                   'pairs that no re-test could settle (no good partner left; mpi bw host n06 &lt;-&gt; n07 12 '
                   'GB/s = 48% of the best pair 25 GB/s; bad below 93% of the best pair)</li><li>n07: node n07: '
                   'bad pairs that no re-test could settle (no good partner left; mpi bw host n00 &lt;-&gt; n07 12 '
                   'GB/s = 48% of the best pair 25 GB/s; bad below 93% of the best pair)</li></ul>\n'
                   '<h2>Notes</h2><ul><li>a message</li></ul>\n'
                   '</body></html>'},
 'watch': {'summary': 'nodemap watch: 3 rank(s) on n1, 19.8 s, job j1 started ?\n'
                      '  rank  GPU peak   GPU growth  GiB/min  shape    host peak  host growth  GiB/min  shape\n'
                      '  ----  ---------  ----------  -------  -------  ---------  -----------  -------  -------\n'
                      '     0  8.83 GiB   +3.61 GiB    +14.65  growing  2.00 GiB   +0.00 GiB      +0.00  steady\n'
                      '     1  4.00 GiB   +0.00 GiB     +0.00  steady   2.00 GiB   +0.00 GiB      +0.00  steady\n'
                      '     2  76.00 GiB  +0.00 GiB     +0.00  steady   5.87 GiB   +2.89 GiB     +11.72  growing\n'
                      '  GPU 0 H100 on n1: peak used 9.32 of 80.00 GiB, margin 70.68 GiB; ranks 0 peaked at 8.83 '
                      'GiB together\n'
                      '  GPU 1 H100 on n1: peak used 4.49 of 80.00 GiB, margin 75.51 GiB; ranks 1 peaked at 4.00 '
                      'GiB together\n'
                      '  GPU 2 H100 on n1: peak used 76.49 of 80.00 GiB, margin 3.51 GiB; ranks 2 peaked at 76.00 '
                      'GiB together\n'
                      '  warn: rank 0: GPU memory grows steadily and is never given back\n'
                      "    evidence: its processes' GPU memory (NVML): floor 4.49 -> 8.10 GiB (+3.61 GiB after "
                      'start-up, peak 8.83) over 19.8 s, +14.65 GiB/min; loads CuPy\n'
                      "    fix: CuPy's memory pool keeps freed blocks: "
                      'cupy.get_default_memory_pool().free_all_blocks() between phases, or a bound with '
                      'CUPY_GPU_MEMORY_LIMIT / pool.set_limit(); look for arrays kept alive each iteration (a '
                      'cache, a list that grows)\n'
                      '  warn: rank 2: host memory (RSS) grows steadily and is never given back\n'
                      '    evidence: RSS: floor 2.39 -> 5.28 GiB (+2.89 GiB after start-up, peak 5.87) over 19.8 '
                      's, +11.72 GiB/min\n'
                      '    fix: look for buffers kept every iteration (pinned host buffers, a cache, a list that '
                      'grows); MPI registration caches: UCX_RCACHE_MAX_SIZE / UCX_MEMTYPE_CACHE=n\n'
                      "  warn: rank 2: GPU memory peak far above its peers'\n"
                      '    evidence: peak 76.00 GiB against a median of 6.42 GiB for the other 2 rank(s) of n1 '
                      '(11.8x)\n'
                      '    fix: the data decomposition gives this rank more (rebalance the domains), or it does '
                      'extra work (I/O, reductions, a root that gathers): the node fits only as many ranks as the '
                      'largest one allows\n'
                      "  warn: rank 2: host memory peak far above its peers'\n"
                      '    evidence: peak 5.87 GiB against a median of 2.00 GiB for the other 2 rank(s) of n1 '
                      '(2.9x)\n'
                      '    fix: the data decomposition gives this rank more (rebalance the domains), or it does '
                      'extra work (I/O, reductions, a root that gathers): the node fits only as many ranks as the '
                      'largest one allows\n'
                      '  warn: GPU 2 on n1: memory near capacity\n'
                      '    evidence: peak used 76.49 of 80.00 GiB: margin 3.51 GiB (4.4%); ranks 2 held at most '
                      '76.00 GiB together\n'
                      '    fix: a larger input or a longer run may fail to allocate: use more GPUs (nodes), fewer '
                      'ranks per GPU, or limit pools (see growth findings)\n'
                      '  warn: GPU 2 on n1: another process holds memory there\n'
                      '    evidence: pid 999 python held up to 2.00 GiB beside rank 2 (not a rank of this job)\n'
                      '    fix: the GPU is not yours alone: ask for exclusive nodes/GPUs, or stop the process (a '
                      'leftover run, a notebook, a monitoring agent with a context)\n'
                      '  info: rank 2: another rank uses its GPU though the plan did not share it\n'
                      '    evidence: rank 1 (pid 1001 app) also holds GPU 2 though its plan gave it GPU(s) 1\n'
                      '    fix: a rank that opens more GPUs than its own (peer access, CUDA IPC, a library that '
                      'touches every visible device) costs a context on each: set CUDA_VISIBLE_DEVICES per rank '
                      '(nodemap run does) and do not override it\n',
           'html': "<ol id='watch-findings'><li><span class='warn'>&nbsp;warn&nbsp;</span> <b>[growth]</b> rank 0: "
                   "GPU memory grows steadily and is never given back<br><span class='note'>evidence: its "
                   'processes&#x27; GPU memory (NVML): floor 4.49 -&gt; 8.10 GiB (+3.61 GiB after start-up, peak '
                   '8.83) over 19.8 s, +14.65 GiB/min; loads CuPy</span><br>fix: CuPy&#x27;s memory pool keeps '
                   'freed blocks: cupy.get_default_memory_pool().free_all_blocks() between phases, or a bound with '
                   'CUPY_GPU_MEMORY_LIMIT / pool.set_limit(); look for arrays kept alive each iteration (a cache, '
                   "a list that grows)</li><li><span class='warn'>&nbsp;warn&nbsp;</span> <b>[host-growth]</b> "
                   'rank 2: host memory (RSS) grows steadily and is never given back<br><span '
                   "class='note'>evidence: RSS: floor 2.39 -&gt; 5.28 GiB (+2.89 GiB after start-up, peak 5.87) "
                   'over 19.8 s, +11.72 GiB/min</span><br>fix: look for buffers kept every iteration (pinned host '
                   'buffers, a cache, a list that grows); MPI registration caches: UCX_RCACHE_MAX_SIZE / '
                   "UCX_MEMTYPE_CACHE=n</li><li><span class='warn'>&nbsp;warn&nbsp;</span> <b>[imbalance]</b> rank "
                   "2: GPU memory peak far above its peers&#x27;<br><span class='note'>evidence: peak 76.00 GiB "
                   'against a median of 6.42 GiB for the other 2 rank(s) of n1 (11.8x)</span><br>fix: the data '
                   'decomposition gives this rank more (rebalance the domains), or it does extra work (I/O, '
                   'reductions, a root that gathers): the node fits only as many ranks as the largest one '
                   "allows</li><li><span class='warn'>&nbsp;warn&nbsp;</span> <b>[imbalance]</b> rank 2: host "
                   "memory peak far above its peers&#x27;<br><span class='note'>evidence: peak 5.87 GiB against a "
                   'median of 2.00 GiB for the other 2 rank(s) of n1 (2.9x)</span><br>fix: the data decomposition '
                   'gives this rank more (rebalance the domains), or it does extra work (I/O, reductions, a root '
                   'that gathers): the node fits only as many ranks as the largest one allows</li><li><span '
                   "class='warn'>&nbsp;warn&nbsp;</span> <b>[near-capacity]</b> GPU 2 on n1: memory near "
                   "capacity<br><span class='note'>evidence: peak used 76.49 of 80.00 GiB: margin 3.51 GiB (4.4%); "
                   'ranks 2 held at most 76.00 GiB together</span><br>fix: a larger input or a longer run may fail '
                   'to allocate: use more GPUs (nodes), fewer ranks per GPU, or limit pools (see growth '
                   "findings)</li><li><span class='warn'>&nbsp;warn&nbsp;</span> <b>[foreign]</b> GPU 2 on n1: "
                   "another process holds memory there<br><span class='note'>evidence: pid 999 python held up to "
                   '2.00 GiB beside rank 2 (not a rank of this job)</span><br>fix: the GPU is not yours alone: ask '
                   'for exclusive nodes/GPUs, or stop the process (a leftover run, a notebook, a monitoring agent '
                   "with a context)</li><li><span class='info'>&nbsp;info&nbsp;</span> <b>[shared-gpu]</b> rank 2: "
                   "another rank uses its GPU though the plan did not share it<br><span class='note'>evidence: "
                   'rank 1 (pid 1001 app) also holds GPU 2 though its plan gave it GPU(s) 1</span><br>fix: a rank '
                   'that opens more GPUs than its own (peer access, CUDA IPC, a library that touches every visible '
                   'device) costs a context on each: set CUDA_VISIBLE_DEVICES per rank (nodemap run does) and do '
                   'not override it</li></ol>'}}
