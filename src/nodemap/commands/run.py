"""`nodemap run [request options] -- APP ARGS`: bind this rank as planned, exec APP."""

from __future__ import annotations

import argparse
import os
import sys

DESCRIPTION = """\
Start one rank of an MPI+X application bound as `nodemap plan` would place
it: find this rank's node-local rank and the number of ranks on the node
from the launcher (Slurm, Open MPI, MPICH/Hydra, Cray PALS, Flux, MVAPICH2,
torchrun) or --local-rank/--local-size, plan the node, then set this
process's CPU affinity, memory policy and environment (CUDA_VISIBLE_DEVICES,
OMP_*, UCX_NET_DEVICES, NCCL_IB_HCA...) and exec APP in its place: APP keeps
the PID, and its exit code and signals are its own.

Variables you set yourself win over the plan (a note on stderr says which)
unless --override-env; device-visibility variables are narrowed by the plan,
which was made within them. Tell the launcher not to bind (see examples):
its binding would narrow what each rank sees when it plans (Open MPI's
default binding, which it announces, is undone before planning). Without a
launcher, one task on the whole allowed node."""

EPILOG = """\
examples:
  srun --ntasks-per-node=8 --cpu-bind=none --gpu-bind=none nodemap run -- ./app
  mpirun --map-by ppr:4:node --bind-to none nodemap run --threads 8 -- ./app
  mpiexec -n 2 -bind-to none nodemap run -- nodemap show
  flux run --tasks-per-node=4 -o cpu-affinity=off -o gpu-affinity=off nodemap run -- ./app
  nodemap run --local-rank 0 --local-size 2 --dry-run -- ./app    what rank 0 of 2 would get

  nodemap run --watch -- ./app      record each rank's GPU/host memory over time (nodemap-watch/)

--tasks defaults to the launcher's local size; without a launcher (and
without --local-rank) nodemap run is one task on the whole allowed node, like
numactl or likwid-pin: every allowed PU bound, OMP_NUM_THREADS one per core
(--threads T or --smt K for others). The first rank of a node plans and publishes the plan
in $TMPDIR/nodemap-$UID (a private folder); the others read it, and later
steps reuse it for 10 minutes (--no-cache to plan afresh).
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    from .requestargs import add_request_arguments

    add_request_arguments(p)
    g = p.add_argument_group("launch")
    g.add_argument("--local-rank", type=int, metavar="R", help="this rank's index on the node (default: the launcher's)")
    g.add_argument("--local-size", type=int, metavar="N", help="ranks on this node (default: the launcher's)")
    g.add_argument("--override-env", action="store_true", help="the plan's variables win over ones you set")
    g.add_argument("--mem-policy", choices=("bind", "preferred", "none"), default="bind",
                   help="bind: memory only from the task's NUMA node(s) (default); preferred: its node first, "
                        "others when full (one node per task); none: leave the policy alone")
    g.add_argument("--dry-run", action="store_true", help="print what would be applied; do not exec")
    g.add_argument("--json", action="store_true", help="with --dry-run: print it as JSON")
    g.add_argument("--verbose", "-v", action="store_true", help="each rank prints its binding on stderr")
    g.add_argument("--no-cache", action="store_true", help="plan afresh instead of reusing this node's cached plan")
    w = p.add_argument_group("watch (memory timeline per rank)")
    w.add_argument("--watch", action="store_true",
                   help="record this rank's GPU and host memory over time beside the application; local rank 0 "
                        "prints the node's summary (growth, imbalance, margin, other processes) when it ends")
    w.add_argument("--watch-interval", metavar="T", help="time between samples (default 200ms)")
    w.add_argument("--watch-dir", metavar="DIR",
                   help="folder of the timelines (default $NODEMAP_WATCH_DIR, else ./nodemap-watch[-JOBID])")
    p.add_argument("app", nargs=argparse.REMAINDER, metavar="-- APP ARGS", help="the application and its arguments")


def run(args: argparse.Namespace) -> int:
    from ..errors import NodemapError
    from .. import launcher
    from ..mapping import emit, launch

    argv = list(args.app)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv and not args.dry_run:
        raise NodemapError("no application given: put it after --, e.g. nodemap run -- ./app args")
    if not args.watch and (args.watch_interval is not None or args.watch_dir is not None):
        raise NodemapError("--watch-interval and --watch-dir take effect only with --watch: add --watch, or drop them")
    alone = args.local_rank is None and not launcher.launched(os.environ)
    if alone:
        # no launcher: like numactl or likwid-pin, one task on the whole allowed node (every PU)
        lr = launcher.LocalRank(0, args.local_size or 1, "no launcher: one task")
    else:
        lr = launcher.detect(os.environ, args.local_rank, args.local_size)
    tasks = args.tasks or lr.size
    if not tasks:
        raise NodemapError(f"{lr.launcher} does not say how many ranks share this node: pass --local-size N or --tasks N")
    if lr.rank >= tasks:
        raise NodemapError(f"local rank {lr.rank} ({lr.launcher}) but the plan has only {tasks} task(s): "
                           f"pass --tasks {lr.rank + 1} or more, or start fewer ranks per node")
    undone = launch.undo_launcher_binding(os.environ) if not args.input else ""
    if undone and lr.rank == 0 and args.verbose:
        print(f"nodemap run: note: {undone}", file=sys.stderr)
    from ..mapping.nodeplan import node_plan
    from .requestargs import request_fields

    request = request_fields(args, tasks, all_pus=alone and tasks == 1)
    plan, cached = node_plan(request, args.input, from_launcher=args.tasks is None, local_rank=lr.rank,
                             cache=not args.no_cache,
                             say=lambda text: print(f"nodemap run: {text}", file=sys.stderr, flush=True))
    task = plan.tasks[lr.rank]
    final, decisions = emit.merge_env([tuple(kv) for kv in task.env], os.environ, args.override_env)
    binding = launch.Binding(task.cpu_list, task.mem_list, args.mem_policy, plan.node_mems)
    if args.dry_run:
        _print_dry_run(args, lr, plan, task, final, decisions, argv, cached)
        return 0
    crowded = [n for n in plan.notes if "(oversubscribed)" in n]
    if crowded and lr.rank == 0:
        print(f"nodemap run: note: {crowded[0]}: {lr.launcher} started more ranks than this node has PUs",
              file=sys.stderr)
    if lr.rank == 0:  # a NIC down: the node's ranks were planned around it (the planner's note, devices.py)
        for n in plan.notes:
            if n.startswith("NIC ") and " down: ranks use " in n:
                print(f"nodemap run: note: {n}", file=sys.stderr)
    kept = [d for d in decisions if d["used"] == "user"]
    if kept and lr.rank == 0:
        print("nodemap run: kept your " + ", ".join(f"{d['name']}={d['current']}" for d in kept)
              + " (plan: " + ", ".join(d["planned"] for d in kept) + "); --override-env uses the plan's",
              file=sys.stderr)
    if args.verbose:
        print(f"nodemap run: local rank {lr.rank}/{tasks} ({lr.launcher}): " + _summary(task, args.mem_policy),
              file=sys.stderr)
    # a refused memory policy: local rank 0 says it for the node (--verbose: every rank)
    say = (lambda text: print(f"nodemap run: {text}", file=sys.stderr)) if lr.rank == 0 or args.verbose else (
        lambda text: None)
    if args.watch:  # imported only when asked: the launch path stays as fast without it
        from ..watch import monitor as watch

        launch.program(argv, final)  # a missing program fails before its timeline is written
        w = watch.prepare(args.watch_dir, watch.parse_interval(args.watch_interval), local_rank=lr.rank,
                          local_size=lr.size, task=task, argv=argv, env=os.environ)
        return w.run(lambda: launch.apply_and_exec(binding, final, argv, say))  # the summary comes before the return
    launch.apply_and_exec(binding, final, argv, say)
    return 0  # not reached


def _summary(task, mem_policy: str) -> str:
    gpus = ",".join(map(str, task.gpus)) or "-"
    nics = ",".join(task.nics) or "-"
    return f"PUs {task.cpus}, memory {mem_policy} {task.mems or '-'}, GPUs {gpus}, NICs {nics}, threads {task.threads}"


def _print_dry_run(args, lr, plan, task, final, decisions, argv, cached) -> None:
    watching = None
    if args.watch:
        from ..watch import monitor as watch

        watching = {"dir": args.watch_dir or watch.default_dir(os.environ),
                    "interval_s": watch.parse_interval(args.watch_interval)}
    if args.json:
        import json

        print(json.dumps({
            "local_rank": lr.rank, "local_size": lr.size, "launcher": lr.launcher, "hostname": plan.hostname,
            "task": {k: getattr(task, k) for k in ("task", "cpus", "mems", "gpus", "nics", "threads", "places")},
            "mem_policy": args.mem_policy, "env": final, "decisions": decisions, "argv": argv,
            "notes": plan.notes, "cached": cached, "watch": watching}, indent=1))
        return
    print(f"local rank {lr.rank} of {len(plan.tasks)} ({lr.launcher}) on {plan.hostname or 'this node'}"
          f"{' (cached plan)' if cached else ''}")
    print("  " + _summary(task, args.mem_policy))
    for d in decisions:
        value = d["planned"] if d["used"] != "user" else d["current"]
        print(f"  {d['name']}={value}  [{d['used']}: {d['why']}]")
    for n in plan.notes:
        print(f"  note: {n}")
    if watching:
        print(f"  watch: a monitor would record memory every {watching['interval_s']:g} s into {watching['dir']}/")
    print("  exec: " + (" ".join(argv) or "(no application given)"))
