"""`nodemap check --fleet` with real MPI ranks (the mpich wheel's mpiexec
beside sys.executable), ranks acting as nodes through NODEMAP_FLEET_NODE:
a slow node flagged, a silent one named missing within its timeout, the
rest complete; Ctrl-C writes what was gathered; --from rebuilds the report."""

import json
import os
import re
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fleet_docs import node_doc

pytest.importorskip("mpi4py")
BIN = Path(sys.executable).parent
MPIEXEC = BIN / "mpiexec"
pytestmark = [pytest.mark.mpi, pytest.mark.skipif(not MPIEXEC.exists(), reason="no mpiexec next to sys.executable "
                                                  "(pip install mpich)")]
NODEMAP = [sys.executable, "-m", "nodemap"]
FLEET = [*NODEMAP, "check", "--fleet"]
# Four "nodes" share two cores here: pair figures are noise (a ping-pong can take 1,000x its best under
# load), so these tests do not judge links (their rule is tested in test_fleet_merge.py).
LOOSE_LINKS = "[fleet]\nlink_bad = 1e-9\nlink_latency = 1e6\nrail_bad = 1e-9\nrail_latency = 1e6\nrail_tail = 1e6\n"  # the widest the site file takes


def env(**kw):
    return dict(os.environ, CUDA_VISIBLE_DEVICES="", **kw)


def mpmd(ranks, args, *launcher):
    """mpiexec with one block per rank: (node name, extra environment)."""
    cmd = [str(MPIEXEC), *launcher]
    for i, (node, extra) in enumerate(ranks):
        if i:
            cmd.append(":")
        cmd += ["-n", "1", "-env", "NODEMAP_FLEET_NODE", node]
        for k, v in extra.items():
            cmd += ["-env", k, v]
        cmd += [*FLEET, *args]
    return cmd


@pytest.fixture
def saved_doc(tmp_path):
    path = tmp_path / "doc.json"
    path.write_text(json.dumps(node_doc("template", random.Random(7), gpus=2, noise=0.0)))
    return str(path)


def read(out):
    fleet = json.loads((out / "fleet.json").read_text())
    lines = [json.loads(x) for x in (out / "nodes.jsonl").read_text().splitlines()]
    return fleet, lines


def test_slow_node_flagged_silent_node_missing_within_its_timeout_rest_complete(tmp_path, saved_doc):
    site = tmp_path / "site.toml"
    site.write_text(LOOSE_LINKS)
    out = tmp_path / "out"
    ranks = [("nodeA", {}), ("nodeB", {"NODEMAP_FLEET_SCALE": "0.8"}), ("nodeC", {}),
             ("nodeD", {"NODEMAP_FLEET_HANG": "check"})]
    p = subprocess.run(mpmd(ranks, ["-o", str(out), "--check-timeout", "6", "--pair-size", "64KiB",
                                    "--expect", str(site)]),
                       capture_output=True, text=True, timeout=300, env=env(NODEMAP_FLEET_NODE_DOC=saved_doc))
    assert p.returncode != 0, p.stdout + p.stderr  # nodes to drain; the silent rank is ended with MPI_Abort
    fleet, lines = read(out)
    assert sorted(x["host"] for x in lines) == ["nodeA", "nodeB", "nodeC"]
    assert [d["node"] for d in fleet["drain"]] == ["nodeD", "nodeB"], (fleet["drain"], p.stderr)
    missing = fleet["drain"][0]["reason"]
    assert "did not answer" in missing and "running its node check" in missing
    slow = fleet["drain"][1]
    assert "80% of the fleet median" in slow["reason"] or "1.25x the fleet median" in slow["reason"]
    status = {n["name"]: (n["status"], n["verdict"]) for n in fleet["nodes"]}
    assert status == {"nodeA": ("complete", "pass"), "nodeB": ("complete", "fail"), "nodeC": ("complete", "pass"),
                      "nodeD": ("missing", "fail")}
    assert not fleet["complete"]
    pairs = [json.loads(x) for x in (out / "pairs.jsonl").read_text().splitlines()]
    measured = {(r["a"], r["b"]) for r in pairs if r["key"] == "mpi latency host"}
    assert measured == {("nodeA", "nodeB"), ("nodeB", "nodeC"), ("nodeA", "nodeC")}
    assert all(r["value"] > 0 for r in pairs)
    # Named missing when its 6 s ran out (rank 0's clock starts before the ranks join), not at the end.
    when = re.search(r"\[\s*([\d.]+)s\] nodeD: no node document within 6 s", p.stderr)
    assert when and 6 <= float(when.group(1)) < 6 + 30, p.stderr
    assert "<svg" in (out / "fleet.html").read_text()
    assert "nodeD" in p.stdout and "drain (2)" in p.stdout


def test_a_suspect_is_re_measured_on_its_node_before_it_is_drained(tmp_path, saved_doc):
    """Two nodes 20% slow on their first check: the one that stays slow when
    its leader measures again is drained, the transient one is a warning."""
    out = tmp_path / "out"
    ranks = [("nA", {}), ("nB", {"NODEMAP_FLEET_SCALE": "0.8"}), ("nC", {}),
             ("nE", {"NODEMAP_FLEET_SCALE_ONCE": "0.8"}), ("nF", {})]
    p = subprocess.run(mpmd(ranks, ["-o", str(out), "--no-pairs", "--json"]), capture_output=True, text=True,
                       timeout=180, env=env(NODEMAP_FLEET_NODE_DOC=saved_doc))
    assert p.returncode == 1, p.stderr
    fleet = json.loads(p.stdout)
    assert [d["node"] for d in fleet["drain"]] == ["nB"] and "still beyond" in fleet["drain"][0]["reason"]
    transient = [f for f in fleet["findings"] if f["node"] == "nE"]
    assert transient and all(f["verdict"] == "warn" and "transient, not drained" in f["text"] for f in transient)
    again = json.loads((out / "remeasured.json").read_text())["remeasured"]
    assert set(again) == {"nB", "nE"} and "re-measure round 1: " in p.stderr
    figures = len(json.loads(open(saved_doc).read())["figures"])
    assert (f"re-measured {2 * figures} suspect figures on 2 nodes before draining: {figures} confirmed (drained), "
            f"{figures} passed (transient), 0 unsettled (warnings)") in fleet["notes"]
    # --from the folder confirms by the same re-measures
    q = subprocess.run([*NODEMAP, "check", "--from", str(out), "-o", str(tmp_path / "again"), "--json", "--no-html"],
                       capture_output=True, text=True, timeout=60, env=env())
    assert [d["node"] for d in json.loads(q.stdout)["drain"]] == ["nB"], q.stderr


def test_a_rank_that_never_joins_is_named_in_words(tmp_path, saved_doc):
    out = tmp_path / "out"
    ranks = [("a", {}), ("b", {}), ("c", {}), ("d", {"NODEMAP_FLEET_HANG": "join"})]
    p = subprocess.run(mpmd(ranks, ["-o", str(out), "--join-timeout", "3", "--no-pairs", "--json", "-q"]),
                       capture_output=True, text=True, timeout=120, env=env(NODEMAP_FLEET_NODE_DOC=saved_doc))
    assert p.returncode != 0
    fleet = json.loads((out / "fleet.json").read_text())
    assert "rank 3 did not join within 3 s" in fleet["messages"], fleet["messages"]  # not "ranks [3]"
    assert [d["node"] for d in fleet["drain"]] == ["rank3"]


def test_a_node_whose_check_dies_is_missing_and_the_rest_reported(tmp_path, saved_doc):
    out = tmp_path / "out"
    ranks = [("a", {}), ("b", {}), ("c", {"NODEMAP_FLEET_HANG": "crash"})]
    # Hydra ends every rank when one dies unless told not to (docs/fleet.md: each launcher's switch).
    p = subprocess.run(mpmd(ranks, ["-o", str(out), "--check-timeout", "5", "--pair-size", "16KiB"],
                            "-disable-auto-cleanup"),
                       capture_output=True, text=True, timeout=180, env=env(NODEMAP_FLEET_NODE_DOC=saved_doc))
    fleet, lines = read(out)
    assert sorted(x["host"] for x in lines) == ["a", "b"]
    assert {n["name"]: n["status"] for n in fleet["nodes"]} == {"a": "complete", "b": "complete", "c": "missing"}
    assert [d["node"] for d in fleet["drain"]] == ["c"], p.stderr


def test_two_ranks_per_node_measure_rails_and_rank0_is_not_a_leader(tmp_path, saved_doc):
    out = tmp_path / "out"
    ranks = [("n1", {}), ("n1", {}), ("n2", {}), ("n2", {})]
    p = subprocess.run(mpmd(ranks, ["-o", str(out), "--pair-size", "64KiB", "--json", "-q"]),
                       capture_output=True, text=True, timeout=120, env=env(NODEMAP_FLEET_NODE_DOC=saved_doc))
    assert p.returncode in (0, 1), p.stderr
    fleet = json.loads(p.stdout)
    assert fleet["complete"] and {n["name"] for n in fleet["nodes"]} == {"n1", "n2"}
    keys = {x["key"] for x in fleet["links"]}
    assert {"mpi bw host", "mpi bw host rail0", "mpi bw host rail1", "mpi latency host", "mpi latency host rail0",
            "mpi latency host rail1"} <= keys  # every rail's latency too: a delay on one rail shows in no bandwidth
    rails = [json.loads(x) for x in (out / "pairs.jsonl").read_text().splitlines() if "rail" in json.loads(x)["key"]]
    assert len(rails) == 4 and all(len(r["nics"]) == 2 for r in rails)  # the rail's NIC each side ("" here)
    bw = {x["key"]: x["value"] for x in fleet["links"]}
    assert bw["mpi bw host"] == pytest.approx(bw["mpi bw host rail0"] + bw["mpi bw host rail1"])


def test_real_node_check_on_two_nodes_end_to_end(tmp_path):
    out = tmp_path / "out"
    p = subprocess.run([str(MPIEXEC), "-n", "2", "-env", "NODEMAP_FLEET_NODE", "live{rank}", *FLEET, "-o", str(out),
                        "--pair-size", "64KiB"], capture_output=True, text=True, timeout=300,
                       env=env(NODEMAP_CHECK_TINY="1"))
    assert p.returncode in (0, 1), p.stderr
    fleet, lines = read(out)
    assert sorted(x["host"] for x in lines) == ["live0", "live1"]
    assert all(x["figures"] and x["topology"] and x["complete"] for x in lines)
    assert all("host/stream/triad" in {f["key"] for f in x["figures"]} for x in lines)
    assert not any("results" in x for x in lines)  # gathered compact; the leader keeps the full document
    full = json.loads((out / "nodes" / "live1.check.json").read_text())
    assert full["results"] and lines[0]["full_document"].endswith(".check.json")
    assert fleet["complete"] and {b["key"] for b in fleet["baselines"]} >= {"host/stream/triad"}
    assert {x["key"] for x in fleet["links"]} >= {"mpi bw host", "mpi latency host"}
    assert (out / "fleet.html").exists() and "fleet:" in p.stdout
    # one rank per node: no MPI step, and the document says what it needs
    for x in lines:
        assert not [f for f in x["figures"] if f["area"] == "MPI"]
        why = [s["reason"] for s in x["skipped"] if s["what"].startswith("MPI point-to-point")]
        assert len(why) == 1 and ">= 2 ranks per node" in why[0] and "--ntasks-per-node=<GPUs>" in why[0], why


def _shim(tmp_path):
    """PYTHONPATH on which `import cupy` is tests/fake_cupy.py (host memory as "GPU" memory)."""
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "cupy.py").write_text("import sys\nimport fake_cupy\nsys.modules['cupy'] = fake_cupy\n")
    return os.pathsep.join([str(shim), str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])


def test_two_ranks_per_node_give_each_node_its_own_mpi_figures(tmp_path):
    # Two "nodes" of two ranks; rank 0 is n1's second rank (its leader is rank 1). Device buffers are
    # fake_cupy's host memory, staged: the device path runs through the real ranks too.
    out = tmp_path / "out"
    ranks = [("n1", {}), ("n1", {}), ("n2", {}), ("n2", {})]
    p = subprocess.run(mpmd(ranks, ["-o", str(out), "--pair-size", "64KiB", "-q"]), capture_output=True, text=True,
                       timeout=300, env=env(NODEMAP_CHECK_TINY="1", PYTHONPATH=_shim(tmp_path)))
    assert p.returncode in (0, 1), p.stderr
    for node, pair in (("n1", {0, 1}), ("n2", {2, 3})):
        doc = json.loads((out / "nodes" / f"{node}.check.json").read_text())
        mpi = {f["key"]: f for f in doc["figures"] if f["area"] == "MPI"}
        assert set(mpi) == {"mpi/HH/latency", "mpi/HH/bw", "mpi/DD/bw"}, (node, doc["skipped"])
        assert all(f["value"] > 0 for f in mpi.values())
        judged = {"pass", "warn", "fail", "inconclusive"}  # inconclusive: measured while this shared machine was busy
        assert {mpi[k]["verdict"] for k in ("mpi/HH/latency", "mpi/HH/bw")} <= judged, mpi
        assert mpi["mpi/DD/bw"]["verdict"] == "info"  # judged against the node's GPU<->GPU copies: none here
        assert mpi["mpi/HH/bw"]["label"].startswith("MPI bandwidth, host buffers (host), 16 MiB")
        assert "(staged)" in mpi["mpi/DD/bw"]["label"]
        assert not [s for s in doc["skipped"] if s["what"].startswith("MPI point-to-point")]
        rs = next(r for r in doc["results"] if r["command"].startswith("bench mpi"))
        assert {pl["rank"] for pl in rs["environment"]["places"]} == pair  # the node's own two ranks
        aware = [c for c in doc["checks"] if c["key"] == "inventory/mpi/cuda_aware"]
        assert len(aware) == 1 and "MPIX_Query_cuda_support" in aware[0]["rule"], aware
        assert doc["summary"]["areas"]["MPI"] in judged
    # only the leaders ran a node check (one document each)
    assert sorted(x.name for x in (out / "nodes").glob("*.check.json")) == ["n1.check.json", "n2.check.json"]


def test_a_silent_second_rank_is_reported_not_waited_on(tmp_path):
    out = tmp_path / "out"
    ranks = [("n1", {}), ("n1", {}), ("n2", {}), ("n2", {"NODEMAP_FLEET_HANG": "local"})]
    t0 = time.monotonic()
    # 30 s: n1's own step (16 MiB messages) finishes within it on a loaded 2-core machine
    p = subprocess.run(mpmd(ranks, ["-o", str(out), "--pair-timeout", "30", "--no-pairs"]), capture_output=True,
                       text=True, timeout=300, env=env(NODEMAP_CHECK_TINY="1"))
    assert time.monotonic() - t0 < 240, p.stderr  # ended with MPI_Abort, not held by the silent rank
    fleet, lines = read(out)
    assert sorted(x["host"] for x in lines) == ["n1", "n2"]
    n2 = next(x for x in lines if x["host"] == "n2")
    why = [s["reason"] for s in n2["skipped"] if s["what"].startswith("MPI point-to-point")]
    assert why == ["rank 3 (this node's second local rank) did not answer or finish within 30 s (--pair-timeout)"], why
    n1 = next(x for x in lines if x["host"] == "n1")
    assert {f["key"] for f in n1["figures"]} >= {"mpi/HH/latency", "mpi/HH/bw"}
    assert any(m.startswith("n2: rank 3") and "did not answer" in m for m in fleet["messages"]), fleet["messages"]


def test_ctrl_c_writes_what_was_gathered(tmp_path, saved_doc):
    out = tmp_path / "out"
    ranks = [("a", {}), ("b", {}), ("c", {"NODEMAP_FLEET_HANG": "check"})]
    proc = subprocess.Popen(mpmd(ranks, ["-o", str(out), "--check-timeout", "300"]), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env(NODEMAP_FLEET_NODE_DOC=saved_doc),
                            start_new_session=True)
    lines = out / "nodes.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (lines.exists() and len(lines.read_text().splitlines()) == 2):
        time.sleep(0.2)
    time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C does to the launcher's process group
    try:
        stdout, stderr = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    fleet, got = read(out)
    assert not fleet["complete"] and sorted(x["host"] for x in got) == ["a", "b"]
    assert {n["name"]: n["status"] for n in fleet["nodes"]} == {"a": "complete", "b": "complete", "c": "missing"}
    assert any("interrupted" in m for m in fleet["messages"])


def test_from_saved_documents_builds_the_same_report(tmp_path):
    rng = random.Random(3)
    d = tmp_path / "saved"
    d.mkdir()
    for i in range(6):
        slow = {"gpu/1/hbm_triad": 0.82} if i == 4 else None
        (d / f"n{i}.json").write_text(json.dumps(node_doc(f"n{i}", rng, gpus=2, slow=slow)))
    (d / "notes.txt").write_text("ignored")
    out = tmp_path / "out"
    p = subprocess.run([*NODEMAP, "check", "--from", str(d), "-o", str(out)], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 1, p.stderr
    assert "n4: GPU1 HBM triad" in p.stdout
    fleet = json.loads((out / "fleet.json").read_text())
    assert [x["node"] for x in fleet["drain"]] == ["n4"] and len(fleet["nodes"]) == 6
    html = (out / "fleet.html").read_text()
    assert html.count("<svg") >= 2  # heatmap and a distribution, inline
    assert "<script" not in html and not re.search(r"(src|href)\s*=\s*[\"']?https?:|url\((?!#)", html)  # offline


def test_from_an_empty_folder_is_one_line(tmp_path):
    p = subprocess.run([*FLEET, "--from", str(tmp_path), "-o", str(tmp_path / "o")], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 2 and "no node documents" in p.stderr and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


def test_from_a_fleet_summary_says_what_it_is_and_every_version_read(tmp_path):
    """The error named only nodemap.check/2 (/1 is read too) and not what the file given was."""
    (tmp_path / "fleet.json").write_text('{"schema": "nodemap.fleet/2", "nodes": []}')
    p = subprocess.run([*FLEET, "--from", str(tmp_path / "fleet.json"), "-o", str(tmp_path / "o")],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr
    assert "of schema nodemap.check/1 or nodemap.check/2) found; " in p.stderr
    assert "fleet.json is a fleet summary (nodemap.fleet/2, from nodemap check --fleet): give the fleet's folder " \
           "to nodemap check --from DIR; run" in p.stderr, p.stderr


def test_a_bad_site_file_stops_before_mpi_in_one_line(tmp_path):
    site = tmp_path / "s.toml"
    site.write_text("[fleet]\nwarn = 2.0\n")
    p = subprocess.run([*FLEET, "--expect", str(site), "-o", str(tmp_path / "o")], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 2 and "fleet.warn = 2.0 must be a fraction of the fleet median" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


def test_a_rail_is_named_by_the_nic_local_to_its_rank():
    from nodemap.fleet.driver import nearest_nic

    nics = [("mlx5_0", "0-15"), ("mlx5_1", "16-31"), ("eth0", "")]
    assert nearest_nic(nics, {3, 4}) == "mlx5_0" and nearest_nic(nics, {20}) == "mlx5_1"
    assert nearest_nic(nics, {15, 16}) == "mlx5_0+mlx5_1" and nearest_nic(nics, set()) == ""


@pytest.mark.parametrize("option", ["--join-timeout", "--check-timeout", "--pair-timeout"])
@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0", "1e999"])
def test_fleet_timeouts_are_positive_finite_seconds(tmp_path, option, value):
    # nan once made every healthy rank "missing" at once; inf switched the never-hang guarantee off
    p = subprocess.run([*FLEET, f"{option}={value}", "-o", str(tmp_path / "o")], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert f"argument {option}:" in p.stderr.strip().splitlines()[-1] and "seconds" in p.stderr


def test_device_buffers_are_staged_where_mpi_is_not_cuda_aware_and_skipped_without_gpus(tmp_path, saved_doc):
    # "GPU" memory is tests/fake_cupy.py's host memory: the staged path runs through real MPI ranks.
    path = _shim(tmp_path)
    out = tmp_path / "out"
    p = subprocess.run(mpmd([("a", {}), ("b", {})], ["-o", str(out), "--pair-size", "64KiB", "--json", "-q"]),
                       capture_output=True, text=True, timeout=120,
                       env=env(NODEMAP_FLEET_NODE_DOC=saved_doc, PYTHONPATH=path))
    assert p.returncode in (0, 1), p.stderr
    fleet = json.loads(p.stdout)
    assert {"mpi bw device", "mpi bw device rail0", "mpi latency device", "mpi bw host"} <= {x["key"] for x in
                                                                                            fleet["links"]}
    device = [json.loads(x) for x in (out / "pairs.jsonl").read_text().splitlines() if "device rail0" in x]
    assert device and device[0]["transport"] == "staged (pinned host)" and "not CUDA-aware" in device[0]["why"]
    # no GPU (no CuPy here): host only, and the report says why
    p = subprocess.run(mpmd([("a", {}), ("b", {})], ["-o", str(tmp_path / "o2"), "--pair-size", "64KiB", "--json",
                                                     "-q"]), capture_output=True, text=True, timeout=120,
                       env=env(NODEMAP_FLEET_NODE_DOC=saved_doc))
    fleet = json.loads(p.stdout)
    assert not any("device" in x["key"] for x in fleet["links"]) and "mpi bw host" in {x["key"] for x in fleet["links"]}
    assert any("device buffers skipped: no GPU visible" in m for m in fleet["messages"])


def _gpus():
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount()
    except Exception:
        return 0


@pytest.mark.gpu
@pytest.mark.skipif(not _gpus(), reason="no CUDA GPU (CuPy)")
def test_device_buffers_on_a_real_gpu(tmp_path, saved_doc):
    out = tmp_path / "out"
    p = subprocess.run(mpmd([("g0", {}), ("g1", {})], ["-o", str(out), "--pair-size", "4MiB", "--json", "-q"]),
                       capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, NODEMAP_FLEET_NODE_DOC=saved_doc))
    assert p.returncode in (0, 1), p.stderr
    device = [json.loads(x) for x in (out / "pairs.jsonl").read_text().splitlines() if "device" in x]
    assert {r["key"] for r in device} >= {"mpi bw device", "mpi bw device rail0", "mpi latency device"}
    assert all(r["value"] > 0 for r in device)
    assert {r.get("transport") for r in device if "rail0" in r["key"]} <= {"cuda-aware", "staged (pinned host)"}
    print({r["key"]: (round(r["value"], 2), r.get("transport")) for r in device})


@pytest.mark.gpu
@pytest.mark.skipif(not _gpus(), reason="no CUDA GPU (CuPy)")
def test_a_nodes_own_mpi_step_on_a_real_gpu(tmp_path):
    # One node of two ranks (the real check, tiny host sizes): its MPI step with device buffers on the GPUs.
    out = tmp_path / "out"
    p = subprocess.run(mpmd([("g", {}), ("g", {})], ["-o", str(out), "-q"]), capture_output=True, text=True,
                       timeout=600, env=dict(os.environ, NODEMAP_CHECK_TINY="1"))
    assert p.returncode in (0, 1), p.stderr
    doc = json.loads((out / "nodes" / "g.check.json").read_text())
    mpi = {f["key"]: f for f in doc["figures"] if f["area"] == "MPI"}
    assert set(mpi) == {"mpi/HH/latency", "mpi/HH/bw", "mpi/DD/bw"}, doc["skipped"]
    dd = next(r for rs in doc["results"] if rs["command"].startswith("bench mpi") for r in rs["results"]
              if r["params"]["buffers"] == "DD")
    assert dd["params"]["transport"] in ("cuda-aware", "staged") and re.search(r"(GPU|cuda)\d", dd["path"]), dd
    aware = next(c for c in doc["checks"] if c["key"] == "inventory/mpi/cuda_aware")
    assert aware["verdict"] in ("pass", "warn"), aware
    print({k: (round(f["value"], 2), f["verdict"], f["label"]) for k, f in mpi.items()}, aware["value"])


def test_an_unknown_pair_buffer_kind_is_one_line(tmp_path):
    p = subprocess.run([*FLEET, "--pair-buffers", "host,gpu", "-o", str(tmp_path / "o")], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 2 and "choose from host,device" in p.stderr and len(p.stderr.strip().splitlines()) == 1


LATE_SENDS = """
import time
from mpi4py import MPI
from nodemap.fleet import wire
comm = MPI.COMM_WORLD
if comm.Get_rank() == 0:  # large sends nobody receives: their deadline passes
    buf = bytearray(16 << 20)
    reqs = [comm.Isend([memoryview(buf)[i << 21:(i + 1) << 21], MPI.BYTE], dest=1, tag=5) for i in range(8)]
    try:
        wire.wait_all(reqs, wire.deadline(0.5))
    except wire.Late:
        print("late", flush=True)
    del reqs, buf
time.sleep(1)
print("alive", comm.Get_rank(), flush=True)
"""


def test_requests_past_their_deadline_do_not_kill_the_rank(tmp_path):
    # wire once cancelled them: cancelling a send is a SIGSEGV in the mpich wheel's UCX device, which
    # ended the whole job where a pair test or a node's MPI step timed out mid-transfer.
    script = tmp_path / "late.py"
    script.write_text(LATE_SENDS)
    p = subprocess.run([str(MPIEXEC), "-n", "2", sys.executable, str(script)], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0 and "late" in p.stdout, p.stdout + p.stderr
    assert "alive 0" in p.stdout and "alive 1" in p.stdout


@pytest.mark.parametrize("planted", ["nodes.jsonl", "pairs.jsonl", "fleet.json", "remeasured.json", "nodes",
                                     "nodes/b.json", "nodes/a.check.json"])
def test_a_file_planted_in_the_output_folder_stops_the_fleet_in_one_line_before_measuring(tmp_path, saved_doc,
                                                                                          planted):
    """A link (a FIFO for fleet.json) another user planted in a shared DIR: the fleet measured every node,
    then rank 0 failed to write, and the other ranks waited 4140 s (issue 35 defect 4)."""
    out, secret = tmp_path / "out", tmp_path / "secret"
    (out / "nodes").mkdir(parents=True)
    secret.mkdir() if planted == "nodes" else secret.write_text("secret\n")
    target = out / planted
    if planted == "nodes":
        target.rmdir()
    if planted == "fleet.json":
        os.mkfifo(target)
    else:
        target.symlink_to(secret)
    t0 = time.monotonic()
    # each node check would take 30 s (NODEMAP_FLEET_SLOW): ending well within them proves none was measured
    p = subprocess.run(mpmd([("a", {}), ("b", {})], ["-o", str(out), "--no-pairs"]), capture_output=True,
                       text=True, timeout=180, env=env(NODEMAP_FLEET_NODE_DOC=saved_doc, NODEMAP_FLEET_SLOW="30"))
    took = time.monotonic() - t0
    said = [x for x in (p.stdout + p.stderr).splitlines() if "error:" in x]
    assert p.returncode == 2 and len(said) == 1, p.stdout + p.stderr
    assert str(target) in said[0] and "remove it or give another folder" in said[0], said
    assert took < 30, (took, p.stderr)
    assert not [x for x in out.glob("nodes/*.check.json") if not x.is_symlink()], "a node was measured"
    assert not (out / "fleet.json").is_file()
    assert (list(secret.iterdir()) == [] if planted == "nodes" else secret.read_text() == "secret\n")


def test_a_file_planted_after_the_check_costs_only_that_file(tmp_path):
    from nodemap.fleet.driver import Config, Coordinator
    from nodemap.fleet.output import NodeLine

    secret = tmp_path / "secret"
    secret.write_text("secret\n")
    c = Coordinator(None, Config(outdir=str(tmp_path / "out")), None)
    c.out.check()
    (tmp_path / "out" / "nodes.jsonl").symlink_to(secret)  # planted once the run has started
    c.saving(c.out.node_line, NodeLine("n1", '{"host": "n1", "figures": []}'))
    assert len(c.messages) == 1 and "not written: --output:" in c.messages[0], c.messages
    assert "nodes.jsonl is a symbolic link" in c.messages[0] and secret.read_text() == "secret\n"


def test_a_rank_that_stops_answering_at_the_very_end_does_not_hold_the_others(tmp_path, saved_doc):
    """Once rank 0 said done, c never says goodbye: every other rank waited in MPI_Finalize's barrier for
    good (Hydra with -disable-auto-cleanup); rank 0 now ends the job with MPI_Abort, the report written."""
    out = tmp_path / "out"
    ranks = [("a", {}), ("b", {}), ("c", {"NODEMAP_FLEET_HANG": "end"})]
    t0 = time.monotonic()
    p = subprocess.run(mpmd(ranks, ["-o", str(out), "--no-pairs", "-q"], "-disable-auto-cleanup"),
                       capture_output=True, text=True, timeout=180, env=env(NODEMAP_FLEET_NODE_DOC=saved_doc))
    took = time.monotonic() - t0
    assert took < 90, (took, p.stderr)  # the goodbye's 10 s, the start and the checks on a loaded machine
    fleet = json.loads((out / "fleet.json").read_text())
    assert {n["name"]: n["status"] for n in fleet["nodes"]} == {"a": "complete", "b": "complete", "c": "complete"}
