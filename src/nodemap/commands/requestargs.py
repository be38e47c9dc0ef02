"""The request options of `nodemap plan` and `nodemap run`, defined once (a
plan printed by `nodemap plan --tasks 8` is the plan `nodemap run --tasks 8`
applies), both ways: options -> the Request's fields (`request_fields`,
plain values: cheap, on every rank's launch) or the Request, and a Request
-> options (`request_args`)."""

from __future__ import annotations

import argparse

from ..text import is_decimal

# dest names of the request options, in the order they affect a plan
REQUEST_DESTS = ("tasks", "threads", "gpus_per_task", "smt", "cpus", "mems", "nic_rails", "no_gpus",
                 "gpu_order", "oversubscribe", "no_greedy", "no_gpu_match", "gpu_ids", "reserve_cores", "input")
GPU_IDS = ("index", "uuid", "pci")


def add_request_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("request")
    g.add_argument("--tasks", type=int, metavar="N", help="tasks (ranks) on this node")
    # no default: the request's "auto" values (threads 0, GPUs -1) are not options
    g.add_argument("--threads", type=int, metavar="T", help="threads per task, 1 or more (default: one per PU it gets)")
    g.add_argument("--gpus-per-task", type=int, metavar="G", help="GPUs per task, 0 or more (default: spread evenly)")
    g.add_argument("--smt", type=int, default=0, metavar="K",
                   help="hardware threads per core to use (default: 1 unless needed)")
    g.add_argument("--cpus", metavar="LIST", help="only these PUs, e.g. 0-15,32-47")
    g.add_argument("--mems", metavar="LIST", help="only the CPUs of these NUMA nodes, e.g. 0,1")
    g.add_argument("--nic-rails", default="auto", metavar="K|all|auto",
                   help="NICs per task (default auto: every nearest NIC when the node has more NICs than tasks, "
                        "else one, balanced; 1: one NIC each; all: every equally near NIC)")
    g.add_argument("--no-gpus", action="store_true", help="ignore GPUs: spread by PUs")
    g.add_argument("--gpu-order", choices=("locality", "index"), default="locality",
                   help="index: task k gets GPU k (default: by locality)")
    g.add_argument("--oversubscribe", action="store_true", help="let tasks share PUs when tasks > PUs")
    g.add_argument("--no-greedy", action="store_true",
                   help="fewer tasks than GPU/NUMA domains: one domain per task, spread evenly (default: each task "
                        "takes a run of domains)")
    g.add_argument("--no-gpu-match", action="store_true",
                   help="spread tasks over NUMA domains by PUs, not by where the GPUs are (GPUs still go to the "
                        "tasks of their domain; mpibind's gpu_optim=0)")
    g.add_argument("--gpu-ids", choices=GPU_IDS, default="index",
                   help="how CUDA_VISIBLE_DEVICES names GPUs: index (PCI order, default), uuid (needed with MIG: one MIG device per task; "
                        "needs NVML), pci (indexes, plus NODEMAP_GPU_PCI with PCI bus ids)")
    g.add_argument("--reserve-cores", type=int, default=0, metavar="K",
                   help="keep the first K cores of every socket free of tasks (system daemons, progress threads)")
    g.add_argument("--input", metavar="TOPO", help="a saved node (hwloc XML, sysfs snapshot, nodemap JSON, or a "
                                                      "check document: its topology)")


RAILS = {"all": -1, "auto": -2}  # --nic-rails words: Request.nic_rails' -1 and RAILS_AUTO (not imported: msgspec)
MAX_COUNT = 1 << 20  # threads, GPUs, SMT per task
MAX_TASKS = 1 << 14  # tasks per node: twice Linux's largest NR_CPUS


def request_from_args(args: argparse.Namespace, tasks: int | None = None, all_pus: bool = False):
    """A Request from parsed options; `tasks` fills in when --tasks is absent;
    `all_pus`: bind every PU of the tasks' cores (a run without a launcher)."""
    from ..mapping.request import Request

    return Request(**request_fields(args, tasks, all_pus))


def request_fields(args: argparse.Namespace, tasks: int | None = None, all_pus: bool = False) -> dict:
    """Every field of the Request the options ask for, as keyword arguments of
    Request (plain values and CpuSets), each option checked; as
    request_from_args (`tasks`, `all_pus`) without importing the Request."""
    from ..errors import InputError

    def cpuset(flag: str, text):
        if text is None:
            return None
        from ..topology.cpuset import CpuSet, CpuSetError  # only then: every rank's launch reads this

        try:
            return CpuSet.parse(text)
        except CpuSetError as e:
            raise InputError(flag, f"{e} (write a list like 0-3,8-11)") from None

    def count(flag: str, value, least: int, most: int = MAX_COUNT):
        # more per node is a typo, and planning it would eat memory (a plan
        # of 2^20 tasks needs over 1 GiB)
        if value is not None and not least <= value <= most:
            raise InputError(flag, f"{str(value)[:30]} is out of range ({least} to {most}, nodemap's limit per node; "
                                   "leave the option out for its default)")
        return value

    rails = str(args.nic_rails)
    if rails not in RAILS and not is_decimal(rails, 6):
        raise InputError("--nic-rails", f"{rails[:30]!r} is not a count, 'all' or 'auto'")
    n = args.tasks if args.tasks is not None else tasks
    return dict(
        tasks=count("--tasks", n, 1, MAX_TASKS) if n is not None else 0,
        threads=0 if args.threads is None else count("--threads", args.threads, 1),
        gpus_per_task=0 if args.no_gpus else -1 if args.gpus_per_task is None else count(
            "--gpus-per-task", args.gpus_per_task, 0),
        smt=count("--smt", args.smt, 0),
        restrict_cpus=cpuset("--cpus", args.cpus), restrict_mems=cpuset("--mems", args.mems),
        nic_rails=RAILS.get(rails) or int(rails), gpu_order=args.gpu_order,
        oversubscribe=args.oversubscribe, greedy=not args.no_greedy,
        spread_by="pus" if args.no_gpu_match else "auto", gpu_ids=args.gpu_ids,
        reserve_cores=count("--reserve-cores", args.reserve_cores, 0), all_pus=all_pus)


# the `nodemap run` words of a Request field's value other than its default, in the options' order
WORDS = {
    "threads": lambda v: ["--threads", str(v)],
    "smt": lambda v: ["--smt", str(v)],
    "gpus_per_task": lambda v: ["--gpus-per-task", str(v)] if v else ["--no-gpus"],
    "restrict_cpus": lambda v: ["--cpus", v.format()],
    "restrict_mems": lambda v: ["--mems", v.format()],
    "nic_rails": lambda v: ["--nic-rails", {n: w for w, n in RAILS.items()}.get(v, str(v))],
    "gpu_order": lambda v: ["--gpu-order", v],
    "oversubscribe": lambda v: ["--oversubscribe"],
    "greedy": lambda v: ["--no-greedy"],
    "spread_by": lambda v: ["--no-gpu-match"] if v == "pus" else [],
    "gpu_ids": lambda v: ["--gpu-ids", v],
    "reserve_cores": lambda v: ["--reserve-cores", str(v)],
}


def request_args(req) -> list[str]:
    """The `nodemap run` options that reproduce `req` (defaults left out)."""
    from ..mapping.request import Request

    base = Request(tasks=req.tasks)
    return ["--tasks", str(req.tasks), *(w for field, words in WORDS.items()
                                         if getattr(req, field) != getattr(base, field) for w in words(getattr(req, field)))]
