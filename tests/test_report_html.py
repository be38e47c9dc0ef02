"""The HTML report: every plot drawn from a document with GPU areas (synthetic
results over a fixture topology), tables without matplotlib, the hook for
extra sections, and a real headless browser (skips without chromium)."""

import shutil
import subprocess
import sys

import pytest

import check_synth as syn
import nodes
from conftest import ROOT
from nodemap.check import expectations
from nodemap.check.inventory import Check
from nodemap.check.document import CheckDoc
from nodemap.report import html, plots

GPU_NUMA = dict(enumerate(nodes.KAROLINA_GPU_NUMA))


@pytest.fixture
def doc():
    h2d = {(n, g): (24.0 if n == GPU_NUMA[g] else 20.0) for g in range(4) for n in (1, 3)}
    d2d = {(a, b): 250.0 for a in range(4) for b in range(4) if a != b}
    d2d[(0, 2)] = 150.0
    d = CheckDoc(level="full", topology=nodes.karolina(), expectations=expectations.shipped(),
                 results=[syn.hbm({g: 1400.0 for g in range(4)}), syn.copies(h2d, GPU_NUMA, d2d),
                          syn.stream({"1/L3": (16, 339.0), "1/core": (128, 298.0)}),
                          syn.numa({(i, j): 40.0 if i == j else 20.0 for i in range(2) for j in range(2)}),
                          syn.latency({"L1d": (16384, 1.2), "L2": (262144, 4.0), "DRAM": (1 << 30, 110.0)}),
                          syn.gpu_latency({(a, b): 2000.0 if (a, b) == (1, 3) else 800.0
                                           for a in range(4) for b in range(4) if a != b})])
    d.rejudge()
    return d


def test_every_plot_is_drawn_as_inline_svg(doc):
    pytest.importorskip("matplotlib")
    page = html.render(doc)
    for pid in ("plot-stream-sweep", "plot-numa-bw", "plot-latency", "plot-h2d", "plot-d2d", "plot-d2d-latency"):
        assert f"<div class='plot' id='{pid}'>" in page
    assert page.count("<svg") == 6 and "<script" not in page and "<metadata>" not in page
    assert "d2d/gpu0-&gt;gpu2" in page and "fail" in page
    assert page == html.render(doc)  # the same document gives the same file


def test_a_heatmap_with_an_inconclusive_pair_is_drawn(doc):
    """A pair whose interval straddles its limit, or measured while the node
    was busy, is inconclusive: the heatmaps had no colour for it, so the
    HTML report of such a check was a KeyError traceback."""
    pytest.importorskip("matplotlib")
    import dataclasses

    i = next(i for i, j in enumerate(doc.judged) if j.figure.key.startswith("d2d/"))
    doc.judged[i] = dataclasses.replace(doc.judged[i], verdict="inconclusive")
    page = html.render(doc)
    assert page.count("<svg") == 6 and plots.VERDICT_COLOR["inconclusive"] in page


def test_without_matplotlib_the_tables_stay_and_the_extra_is_named(doc, monkeypatch):
    monkeypatch.setattr(plots, "available", lambda: False)
    page = html.render(doc)
    assert "<svg" not in page and "nodemap[report]" in page and "gpu/0/hbm_triad" in page


def test_extra_sections_hook(doc, monkeypatch):
    timeline = {"rank0": [1, 2, 3]}  # what the other command read (commands/report.py: the watch timelines)
    monkeypatch.setattr(html, "SECTIONS", [lambda d: html.Section("timeline", "Memory timeline",
                                                                  f"<p>{len(timeline)} ranks</p>")])
    page = html.render(doc)
    assert "<h2 id='timeline'>Memory timeline</h2><p>1 ranks</p>" in page


@pytest.mark.slow
def test_headless_chromium_opens_it_offline(doc, tmp_path):
    pytest.importorskip("matplotlib")
    if not any(shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome")):
        pytest.skip("no chromium here (benchmarks/html_in_browser.py installs it)")
    page = tmp_path / "check.html"
    page.write_text(html.render(doc))
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "html_in_browser.py"), str(page), "--no-install",
                        "--screenshot", str(tmp_path / "shot.png")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "6 plots promised" in r.stdout and (tmp_path / "shot.png").stat().st_size > 10000


LONG_CHECKS = [  # as a real GPU node's inventory: unbroken names and a long fix ran the table past 1400 px
    Check("inventory/env/OMPI_MCA_btl_vader_single_copy_mechanism", "OMPI_MCA_btl_vader_single_copy_mechanism",
          "none", "", "info", "changes how results are produced"),
    Check("inventory/env/CUDA_HOME", "CUDA_HOME", "/opt/nvidia/hpc_sdk/Linux_x86_64/24.7/cuda/12.5/targets/x86_64-linux",
          "", "info", "changes how results are produced"),
    Check("inventory/mpi/cuda_aware", "MPI CUDA-aware", "no (Open MPI 4.1.4 built without CUDA)", "", "fail",
          "device buffers need a CUDA-aware MPI", "configuration",
          "use a CUDA-aware MPI build (Open MPI/UCX built with CUDA, MPICH with MPIR_CVAR_ENABLE_GPU=1, Cray MPICH "
          "with MPICH_GPU_SUPPORT_ENABLED=1) and pass device pointers; or set NODEMAP_MPI_CUDA_AWARE=0"),
]


def test_table_cells_wrap_long_words_so_the_fix_column_stays_on_the_page(doc):
    doc.checks = list(LONG_CHECKS)
    page = html.render(doc)
    style = page[page.index("<style>"):page.index("</style>")]
    assert "td{overflow-wrap:anywhere}" in style  # an unbroken name may wrap inside its cell
    assert "th,td.v{overflow-wrap:normal}" in style  # headings and verdicts keep whole words
    assert "<table id='checks'>" in page and page.count("<td>use a CUDA-aware MPI build") == 1


def _bench_doc(tmp_path, site: str = ""):
    from nodemap.commands import report

    path = tmp_path / "mem.json"
    path.write_text(syn.stream({"1/core": (2, 19.7)}).to_json())
    exp = None
    if site:
        exp = tmp_path / "site.toml"
        exp.write_text(site)
    return report.load([str(path)], str(exp) if exp else None)


SITE_PEAK = ('[[limit]]\nkind = "stream"\nmatch = "."\npeak = 40.0\nwarn = 0.72\nfail = 0.60\n'
             'source = "2 channels x 2500 MT/s x 8 B"\n')


def test_bench_results_page_says_what_it_is_not_a_check_at_level_dash(tmp_path):
    page = html.render(_bench_doc(tmp_path))
    title = page[page.index("<title>"):page.index("</title>")]
    assert "nodemap bench memory" in title and "check" not in title
    assert "<h1>nodemap bench memory on " in page and "level <b>-</b>" not in page and "finished -" not in page
    inventory = page[page.index("<h2 id='inventory'>"):page.index("<h2 id='environment'>")]
    assert "<table" not in inventory and "nodemap check</code> runs them" in inventory  # no empty table
    environment = page[page.index("<h2 id='environment'>"):]
    assert "<th>command</th><td>nodemap bench memory" in environment  # the file's own, not an empty table


def test_the_checks_heading_names_verification_only_where_the_section_holds_it(doc):
    """The section also lists a step's verified output (verification/KIND/PART,
    check/failed.py); its heading said "Inventory and health". Anchor unchanged."""
    doc.checks = [Check("inventory/env/NCCL_ALGO", "NCCL_ALGO", "Ring", "unset", "warn", "forced", "configuration")]
    assert "<h2 id='inventory'>Inventory and health</h2>" in html.render(doc)
    doc.checks.append(Check("verification/nccl/all_reduce", "NCCL all_reduce", "5 wrong elements",
                            "0 wrong elements", "fail", "bench nccl verifies its output", "configuration", "", "NCCL"))
    page = html.render(doc)
    assert "<h2 id='inventory'>Inventory, health and verification</h2>" in page and "Inventory and health" not in page


def test_one_measurement_judged_twice_is_one_row(tmp_path):
    """One STREAM placement with a DRAM peak: the placement figure and the
    peak figure are the same triad; its value, interval and unit once."""
    doc = _bench_doc(tmp_path, SITE_PEAK)
    assert [j.figure.key for j in doc.judged] == ["host/stream/triad", "host/stream/best"]
    page = html.render(doc)
    table = page[page.index("<table id='figure-table'>"):]
    table = table[:table.index("</table>")]
    assert table.count("<tr>") == 3 and table.count(">19.7</td>") == 1  # heading + two lines, the value once
    assert table.count("rowspan='2'") == 4  # area, value, interval, unit shared
    assert "host/stream/triad" in table and "host/stream/best" in table and "49% of 40" in table


@pytest.mark.slow
@pytest.mark.parametrize("window", ["1400x900"])
def test_headless_chromium_inventory_fits_the_window(doc, tmp_path, window):
    if not any(shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome")):
        pytest.skip("no chromium here (benchmarks/html_in_browser.py installs it)")
    pytest.importorskip("PIL")
    doc.checks = list(LONG_CHECKS)
    page = tmp_path / "check.html"
    page.write_text(html.render(doc))
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "html_in_browser.py"), str(page), "--no-install",
                        "--screenshot", str(tmp_path / "inv.png"), "--window", window, "--at", "inventory"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr  # nothing drawn in the screenshot's right margin


def test_one_table_escapes_every_cell_but_markup_given_as_markup(doc):
    from nodemap.htmlpage import Cell, Markup, table

    t = table(["a<b"], [("<script>x</script>", Cell("<i>", cls="v fail"), Markup("<code>k</code>"))], id="t")
    assert t == ("<table id='t'><tr><th>a&lt;b</th></tr><tr><td>&lt;script&gt;x&lt;/script&gt;</td>"
                 "<td class='v fail'>&lt;i&gt;</td><td><code>k</code></td></tr></table>")
    # through a page: a check's text that looks like markup is shown, not run
    doc.checks = [Check("inventory/env/X", "X", "<img src=x onerror=alert(1)>", "", "warn", "<b>rule</b>")]
    page = html.render(doc)
    assert "<img src=x" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    assert "<td>&lt;b&gt;rule&lt;/b&gt;</td>" in page and "<td class='v warn'>warn</td>" in page


def test_browser_check_counts_the_pages_console_messages_not_chromiums_own():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import html_in_browser

    own = ('[1:1:INFO:CONSOLE:574] "Slow network is detected.", '
           'source: chrome://resources/cr_components/composebox/composebox_input.js (574)')
    page = "[1:1:INFO:CONSOLE:3] \"Refused to load the image\", source: file:///tmp/check.html (3)"
    assert html_in_browser.console_errors(own) == []
    assert html_in_browser.console_errors(own + "\n" + page) == [page]
