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


def test_without_matplotlib_the_tables_stay_and_the_extra_is_named(doc, monkeypatch):
    monkeypatch.setattr(plots, "available", lambda: False)
    page = html.render(doc)
    assert "<svg" not in page and "nodemap[report]" in page and "gpu/0/hbm_triad" in page


def test_extra_sections_hook(doc, monkeypatch):
    doc.extra["memory_timeline"] = {"rank0": [1, 2, 3]}
    monkeypatch.setattr(html, "SECTIONS", [lambda d: html.Section("timeline", "Memory timeline",
                                                                  f"<p>{len(d.extra['memory_timeline'])} ranks</p>")])
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
