"""benchmarks/check_quick_vs_full.py: how runs of the two levels are judged
against the 3% target (synthetic runs; the benchmark itself runs nodemap)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import check_quick_vs_full as qvf  # noqa: E402


def runs(quick, full, extra_key=False):
    out = [{"level": "quick", "figures": {"x": {"value": v, "unit": "GB/s"}}} for v in quick]
    out += [{"level": "full", "figures": {"x": {"value": v, "unit": "GB/s"}, **({"y": {"value": 1.0, "unit": "ns"}}
                                                                             if extra_key else {})}} for v in full]
    return out


def test_an_interval_inside_3pct_supports_outside_contradicts_else_shows_nothing():
    assert qvf.verdict(0.98, 1.02) == "supported"
    assert qvf.verdict(1.04, 1.10) == "contradicted" and qvf.verdict(0.80, 0.96) == "contradicted"
    assert qvf.verdict(0.95, 1.02) == "not shown"


def test_quiet_equal_levels_are_supported_a_shifted_level_contradicted():
    full = [100.0, 100.5, 99.5, 100.2, 99.8]
    (same,) = qvf.compare(runs([100.1, 99.9, 100.3, 99.7, 100.0], full))
    assert same["within_3pct"] == "supported" and same["low"] <= same["ratio"] <= same["high"]
    (shifted,) = qvf.compare(runs([v * 1.1 for v in full], full))
    assert shifted["within_3pct"] == "contradicted" and abs(shifted["ratio"] - 1.1) < 1e-9


def test_noisy_runs_show_nothing_and_figures_of_one_level_are_left_out():
    rows = qvf.compare(runs([80.0, 120.0, 100.0], [100.0, 70.0, 125.0], extra_key=True))
    assert [r["key"] for r in rows] == ["x"] and rows[0]["within_3pct"] == "not shown"


def test_one_run_of_a_level_shows_nothing():
    """A campaign cut short after one pair: equal single runs are no evidence
    of 3% (their interval has zero width), so neither verdict is given."""
    runs = [{"level": lv, "pair": 0, "figures": {"gpu/0/hbm_triad": {"value": v, "unit": "GB/s"}}}
            for lv, v in (("quick", 3080.0), ("full", 3081.0))]
    (row,) = qvf.compare(runs)
    assert row["within_3pct"] == "not shown (one run)"
