"""benchmarks/jacobi_vs_reference.py: nodemap's result sets beside the
reference's -csv lines, grouped by GPU count for strong and weak scaling
(synthetic records shaped like a device run's)."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import jacobi_vs_reference as jvr  # noqa: E402

STRONG, WEAK = "1024x1024", "1024x512"


def result_set(path: Path, mode: str, gpus: int, times: dict[str, float], size: str, weak: bool = False) -> str:
    """A `nodemap bench jacobi` JSON of one run on `gpus` GPUs, one slab each:
    the 'single' baseline (whole grid, one GPU) plus the given variants."""
    nx, ny = (int(x) for x in size.split("x"))
    gx, gy = (nx, (ny - 2) * gpus + 2) if weak else (nx, ny)
    def row(variant, us, slabs, g, w, h, tile=None):
        return {"unit": "us", "stats": {"median": us, "spread": 0.01},
                "params": {"variant": variant, "dtype": "fp32", "nx": w, "ny": h, "iters": 200, "slabs": slabs,
                           "gpus": g, "efficiency": 1.0, "slab_grid": tile}}
    results = [row("single", 1000.0 * gx * gy / (1024 * 1024), 1, 1, gx, gy)]
    results += [row(v, us, gpus, gpus, gx, gy, size if weak else None) for v, us in times.items()]
    doc = {"command": f"bench jacobi --size {size} --dtype fp32 --iters 200" + (" --weak" if weak else ""),
           "environment": {"mode": mode, "slabs": gpus}, "results": results}
    p = path / f"{mode}_{gpus}_{'weak' if weak else 'strong'}.json"
    p.write_text(json.dumps(doc))
    return str(p)


def reference_lines(path: Path, lines: list[tuple[str, int, int, int, float]]) -> str:
    """-csv lines as the reference prints them: (name, nx, ny, GPUs, seconds for 200 steps)."""
    text = []
    for name, nx, ny, g, secs in lines:
        text.append(f"single_gpu, {nx}, {ny}, 200, 1, {secs:f}" if name == "single_gpu" else
                    f"{name}, {nx}, {ny}, 200, 200, {g}, 1, {secs:f}, 0.3")
    p = path / "reference_csv.txt"
    p.write_text("\n".join(text) + "\nnot a csv line\n")
    return str(p)


@pytest.fixture
def campaign(tmp_path):
    """1 and 2 GPUs, strong at 1024x1024 and weak at 1024x512 per GPU."""
    files = [result_set(tmp_path, "single", 1, {"peer": 1000.0}, STRONG),
             result_set(tmp_path, "single", 2, {"peer": 500.0}, STRONG),  # perfect strong scaling
             result_set(tmp_path, "mpi", 1, {"nccl": 1000.0}, STRONG),
             result_set(tmp_path, "mpi", 2, {"nccl": 625.0}, STRONG),
             result_set(tmp_path, "single", 1, {"peer": 500.0}, WEAK, weak=True),
             result_set(tmp_path, "single", 2, {"peer": 550.0}, WEAK, weak=True)]
    ref = reference_lines(tmp_path, [
        ("single_gpu", 1024, 1024, 1, 0.3), ("multi_threaded_p2p", 1024, 1024, 1, 0.2),
        ("multi_threaded_p2p", 1024, 1024, 2, 0.125), ("nccl", 1024, 1024, 1, 0.2), ("nccl", 1024, 1024, 2, 0.1),
        ("nccl", 1024, 1024, 2, 0.3),  # two repetitions: the median
        ("multi_threaded_p2p", 1024, 512, 1, 0.1), ("multi_threaded_p2p", 1024, 1022, 2, 0.125),
        ("multi_threaded_p2p", 1024, 1024, 3, 0.1)])  # a GPU count nodemap did not run: listed alone
    return ref, files


def table(campaign) -> dict[tuple, dict]:
    ref, files = campaign
    rows = jvr.scaling_rows(jvr.reference(ref), jvr.ours(files), {"strong": STRONG, "weak": WEAK})
    return {(r["scaling"], r["mode"], r["variant"], r["reference"], r["G"]): r for r in rows}


def test_strong_scaling_pairs_each_gpu_count_with_its_reference_run(campaign):
    t = table(campaign)
    one, two = t[("strong", "single", "peer", "multi_threaded_p2p", 1)], t[("strong", "single", "peer",
                                                                              "multi_threaded_p2p", 2)]
    assert (one["ours_us"], one["ref_us"], one["ratio"]) == (1000.0, 1000.0, 1.0)
    assert (two["ours_us"], two["ref_us"]) == (500.0, 625.0)
    assert two["ours_eff"] == pytest.approx(1.0) and two["ref_eff"] == pytest.approx(0.8)
    assert two["ratio"] == pytest.approx(1.25)
    nccl = t[("strong", "mpi", "nccl", "nccl", 2)]
    assert nccl["ref_us"] == pytest.approx(1000.0)  # median of 500 and 1500 us
    assert nccl["ours_eff"] == pytest.approx(0.8)


def test_the_single_baseline_counts_only_in_one_gpu_runs(campaign):
    t = table(campaign)
    singles = sorted(k[4] for k in t if k[:3] == ("strong", "single", "single"))
    assert singles == [1]  # the 2-GPU run's whole-grid baseline is not a 2-GPU point
    assert t[("strong", "single", "single", "single_gpu", 1)]["ref_us"] == pytest.approx(1500.0)
    assert not any(k[0] == "weak" and k[2] == "single" and k[4] == 2 for k in t)


def test_weak_scaling_matches_the_reference_at_the_grown_global_grid(campaign):
    t = table(campaign)
    two = t[("weak", "single", "peer", "multi_threaded_p2p", 2)]
    assert two["global"] == "1024x1022"  # halo rows once: (512 - 2) x 2 + 2
    assert (two["ours_us"], two["ref_us"]) == (550.0, 625.0)
    assert two["ours_eff"] == pytest.approx(500 / 550) and two["ref_eff"] == pytest.approx(500 / 625)
    assert ("weak", "single", "peer", "multi_threaded_p2p", 1) in t
    assert ("strong", "single", "peer", "multi_threaded_p2p", 3) in t  # the 3-GPU reference line is kept
    assert t[("strong", "single", "peer", "multi_threaded_p2p", 3)]["ours_us"] is None


def test_a_reference_variant_without_a_nodemap_series_is_listed_alone(tmp_path):
    ref = reference_lines(tmp_path, [("nccl_graphs", 1024, 1024, 1, 0.2), ("nccl_graphs", 1024, 1024, 2, 0.2)])
    rows = jvr.scaling_rows(jvr.reference(ref), [], {"strong": STRONG})
    assert [(r["reference"], r["G"], r["ref_eff"]) for r in rows] == [("nccl_graphs", 1, 1.0), ("nccl_graphs", 2, 0.5)]
    assert all(r["variant"] == "-" and r["ratio"] is None for r in rows)


def test_main_prints_and_writes_markdown(campaign, tmp_path, capsys):
    ref, files = campaign
    md = tmp_path / "summary.md"
    assert jvr.main([ref, *files, "--strong", STRONG, "--weak", WEAK, "--markdown", str(md)]) == 0
    text = md.read_text()
    assert "## Strong scaling, fixed 1024x1024 grid" in text and "## Weak scaling, 1024x512 per GPU" in text
    assert "| single | peer | fp32 | 2 | 1024x1024 | 500.0 | 100% | multi_threaded_p2p | 625.0 | 80% | 1.25 |" in text
    assert text in capsys.readouterr().out


def test_without_grids_only_the_pairs_table_is_printed(campaign, capsys):
    ref, files = campaign
    assert jvr.main([ref, *files]) == 0
    out = capsys.readouterr().out
    assert "nodemap variant" in out and "scaling" not in out
