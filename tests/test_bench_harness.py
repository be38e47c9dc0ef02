"""The one harness every bench kind runs on, tried as a user would: the same
options everywhere, the same size convention, errors that name the option
and the kind, Ctrl-C that keeps what was measured, outputs that never
replace what they must not. Also the in-process entry, driver.measure."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import random
import re
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nodemap import cli
from nodemap.bench import driver, harness
from nodemap.commands import bench as bench_cli
from nodemap.bench.peaks import dram_peak, parse_dimm
from nodemap.bench.kinds import BENCHES

SRC = Path(harness.__file__).resolve().parents[1]  # src/nodemap
BIN = Path(sys.executable).parent
NO_GPU = dict(os.environ, CUDA_VISIBLE_DEVICES="")
GPU_KINDS = ("gpu", "copies", "nccl", "ring", "placement", "jacobi")
TINY = {  # each CPU kind for real, in well under a second
    "memory": ["--size", "1M", "--repeats", "2", "--kernels", "triad"],
    "latency": ["--max-size", "16K", "--repeats", "2", "--loads", "4096"],
    "numa": ["--size", "1M", "--repeats", "2", "--no-latency"],
}


def nodemap(*args: str, env=None, timeout=60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nodemap", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=env or NO_GPU)


def parser_of(kind: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"nodemap bench {kind}")
    bench_cli.add_options(p, importlib.import_module(BENCHES[kind][0]).Options)
    return p


# --- one option set ----------------------------------------------------------------


@pytest.mark.parametrize("kind", list(BENCHES))
def test_every_kind_has_the_shared_options_with_one_meaning(kind):
    p = parser_of(kind)
    a = p.parse_args(["--json", "-o", "r.json", "-q", "--repeats", "3", "--input", "t.json", "--timeout", "9"])
    assert (a.json, a.output, a.quiet, a.repeats, a.topology, a.timeout) == (True, "r.json", True, 3, "t.json", 9.0)
    b = p.parse_args(["--output", "s.json", "--quiet", "--topology", "u.json"])
    assert (b.output, b.quiet, b.topology, b.json) == ("s.json", True, "u.json", False)
    assert p.parse_args([]).repeats >= 1


@pytest.mark.parametrize("kind", list(TINY))
def test_cpu_kinds_run_with_the_shared_options(kind, tmp_path):
    topo = tmp_path / "node.json"
    assert nodemap("topo", "--export", topo).returncode == 0
    out = tmp_path / "r.json"
    r = nodemap("bench", kind, *TINY[kind], "--json", "-q", "-o", out, "--topology", topo, "--timeout", "120")
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""  # -q: no progress
    printed, saved = json.loads(r.stdout), json.loads(out.read_text())
    assert printed == saved and saved["complete"] and saved["results"]
    assert all(x["verified"] and x["stats"]["n"] == 2 for x in saved["results"])
    assert not any("caution: --topology" in m for m in saved["messages"])  # this machine's own file
    assert stat.S_IMODE(out.stat().st_mode) == 0o666 & ~_umask()


def _umask() -> int:
    m = os.umask(0)
    os.umask(m)
    return m


@pytest.mark.parametrize("kind", GPU_KINDS)
def test_gpu_kinds_end_in_one_clean_line_without_a_gpu(kind, tmp_path):
    mode = ["--mode", "single"] if kind in ("nccl", "ring", "jacobi") else []  # not under a launcher
    r = nodemap("bench", kind, "-q", "--repeats", "1", "-o", tmp_path / "r.json", *mode)
    assert r.returncode == 2 and r.stdout == "", r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"nodemap bench {kind}: error: ") and "Traceback" not in r.stderr


# --- one unit convention -----------------------------------------------------------------


def test_one_g_is_two_to_the_thirty_and_one_gb_ten_to_the_nine_in_every_kind():
    """Measured in process (driver.measure): the bytes each kind used."""
    from nodemap.bench.host import latency, memory, numa

    mib = driver.measure(memory, memory.Options(size="1M", repeats=1, kernels="copy"))
    mb = driver.measure(memory, memory.Options(size="1MB", repeats=1, kernels="copy"))
    assert mib.results[0].params["array_bytes"] == 2**20 and mb.results[0].params["array_bytes"] == 10**6
    lat = driver.measure(latency, latency.Options(max_size="64KB", repeats=1, loads=1024))
    assert lat.results[-1].params["working_set"] == 64000
    matrix = driver.measure(numa, numa.Options(size="1MB", repeats=1, no_latency=True))
    assert all(r.params["array_bytes"] == 10**6 for r in matrix.results)


SIZE_OPTIONS = [  # every option of every kind that takes bytes: (kind, option, a valid rest of the line)
    ("memory", "--size", []), ("numa", "--size", []), ("numa", "--latency-size", []),
    ("latency", "--max-size", []), ("gpu", "--size", []), ("copies", "--size", []),
    ("mpi", "--sizes", []), ("mpi", "--chunk", []), ("nccl", "--sizes", []), ("ring", "--sizes", []),
    ("placement", "--table", []), ("placement", "--object-bytes", []), ("placement", "--chunks", []),
]


@pytest.mark.parametrize("kind, option, rest", SIZE_OPTIONS)
def test_size_errors_name_the_typed_option_and_the_kind(kind, option, rest, capsys, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert cli.main(["bench", kind, option, "12 parsecs", *rest]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"nodemap bench {kind}: error: {option} '12 parsecs': not a size"), err
    assert "1024^n" in err and "1000^n" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("argv, want", [
    (["bench", "latency", "--max-size", "1K"], "nodemap bench latency: error: --max-size '1K': too small"),
    (["bench", "numa", "--kernel", "foo"], "nodemap bench numa: error: --kernel: unknown kernel foo"),
    (["bench", "memory", "--kernels", "foo"], "nodemap bench memory: error: --kernels: unknown kernel foo"),
    (["bench", "memory", "--repeats", "0"], "nodemap bench memory: error: --repeats 0"),
    (["place", "plan", "--counts", "c.npz", "--budget", "1X"], "nodemap place: error: --budget '1X': not a size"),
    # one option per error, the harness's one count check (they were lumped: "--window, --repeats and ...")
    (["bench", "mpi", "--window", "0"], "nodemap bench mpi: error: --window 0: need at least 1"),
    (["bench", "mpi", "--iters-scale", "0"], "nodemap bench mpi: error: --iters-scale 0: give a number above 0"),
    (["bench", "mpi", "--repeats", "0"], "nodemap bench mpi: error: --repeats 0: need at least 1"),
    (["bench", "copies", "--iters", "0"], "nodemap bench copies: error: --iters 0: need at least 1"),
    (["bench", "copies", "--repeats", "0"], "nodemap bench copies: error: --repeats 0: need at least 1"),
    (["bench", "nccl", "--iters", "0"], "nodemap bench nccl: error: --iters 0: need at least 1"),
    (["bench", "ring", "--steps", "0"], "nodemap bench ring: error: --steps 0: need at least 1"),
    (["bench", "gpu", "--grid-per-sm", "-1"], "nodemap bench gpu: error: --grid-per-sm -1: need at least 0"),
    (["bench", "gpu", "--repeats", "0"], "nodemap bench gpu: error: --repeats 0: need at least 1"),
    (["bench", "memory", "--batch", "0"], "nodemap bench memory: error: --batch 0: need at least 1"),
    # placement's own options before its GPU (this machine has no CuPy or no GPU)
    (["bench", "placement", "--lookups", "0"], "nodemap bench placement: error: --lookups 0: need at least 1"),
    (["bench", "placement", "--zipf", "x"], "nodemap bench placement: error: --zipf 'x'"),
    (["bench", "placement", "--budget-fraction", "0"], "nodemap bench placement: error: --budget-fraction 0"),
    # a topology file that cannot be read names the option as it was typed, before MPI or a GPU
    (["bench", "memory", "--topology", "/nonexistent/t.json"], "nodemap bench memory: error: --topology /nonexistent"),
    (["bench", "latency", "--input", "/nonexistent/t.json"], "nodemap bench latency: error: --input /nonexistent"),
    (["bench", "mpi", "--input", "/nonexistent/t.json"], "nodemap bench mpi: error: --input /nonexistent"),
    (["bench", "nccl", "--topology", "/nonexistent/t.json"], "nodemap bench nccl: error: --topology /nonexistent"),
])
def test_other_errors_name_what_was_typed(argv, want, capsys, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert cli.main(argv) == 2
    assert capsys.readouterr().err.strip().startswith(want)


def test_a_bad_option_under_a_malformed_rank_variable_is_still_one_line(capsys, monkeypatch):
    """The refusal asks the launcher's rank (rank 0 says it); a rank variable
    that is not a number is then that process's to say, not a NameError."""
    monkeypatch.setenv("PMI_RANK", "abc")
    assert cli.main(["bench", "memory", "--repeats", "0"]) == 2
    assert capsys.readouterr().err.strip().startswith("nodemap bench memory: error: --repeats 0")


def test_placement_without_cupy_says_so_as_every_gpu_kind(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy -> ImportError
    for kind in ("placement", "gpu"):
        assert cli.main(["bench", kind]) == 2
    placement, gpu = capsys.readouterr().err.strip().splitlines()
    assert placement.split(": error: ")[1] == gpu.split(": error: ")[1]


def test_the_bench_layer_has_one_parser_formatter_writer_and_table_renderer():
    """grep-level: the concepts live in one place each (units, outfile, text.table)."""
    sources = {p.relative_to(SRC).as_posix(): p.read_text() for p in SRC.rglob("*.py")}
    bench = {k: v for k, v in sources.items() if k.startswith(("bench/", "commands/bench"))}

    def where(pattern: str, files: dict[str, str]) -> set[str]:
        return {k for k, v in files.items() if re.search(pattern, v)}

    assert where(r"def parse_(size|sizes|bytes)\b|['\"](kib|mib|gib)['\"]", sources) == {"units.py"}
    assert where(r"(/|>>)\s*(2\s*\*\*\s*(10|20|30|40)\b|\(?1\s*<<\s*(10|20|30|40)\)?)\s*:|>>\s*(10|20|30)\b",
                 bench) == set()  # sizes for people go through units.format_size
    # files the user named are written by outfile alone; the plan cache and
    # scratch's copy of a piped input are private files, not outputs
    assert where(r"os\.replace\(|mkstemp\(|os\.rename\(", sources) <= {
        "outfile.py", "mapping/plancache.py", "scratch.py"}
    assert where(r"os\.replace\(|mkstemp\(|os\.rename\(|\.write_text\(", bench) == set()
    assert where(r"\.ljust\(|\.rjust\(|\{[^}\n]*:[<>^]\d+", bench) == set()  # tables: nodemap.text.table
    assert {k for k, v in bench.items() if re.search(r"^def (emit|finish)\(", v, re.M)} == {"bench/harness.py"}


# --- peaks ---------------------------------------------------------------------------------


def _type17(size_mb: int, width: int, speed: int, configured: int) -> bytes:
    rec = bytearray(0x28)
    rec[0], rec[1] = 17, 0x28
    rec[0x0A:0x0C] = width.to_bytes(2, "little")
    rec[0x0C:0x0E] = size_mb.to_bytes(2, "little")
    rec[0x15:0x17] = speed.to_bytes(2, "little")
    rec[0x20:0x22] = configured.to_bytes(2, "little")
    return bytes(rec) + b"DIMM 0\0\0"


def test_dram_peak_from_smbios_records(tmp_path):
    entries = tmp_path / "sys/firmware/dmi/entries"
    for i, rec in enumerate([_type17(32768, 64, 4800, 4400)] * 8 + [_type17(0, 64, 0, 0)] * 4):
        d = entries / f"17-{i}"
        d.mkdir(parents=True)
        (d / "raw").write_bytes(rec)
    peak = dram_peak(str(tmp_path))
    assert peak is not None and peak.gbs == pytest.approx(8 * 8 * 4400 / 1000)  # configured speed wins
    assert "8 DIMMs" in peak.source and "4400 MT/s" in peak.source
    assert parse_dimm(_type17(0, 64, 3200, 3200)) is None  # an empty slot
    assert parse_dimm(b"\x11\x04") is None
    assert dram_peak(str(tmp_path / "nothing")) is None


def test_peak_given_by_the_user_makes_a_percentage(tmp_path):
    from nodemap.bench.host import memory

    rs = driver.measure(memory, memory.Options(size="1M", repeats=1, kernels="triad", peak=1000.0))
    r = rs.results[0]
    assert r.peak == 1000 and r.efficiency == pytest.approx(r.stats.best / 1000)
    assert not any("peak unknown" in m for m in rs.messages)


def test_arrays_in_cache_and_wide_spread_get_cautions():
    from nodemap.bench.host.stream import cache_caution
    from nodemap.bench.results import make_result

    assert cache_caution(3 << 20, 32 << 20) and not cache_caution(64 << 20, 32 << 20) and not cache_caution(1, 0)
    r = harness.cautions(make_result("memory", "triad", "GB/s", [10, 20, 30], verified=True))
    assert any(n.startswith("caution: spread 100%") for n in r.notes)
    assert harness.caution_lines([r])[0].startswith("caution: 1 of 1 results spread over 10%")


def _foreign_topology(tmp_path: Path) -> Path:
    """This machine's topology export, with another host's name."""
    topo = tmp_path / "node.json"
    assert nodemap("topo", "--export", topo).returncode == 0
    d = json.loads(topo.read_text())
    d["machine"]["hostname"] = "elsewhere"
    topo.write_text(json.dumps(d))
    return topo


def test_a_topology_file_of_another_host_is_named(tmp_path):
    topo = _foreign_topology(tmp_path)
    from nodemap.bench.host import latency

    rs = driver.measure(latency, latency.Options(max_size="8K", repeats=1, loads=1024, topology=str(topo)))
    assert sum(m.startswith("caution: --topology") and "elsewhere" in m for m in rs.messages) == 1


def test_the_session_names_another_hosts_topology_for_every_kind(tmp_path):
    """mpi, nccl, ring, jacobi and placement run on GPUs or under a launcher:
    the caution comes from the session they all enter, not from each kind."""
    from nodemap.bench.results import ResultSet

    topo = _foreign_topology(tmp_path)
    for kind in BENCHES:
        args = parser_of(kind).parse_args(["--input", str(topo)])
        rs = ResultSet(command=f"bench {kind}")
        with harness.session(rs, args):
            pass
        assert any(m.startswith(f"caution: --input {topo} describes host elsewhere") for m in rs.messages), kind
    sources = {p.name: p.read_text() for p in (SRC / "bench").glob("*.py")}
    assert {k for k, v in sources.items() if "topology_cautions(" in v} == {"harness.py"}


def test_a_budget_that_ends_while_a_kind_plans_stops_its_cases_at_once():
    """check --budget's stop, asked while a kind was still planning (CuPy's start, copies' buffers):
    the kind's session keeps it (it cleared it, and the step ran on until SIGALRM cut it a second
    later, its results saying Ctrl-C); any other stop left over is cleared as before."""
    from nodemap.bench import interrupt
    from nodemap.bench.results import ResultSet

    args = parser_of("memory").parse_args([])
    for why, kept in ((interrupt.BUDGET, True), ("interrupted (Ctrl-C)", False)):
        interrupt.request(why)
        rs = ResultSet(command="bench memory")
        with harness.session(rs, args):
            seen = interrupt.requested()
        assert seen is kept and rs.complete is not kept
        assert (harness.CUT in rs.messages) is kept and not interrupt.requested()


# --- outputs ----------------------------------------------------------------------------


@pytest.mark.parametrize("target", ["fifo", "symlink", "missing folder", "folder"])
@pytest.mark.parametrize("kind", ["memory", "latency"])
def test_bad_outputs_are_refused_before_measuring(tmp_path, target, kind):
    real = tmp_path / "real.json"
    real.write_text("keep")
    paths = {"fifo": tmp_path / "fifo", "symlink": tmp_path / "link.json", "missing folder": tmp_path / "no/x.json",
             "folder": tmp_path}
    os.mkfifo(paths["fifo"])
    paths["symlink"].symlink_to(real)
    t0 = time.monotonic()
    r = nodemap("bench", kind, *TINY[kind], "-o", paths[target])
    assert r.returncode == 2 and r.stdout == "" and time.monotonic() - t0 < 20
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"nodemap bench {kind}: error: --output {paths[target]}")
    assert real.read_text() == "keep" and paths["symlink"].is_symlink()
    assert stat.S_ISFIFO(os.lstat(paths["fifo"]).st_mode)


def test_dash_sends_the_json_to_stdout_and_the_table_to_stderr():
    r = nodemap("bench", "latency", *TINY["latency"], "-o", "-", "-q")
    assert r.returncode == 0 and json.loads(r.stdout)["complete"]
    assert "working set" in r.stderr


def test_save_failing_at_the_end_prints_the_results_and_names_the_error(tmp_path, monkeypatch, capsys):
    from nodemap.bench.results import ResultSet, make_result

    rs = ResultSet(command="bench memory", results=[make_result("memory", "triad", "GB/s", [1.0], verified=True)])
    rs.complete = True
    args = argparse.Namespace(json=False, output=str(tmp_path / "gone" / "r.json"))
    assert harness.finish(rs, args, lambda s: "TABLE") == 2
    out, err = capsys.readouterr()
    assert "TABLE" in out and "not saved" in err and "does not exist" not in out


# --- Ctrl-C ---------------------------------------------------------------------------------


def _interrupt(cmd: list[str], out: Path, settle: float, env=None) -> tuple[subprocess.CompletedProcess, float]:
    """Start, wait until the run saved its first (empty) file, let it measure
    a random while, send SIGINT; return the run and how long it took to end."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env or NO_GPU)
    deadline = time.monotonic() + 60
    while not out.exists() and time.monotonic() < deadline and p.poll() is None:
        time.sleep(0.02)
    time.sleep(random.uniform(0.0, settle))
    t0 = time.monotonic()
    p.send_signal(signal.SIGINT)
    stdout, stderr = p.communicate(timeout=60)
    return subprocess.CompletedProcess(cmd, p.returncode, stdout, stderr), time.monotonic() - t0


@pytest.mark.parametrize("sweep", [False, True])
def test_ctrl_c_stops_bench_memory_keeps_and_prints_what_was_measured(tmp_path, sweep):
    out = tmp_path / "r.json"
    cmd = [sys.executable, "-m", "nodemap", "bench", "memory", "--size", "32M", "--repeats", "400", "-o", str(out)]
    if sweep:
        cmd += ["--sweep", "--repeats", "150", "--kernels", "triad,copy"]
    r, took = _interrupt(cmd, out, 1.5)
    assert r.returncode == 130, r.stderr
    assert took < 2.0, took
    saved = json.loads(out.read_text())
    assert saved["complete"] is False and any(m.startswith("interrupted") for m in saved["messages"])
    for x in saved["results"]:  # each saved case verified, every sample counted
        assert x["verified"] and x["stats"]["n"] == len(x["samples"]) >= 1
        assert x["params"]["thread_order"] in r.stdout  # and shown in the table
    if sweep:  # whole thread orders only: each has every kernel
        by = {}
        for x in saved["results"]:
            by.setdefault(x["params"]["thread_order"], set()).add(x["metric"])
        assert all(ks == {"triad", "copy"} for ks in by.values())
    assert "note: interrupted" in r.stdout


def test_ctrl_c_during_the_set_up_of_large_arrays_ends_within_two_seconds(tmp_path):
    """First touch and the check of 512 MiB arrays take seconds on this VM
    (Ctrl-C took 1.9-4.7 s before the C loops looked at the stop flag):
    a stop there ends the run without that case."""
    out = tmp_path / "r.json"
    cmd = [sys.executable, "-m", "nodemap", "bench", "memory", "--size", "512M", "--repeats", "200", "-q",
           "-o", str(out)]
    r, took = _interrupt(cmd, out, 1.0)
    assert r.returncode == 130, r.stderr
    assert took < 2.5, took  # 2 s, and a little for a loaded 2-core machine
    saved = json.loads(out.read_text())
    assert saved["complete"] is False and all(x["verified"] for x in saved["results"])


def test_a_stop_while_the_pointer_chase_is_built_returns_no_repetition():
    import threading

    from nodemap.bench.host import kernels as hostkernels
    from nodemap.bench import interrupt

    stopped_at = []
    threading.Timer(0.2, lambda: (stopped_at.append(time.monotonic()), interrupt.request())).start()
    try:  # building and walking a 512 MiB cycle once takes seconds here
        run = hostkernels.chase(512 << 20, sorted(os.sched_getaffinity(0))[0], reps=3)
    finally:
        interrupt.reset()
    assert time.monotonic() - stopped_at[0] < 1.5
    assert run.stopped and run.ns_per_load == []


def test_a_kernel_stopped_mid_run_returns_its_completed_repetitions_verified():
    import threading

    from nodemap.bench.host import kernels as hostkernels
    from nodemap.bench import interrupt

    cpus = sorted(os.sched_getaffinity(0))[:1]
    threading.Timer(0.3, interrupt.request).start()
    try:
        run = hostkernels.stream(cpus, 1 << 20, ["copy", "triad"], 100000)
    finally:
        interrupt.reset()
    assert run.stopped and 1 <= len(run.seconds["copy"]) == len(run.seconds["triad"]) < 100000
    assert run.verified  # the gold replay stops where the kernels stopped


@pytest.mark.mpi
@pytest.mark.skipif(not (BIN / "mpiexec").exists(), reason="no mpiexec next to sys.executable (pip install mpich)")
def test_ctrl_c_under_mpiexec_stops_every_rank_and_rank0_saves(tmp_path):
    pytest.importorskip("mpi4py")
    out = tmp_path / "f.json"
    cmd = [str(BIN / "mpiexec"), "-n", "2", str(BIN / "nodemap"), "bench", "mpi", "--sizes", "1:16MiB",
           "--repeats", "200", "--iters-scale", "0.01", "-o", str(out)]
    r, took = _interrupt(cmd, out, 1.5)
    assert r.returncode == 130, r.stderr
    assert took < 2.0, took
    saved = json.loads(out.read_text())
    assert saved["complete"] is False and any(m.startswith("interrupted") for m in saved["messages"])
    sizes = [x["params"]["size"] for x in saved["results"] if x["metric"] == "latency"]
    assert sizes == [2**k for k in range(len(sizes))]  # every completed size, in order
    assert all(x["verified"] for x in saved["results"])
    assert r.stdout.count("latency") >= len(sizes)  # the table shows them


@pytest.mark.mpi
@pytest.mark.skipif(not (BIN / "mpiexec").exists(), reason="no mpiexec next to sys.executable (pip install mpich)")
def test_bench_mpi_names_another_hosts_topology(tmp_path):
    pytest.importorskip("mpi4py")
    topo = _foreign_topology(tmp_path)
    r = subprocess.run([str(BIN / "mpiexec"), "-n", "2", str(BIN / "nodemap"), "bench", "mpi", "--sizes", "1:1K",
                        "--repeats", "1", "--iters-scale", "0.01", "--input", str(topo), "--json", "-q"],
                       capture_output=True, text=True, timeout=120, env=NO_GPU)
    assert r.returncode == 0, r.stderr
    assert any(m.startswith(f"caution: --input {topo} describes host elsewhere")
               for m in json.loads(r.stdout)["messages"])


def test_slowest_rank_is_the_largest_per_step_time():
    # the one slowest-rank reduction (jacobi and ring each had their own), on the kinds' one World
    from types import SimpleNamespace

    from nodemap.bench.comm.world import World, alone
    from nodemap.bench.harness import slowest_rank

    class Comm:  # two ranks: a slower peer took 0.5 s per step
        barriers = 0

        def Barrier(self):
            self.barriers += 1

        def allreduce(self, v, op):
            return max(v, 0.5)

    comm, ran = Comm(), []
    once = slowest_rank(World(comm, 0, 2, MPI=SimpleNamespace(MAX="max")), 4, lambda: ran.append(1))
    assert once() == 0.5 and comm.barriers == 1 and ran == [1]
    assert slowest_rank(alone(), 2, lambda: None)() < 0.01
