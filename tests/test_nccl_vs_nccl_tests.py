"""benchmarks/nccl_vs_nccl_tests.{py,sh}: nccl-tests' stdout parsed as its
util.cu prints it, blocks cut short, the pairing with nodemap's result sets
and the ratio (CPU only; the comparison itself runs on a GPU node)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import nccl_vs_nccl_tests as nv  # noqa: E402

# all_reduce_perf -g 2 -b 8 -e 2G -f 4 (sizes thinned), written with util.cu's
# own printf formats (writeDeviceReport, writeResultHeader, writeBenchmarkLine*,
# writeResultFooter, finalizeFooter, writeErrors): column widths as printed.
ALL_REDUCE = """# nccl-tests version 2.19.6 nccl-headers=22809 nccl-library=22809
# Collective test starting: all_reduce_perf
# nThread 1 nGpus 2 minBytes 8 maxBytes 2147483648 step: 4(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0 unalign: 0
#
# Using devices
#  Rank  0 Group  0 Pid   4242 on gpu-node-7 device  0 [0000:18:00] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid   4242 on gpu-node-7 device  1 [0000:2a:00] NVIDIA H100 80GB HBM3
#
#                                                              out-of-place                       in-place          
#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong 
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)         
           8             2     float     sum      -1     9.21    0.00    0.00       0     9.05    0.00    0.00       0
          32             8     float     sum      -1     9.30    0.00    0.00       0     9.11    0.00    0.00       0
     2097152        524288     float     sum      -1    21.87   95.89   95.89       0    21.50   97.54   97.54       0
   134217728      33554432     float     sum      -1   395.62  339.26  339.26       0   394.80  339.96  339.96       0
  2147483648     536870912     float     sum      -1  5943.20  361.33  361.33       0  5950.75  360.88  360.88       0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 141.912 
#
# Collective test concluded: all_reduce_perf
#

"""

# all_gather_perf_mpi under mpirun -np 2, -c 0: #wrong is N/A; two cycles (-N 2)
ALL_GATHER_MPI = """# nccl-tests version 2.19.6 nccl-headers=22809 nccl-library=22809
# Collective test starting: all_gather_perf_mpi
# nThread 1 nGpus 1 minBytes 1048576 maxBytes 4194304 step: 4(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 0 graph: 0 unalign: 0
#
# Using devices
#  Rank  0 Group  0 Pid   5001 on gpu-node-7 device  0 [0000:18:00] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid   5002 on gpu-node-7 device  1 [0000:2a:00] NVIDIA H100 80GB HBM3
#
#                                                              out-of-place                       in-place          
#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong 
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)         
     1048576        131072     float    none      -1    15.10   69.44   34.72    N/A    14.90   70.37   35.19    N/A
     4194304        524288     float    none      -1    30.00  139.81   69.91    N/A    29.80  140.75   70.37    N/A
     1048576        131072     float    none      -1    15.30   68.53   34.27    N/A    15.00   69.91   34.95    N/A
     4194304        524288     float    none      -1    29.00  144.63   72.32    N/A    29.90  140.28   70.14    N/A
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 52.7338 
#
# Collective test concluded: all_gather_perf_mpi
#

"""


def test_header_devices_and_every_row_of_a_whole_run():
    p = nv.parse_nccl_tests(ALL_REDUCE)
    assert (p["version"], p["nccl_headers"], p["nccl_library"]) == ("2.19.6", 22809, 22809)
    assert [d["pci"] for d in p["devices"]] == ["0000:18:00", "0000:2a:00"]
    assert p["devices"][0]["name"] == "NVIDIA H100 80GB HBM3" and p["devices"][1]["host"] == "gpu-node-7"
    assert [r["size"] for r in p["rows"]] == [8, 32, 2097152, 134217728, 2147483648]
    last = p["rows"][-1]
    assert (last["count"], last["type"], last["redop"], last["root"]) == (536870912, "float", "sum", "-1")
    assert last["out"] == {"time_us": 5943.20, "algbw": 361.33, "busbw": 361.33, "wrong": 0}
    assert last["in"]["time_us"] == 5950.75
    assert p["complete"] and p["out_of_bounds"] == 0 and p["errors"] == []
    assert nv.nccl_tests_flags(p) == []


def test_na_wrong_counts_and_cycles_give_one_case_per_size_and_place():
    p = nv.parse_nccl_tests(ALL_GATHER_MPI)
    cases = nv.nccl_tests_cases(p)
    assert cases[(4194304, "out")] == {"times": [30.00, 29.00], "busbw": [69.91, 72.32], "wrong": None}
    assert set(cases) == {(s, w) for s in (1048576, 4194304) for w in ("out", "in")}


def test_a_block_killed_mid_line_keeps_whole_lines_only_and_is_flagged():
    cut = ALL_REDUCE.index("  5943.20") + 6  # inside the 2 GiB line: "5943" of a longer number
    p = nv.parse_nccl_tests(ALL_REDUCE[:cut])
    assert [r["size"] for r in p["rows"]] == [8, 32, 2097152, 134217728]
    assert not p["complete"]
    assert any("cut short" in f for f in nv.nccl_tests_flags(p))
    # killed after the out-of-place half was printed and flushed with a newline? never: one printf per
    # line end, so a line with only its out-of-place half would lack "in" and still parse
    half = "  2147483648     536870912     float     sum      -1  5943.20  361.33  361.33       0\n"
    assert "in" not in nv.table_row(half) and nv.table_row(half)["out"]["busbw"] == 361.33


@given(st.integers(min_value=0, max_value=len(ALL_REDUCE)))
def test_any_prefix_parses_to_a_prefix_of_the_rows(n):
    whole = nv.parse_nccl_tests(ALL_REDUCE)["rows"]
    rows = nv.parse_nccl_tests(ALL_REDUCE[:n])["rows"]
    assert rows == whole[:len(rows)]


def test_wrong_elements_and_errors_are_flagged():
    bad = ALL_REDUCE.replace("5950.75  360.88  360.88       0", "5950.75  360.88  360.88      12").replace(
        "# Out of bounds values : 0 OK", "# Out of bounds values : 1 FAILED") + "# error: unhandled cuda error\n"
    p = nv.parse_nccl_tests(bad)
    assert nv.nccl_tests_cases(p)[(2147483648, "in")]["wrong"] == 12
    flags = nv.nccl_tests_flags(p)
    assert any("out-of-bounds" in f for f in flags) and any("unhandled cuda error" in f for f in flags)


def nodemap_doc(op, medians_by_size, factor=1.0, complete=True, messages=(), failures=()):
    """A result set as `nodemap bench nccl -o` writes it (nodemap's own records)."""
    from nodemap.bench.results import ResultSet, make_result

    rs = ResultSet("bench nccl", host="gpu-node-7", complete=complete, messages=list(messages),
                   environment={"nccl": 22809, "cupy": "14.2.0", "ranks": 2, "mode": "single",
                                "gpus": ["GPU0", "GPU1"]})
    for f in failures:
        rs.fail(f)
    for (size, inplace), samples in medians_by_size.items():
        rs.add(make_result("nccl", op, "GB/s busbw", samples, verified=True,
                           params={"size": size, "ranks": 2, "inplace": inplace, "iters": 20, "bus_factor": factor,
                                   "wrong": 0}))
    return json.loads(rs.to_json())


def test_pairing_takes_each_tools_best_block_and_the_ratio_of_times(tmp_path):
    big = 2147483648
    blocks = tmp_path / "blocks"
    blocks.mkdir()
    # nodemap: block medians 300 and 330 GB/s busbw (factor 1 with 2 ranks) -> best 330
    (blocks / "nodemap_single_all_reduce_r0.json").write_text(json.dumps(nodemap_doc("all_reduce", {
        (big, False): [290.0, 300.0, 310.0], (8, False): [0.0008, 0.001, 0.0009]})))
    (blocks / "nodemap_single_all_reduce_r1.json").write_text(json.dumps(nodemap_doc("all_reduce", {
        (big, False): [330.0, 329.0, 331.0]})))
    (blocks / "nccltests_single_all_reduce_r0.txt").write_text(ALL_REDUCE)
    (blocks / "nccltests_single_all_reduce_r1.txt").write_text(ALL_REDUCE.replace("5943.20", "6100.00"))
    (tmp_path / "machine.txt").write_text("host: gpu-node-7\n")
    md, doc = nv.report(str(tmp_path))
    rows = {(r["size"], r["place"]): r for r in doc["rows"]}
    r = rows[(big, "out")]
    assert r["nodemap"]["blocks"] == 2 and r["nccltests"]["blocks"] == 2
    assert abs(r["nodemap"]["busbw"] - 330.0) < 1e-9
    assert abs(r["nodemap"]["time_us"] - big / 330.0 / 1e3) < 1e-6
    assert r["nccltests"]["time_us"] == 5943.20 and abs(r["nccltests"]["spread"] - (6100 / 5943.2 - 1)) < 1e-9
    assert abs(r["ratio"] - 5943.20 / (big / 330.0 / 1e3)) < 1e-9
    # 8 B: nccl-tests prints busbw 0.00, the ratio still comes from the times
    assert abs(rows[(8, "out")]["ratio"] - 9.21 / (8 / 0.0009 / 1e3)) < 1e-9
    # a size only one tool measured: shown, no ratio
    assert rows[(32, "out")]["nodemap"] is None and rows[(32, "out")]["ratio"] is None
    assert doc["flags"] == [] and "none: 0 wrong elements" in md
    assert doc["info"]["nccl_tests"]["single"]["version"] == "2.19.6"
    assert doc["info"]["nodemap"]["single"]["nccl"] == 22809 and doc["info"]["machine.txt"] == "host: gpu-node-7"
    assert [s["op"] for s in doc["large_sizes"]] == ["all_reduce"]


@pytest.mark.parametrize("typed", [True, False])  # False: a block saved before failures were typed
def test_nodemap_wrong_elements_and_unfinished_runs_are_flagged(tmp_path, typed):
    from nodemap.bench.results import Failure

    msg = "all_reduce out-of-place 8 B: 3 wrong elements after the operation: NCCL or the GPUs' links corrupt data"
    wrong = Failure("nccl", "all_reduce", "NCCL all_reduce", "0 wrong elements", "3 wrong elements (out-of-place, "
                    "8 B)", transport="nccl", count=3, size=8, message=msg)
    (tmp_path / "nodemap_mpi_all_reduce_r0.json").write_text(json.dumps(
        nodemap_doc("all_reduce", {(8, False): [0.001]}, complete=False, messages=[] if typed else [msg],
                    failures=[wrong] if typed else [])))
    (tmp_path / "nodemap_mpi_sendrecv_r0.json").write_text('{"results": [')  # killed while writing
    md, doc = nv.report(str(tmp_path))
    assert any("3 wrong elements" in f for f in doc["flags"])
    assert any("not complete" in f for f in doc["flags"])
    assert any("nodemap_mpi_sendrecv_r0.json: unreadable" in f for f in doc["flags"])


def test_main_writes_the_markdown_and_json_and_refuses_a_missing_folder(tmp_path, capsys):
    (tmp_path / "nccltests_mpi_all_gather_r0.txt").write_text(ALL_GATHER_MPI)
    assert nv.main([str(tmp_path)]) == 0
    assert (tmp_path / "nccl_vs_nccl_tests.md").read_text().startswith("# nodemap bench nccl vs nccl-tests")
    assert json.loads((tmp_path / "nccl_vs_nccl_tests.json").read_text())["rows"][0]["op"] == "all_gather"
    assert nv.main([str(tmp_path / "absent")]) == 2


def test_the_device_script_is_valid_bash():
    subprocess.run(["bash", "-n", str(ROOT / "benchmarks" / "nccl_vs_nccl_tests.sh")], check=True)


FAKES = {  # stand-ins for the GPU node's tools: enough for the script's control flow
    "nvidia-smi": '#!/bin/bash\n[ "$1" = -L ] && { echo "GPU 0: H100 (UUID: a)"; echo "GPU 1: H100 (UUID: b)"; }\nexit 0\n',
    "mpicc": "#!/bin/bash\nexit 0\n",
    "mpirun": '#!/bin/bash\n[ "$1" = --version ] && exit 0\n'
              'while [ $# -gt 0 ]; do case $1 in -np|-x|--bind-to) shift 2;; --mca) shift 3;; -*) shift;; *) break;; '
              'esac; done\nexec "$@"\n',
    # make: every op's binary prints the sample table
    "make": '#!/bin/bash\nfor a in "$@"; do case $a in BUILDDIR=*) b=${a#BUILDDIR=};; NAME_SUFFIX=*) s=${a#*=};; esac; done\n'
            'mkdir -p "$b"; for op in all_reduce sendrecv; do printf \'#!/bin/bash\\necho "$*" >>%s/args\\n'
            'cat %s\\n\' "$b" "$SAMPLE" >"$b/${op}_perf$s"; chmod +x "$b/${op}_perf$s"; done\n',
}


def fake_nodemap(python):
    return f"""#!{python}
import json, sys
a = sys.argv[1:]
if a == ["--version"]:
    sys.exit(0)
if "-o" in a:
    from nodemap.bench.results import ResultSet, make_result
    op, sizes = a[a.index("--ops") + 1], [int(s) for s in a[a.index("--sizes") + 1].split(",")]
    rs = ResultSet("bench nccl", environment={{"nccl": 22809}})
    for s in sizes:
        rs.add(make_result("nccl", op, "GB/s busbw", [s / 5.0e6], verified=True,
                           params={{"size": s, "inplace": False, "bus_factor": 1.0, "wrong": 0}}))
    json.dump(json.loads(rs.to_json()), open(a[a.index("-o") + 1], "w"))
"""


def test_the_script_alternates_blocks_passes_the_same_sizes_and_summarises(tmp_path):
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    for name, text in {**FAKES, "nodemap": fake_nodemap(sys.executable)}.items():
        (bin_ / name).write_text(text)
        (bin_ / name).chmod(0o755)
    # the summary reads nodemap's files with nodemap, as on the device (a wrapper: a venv's symlink would not do)
    (bin_ / "python3").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    (bin_ / "python3").chmod(0o755)
    (tmp_path / "sample.txt").write_text(ALL_REDUCE)
    src = tmp_path / "src"
    src.mkdir()
    out = tmp_path / "out"
    env = {**os.environ, "PATH": f"{bin_}:/usr/bin:/bin", "SAMPLE": str(tmp_path / "sample.txt"),
           "SIZES": "8:2G:4", "ROUNDS": "2", "OPS": "all_reduce", "MODES": "single,mpi", "BUILD_DIR": str(tmp_path / "bld"),
           "NM_ARGS": "--graph", "NT_ARGS": "-G 1"}
    subprocess.run(["bash", str(ROOT / "benchmarks" / "nccl_vs_nccl_tests.sh"), str(out), str(src)], env=env,
                   check=True, capture_output=True, timeout=120)
    log = (out / "nccl_log.txt").read_text()
    assert "--repeats 5 --graph -q -o" in log  # NM_ARGS reach every nodemap block, NT_ARGS every nccl-tests one
    assert "-c 1 -d float -o sum -a 3 -G 1" in (tmp_path / "bld" / "single" / "args").read_text()
    order = [line.split()[1] for line in log.splitlines() if line.startswith("=== n") and ": rc=" not in line]
    assert order == ["nodemap-single-all_reduce-r0", "nccltests-single-all_reduce-r0",
                     "nodemap-mpi-all_reduce-r0", "nccltests-mpi-all_reduce-r0",
                     "nccltests-single-all_reduce-r1", "nodemap-single-all_reduce-r1",
                     "nccltests-mpi-all_reduce-r1", "nodemap-mpi-all_reduce-r1"]
    assert "-g 2 -b 8 -e 2147483648 -f 4 -n 20 -w 5 -N 5 -c 1" in (tmp_path / "bld" / "single" / "args").read_text()
    assert "-g 1 -b 8" in (tmp_path / "bld" / "mpi" / "args").read_text()
    doc = json.loads((out / "nccl_vs_nccl_tests.json").read_text())
    sizes = {r["size"] for r in doc["rows"] if r["nodemap"]}
    assert sizes == {8 * 4 ** k for k in range(15)}  # nodemap got nccl-tests' sizes, listed
    assert {r["mode"] for r in doc["rows"] if r["ratio"]} == {"single", "mpi"}
    packed = subprocess.run(["tar", "tzf", str(out / "nccl_results.tar.gz")], capture_output=True, text=True).stdout
    assert "blocks/nodemap_mpi_all_reduce_r1.json" in packed and "build_mpi.txt" in packed
    assert not (out / "build").exists() and not list(out.glob("**/*_perf*"))  # binaries stay out of OUTDIR
