"""`nodemap plan`: print where each rank's PUs, memory, GPUs and NICs go."""

from __future__ import annotations

import argparse
import json
import sys

DESCRIPTION = """\
Plan the ranks of one node: for every task its PUs, the NUMA node(s) its
memory is bound to, its GPUs and NICs, and its threads. Tasks go to the NUMA
domains of the GPUs (in proportion to the GPUs there), each task's CPUs and
memory next to its GPU, and its NIC on the GPU's PCIe switch when there is
one. Nothing is changed: `nodemap run` applies the same plan to each rank."""

EPILOG = """\
examples:
  nodemap plan                               one rank per GPU (per NUMA domain without GPUs)
  nodemap plan --tasks 8                     one rank per GPU, CPUs/memory/NIC near it
  nodemap plan --tasks 4 --threads 16        4 ranks of 16 OpenMP threads
  nodemap plan --tasks 2                     2 ranks, each with every NIC near it (multi-rail)
  nodemap plan --tasks 2 --nic-rails 1       ... with one NIC each
  nodemap plan --tasks 8 --reserve-cores 1   keep core 0 of every socket free
  nodemap plan --tasks 4 --gpu-ids uuid      GPUs by UUID in CUDA_VISIBLE_DEVICES (MIG)
  nodemap plan --tasks 64 --no-gpus          CPU-only: spread over NUMA domains by PUs
  nodemap plan --tasks 4 --gpu-order index   task k gets GPU k (CPUs still next to it)
  nodemap plan --tasks 8 --env               the environment each rank gets
  nodemap plan --tasks 8 --launcher srun     a ready-to-paste launch line (srun, mpirun, mpiexec, flux)
  W=$(nodemap plan --tasks 8 --launcher srun --emit wrapper)
  srun $(nodemap plan --tasks 8 --launcher srun --emit native) sh -c "$W" sh ./app
                                             srun's own binding options for the plan (no nodemap
                                             on the compute nodes); the wrapper W sets OMP_*, UCX...
  nodemap plan --tasks 8 --launcher mpirun --emit native --rankfile rf
                                             Open MPI: writes the rankfile rf, prints mpirun's options
                                             (with --host NODE:8 outside a scheduler's allocation)
  mpiexec $(nodemap plan --tasks 8 --launcher mpiexec --emit native) sh -c "$W" sh ./app
                                             MPICH/Hydra: -ppn, -bind-to user:..., -genv (W: its wrapper)
  nodemap plan --tasks 8 --json              the plan as JSON (schema nodemap.plan/1)
  nodemap plan --tasks 8 --input node.xml    plan for a saved node (hwloc XML, sysfs, JSON, check.json)

columns: PUs are OS indexes; NUMA is where memory is bound; a GPU is marked
"local" when it sits in the task's NUMA node; the NIC shows its path class
from the task's GPU (PIX/PXB: same PCIe switch, PHB/NODE: same NUMA node, SYS).
"""

# The keys of emit.launch_lines: Slurm, Open MPI, MPICH/Hydra (and Intel MPI, Cray PALS), Flux.
LAUNCHERS = ("srun", "mpirun", "mpiexec", "flux")


def add_arguments(p: argparse.ArgumentParser) -> None:
    from .requestargs import add_request_arguments

    add_request_arguments(p)  # the same request options as `nodemap run`
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.add_argument("--env", action="store_true", help="print each task's environment (CUDA_VISIBLE_DEVICES, OMP_*, UCX...)")
    p.add_argument("--launcher", choices=LAUNCHERS,
                   help="print the line that starts every rank through `nodemap run` with this launcher "
                        "(srun: Slurm, mpirun: Open MPI, mpiexec: MPICH/Hydra, flux)")
    p.add_argument("--emit", choices=("native", "wrapper", "tasks"),
                   help="with --launcher: native prints only the launcher's own binding options "
                        "for the plan (CPU masks, GPU and memory maps; words to splice into its command line); "
                        "wrapper prints the one-line sh script that sets each task's remaining environment "
                        "(run it as: sh -c WRAPPER sh APP); tasks (no --launcher): one tab-separated line per task "
                        "(rank, PUs, NUMA nodes, NAME=VALUE...), what the Slurm plugin reads")
    p.add_argument("--slurm-cores", metavar="LIST",
                   help="only the PUs of these cores, numbered as Slurm and hwloc number them (logical, node-wide, "
                        "core 0 first): a step's allocated cores; the Slurm plugin passes them")
    p.add_argument("--rankfile", metavar="PATH", help="with --launcher mpirun --emit native: write the rankfile here")
    p.add_argument("--nodes", type=int, default=1, metavar="N",
                   help="with --launcher mpirun --emit native: rankfile lines for N nodes (default 1; outside a "
                        "scheduler's allocation, 1 node is given to mpirun as --host NODE:TASKS)")


def run(args: argparse.Namespace) -> int:
    from ..mapping import emit
    from .requestargs import request_args, request_from_args
    from ..mapping.plan import default_tasks, plan
    from ..topology.discover import discover
    from ..topology.model import replace

    topo = discover(args.input)
    default = None
    if args.tasks is None:  # one task per GPU, else per NUMA domain; said below the table
        n, default = default_tasks(topo, args.no_gpus)
        req = request_from_args(args, n)
    else:
        req = request_from_args(args)
    if args.slurm_cores is not None:
        req = replace(req, restrict_cpus=_slurm_cores(topo, args.slurm_cores, req.restrict_cpus))
    p = plan(topo, req)
    if default:
        p = replace(p, notes=(default, *p.notes))
    if args.emit:
        return _native(topo, p, args)
    if args.env:
        p = emit.with_env(topo, p)
    line = emit.launch_lines(p, request_args(req))[args.launcher] if args.launcher else None
    if args.json:
        d = p.to_dict()
        if line is not None:
            d["launch"] = line
        print(json.dumps(d, indent=1))
        return 0
    print(table(topo, p), end="")
    for n in p.notes:
        print(f"note: {n}")
    if args.env:
        print(_env_text(p))
    if line is not None:
        print(line)
    return 0


def _slurm_cores(topo, text: str, cpus):
    """The PUs of Slurm's cores `text` (logical core indexes), within --cpus."""
    from ..errors import InputError
    from ..topology.cpuset import CpuSet, CpuSetError
    from ..topology.render import cores_in_order

    try:
        wanted = CpuSet.parse(text)
    except CpuSetError as e:
        raise InputError("--slurm-cores", f"{e} (write a list like 0-3,8)") from None
    cores = cores_in_order(topo)
    if not wanted or wanted.last() >= len(cores):
        raise InputError("--slurm-cores", f"{text[:40]}: this node has cores 0-{len(cores) - 1}")
    pus = CpuSet.union_all(cores[i].cpuset for i in wanted) & topo.cpuset
    return pus if cpus is None else pus & cpus


def _cache_for_the_plugin(text: str) -> None:
    """The SPANK plugin asked (its key in the environment): cache the task lines
    for its later steps (mapping/spankcache.py; it checks what it reads)."""
    from ..mapping import spankcache

    key = spankcache.key_from_env()
    if key:
        sys.stdout.flush()  # printed first: a cache that cannot be written costs nothing
        spankcache.save(key, text)


def _native(topo, p, args) -> int:
    """--emit native|wrapper: the plan in the launcher's own syntax."""
    from .. import outfile
    from ..errors import InputError
    from ..mapping import emit

    if args.emit == "tasks":
        if args.json:  # printing the text anyway would hand a JSON reader tab-separated lines
            raise InputError("--json", "--emit tasks is the Slurm plugin's plain text; for JSON leave out --emit "
                                       "(nodemap plan --json --env has each task's PUs, NUMA nodes and variables)")
        text = emit.task_lines(topo, p)
        print(text, end="")
        _cache_for_the_plugin(text)
        return 0
    if args.launcher not in emit.NATIVE_LAUNCHERS:
        raise InputError("--emit", f"needs --launcher {'|'.join(emit.NATIVE_LAUNCHERS)}")
    host, note = _mpirun_host(topo, args) if args.launcher == "mpirun" else ("", "")
    out = emit.native(topo, p, args.launcher, rankfile=args.rankfile or "", nodes=args.nodes, host=host)
    if note and args.emit == "native" and not args.json:
        print(f"nodemap plan: note: {note}", file=sys.stderr)
    if "rankfile" in out and (args.emit == "native" or args.json):  # where the options naming it are printed:
        outfile.write(args.rankfile, out["rankfile"], "--rankfile")  # the wrapper's $(...) must not overwrite it
    if args.json:
        print(json.dumps({"schema": "nodemap.native/1", **out, "notes": [*p.notes, *([note] if note else [])]},
                         indent=1))
    elif args.emit == "native":
        print(" ".join(out["args"]))
    else:
        print(out["wrapper"])
    return 0


def _mpirun_host(topo, args) -> tuple[str, str]:
    """(the node's name for mpirun's --host, a note): no scheduler's allocation here (where this runs, as
    `mpirun $(nodemap plan ...)` runs it) means mpirun takes no relative host. The name is "" inside an
    allocation, or when none fits (several nodes, a topology without a usable host name): the note then
    says what mpirun still needs."""
    import os

    from .. import env

    if env.mpirun_allocation(os.environ):
        return "", ""
    name = topo.machine.hostname
    if args.nodes == 1 and env.slurm_node_name(name):
        return name, ""
    why = f"{args.nodes} nodes" if args.nodes > 1 else "the topology names no usable host"
    return "", (f"no scheduler's allocation here and {why}: the rankfile's relative hosts +n0.. need one "
                "(run inside the job), or give mpirun --host/--hostfile for them")


def _env_text(p) -> str:
    out = []
    for t in p.tasks:
        out.append(f"task {t.task}:")
        out += [f"  {k}={v}" for k, v in t.env]
    return "\n".join(out)


# --- the table ----------------------------------------------------------------------


def table(topo, p) -> str:
    rows = [("task", "PUs", "NUMA", "GPUs", "NIC", "threads")]
    for t in p.tasks:
        rows.append((str(t.task), t.cpus.format(), t.mems.format() or "-", _gpus_cell(topo, t),
                     _nic_cell(topo, t), str(t.threads)))
    from ..text import table as columns

    head = f"{len(p.tasks)} task(s) on {topo.machine.hostname or 'this node'}, spread at level {p.level or '-'}"
    return head + "\n" + columns(rows[0], rows[1:], right=False, rule=False) + "\n"


def _gpus_cell(topo, t) -> str:
    if not t.gpus:
        return "-"
    from ..topology import paths

    ids = ",".join(map(str, t.gpus))
    homes = {paths.device_numa(topo, topo.gpu(g).key) for g in t.gpus}
    where = "local" if homes <= set(t.mems) else "NUMA " + ",".join(str(h) for h in sorted(homes))
    if len(t.gpus) > 1:
        worst = max((paths.path(topo, topo.gpu(a).key, topo.gpu(b).key) for a in t.gpus for b in t.gpus if a < b),
                    key=lambda x: x.rank)
        return f"{ids} ({where}, {worst.label})"
    return f"{ids} ({where})"


def _nic_cell(topo, t) -> str:
    if not t.nics:
        return "-"
    from ..topology import paths

    if not t.gpus:
        return ",".join(t.nics)
    cls = [min((paths.path(topo, topo.gpu(g).key, n) for g in t.gpus), key=lambda x: x.rank).label for n in t.nics]
    return ",".join(f"{n} ({c})" for n, c in zip(t.nics, cls))
