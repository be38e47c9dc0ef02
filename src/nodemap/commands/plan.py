"""`nodemap plan`: print where each rank's PUs, memory, GPUs and NICs go."""

from __future__ import annotations

import argparse
import dataclasses
import json

DESCRIPTION = """\
Plan the ranks of one node: for every task its PUs, the NUMA node(s) its
memory is bound to, its GPUs and NICs, and its threads. Tasks go to the NUMA
domains of the GPUs (in proportion to the GPUs there), each task's CPUs and
memory next to its GPU, and its NIC on the GPU's PCIe switch when there is
one. Nothing is changed: `nodemap run` applies the same plan to each rank."""

EPILOG = """\
examples:
  nodemap plan --tasks 8                     one rank per GPU, CPUs/memory/NIC near it
  nodemap plan --tasks 4 --threads 16        4 ranks of 16 OpenMP threads
  nodemap plan --tasks 2 --nic-rails all     2 ranks, each with every NIC near it
  nodemap plan --tasks 64 --no-gpus          CPU-only: spread over NUMA domains by PUs
  nodemap plan --tasks 4 --gpu-order index   task k gets GPU k (CPUs still next to it)
  nodemap plan --tasks 8 --env               the environment each rank gets
  nodemap plan --tasks 8 --launcher srun     a ready-to-paste launch line
  nodemap plan --tasks 8 --json              the plan as JSON (schema nodemap.plan/1)
  nodemap plan --tasks 8 --input node.xml    plan for a saved node (hwloc XML, sysfs, JSON)

columns: PUs are OS indexes; NUMA is where memory is bound; a GPU is marked
"local" when it sits in the task's NUMA node; the NIC shows its path class
from the task's GPU (PIX/PXB: same PCIe switch, PHB/NODE: same NUMA node, SYS).
"""

LAUNCHERS = ("srun", "mpirun", "flux")


def add_arguments(p: argparse.ArgumentParser) -> None:
    try:
        from ..mapping import cliargs
    except ImportError:  # shared request options not written yet: same flags, local parser
        _add_request_arguments(p)
    else:
        cliargs.add_request_arguments(p)
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.add_argument("--env", action="store_true", help="print each task's environment (CUDA_VISIBLE_DEVICES, OMP_*, UCX...)")
    p.add_argument("--launcher", choices=LAUNCHERS, help="print launch lines that start each rank through `nodemap run`")


def run(args: argparse.Namespace) -> int:
    from ..errors import NodemapError
    from ..mapping.plan import plan
    from ..topology.discover import discover

    req = _request(args)
    if req.tasks is None or req.tasks < 1:
        raise NodemapError("--tasks is required for nodemap plan (ranks on this node), e.g. --tasks 8")
    topo = discover(getattr(args, "input", None))
    p = plan(topo, req)
    emit = _emit() if (args.env or args.launcher) else None
    if args.env and emit is not None:
        p = dataclasses.replace(p, tasks=tuple(
            dataclasses.replace(t, env=tuple(emit.task_env(topo, p, t))) for t in p.tasks))
    lines = emit.launch_lines(p, request_args(req)) if (emit is not None and args.launcher) else None
    if args.json:
        d = p.to_dict()
        if lines is not None:
            d["launch"] = _pick(lines, args.launcher)
        print(json.dumps(d, indent=1))
        return 0
    print(table(topo, p), end="")
    for n in p.notes:
        print(f"note: {n}")
    if args.env:
        print(_env_text(p) if emit is not None else "environment: not available yet (nodemap.mapping.emit is missing)")
    if args.launcher:
        print(_pick(lines, args.launcher) if lines is not None
              else "launch lines: not available yet (nodemap.mapping.emit is missing)")
    return 0


def _emit():
    try:
        from ..mapping import emit
    except ImportError:
        return None
    return emit


def _pick(lines, launcher: str):
    """emit.launch_lines may give one text or one line per launcher."""
    if isinstance(lines, dict):
        return lines.get(launcher, "")
    if isinstance(lines, (list, tuple)):
        return "\n".join(str(x) for x in lines if launcher in str(x)) or "\n".join(map(str, lines))
    return str(lines)


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
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    head = f"{len(p.tasks)} task(s) on {topo.machine.hostname or 'this node'}, spread at level {p.level or '-'}"
    return head + "\n" + "\n".join(lines) + "\n"


def _gpus_cell(topo, t) -> str:
    if not t.gpus:
        return "-"
    from ..topology import paths

    ids = ",".join(map(str, t.gpus))
    homes = {paths.device_numa(topo, f"GPU{g}") for g in t.gpus}
    where = "local" if homes <= set(t.mems) else "NUMA " + ",".join(str(h) for h in sorted(homes))
    if len(t.gpus) > 1:
        worst = max((paths.path(topo, f"GPU{a}", f"GPU{b}") for a in t.gpus for b in t.gpus if a < b),
                    key=lambda x: x.rank)
        return f"{ids} ({where}, {worst.label})"
    return f"{ids} ({where})"


def _nic_cell(topo, t) -> str:
    if not t.nics:
        return "-"
    from ..topology import paths

    if not t.gpus:
        return ",".join(t.nics)
    cls = [min((paths.path(topo, f"GPU{g}", n) for g in t.gpus), key=lambda x: x.rank).label for n in t.nics]
    return ",".join(f"{n} ({c})" for n, c in zip(t.nics, cls))


# --- request options -------------------------------------------------------------------


def _request(args: argparse.Namespace):
    try:
        from ..mapping import cliargs
    except ImportError:
        return _request_from_args(args)
    return cliargs.request_from_args(args)


def request_args(req) -> list[str]:
    """The `nodemap run` options that reproduce `req` (defaults left out)."""
    from ..mapping.request import Request

    base = Request(tasks=req.tasks)
    out = ["--tasks", str(req.tasks)]
    simple = {"threads": "--threads", "smt": "--smt"}
    for field, flag in simple.items():
        if getattr(req, field) != getattr(base, field):
            out += [flag, str(getattr(req, field))]
    if req.gpus_per_task == 0:
        out.append("--no-gpus")
    elif req.gpus_per_task != base.gpus_per_task:
        out += ["--gpus-per-task", str(req.gpus_per_task)]
    if req.restrict_cpus is not None:
        out += ["--cpus", req.restrict_cpus.format()]
    if req.restrict_mems is not None:
        out += ["--mems", req.restrict_mems.format()]
    if req.nic_rails != base.nic_rails:
        out += ["--nic-rails", "all" if req.nic_rails < 0 else str(req.nic_rails)]
    if req.gpu_order != base.gpu_order:
        out += ["--gpu-order", req.gpu_order]
    if req.oversubscribe:
        out.append("--oversubscribe")
    return out


def _add_request_arguments(p: argparse.ArgumentParser) -> None:
    """Stand-in for nodemap.mapping.cliargs (same flags) until it exists."""
    p.add_argument("--tasks", type=int, metavar="N", help="tasks (ranks) on this node")
    p.add_argument("--threads", type=int, default=0, metavar="T", help="threads per task (default: one per PU it gets)")
    p.add_argument("--gpus-per-task", type=int, default=-1, metavar="G", help="GPUs per task (default: spread evenly)")
    p.add_argument("--smt", type=int, default=0, metavar="K", help="hardware threads per core to use (default: 1 unless needed)")
    p.add_argument("--cpus", metavar="LIST", help="only these PUs, e.g. 0-15,32-47")
    p.add_argument("--mems", metavar="LIST", help="only the CPUs of these NUMA nodes, e.g. 0,1")
    p.add_argument("--nic-rails", default="1", metavar="K|all", help="NICs per task (default 1; all: every equally near NIC)")
    p.add_argument("--no-gpus", action="store_true", help="ignore GPUs: spread by PUs")
    p.add_argument("--gpu-order", choices=("locality", "index"), default="locality",
                   help="index: task k gets GPU k (default: by locality)")
    p.add_argument("--oversubscribe", action="store_true", help="let tasks share PUs when tasks > PUs")
    p.add_argument("--input", metavar="TOPO", help="plan for a saved node (hwloc XML, sysfs snapshot, nodemap JSON)")


def _request_from_args(args: argparse.Namespace):
    from ..errors import InputError
    from ..mapping.request import Request
    from ..topology.cpuset import CpuSet, CpuSetError

    def cpuset(flag: str, text):
        try:
            return CpuSet.parse(text) if text is not None else None
        except CpuSetError as e:
            raise InputError(flag, f"{e} (write a list like 0-3,8-11)") from None

    rails = str(args.nic_rails)
    if rails != "all" and not rails.lstrip("-").isdigit():
        raise InputError("--nic-rails", f"{rails!r} is not a count or 'all'")
    return Request(
        tasks=args.tasks if args.tasks is not None else 0,
        threads=args.threads, gpus_per_task=0 if args.no_gpus else args.gpus_per_task, smt=args.smt,
        restrict_cpus=cpuset("--cpus", args.cpus), restrict_mems=cpuset("--mems", args.mems),
        nic_rails=-1 if rails == "all" else int(rails), gpu_order=args.gpu_order,
        oversubscribe=args.oversubscribe)
