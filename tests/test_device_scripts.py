"""benchmarks/*.sh dry runs: every device script on stand-in tools (a fake
nvidia-smi with two GPUs, mpirun running the ranks one after the other,
nodemap writing its outputs, python3 answering for CuPy/mpi4py, git, nvcc,
likwid-bench, lstopo), its log read for each part's command line, exit codes,
parts skipped for the budget, the tarball after each part and the mpirun
fallback. The campaigns themselves run on a GPU node; this is their control
flow and benchmarks/lib/campaign.sh, in a few seconds."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "benchmarks"
CHECK_JSON = BENCH / "results" / "check_h100_20261125" / "full" / "check.json"

# every stand-in appends {"tool", "argv", "packed"} to $FAKE_CALLS; packed: $FAKE_TARBALL exists then
RECORD = """
import json, os, sys
def record(tool):
    with open(os.environ["FAKE_CALLS"], "a") as f:
        f.write(json.dumps({"tool": tool, "argv": sys.argv[1:], "rank": os.environ.get("OMPI_COMM_WORLD_RANK"),
                            "packed": os.path.exists(os.environ.get("FAKE_TARBALL", "/nonexistent"))}) + "\\n")
"""

FAKE_NODEMAP = RECORD + """
import shutil
record("nodemap")
a = sys.argv[1:]
if a == ["--version"]:
    sys.exit(print("nodemap 0.0.fake"))
if a[0] in os.environ.get("FAKE_NODEMAP_FAIL", "").split(",") or a[:2] == os.environ.get("FAKE_NODEMAP_FAIL", "").split(" "):
    sys.exit(print("fake failure", file=sys.stderr) or 3)
out = next((a[i + 1] for i, k in enumerate(a) if k in ("-o", "--output", "--export")), None)
if a[0] == "check" and out:
    os.makedirs(out, exist_ok=True)
    if "--fleet" not in a:
        shutil.copy(os.environ["FAKE_CHECK_JSON"], os.path.join(out, "check.json"))
        open(os.path.join(out, "check.html"), "w").write("<html>")
elif out:
    json.dump({"command": " ".join(a[:2]), "results": []}, open(out, "w"))
elif a[:2] == ["bench", "memory"]:  # stream_vs_likwid: one sample of --batch runs
    print(json.dumps({"results": [{"params": {"isa": "avx2"}, "samples": [20.0 if "--nt-stores" in a else 10.0]}]}))
elif a[0] == "topo" and "--json" in a:
    print(json.dumps({"source": "sysfs"}))
else:
    print("fake nodemap", *a)
"""

FAKE_PYTHON3 = RECORD + """
record("python3")
a = sys.argv[1:]
code = a[1] if a[:1] == ["-c"] else ""
if any(m in code for m in ("cupy", "mpi4py", "torch")):
    sys.exit(print("python 3.fake cupy 13.fake mpi4py 4.fake nccl 22809 torch 2.fake"))
if "nvidia.nccl" in code or a[:2] in (["-m", "pytest"], ["-m", "pip"]):
    sys.exit(0)
if a and a[0].endswith(".py") and "benchmarks" in a[0]:  # a companion script: recorded, not run
    if "--keep" in a:  # check_quick_vs_full.py keeps each run's folder
        keep = a[a.index("--keep") + 1]
        os.makedirs(os.path.join(keep, "1-full"), exist_ok=True)
        open(os.path.join(keep, "1-full", "check.json"), "w").write(open(os.environ["FAKE_CHECK_JSON"]).read())
    sys.exit(0)
os.execv(os.environ["FAKE_REAL_PYTHON"], [os.environ["FAKE_REAL_PYTHON"], *a])
"""

# ranks one after the other; the probe (a barrier) fails unless the fallback's
# transport is asked for when FAKE_MPI_FAIL is set (no UCX/IB)
FAKE_MPIRUN = RECORD + """
import subprocess
record("mpirun")
a = sys.argv[1:]
if a == ["--version"]:
    sys.exit(print("mpirun (Open MPI) 4.1.fake"))
if any("COMM_WORLD.Barrier" in x for x in a):
    fail = os.environ.get("FAKE_MPI_FAIL") and "ob1" not in a
    sys.exit(print("UCX  ERROR no transport") or 1 if fail else 0)
np, env, i = 1, dict(os.environ), 0
while i < len(a) and a[i].startswith("-"):
    if a[i] == "-np":
        np = int(a[i + 1])
    if a[i] == "-x" and "=" in a[i + 1]:
        k, v = a[i + 1].split("=", 1)
        env[k] = v
    i += 3 if a[i] == "--mca" else 2 if a[i] in ("-np", "-x", "--bind-to") else 1
for r in range(np):
    rc = subprocess.run(a[i:], env={**env, "OMPI_COMM_WORLD_RANK": str(r), "OMPI_COMM_WORLD_SIZE": str(np)}).returncode
    if rc:
        sys.exit(rc)
"""

FAKE_NVIDIA_SMI = RECORD + """
record("nvidia-smi")
a = sys.argv[1:]
if a == ["-L"]:
    print("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-a)\\nGPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-b)")
elif a[:1] == ["topo"]:
    print("\\tGPU0\\tGPU1\\nGPU0\\t X \\tNV18\\nGPU1\\tNV18\\t X ")
else:
    print("0, NVIDIA H100 80GB HBM3, 00000000:19:00.0, 550.fake, 81559 MiB")
"""

FAKE_LIKWID = RECORD + """
record("likwid-bench")
a = sys.argv[1:]
if a == ["-p"]:
    print("Domain N:\\n\\tTag N: 0 1 2 3")
elif a == ["-a"]:
    print("copy - Double-precision vector copy\\nstream - Double-precision stream triad\\n"
          "copy_mem - copy, non-temporal stores\\nstream_mem - triad, non-temporal stores")
else:
    print("MByte/s:\\t\\t12500.00")
"""

SHELL_FAKES = {
    "git": 'echo "nodemap abc1234 2026-11-27T00:00:00+00:00"',
    "nvcc": 'echo "Cuda compilation tools, release 12.fake"',
    "lstopo-no-graphics": '[ "$1" = --version ] && echo "lstopo-no-graphics 2.fake" || echo "Machine (fake)"',
}


@pytest.fixture
def fake(tmp_path):
    """The stand-in tools first on PATH; returns a runner of a script and a reader of the calls."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    tools = {"nodemap": FAKE_NODEMAP, "python3": FAKE_PYTHON3, "mpirun": FAKE_MPIRUN,
             "nvidia-smi": FAKE_NVIDIA_SMI, "likwid-bench": FAKE_LIKWID}
    for name, text in tools.items():
        (bin_ / name).write_text(f"#!{sys.executable}\n{text}")
    for name, text in SHELL_FAKES.items():
        (bin_ / name).write_text(f"#!/bin/bash\necho {name} \"$@\" >>\"$FAKE_CALLS.sh\"\n{text}\n")
    for f in bin_.iterdir():
        f.chmod(0o755)
    log = tmp_path / "calls.jsonl"

    class Fake:
        env = {**os.environ, "PATH": f"{bin_}:{os.environ['PATH']}", "FAKE_CALLS": str(log),
               "FAKE_REAL_PYTHON": sys.executable, "FAKE_CHECK_JSON": str(CHECK_JSON),
               "PYTHONPATH": str(ROOT / "src")}

        @staticmethod
        def run(script, *args, cwd=ROOT, rc=0, **env):
            p = subprocess.run(["bash", str(BENCH / script), *map(str, args)], cwd=cwd,
                               env={**Fake.env, **{k: str(v) for k, v in env.items()}},
                               capture_output=True, text=True, timeout=60)
            assert p.returncode == rc, p.stdout + p.stderr
            return p

        @staticmethod
        def calls(tool=None):
            rows = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
            return [r for r in rows if tool in (None, r["tool"])]

    return Fake


def steps(log: str) -> dict[str, str]:
    """NAME -> the command line step logged for it."""
    return dict(re.findall(r"^=== (\S+) \[\d+ s\]: (.*)$", log, re.M))


def rcs(log: str) -> dict[str, int]:
    return {name: int(rc) for name, rc in re.findall(r"^=== (\S+): rc=(\d+) in \d+ s$", log, re.M)}


def packed(tarball: Path) -> list[str]:
    return subprocess.run(["tar", "tzf", str(tarball)], capture_output=True, text=True, check=True).stdout.split()


def test_every_script_is_valid_bash_and_sources_the_one_library():
    scripts = sorted(BENCH.glob("*.sh"))
    assert len(scripts) == 9
    for s in scripts:
        subprocess.run(["bash", "-n", str(s)], check=True)
        text = s.read_text()
        assert "lib/campaign.sh" in text, s.name
        assert not re.search(r"^\s*(step|want|pack|fits)\(\)", text, re.M), f"{s.name} defines its own helper"


def test_multi_gpu_campaign_runs_its_parts_skips_what_the_budget_cannot_hold_and_packs_after_each(fake, tmp_path):
    out = tmp_path / "mg"
    fake.run("multi_gpu_campaign.sh", out, "info,check1,qvf,fleet,compare,placement,repeat", 150,
             FAKE_TARBALL=f"{out}.tar.gz")
    log = (out / "log.txt").read_text()
    ran = steps(log)
    assert list(ran) == ["nvidia-smi-topo", "topo-matrix", "topo-export", "check-quick-1gpu", "fleet", "compare",
                         "placement"]
    assert set(rcs(log).values()) == {0}
    assert "=== qvf: skipped, " in log and "s left of the budget, needs ~200 s" in log
    assert "=== repeat: skipped, " in log and "needs ~180 s" in log
    assert ran["check-quick-1gpu"] == f"env CUDA_VISIBLE_DEVICES=0 nodemap check --level quick -o {out}/check_quick_1gpu"
    assert ran["fleet"].startswith("mpirun --allow-run-as-root --oversubscribe --bind-to none -x NCCL_NVLS_ENABLE")
    assert " -np 4 -x NODEMAP_FLEET_NODE=gpunode{rank} bash -c " in ran["fleet"]  # 2 ranks per GPU
    assert "ob1" not in ran["fleet"] and "falling back" not in log  # the probe passed: no fallback
    fleet = [c for c in fake.calls("nodemap") if "--fleet" in c["argv"]]
    assert sorted(c["rank"] for c in fleet) == ["0", "1", "2", "3"]
    assert "=== machine" in log and "mpirun (Open MPI) 4.1.fake" in log and "nodemap abc1234" in log
    # the tarball is there from the second part on, and holds the last part's output
    assert all(c["packed"] for c in fake.calls("nodemap")[3:])
    assert f"{out.name}/placement.json" in packed(Path(f"{out}.tar.gz"))
    assert not list(out.glob("fleet/nodes/*.html"))


def test_multi_gpu_campaign_repeat_writes_each_runs_verdict_and_falls_back_to_shared_memory(fake, tmp_path):
    out = tmp_path / "rep"
    fake.run("multi_gpu_campaign.sh", out, "repeat,qvf", 900, FAKE_MPI_FAIL=1)
    log = (out / "log.txt").read_text()
    assert "=== mpirun: falling back to mpirun --allow-run-as-root" in log
    assert log.split("falling back to ")[1].split("\n")[0].endswith("--mca pml ob1 --mca btl self,vader")
    ran = steps(log)
    assert [n for n in ran if n.startswith("check-full")] == ["check-full-1", "check-full-2", "check-full-3"]
    assert ran["check-full-2"] == f"nodemap check --level full -q -o {out}/repeat_2"
    lines = (out / "repeat.txt").read_text().splitlines()
    assert [ln.split(":")[0] for ln in lines] == ["run 1", "run 2", "run 3"]
    assert all("verdict=pass" in ln and "exit=0" in ln and "figures={" in ln for ln in lines), lines
    assert not list(out.glob("repeat_*/*.html"))
    # qvf: the companion script, then its first full run rendered
    assert ran["quick-vs-full"].startswith("python3 benchmarks/check_quick_vs_full.py --gpu --pairs 2 --keep")
    assert ran["report-full"] == f"nodemap report {out}/qvf_runs/1-full/check.json --html {out}/check_full.html"


def test_multi_gpu_campaign_with_too_small_a_budget_runs_nothing_and_still_packs(fake, tmp_path):
    out = tmp_path / "none"
    fake.run("multi_gpu_campaign.sh", out, "info,check1", 5)
    log = (out / "log.txt").read_text()
    assert steps(log) == {} and "=== info: skipped, " in log and "=== check1: skipped, " in log
    assert "none/log.txt" in packed(Path(f"{out}.tar.gz"))


def test_node_campaign_runs_every_part_under_mpirun_of_one_rank_per_gpu_and_packs_the_json(fake, tmp_path):
    out = tmp_path / "node"
    fake.run("node_campaign.sh", out, FAKE_TARBALL=out / "node_results.tar.gz", FAKE_NODEMAP_FAIL="bench gpu")
    log = (out / "node_log.txt").read_text()
    ran, rc = steps(log), rcs(log)
    assert len(ran) == 20 and set(ran) == set(rc)
    assert rc["gpu"] == 3 and {v for k, v in rc.items() if k != "gpu"} == {0}  # a failing part: its code, the rest go on
    assert ran["run-show"].endswith("-np 2 nodemap run -- nodemap show")
    assert ran["plan-2-per-gpu-env"] == "nodemap plan --tasks 4 --env --launcher mpirun"
    assert ran["gpu-tests"].startswith("python3 -m pytest -q -p no:cacheprovider tests/test_gpu_device.py")
    assert "torch 2.fake" in log
    assert all(c["packed"] for c in fake.calls("nodemap")[2:])
    assert "json/placement_2gpu.json" in packed(out / "node_results.tar.gz")
    assert not (out / "json").exists()  # packed, then removed: a handful of files come back


def test_comm_campaign_quick_passes_the_quick_sizes_and_falls_back_when_the_probe_fails(fake, tmp_path):
    out = tmp_path / "comm"
    fake.run("comm_campaign.sh", out, "quick", FAKE_MPI_FAIL=1, PARTS="mpi,vs-peers,ring-single")
    log = (out / "comm_log.txt").read_text()
    ran = steps(log)
    assert list(ran) == ["mpi", "vs-peers", "ring-single"] and set(rcs(log).values()) == {0}
    assert ran["mpi"].endswith("--mca pml ob1 --mca btl self,vader nodemap bench mpi --buffers HH,DD --sizes 1:1MiB "
                               f"--repeats 3 -q -o {out}/comm_mpi.json")
    assert " -np 2 " in ran["mpi"]
    assert "comm_vs_peers.py --out" in ran["vs-peers"] and "--nccl-sizes 1MiB:64MiB" in ran["vs-peers"]
    assert ran["ring-single"] == f"nodemap bench ring --sizes 64KiB,4MiB -q -o {out}/comm_ring_single.json"
    assert "NV18" in log  # nvidia-smi topo -m in the machine record


def test_jacobi_vs_reference_skips_gpu_counts_the_budget_cannot_hold_and_says_unbuilt_variants(fake, tmp_path):
    out, ref = tmp_path / "j", tmp_path / "ref"
    (ref / "nccl").mkdir(parents=True)
    fake.run("jacobi_vs_reference.sh", out, ref, "info,strong", BUDGET=39, GPUS="1 2", FAKE_MPI_FAIL=1)
    log = (out / "jacobi_log.txt").read_text()
    assert "=== strong nodemap 1 GPU(s): skipped, " in log and "needs ~40 s" in log
    assert "=== ref nccl: not built" in log  # the reference's runs fit (~35 s): each variant said
    assert list(steps(log)) == ["nvidia-smi-topo"]
    assert "=== mpirun: falling back to" in log
    assert "GPUS=1 2 NX=16384" in log and "ref/reference_csv.txt" in packed(out / "jacobi_results.tar.gz")


def test_nccl_vs_nccl_tests_skips_every_block_once_the_budget_is_spent_and_still_summarises(fake, tmp_path):
    out, src = tmp_path / "n", tmp_path / "src"
    src.mkdir()
    fake.run("nccl_vs_nccl_tests.sh", out, src, BUDGET=5, ROUNDS=1, OPS="all_reduce", MODES="mpi",
             BUILD_DIR=tmp_path / "bld", FAKE_MPI_FAIL=1, rc=1)  # 1: no summary to print (its script is a stand-in)
    log = (out / "nccl_log.txt").read_text()
    assert "=== warmup-single: skipped, budget 5 s spent" in log
    assert "=== nodemap-mpi-all_reduce-r0: skipped, budget 5 s spent" in log
    assert "nccl-tests-mpi" not in log and "=== nccltests-mpi-all_reduce-r0: " in log  # not built: said
    assert steps(log)["summary"].endswith(f"benchmarks/nccl_vs_nccl_tests.py {out}")  # the budget + 30 s
    assert "=== mpirun: falling back to" in log
    machine = (out / "machine.txt").read_text()
    assert "=== machine" in machine and "SIZES=8:2G:4" in machine and "NV18" in machine
    assert {"machine.txt", "nccl_log.txt", "build_single.txt"} <= set(packed(out / "nccl_results.tar.gz"))


def test_check_device_runs_its_stages_in_the_budget_and_logs_each_exit_code(fake, tmp_path):
    out = tmp_path / "cd"
    p = fake.run("check_device.sh", out, 225, cwd=tmp_path, FAKE_NODEMAP_FAIL="bench copies")
    log = (out / "log.txt").read_text()
    ran, rc = steps(log), rcs(log)
    assert list(ran) == ["quick-check", "bench-gpu", "bench-copies", "full-check"]
    assert rc == {"quick-check": 0, "bench-gpu": 0, "bench-copies": 3, "full-check": 0}
    assert ran["quick-check"] == f"nodemap check --level quick -o {out}/quick -q"
    assert not (out / "quick" / "check.html").exists() and (out / "full" / "check.html").exists()
    assert "=== bench-copies: rc=3" in p.stdout  # the summary on the console
    assert "babelstream" not in log and "nvbandwidth" not in log  # no .peers here: not tried
    assert "release 12." in log


def test_check_device_skips_a_stage_with_no_time_left(fake, tmp_path):
    out = tmp_path / "cd"
    fake.run("check_device.sh", out, 4, cwd=tmp_path)
    log = (out / "log.txt").read_text()
    assert re.search(r"^=== full-check: skipped, no time left \(-\d+ s\)$", log, re.M)


def test_device_setup_exports_the_nvls_switches_and_installs_without_network(fake, tmp_path):
    p = subprocess.run(["bash", "-c", "source benchmarks/device_setup.sh && env"], cwd=ROOT, env=fake.env,
                       capture_output=True, text=True, timeout=60, check=True)
    env = dict(line.split("=", 1) for line in p.stdout.splitlines() if "=" in line)
    assert env["NCCL_NVLS_ENABLE"] == "0" and env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
    assert env["NVSHMEM_DISABLE_NVLS"] == "1" and env["PYTHONUNBUFFERED"] == "1"
    pips = [c["argv"] for c in fake.calls("python3") if c["argv"][:2] == ["-m", "pip"]]
    # a checkout holding the device's wheels (.whl, ignored) installs them first, without the index
    wheels = [a for a in pips if "--no-index" in a]
    assert len(wheels) == int((ROOT / ".whl").is_dir() and any((ROOT / ".whl").glob("*.whl")))
    assert [a for a in pips if a not in wheels] == [["-m", "pip", "install", "-q", "--no-build-isolation",
                                                     "--no-deps", "."]]


def test_stream_vs_likwid_pairs_nodemap_with_the_best_likwid_kernel(fake, tmp_path):
    out = tmp_path / "s.json"
    p = fake.run("stream_vs_likwid.sh", 2, "64M", 1, CAL=1, JSON_OUT=out, NODEMAP=fake.env["PATH"].split(":")[0] +
                 "/nodemap", PYTHON=sys.executable)
    assert "CPUs 0,1 (2 threads), 64 MiB per array" in p.stdout
    doc = json.loads(out.read_text())
    assert {(r["kernel"], r["stores"], r["likwid_kernel"]) for r in doc["rows"]} == {
        ("copy", "plain", "copy"), ("triad", "plain", "stream"), ("copy", "NT", "copy_mem"),
        ("triad", "NT", "stream_mem")}
    assert {r["ratio"] for r in doc["rows"]} == {0.8, 1.6}  # 10 or 20 GB/s against 12.5
    runs = [c["argv"] for c in fake.calls("likwid-bench") if "-t" in c["argv"]]
    assert ["-t", "stream", "-W", f"N:{3 * 64 * 2**20 // 1000}kB:2:1:1", "-i", "20"] in runs


def test_topo_vs_lstopo_times_both_and_prints_the_markdown_block(fake, tmp_path):
    p = fake.run("topo_vs_lstopo.sh", 2, NODEMAP=fake.env["PATH"].split(":")[0] + "/nodemap")
    assert "| ratio (target <= 3x) |" in p.stdout and "lstopo: lstopo-no-graphics 2.fake" in p.stdout
    assert "source: sysfs" in p.stdout
    topo = [c for c in fake.calls("nodemap") if c["argv"] == ["topo"]]
    assert len(topo) == 1 + 1 + 2  # checked once, warmed up once, timed N times


def lib(script: str, tmp_path: Path, before: str = "budget=20") -> str:
    """Run bash lines with benchmarks/lib/campaign.sh sourced (after `before`), in tmp_path; returns the log."""
    subprocess.run(["bash", "-c", f'set -u; log=log.txt parts=a,b; {before}; . "{BENCH}/lib/campaign.sh"; '
                                  f"campaign_start; {script}"], cwd=tmp_path, check=True, timeout=30)
    return (tmp_path / "log.txt").read_text()


def test_step_interrupts_at_its_limit_so_the_command_can_save_and_returns_its_status(tmp_path):
    saver = (f"{sys.executable} -c 'import time\ntry: time.sleep(30)\n"
             f"except KeyboardInterrupt: print(\"saved what ran\")'")
    log = lib(f'step slow 1 {saver}; echo "returned $?" >>"$log"; step fails 5 false || echo "false: $?" >>"$log"',
              tmp_path)
    # SIGINT, not KILL: it saved. bash's SECONDS counts whole seconds, so a 1 s step that starts late in
    # its second (or a busy VM's slow exit) reads 2 s, and an instant one 1 s (failed once in a suite run)
    assert re.search(r"saved what ran\n=== slow: rc=124 in [12] s\nreturned 124", log), log
    assert re.search(r"=== fails: rc=1 in [01] s\nfalse: 1", log), log


def test_want_fits_and_step_cap_keep_to_the_budget(tmp_path):
    log = lib("want a && echo a-asked >>$log; want c && echo c-asked >>$log; want b 30 || echo b-no >>$log; "
              "step_cap=1; step long 100 sleep 0; budget=5 step late 1 true || true", tmp_path)
    assert "a-asked" in log and "c-asked" not in log
    assert "=== b: skipped, 20 s left of the budget, needs ~30 s\nb-no" in log
    assert re.search(r"^=== long \[0 s\]: sleep 0\n=== long: rc=0", log, re.M)
    assert "=== late: skipped, budget 5 s spent" in log


def test_without_a_budget_every_estimate_fits_and_the_shells_own_names_stay(tmp_path):
    # a device command sources device_setup.sh (so campaign.sh) into its own shell: left() there read an
    # unset $budget (under set -u: an error, so `want b 30` was skipped; without: 0 s left, every step
    # skipped) and replaced the command's own `left` (benchmarks/results/same_figures_world_20261202)
    log = lib('want b 30 && echo b-asked >>$log; step_cap=1 step capped 5 true; echo "$(left) $(elapsed)" >>$log',
              tmp_path, before="left() { echo mine; }; elapsed() { echo also-mine; }")
    assert "b-asked" in log and "skipped" not in log
    assert re.search(r"^=== capped: rc=0", log, re.M)
    assert "mine also-mine" in log


def test_pack_takes_the_items_that_exist_globs_included(tmp_path):
    (tmp_path / "blocks").mkdir()
    (tmp_path / "build_mpi.txt").write_text("rc=0")
    lib('pack_into r.tar.gz . blocks missing.md "build_*.txt" "none_*.json"; pack; step one 5 true', tmp_path)
    assert sorted(packed(tmp_path / "r.tar.gz")) == ["blocks/", "build_mpi.txt"]
