"""`nodemap plan` end to end on a saved synthetic node."""

import argparse
import json

import pytest

from nodemap.cli import main
from nodemap.commands.plan import LAUNCHERS
from hypothesis import given, settings, strategies as st

from nodemap.commands import requestargs
from nodemap.commands.requestargs import request_args
from nodemap.mapping.request import Request
from nodemap.topology.cpuset import CpuSet


def test_table(karolina_json, capsys):
    assert main(["plan", "--tasks", "8", "--input", karolina_json]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert "level L3" in lines[0]
    assert lines[1].split() == ["task", "PUs", "NUMA", "GPUs", "NIC", "threads"]
    assert lines[2].split() == ["0", "16-23", "1", "2", "(local)", "mlx5_0", "(PIX)", "8"]
    assert len(lines) == 10


def test_json(karolina_json, capsys):
    assert main(["plan", "--tasks", "2", "--nic-rails", "all", "--input", karolina_json, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["schema"] == "nodemap.plan/1"
    assert [t["cpus"] for t in d["tasks"]] == ["0-63", "64-127"]
    assert d["tasks"][0]["nics"] == ["mlx5_0", "mlx5_1"]


def test_plan_without_tasks_is_one_task_per_gpu_and_says_so(karolina_json, capsys):
    assert main(["plan", "--input", karolina_json]) == 0
    out = capsys.readouterr().out
    assert out.startswith("8 task(s)") and "no --tasks: one task per GPU (8)" in out
    assert main(["plan", "--input", karolina_json, "--no-gpus", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert len(d["tasks"]) == 8 and d["notes"][0].startswith("no --tasks: one task per NUMA domain (8")


@pytest.mark.parametrize("argv, match", [
    (["--tasks", "999"], "--oversubscribe"),
    (["--tasks", "2", "--cpus", "5-x"], "--cpus"),
    (["--tasks", "2", "--gpus-per-task", "9"], "--gpus-per-task"),
])
def test_errors_exit_2_on_one_line(karolina_json, capsys, argv, match):
    assert main(["plan", "--input", karolina_json, *argv]) == 2
    err = capsys.readouterr().err
    assert match in err and err.count("\n") == 1


def test_env_and_launcher(karolina_json, capsys):
    assert main(["plan", "--tasks", "2", "--input", karolina_json, "--env", "--launcher", "srun"]) == 0
    out = capsys.readouterr().out
    assert "CUDA_VISIBLE_DEVICES" in out and "OMP_PLACES" in out
    assert out.splitlines()[-1].startswith("srun --ntasks-per-node=2 ")


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_every_launcher_of_emit_is_offered(karolina_json, capsys, launcher):
    assert set(LAUNCHERS) == {"srun", "mpirun", "mpiexec", "flux"}
    assert main(["plan", "--tasks", "2", "--input", karolina_json, "--launcher", launcher, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["launch"].startswith(launcher + " ") and " nodemap run --tasks 2 -- ./app" in d["launch"]


def test_help_lists_mpiexec(capsys):
    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    out = capsys.readouterr().out
    assert "{srun,mpirun,mpiexec,flux}" in out and "MPICH/Hydra" in out


def _request_options(module) -> dict:
    p = argparse.ArgumentParser()
    module.add_arguments(p)
    keep = set(requestargs.REQUEST_DESTS)
    return {a.dest: (tuple(a.option_strings), a.default, a.choices, a.help) for a in p._actions if a.dest in keep}


def test_plan_and_run_share_the_request_options():
    from nodemap.commands import plan as plan_cmd
    from nodemap.commands import run as run_cmd

    opts = _request_options(plan_cmd)
    assert set(opts) == set(requestargs.REQUEST_DESTS)
    assert opts == _request_options(run_cmd)
    assert not hasattr(plan_cmd, "_add_request_arguments") and not hasattr(plan_cmd, "_request_from_args")


def test_plan_and_run_build_the_same_request(karolina_json):
    from nodemap.commands import plan as plan_cmd
    from nodemap.commands import run as run_cmd

    argv = ["--tasks", "4", "--threads", "2", "--cpus", "0-63", "--nic-rails", "all", "--gpu-order", "index",
            "--input", karolina_json]
    reqs = []
    for module in (plan_cmd, run_cmd):
        p = argparse.ArgumentParser()
        module.add_arguments(p)
        args, _ = p.parse_known_args(argv)
        reqs.append(requestargs.request_from_args(args))
    assert reqs[0] == reqs[1] == Request(tasks=4, threads=2, restrict_cpus=CpuSet.parse("0-63"), nic_rails=-1,
                                         gpu_order="index")


def test_a_benchmark_world_asks_the_plan_of_nodemap_run_without_options():
    # the World (bench/comm/world.py) hands node_plan Request(tasks=n)'s fields: the same fields, so the
    # same cached plan, as `nodemap run` with no request option under a launcher of n ranks per node
    from nodemap.commands import run as run_cmd
    from nodemap.mapping.request import RAILS_AUTO
    from nodemap.topology.record import asdict

    p = argparse.ArgumentParser()
    run_cmd.add_arguments(p)
    assert requestargs.request_fields(p.parse_args(["--", "true"]), 4) == asdict(Request(tasks=4))
    assert requestargs.RAILS["auto"] == RAILS_AUTO  # written out there: importing request.py imports msgspec


_CPUS = st.none() | st.sets(st.integers(0, 63), min_size=1).map(CpuSet)


@settings(max_examples=200, deadline=None)
@given(st.builds(Request, tasks=st.integers(1, 64), threads=st.integers(0, 8), gpus_per_task=st.integers(-1, 4),
                 smt=st.integers(0, 4), restrict_cpus=_CPUS, restrict_mems=_CPUS, nic_rails=st.integers(-2, 4),
                 spread_by=st.sampled_from(("auto", "pus")), gpu_order=st.sampled_from(("locality", "index")),
                 oversubscribe=st.booleans(), greedy=st.booleans(), gpu_ids=st.sampled_from(("index", "uuid", "pci")),
                 reserve_cores=st.integers(0, 3)))
def test_request_args_give_back_the_request(req):
    # the options `plan --launcher` prints for `nodemap run` are read back as the very Request
    from nodemap.commands import run as run_cmd

    p = argparse.ArgumentParser()
    run_cmd.add_arguments(p)
    assert requestargs.request_from_args(p.parse_args([*request_args(req), "--", "app"])) == req


def test_request_args_round_trip():
    req = Request(tasks=4, threads=2, gpus_per_task=0, restrict_cpus=CpuSet.parse("0-7"), nic_rails=-1,
                  gpu_order="index", oversubscribe=True)
    assert request_args(req) == ["--tasks", "4", "--threads", "2", "--no-gpus", "--cpus", "0-7",
                                 "--nic-rails", "all", "--gpu-order", "index", "--oversubscribe"]
