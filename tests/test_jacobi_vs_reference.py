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


# --- benchmarks/jacobi_vs_reference.sh with fakes for the GPU, MPI and the reference's build ---

FAKE_MPIRUN = """#!/bin/bash
np=1
while [ $# -gt 0 ]; do case $1 in
  -np) np=$2; shift 2;; -x|--bind-to) shift 2;; --mca) shift 3;; -*) shift;; *) break;; esac; done
for ((r = 0; r < np; r++)); do OMPI_COMM_WORLD_SIZE=$np OMPI_COMM_WORLD_RANK=$r "$@" || exit $?; done
"""
FAKE_JACOBI = """
import os, sys
a = sys.argv[1:]
nx, ny, it = (int(a[a.index(k) + 1]) for k in ("-nx", "-ny", "-niter"))
if int(os.environ.get("OMPI_COMM_WORLD_RANK", "0")):
    sys.exit(0)
nccl = VARIANT.startswith("nccl")
g = int(os.environ["OMPI_COMM_WORLD_SIZE"]) if nccl else len(os.environ["CUDA_VISIBLE_DEVICES"].split(","))
t = nx * ny * 1e-12 * it
print(f"single_gpu, {nx}, {ny}, {it}, 1, {t:f}" if VARIANT == "single_gpu" else
      f"{VARIANT}, {nx}, {ny}, {it}, {it}, {g}, 1, {1.5 * t / g:f}, {t:f}")
"""
FAKE_NODEMAP = """
import json, os, sys
a = sys.argv[1:]
opt = lambda k: a[a.index(k) + 1]
if os.environ.get("OMPI_COMM_WORLD_RANK", "0") != "0":
    sys.exit(0)
mode, weak = opt("--mode"), "--weak" in a
g = len(opt("--gpus").split(",")) if mode == "single" else int(os.environ["OMPI_COMM_WORLD_SIZE"])
assert len(os.environ["CUDA_VISIBLE_DEVICES"].split(",")) == g, "every G runs on its own GPUs only"
nx, ny = map(int, opt("--size").split("x"))
gx, gy = (nx, (ny - 2) * g + 2) if weak else (nx, ny)
def row(v, us, n, w, h, tile=None):
    return {"unit": "us", "stats": {"median": us, "spread": 0.0}, "params": {"variant": v, "dtype": "fp32",
            "nx": w, "ny": h, "iters": 200, "slabs": n, "gpus": n, "efficiency": 1.0, "slab_grid": tile}}
t = gx * gy * 1e-6
res = [row("single", t, 1, gx, gy)] + [row(v, t / g, g, gx, gy, f"{nx}x{ny}" if weak else None)
                                       for v in opt("--variants").split(",") if v != "single"]
doc = {"command": "bench jacobi" + (" --weak" if weak else ""), "environment": {"mode": mode, "slabs": g},
       "results": res}
json.dump(doc, open(opt("-o"), "w"))
"""


def fake_tools(tmp_path: Path) -> Path:
    """A PATH head with two fake GPUs, a fake mpirun (ranks one after the
    other), a fake `make` that 'builds' a reference printing its -csv line,
    a fake nodemap writing result sets, and python3 = this interpreter."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    tools = {"nvidia-smi": '#!/bin/bash\n[ "$1" = -L ] && printf "GPU 0: fake\\nGPU 1: fake\\n"\nexit 0\n',
             "mpirun": FAKE_MPIRUN,
             "python3": f'#!/bin/sh\nexec {sys.executable} "$@"\n',
             "nodemap": f"#!{sys.executable}\n{FAKE_NODEMAP}",
             "make": f'#!/bin/bash\n{{ echo "#!{sys.executable}"; echo "VARIANT = \\"$(basename "$PWD")\\""; '
                     f"cat {tmp_path}/jacobi.py; }} > jacobi && chmod +x jacobi\n"}
    (tmp_path / "jacobi.py").write_text(FAKE_JACOBI)
    for name, text in tools.items():
        (bin_ / name).write_text(text)
        (bin_ / name).chmod(0o755)
    return bin_


def test_the_script_runs_every_gpu_count_on_its_own_gpus(tmp_path):
    """Dry run: G = 1 and 2, strong and weak, builds and tables; the
    reference at nodemap's weak global grid; nothing left unpaired."""
    import os
    import re
    import shutil
    import subprocess

    if not all(shutil.which(t) for t in ("bash", "timeout", "tar", "seq")):
        pytest.skip("needs bash, timeout, tar and seq")
    repo = Path(__file__).resolve().parent.parent
    ref = tmp_path / "ref"
    for v in ("single_gpu", "multi_threaded_p2p", "multi_threaded_copy", "nccl", "nccl_graphs"):
        (ref / v).mkdir(parents=True)
        (ref / v / "Makefile").write_text("CXXFLAGS = -std=c++14\n")
    env = dict(os.environ, PATH=f"{fake_tools(tmp_path)}:{os.environ['PATH']}", PYTHONPATH=str(repo / "src"),
               BUDGET="300")
    out = tmp_path / "out"
    p = subprocess.run(["bash", str(repo / "benchmarks/jacobi_vs_reference.sh"), str(out), str(ref)], cwd=repo,
                       env=env, capture_output=True, text=True, timeout=240)
    log = (out / "jacobi_log.txt").read_text()
    assert p.returncode == 0, p.stderr + log[-3000:]
    assert not re.search(r"^=== \S+: rc=[1-9]", log, re.M), log[-3000:]  # every step passed
    assert "=== ref multi_threaded_p2p_opt: not built" in log  # a variant not built: said, not run
    assert "-std=c++17" in (ref / "nccl" / "Makefile").read_text()
    assert "CUDA_VISIBLE_DEVICES=0,1 mpirun" in log and " -np 2 " + str(ref / "nccl/jacobi") in log
    assert "-nx 16384 -ny 16382 -niter 200" in log  # weak, 2 GPUs: (8192 - 2) x 2 + 2 rows
    md = (out / "summary.md").read_text()
    assert "| single | peer | fp32 | 2 | 16384x16384 | 134.2 | 100% | multi_threaded_p2p | 201.3 | 100% | 1.50 |" in md
    assert "| mpi | nccl | fp32 | 2 | 16384x16382 |" in md and "| single | single | fp32 | 1 | 16384x8192 |" in md
    assert "\n| - | - |" not in md  # every reference variant run has its nodemap series
    assert "summary.md" in subprocess.run(["tar", "tzf", str(out / "jacobi_results.tar.gz")], capture_output=True,
                                          text=True).stdout
