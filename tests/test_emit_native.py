"""`nodemap plan --launcher L --emit native|wrapper`: the plan in srun's,
Open MPI's and Flux's own binding syntax, and the one-line sh wrapper.

Every list is decoded here by the launcher's documented rules (hex masks of
OS CPU ids per local task for srun; ';'-separated hwloc lists for Flux;
hwloc logical PU indexes for an Open MPI rankfile, numbered by walking the
hwloc XML file itself) and must give back the plan's PUs, memory and GPUs;
the wrapper is run by a real sh for every local rank."""

import json
import os
import shutil
import subprocess
import xml.etree.ElementTree as ET

import pytest
from conftest import FIXTURES

import nodes
from nodemap.cli import main
from nodemap.mapping import emit
from nodemap.mapping.plan import plan
from nodemap.mapping.request import Request
from nodemap.topology import hwloc_xml
from nodemap.topology.cpuset import CpuSet

MPIBIND = FIXTURES / "mpibind" / "topo-xml"


def fixture_nodes():
    out = [("karolina", nodes.karolina, 8), ("perlmutter", nodes.perlmutter, 12)]
    out += [(name, lambda name=name: hwloc_xml.read(MPIBIND / f"{name}.xml"), tasks)
            for name, tasks in (("epyc-corona", 6), ("coral-lassen", 4))]
    return [pytest.param(make, tasks, id=name) for name, make, tasks in out]


def from_hex(masks: str) -> list[int]:
    return [int(m, 16) for m in masks.split(",")]


def planned_native(make, tasks: int, launcher: str):
    """(topology, plan, the launcher's native words) for `tasks` tasks on the node `make` builds."""
    topo = make()
    p = plan(topo, Request(tasks=tasks))
    return topo, p, emit.native(topo, p, launcher, rankfile="rf")["args"]


def option(args: list[str], prefix: str) -> str:
    (value,) = [a[len(prefix):] for a in args if a.startswith(prefix)]
    return value


@pytest.mark.parametrize("make,tasks", fixture_nodes())
def test_srun_masks_decode_to_the_plan(fixtures, make, tasks):
    topo, p, args = planned_native(make, tasks, "srun")
    assert option(args, "--ntasks-per-node=") == str(tasks)
    assert [CpuSet.from_mask(m) for m in from_hex(option(args, "--cpu-bind=mask_cpu:"))] == [t.cpus for t in p.tasks]
    assert [CpuSet.from_mask(m) for m in from_hex(option(args, "--mem-bind=mask_mem:"))] == [t.mems for t in p.tasks]
    gpu = option(args, "--gpu-bind=")
    if all(topo.gpu(g).vendor == "NVIDIA" for t in p.tasks for g in t.gpus) and all(t.gpus for t in p.tasks):
        kind, ids = gpu.split(":")
        got = ([(int(i),) for i in ids.split(",")] if kind == "map_gpu"
               else [tuple(CpuSet.from_mask(m)) for m in from_hex(ids)])
        assert got == [t.gpus for t in p.tasks]
    else:  # Slurm binds through the GPU plugin of the vendor; AMD here: the wrapper sets ROCR_VISIBLE_DEVICES
        assert gpu == "none"


def test_srun_gives_several_gpus_a_task_as_masks():
    topo = nodes.karolina()
    p = plan(topo, Request(tasks=2))
    gpu = option(emit.native(topo, p, "srun")["args"], "--gpu-bind=")
    assert gpu.startswith("mask_gpu:") and len(p.tasks[0].gpus) == 4
    assert [tuple(CpuSet.from_mask(m)) for m in from_hex(gpu[len("mask_gpu:"):])] == [t.gpus for t in p.tasks]


@pytest.mark.parametrize("make,tasks", fixture_nodes())
def test_flux_maps_decode_to_the_plan(fixtures, make, tasks):
    _, p, args = planned_native(make, tasks, "flux")
    opts = [args[i + 1] for i, a in enumerate(args) if a == "-o"]
    cpu = next(o for o in opts if o.startswith("cpu-affinity=map:"))[len("cpu-affinity=map:"):]
    assert [CpuSet.parse(x) for x in cpu.split(";")] == [t.cpus for t in p.tasks]
    gpu = next(o for o in opts if o.startswith("gpu-affinity="))
    if gpu != "gpu-affinity=off":
        assert [tuple(CpuSet.parse(x)) for x in gpu[len("gpu-affinity=map:"):].split(";")] == [t.gpus for t in p.tasks]


def hwloc_logical_pus(path) -> dict[int, int]:
    """hwloc's logical PU index is the PU's rank in a depth-first walk of its
    tree, which is the XML file's document order."""
    pus = [int(o.get("os_index")) for o in ET.parse(path).iter("object") if o.get("type") == "PU"]
    return {os_index: i for i, os_index in enumerate(pus)}


@pytest.mark.parametrize("name,tasks", [("epyc-corona", 6), ("coral-lassen", 4), ("cts1-quartz-smt1", 4)])
def test_openmpi_rankfile_names_the_plans_pus_by_hwloc_logical_index(fixtures, name, tasks):
    topo = hwloc_xml.read(MPIBIND / f"{name}.xml")
    p = plan(topo, Request(tasks=tasks))
    out = emit.native(topo, p, "mpirun", rankfile="rf", nodes=2)
    to_os = {v: k for k, v in hwloc_logical_pus(MPIBIND / f"{name}.xml").items()}
    lines = out["rankfile"].splitlines()
    assert len(lines) == 2 * tasks
    for k, line in enumerate(lines):
        head, slot = line.split(" slot=")
        assert head == f"rank {k}=+n{k // tasks}"
        assert CpuSet(to_os[i] for i in CpuSet.parse(slot)) == p.tasks[k % tasks].cpus
    assert out["args"][:4] == ["--np", str(2 * tasks), "--map-by", "rankfile:file=rf:hwtcpus"]


def hydra_user_binding(text: str) -> list[CpuSet]:
    """Hydra's `-bind-to user:` list as topo_hwloc.c (handle_user_binding) reads it: entries split at ',',
    each OS PU ids or ranges a-b joined by '+', an entry 'xN' repeated N times."""
    out = []
    for entry in text.split(","):
        body, _, times = entry.partition("x")
        spans = [part.partition("-") for part in body.split("+")]
        pus = CpuSet(i for a, _, b in spans for i in range(int(a), int(b or a) + 1))
        out += [pus] * int(times or 1)
    return out


@pytest.mark.parametrize("make,tasks", fixture_nodes())
def test_hydra_user_binding_decodes_to_the_plan(fixtures, make, tasks):
    _, p, args = planned_native(make, tasks, "mpiexec")
    assert args[:2] == ["-ppn", str(tasks)] and args[2] == "-bind-to"
    assert hydra_user_binding(args[3].removeprefix("user:")) == [t.cpus for t in p.tasks]
    assert all(flag == "-genv" and "=" in value for flag, value in zip(args[4::2], args[5::2]))


def test_openmpi_lets_ranks_share_pus_only_when_the_plan_does():
    topo = nodes.karolina()
    spread = emit.native(topo, plan(topo, Request(tasks=8)), "mpirun", rankfile="rf")["args"]
    shared = emit.native(topo, plan(topo, Request(tasks=8, restrict_cpus=CpuSet.parse("0-3"), oversubscribe=True)),
                         "mpirun", rankfile="rf")["args"]
    assert "--bind-to" not in spread and shared[shared.index("--bind-to") + 1] == ":overload-allowed"


def run_wrapper(shell, line, var, rank, env=None):
    full = {k: v for k, v in os.environ.items() if not k.startswith(("OMP_", "UCX_", "NCCL_", "CUDA_", "NODEMAP_"))}
    full.update(env or {})
    if rank is not None:
        full[var] = str(rank)
    r = subprocess.run([shell, "-c", line, "sh", "env"], env=full, capture_output=True, text=True, timeout=10)
    return r.returncode, dict(x.split("=", 1) for x in r.stdout.splitlines() if "=" in x), r.stderr


SHELLS = [s for s in ("sh", "dash", "bash", "busybox") if shutil.which(s)]


@pytest.mark.parametrize("launcher", emit.NATIVE_LAUNCHERS)
@pytest.mark.parametrize("shell", SHELLS)
def test_the_wrapper_sets_each_local_ranks_environment(launcher, shell):
    topo = nodes.karolina()
    p = plan(topo, Request(tasks=4, threads=4))
    out = emit.native(topo, p, launcher, rankfile="rf")
    args = out["args"]
    # mpirun -x, mpiexec -genv (Hydra splits NAME=VALUE at the first '=')
    shared = dict(value.split("=", 1) for flag, value in zip(args, args[1:]) if flag in ("-x", "-genv"))
    bound = launcher in ("srun", "flux")  # they set CUDA_VISIBLE_DEVICES themselves
    for t in p.tasks:
        code, got, _ = run_wrapper(shell, out["wrapper"], out["local_rank_var"], t.task)
        assert code == 0
        want = {k: v for k, v in emit.task_env(topo, p, t) if not (bound and k in emit.VISIBILITY)}
        assert {k: got.get(k, shared.get(k)) for k in want} == want
        assert ("CUDA_VISIBLE_DEVICES" in got) == (not bound)
    code, _, err = run_wrapper(shell, out["wrapper"], out["local_rank_var"], 4)
    assert code == 2 and err.count("\n") == 1 and "is not a local rank of this plan" in err
    assert run_wrapper(shell, out["wrapper"], out["local_rank_var"], None)[0] == 2


def test_wrapper_values_are_quoted_for_sh():
    line = emit.wrapper("R", [[("A", 'x"y$z`w\\'), ("B", "{0,1},{2:3}")]])
    code, got, _ = run_wrapper("sh", line, "R", 0)
    assert code == 0 and got["A"] == 'x"y$z`w\\' and got["B"] == "{0,1},{2:3}"


# --- the command line ----------------------------------------------------------------


def test_cli_prints_only_the_options_and_the_wrapper(karolina_json, capsys):
    assert main(["plan", "--tasks", "8", "--input", karolina_json, "--launcher", "srun", "--emit", "native"]) == 0
    words = capsys.readouterr().out.split()
    assert words[0] == "--ntasks-per-node=8" and words[-1] == "--gpu-bind=map_gpu:2,3,0,1,6,7,4,5"
    assert main(["plan", "--tasks", "8", "--input", karolina_json, "--launcher", "srun", "--emit", "wrapper"]) == 0
    assert capsys.readouterr().out.startswith('case "${SLURM_LOCALID-}" in 0) export ')


def test_cli_json_and_rankfile(karolina_json, tmp_path, capsys):
    rf = tmp_path / "rankfile"
    assert main(["plan", "--tasks", "4", "--input", karolina_json, "--launcher", "mpirun", "--emit", "native",
                 "--rankfile", str(rf), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == "nodemap.native/1" and doc["local_rank_var"] == "OMPI_COMM_WORLD_LOCAL_RANK"
    assert rf.read_text() == doc["rankfile"] and rf.read_text().startswith("rank 0=+n0 slot=")
    # `sh -c "$(... --emit wrapper --rankfile rf)"` beside `mpirun $(... --nodes 2 ...)` must leave its rankfile
    rf.write_text("kept")
    assert main(["plan", "--tasks", "4", "--input", karolina_json, "--launcher", "mpirun", "--emit", "wrapper",
                 "--rankfile", str(rf)]) == 0
    assert rf.read_text() == "kept"


@pytest.mark.parametrize("argv,says", [
    (["--emit", "native"], "needs --launcher srun|mpirun|mpiexec|flux"),
    (["--launcher", "mpirun", "--emit", "native"], "needs a rankfile path"),
    (["--launcher", "mpirun", "--emit", "native", "--rankfile", "-"], "needs a rankfile path"),
    (["--launcher", "mpirun", "--emit", "native", "--rankfile", "rf", "--nodes", "0"], "is not a node count"),
    (["--emit", "tasks", "--json"], "--emit tasks is the Slurm plugin's plain text"),  # not text under --json
])
def test_cli_refuses_what_a_launcher_cannot_take(karolina_json, capsys, argv, says):
    assert main(["plan", "--tasks", "4", "--input", karolina_json, *argv]) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1


def hwloc_cores(path) -> list[CpuSet]:
    """Each Core's PUs in the file's order: hwloc's logical core numbering (Slurm's too)."""
    return [CpuSet(int(pu.get("os_index")) for pu in core.iter("object") if pu.get("type") == "PU")
            for core in ET.parse(path).iter("object") if core.get("type") == "Core"]


@pytest.mark.parametrize("name", ["16em64t-4s2c2t.xml", "96em64t-4n4d3ca2co-pci.xml"])
def test_slurm_cores_are_hwloc_logical_cores(fixtures, capsys, name):
    """`plan --slurm-cores` (what the SPANK plugin passes: the step's cores) names cores by logical index."""
    path = FIXTURES / "hwloc-xml" / name
    cores = hwloc_cores(path)
    pick = [1, len(cores) - 1]
    assert main(["plan", "--tasks", "1", "--smt", "8", "--input", str(path), "--slurm-cores",
                 ",".join(map(str, pick)), "--json"]) == 0
    (task,) = json.loads(capsys.readouterr().out)["tasks"]
    assert CpuSet.parse(task["cpus"]) == cores[pick[0]] | cores[pick[1]]
    assert main(["plan", "--tasks", "1", "--input", str(path), "--slurm-cores", str(len(cores))]) == 2
    assert f"this node has cores 0-{len(cores) - 1}" in capsys.readouterr().err


# --- AMD GPUs named by UUID: what is emitted, nodemap's own visibility parser reads back ------------------


def corona_with_rsmi(tmp_path) -> str:
    """epyc-corona (hwloc 1 XML, 4 Vega 20 seen through OpenCL) with an RSMI OS device beside each,
    carrying AMDUUID as hwloc's RSMI backend writes it: rsmi_dev_unique_id_get in bare hex ("%llx")."""
    import re

    text = (MPIBIND / "epyc-corona.xml").read_text()
    k = iter(range(4))

    def rsmi(m):
        i = next(k)
        return (f'<object type="OSDev" name="rsmi{i}" subtype="RSMI" osdev_type="1"><info name="Backend" '
                f'value="RSMI"/><info name="GPUVendor" value="AMD"/><info name="AMDUUID" value="{0x7a3c15e2d1 + i:x}"/>'
                f'</object>{m.group(0)}')

    path = tmp_path / "corona-rsmi.xml"
    path.write_text(re.sub(r'<object type="OSDev" [^>]*name="opencl0d\d"[^>]*>', rsmi, text))
    return str(path)


def rocr_values(path: str, tasks: int, capsys, tmp_path) -> list[list[str]]:
    """Each task's ROCR_VISIBLE_DEVICES from every form nodemap emits: `plan --env --json`, the plugin's
    task lines (--emit tasks) and every launcher's wrapper, run by sh as the launcher would."""
    argv = ["plan", "--tasks", str(tasks), "--input", path]
    assert main([*argv, "--env", "--json"]) == 0
    forms = [[dict(t["env"])["ROCR_VISIBLE_DEVICES"] for t in json.loads(capsys.readouterr().out)["tasks"]]]
    assert main([*argv, "--emit", "tasks"]) == 0
    lines = capsys.readouterr().out.splitlines()
    forms.append([dict(w.split("=", 1) for w in line.split("\t")[3:])["ROCR_VISIBLE_DEVICES"] for line in lines])
    for launcher in emit.NATIVE_LAUNCHERS:
        assert main([*argv, "--launcher", launcher, "--emit", "native", "--rankfile", str(tmp_path / "rf"),
                     "--json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        forms.append([run_wrapper("sh", doc["wrapper"], doc["local_rank_var"], r)[1]["ROCR_VISIBLE_DEVICES"]
                      for r in range(tasks)])
    return forms


def test_amd_uuids_from_hwloc_xml_round_trip_through_every_emitted_form(fixtures, tmp_path, capsys):
    """Issue 36: hwloc's bare hex AMDUUID went out as ROCR_VISIBLE_DEVICES=7a3c15e2d1, which ROCm does
    not take (it wants GPU-<16 hex digits>) and nodemap's own parser refused ("names no GPU of this node")."""
    from nodemap.topology.nvml import hidden_gpus

    path = corona_with_rsmi(tmp_path)
    topo = hwloc_xml.read(path)
    assert [g.uuid for g in topo.gpus] == [f"GPU-{0x7a3c15e2d1 + i:016x}" for i in range(4)]
    for tasks in (2, 4, 7):
        planned = [t.gpus for t in plan(topo, Request(tasks=tasks)).tasks]
        for values in rocr_values(path, tasks, capsys, tmp_path):
            for gpus, value in zip(planned, values):
                assert all(e.startswith("GPU-") for e in value.split(",")), value
                hidden, _, problems = hidden_gpus(topo, {"ROCR_VISIBLE_DEVICES": value})
                assert not problems and hidden == {g.index for g in topo.gpus} - set(gpus), (value, problems)
