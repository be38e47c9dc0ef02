"""MPI in the check: the launcher line (Open MPI as root, no binding), what
is skipped and why, MPI figures and their verdicts, CUDA-awareness and the
"not CUDA-aware" finding; end to end with the mpich wheel on host buffers."""

import os
import stat
import sys
from pathlib import Path

import pytest

import check_synth as syn
import nodes
from nodemap.bench.results import ResultSet, make_result
from nodemap.bench.comm import mpi_p2p
from nodemap.check import mpi, suite
from test_check_verdicts import by_key, doc_of

WHAT = "MPI point-to-point, host and device buffers"  # the MPI step (its STORY: bench/comm/mpi_p2p.py)

MIB16 = 16 << 20


def mpi_set(hh_lat=0.8, hh_bw=9.0, dd_bw=None, transport="staged", aware=None, cls="same-numa",
            dd_cls="NV12") -> ResultSet:
    rs = ResultSet("bench mpi sizes=8,16MiB")
    rs.environment = {"cuda_aware": aware or {"gpu": dd_bw is not None, "aware": False, "proven": False,
                                              "how": "MPIX_Query_cuda_support() = 0 in libmpi.so.12"}}
    for size, us in ((8, hh_lat), (MIB16, 900.0)):
        rs.add(make_result("mpi", "latency", "us", [us, us * 1.01], verified=True,
                           params={"size": size, "buffers": "HH", "transport": "host"}, path_class=cls))
    for size, v in ((8, 0.01), (MIB16, hh_bw)):
        rs.add(make_result("mpi", "bw", "GB/s", [v, v * 0.99], verified=True,
                           params={"size": size, "buffers": "HH", "transport": "host"}, path_class=cls))
    if dd_bw is not None:
        rs.add(make_result("mpi", "bw", "GB/s", [dd_bw, dd_bw * 0.99], verified=True,
                           params={"size": MIB16, "buffers": "DD", "transport": transport}, path_class=dd_cls))
    return rs


def test_host_buffer_figures_are_judged():
    j = by_key(doc_of(mpi_set()))
    assert j["mpi/HH/latency"].verdict == "pass" and j["mpi/HH/latency"].figure.value == pytest.approx(0.8)
    assert j["mpi/HH/bw"].verdict == "pass" and "16 MiB" in j["mpi/HH/bw"].figure.label
    slow = by_key(doc_of(mpi_set(hh_lat=40.0, hh_bw=0.5)))
    assert slow["mpi/HH/latency"].verdict == "fail" and slow["mpi/HH/bw"].verdict == "fail"


def test_staged_device_buffers_give_the_not_cuda_aware_finding():
    """DD staged at 11 GB/s against 250 GB/s NVLink copies: one finding, the issue's sentence, with both numbers."""
    d2d = syn.copies({}, dict(enumerate(nodes.KAROLINA_GPU_NUMA)), {(0, 1): 250.0, (1, 0): 250.0})
    rs = mpi_set(dd_bw=11.0)
    check = mpi.awareness_check(True, [rs], {})
    assert check.verdict == "warn" and check.label == "MPI is not CUDA-aware" and "11.0 GB/s" in check.value
    doc = doc_of(d2d, rs, checks=[check])
    j = by_key(doc)["mpi/DD/bw"]
    assert j.verdict == "fail" and j.figure.peak == pytest.approx(250.0)
    found = [f for f in doc.findings if "CUDA-aware" in f.text]
    assert len(found) == 1  # the check's own finding is folded into the figure's
    f = found[0]
    assert f.text.startswith("MPI is not CUDA-aware: device buffers are staged (11.0 GB/s vs 250 GB/s")
    assert f.cause == "configuration" and mpi.AWARE_KEY in f.keys


def test_awareness_from_the_run_then_from_the_library():
    aware = {"gpu": True, "aware": True, "proven": True, "how": "MPIX_Query_cuda_support() = 1"}
    assert mpi.awareness_check(True, [mpi_set(dd_bw=200.0, transport="cuda-aware", aware=aware)], {}).verdict == "pass"
    no_gpu = mpi.awareness_check(False, [mpi_set()], {})
    assert no_gpu.verdict == "info" and "no GPU" in no_gpu.rule
    off = mpi.awareness_check(True, [], {"MPIR_CVAR_ENABLE_GPU": "0", "PATH": ""})
    assert off.verdict == "warn" and "MPIR_CVAR_ENABLE_GPU=0" in off.rule
    unknown = mpi.awareness_check(True, [], {"PATH": ""})
    assert unknown.verdict == "info" and unknown.value == "unknown"


def _script(tmp_path, name, body):
    p = tmp_path / name
    p.write_text("#!/bin/sh\n" + body)
    p.chmod(p.stat().st_mode | stat.S_IEXEC)
    return str(p)


def test_ompi_info_says_whether_open_mpi_was_built_with_cuda(tmp_path):
    _script(tmp_path, "ompi_info", "echo 'mca:mpi:base:param:mpi_built_with_cuda_support:value:true'\n")
    assert mpi.static_awareness({"PATH": str(tmp_path)}) == (True, "ompi_info: mpi_built_with_cuda_support:value:true")


def test_mpichversion_configured_with_cuda_counts_as_aware(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "executable", str(tmp_path / "none" / "python"))  # not the venv's mpich wheel
    _script(tmp_path, "mpichversion", "echo 'MPICH configure:    --with-device=ch4:ucx --with-cuda=/usr/local/cuda'\n")
    aware, how = mpi.static_awareness({"PATH": str(tmp_path)})
    assert aware is True and "--with-cuda" in how
    _script(tmp_path, "mpichversion", "echo 'MPICH configure:    --with-device=ch4:ucx,ofi'\n")
    assert mpi.static_awareness({"PATH": str(tmp_path)})[0] is None  # absence proves nothing


def test_open_mpi_as_root_is_allowed_and_ranks_are_not_bound():
    ompi = mpi.Launcher("/opt/ompi/bin/mpiexec", "openmpi")
    cmd = mpi.command(ompi, "mpi", ["--buffers", "HH"], "/tmp/x.json", euid=0)
    assert cmd[:2] == ["/opt/ompi/bin/mpiexec", "--allow-run-as-root"]
    assert cmd[cmd.index("--bind-to") + 1] == "none" and cmd[cmd.index("-n") + 1] == "2"
    assert cmd[cmd.index("-o") + 1] == "/tmp/x.json" and sys.executable in cmd
    assert mpi.launch_env(ompi, {}, euid=0) == mpi.ROOT_VARS
    assert "--allow-run-as-root" not in mpi.command(ompi, "mpi", [], "x", euid=1000)
    assert mpi.launch_env(ompi, {}, euid=1000) == {}
    hydra = mpi.Launcher("/venv/bin/mpiexec", "mpich")
    assert "--allow-run-as-root" not in mpi.command(hydra, "mpi", [], "x", euid=0)  # Hydra has no such option


def test_quick_measures_the_judged_sizes_and_device_buffers_where_a_gpu_is():
    from nodemap.bench import driver

    q = mpi_p2p.check_options("quick", gpu=False)
    assert q.sizes == "1,16MiB" and q.buffers == "HH"
    # the latency figure's size is full's smallest; fewer, shorter repetitions keep quick short
    assert q.repeats == 3 and q.iters_scale == 0.3
    assert mpi_p2p.check_options("full", gpu=True).buffers == "HH,DD"
    # the ranks mpiexec starts get the same options as a command line (the step shows it)
    steps, _ = suite.plan(nodes.build(nodes.Spec(1, 1, 1, 4)), "quick", env={})
    assert all(s.argv == driver.argv_of(s.options) for s in steps if s.options is not None)


def test_one_preempted_latency_repetition_leaves_the_verdict_decided():
    """The stability benchmark's idle node: MPI latency 2.4 us, one repetition of 3 preempted (a daemon on
    one of the 2 vCPUs) to 6 us, its [min, max] straddled the 5 us warn limit: inconclusive. Quick now
    takes SMALL_REPEATS of the small messages (a millisecond each), whose 95% interval leaves it out."""
    from nodemap.bench.comm.mpi_p2p import SMALL, Sweep

    q = mpi_p2p.check_options("quick", gpu=False)
    plan = Sweep([], [], [], [], 64, 1, q.repeats, q.iters_scale, 60.0, q.small_repeats)
    assert plan.repeats_at(mpi_p2p.LATENCY_SIZE) == mpi_p2p.SMALL_REPEATS >= 9 and plan.repeats_at(SMALL) >= 9
    assert plan.repeats_at(MIB16) == 3  # the bandwidth's costly repetitions stay few
    assert mpi_p2p.check_options("full", gpu=False).small_repeats == mpi_p2p.SMALL_REPEATS

    def judged(samples):
        rs = mpi_set()
        rs.results = [r for r in rs.results if not (r.metric == "latency" and r.params["size"] == 8)]
        rs.add(make_result("mpi", "latency", "us", samples, verified=True,
                           params={"size": 8, "buffers": "HH", "transport": "host"}, path_class="same-numa"))
        return by_key(doc_of(rs))["mpi/HH/latency"]

    assert judged([2.4, 2.3, 6.0]).verdict == "inconclusive"  # 3 repetitions: what quick measured
    many = [2.4, 2.3, 2.5, 2.35, 2.45] * 3
    many[7] = 6.0
    assert judged(many).verdict == "pass"
    assert judged([6.0, 6.2, 5.9] * 5).verdict == "warn"  # a slow path still warns, every repetition beyond


def test_a_rank_or_a_missing_launcher_is_skipped_with_the_reason(monkeypatch):
    one = nodes.build(nodes.Spec(1, 1, 1, 4))
    _, skipped = suite.plan(one, "quick", env={"OMPI_COMM_WORLD_SIZE": "4"})
    assert any(s.what == WHAT and "OMPI_COMM_WORLD_SIZE" in s.reason for s in skipped)
    monkeypatch.setattr(mpi, "find_launcher", lambda env: None)
    steps, skipped = suite.plan(one, "quick", env={})
    assert "mpi" not in [s.kind for s in steps]
    assert any(s.what == WHAT and "no mpiexec" in s.reason for s in skipped)


def test_a_launcher_that_fails_becomes_a_skipped_item(tmp_path, monkeypatch):
    bad = _script(tmp_path, "mpiexec", "echo 'HYDRA build details' ; echo 'mpiexec: no slots available' >&2; "
                  "exit 3\n")
    monkeypatch.setattr(mpi, "find_launcher", lambda env: mpi.Launcher(bad, "mpich"))
    with pytest.raises(suite.KindFailed, match="exited 3: mpiexec: no slots available"):
        suite.measure("mpi", mpi_p2p.check_options("quick", False), "quick")


def test_a_launcher_past_its_timeout_is_ended_with_its_ranks(tmp_path, monkeypatch):
    """The whole process group goes: a rank left behind would spin on the node."""
    pidfile = tmp_path / "rank.pid"
    slow = _script(tmp_path, "mpiexec", f"sleep 300 & echo $! > {pidfile}; wait\n")
    monkeypatch.setattr(mpi, "find_launcher", lambda env: mpi.Launcher(slow, "mpich"))
    monkeypatch.setitem(mpi.TIMEOUT_S, "quick", 1.0)
    with pytest.raises(mpi.MPIFailed, match="did not finish within 1 s"):
        mpi.measure("mpi", "quick", [])
    rank = int(pidfile.read_text())
    assert _gone(rank), f"the rank (pid {rank}) outlived its launcher"


def _gone(pid: int) -> bool:
    """The process ends within 5 s (reaped by init: gone, or a zombie for a moment)."""
    import time

    for _ in range(50):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        if Path(f"/proc/{pid}/stat").exists() and Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z":
            return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize("ask", ["flavor", "mpichversion"])
def test_a_version_query_that_hangs_is_ended_with_what_it_started(tmp_path, monkeypatch, ask):
    """`mpiexec --version` and mpichversion ran without a process group: at the timeout only the tool was
    killed, and what it had started spun on."""
    pidfile = tmp_path / "child.pid"
    tool = _script(tmp_path, "mpiexec" if ask == "flavor" else "mpichversion",
                   f"sleep 300 & echo $! > {pidfile}; wait\n")
    monkeypatch.setattr(mpi, "QUERY_TIMEOUT_S", 0.5)
    if ask == "flavor":
        assert mpi.flavor.__wrapped__(tool) == ""
    else:
        monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))  # not the venv's own mpichversion
        assert mpi._mpich_configured_with_cuda({"PATH": str(tmp_path)}) is False
    child = int(pidfile.read_text())
    assert _gone(child), f"pid {child}, started by the query, outlived it"


MPIEXEC = Path(sys.executable).parent / "mpiexec"


@pytest.mark.mpi
@pytest.mark.skipif(not MPIEXEC.exists(), reason="no mpiexec next to sys.executable (pip install mpich)")
def test_check_runs_two_mpi_ranks_on_host_buffers(monkeypatch):
    """The real launcher: mpich's mpiexec starts `bench mpi`, the check judges what it saved."""
    pytest.importorskip("mpi4py")
    env = {k: v for k, v in os.environ.items() if k not in mpi.RANK_VARS}
    steps, _ = suite.plan(nodes.build(nodes.Spec(1, 1, 1, 4)), "quick", env=env)
    step = next(s for s in steps if s.kind == "mpi")
    rs = mpi.measure("mpi", "quick", step.argv, env=dict(env, CUDA_VISIBLE_DEVICES=""))
    assert rs.results and all(r.verified for r in rs.results)
    assert rs.environment["launcher"].startswith(str(MPIEXEC)) and "--bind-to none -n 2" in rs.environment["launcher"]
    j = by_key(doc_of(rs))
    assert {"mpi/HH/latency", "mpi/HH/bw"} <= set(j)
    assert all(j[k].verdict in ("pass", "warn", "fail", "inconclusive") and j[k].rule for k in ("mpi/HH/latency", "mpi/HH/bw"))
    # the small messages got SMALL_REPEATS repetitions, the 16 MiB ones quick's 3
    n = {(r.metric, r.params["size"]): r.stats.n for r in rs.results}
    assert n[("latency", 1)] == n[("bw", 1)] == mpi_p2p.SMALL_REPEATS and n[("bw", MIB16)] == 3
    c = mpi.awareness_check(False, [rs], env)
    assert c.verdict == "info" and "no GPU" in c.rule


def test_the_launchers_flavor_is_asked_once(tmp_path, monkeypatch):
    """Plan and measure both ask which MPI it is: one `mpiexec --version`."""
    exe = tmp_path / "mpiexec"
    exe.write_text("#!/bin/sh\necho 'HYDRA build details:' \necho x >> \"$0.calls\"\n")
    exe.chmod(0o755)
    assert mpi.flavor(str(exe)) == "mpich" and mpi.flavor(str(exe)) == "mpich"
    assert (tmp_path / "mpiexec.calls").read_text().count("x") == 1


@pytest.mark.parametrize("var", ["PALS_RANKID", "FLUX_TASK_RANK", "MV2_COMM_WORLD_RANK", "PMI_RANK"])
def test_a_rank_of_any_launcher_starts_no_ranks_of_its_own(var):
    """Under Cray PALS or Flux the check once launched a nested mpiexec -n 2."""
    assert mpi.under_launcher({var: "0"}) == var
