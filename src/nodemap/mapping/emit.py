"""A plan as environment variables and ready-to-paste launch lines.

Each variable and why it is set so: docs/mapping.md, "Environment emitted
per task" and "Launcher-native bindings".

Names from outside (docs/limits.md, "Names from outside"): a name joins a
variable's list only when it is a device name or id (text.name_problem), a
value holds no character that is not printable (a tab or a newline would add
a variable to the Slurm plugin's task lines), and each form checks its own
syntax last: the task lines their separators and the plugin's limits, the
wrapper quotes for sh, the native options are words safe to splice unquoted.

Importing this module costs nothing: it sits on `nodemap run`'s launch path.
"""

from __future__ import annotations

import re

from ..env import GPU_ORDER_VARS, GPU_VISIBILITY_OF, GPU_VISIBILITY_VARS, HIP_VISIBILITY, gpu_family
from ..errors import NodemapError
from ..text import name_problem, shown

# Variables that choose devices: the plan was made within their current
# value (discovery honours it), so the plan's narrower value wins over it.
VISIBILITY = GPU_VISIBILITY_VARS
# A variable that changes the meaning of another follows its winner.
FOLLOWS = GPU_ORDER_VARS
RDMA_KINDS = ("InfiniBand", "Ethernet", "OmniPath")


def task_env(topo, plan, task) -> list[tuple[str, str]]:
    """The environment `task` (a TaskBinding of `plan`) should run with."""
    mig = any(topo.gpu(g).mig for g in task.gpus)  # tasks' turns cost O(tasks): only for MIG
    env = gpu_env(topo, task.gpus, getattr(plan.request, "gpu_ids", "index"), _turns(plan, task) if mig else None)
    env += [("OMP_NUM_THREADS", str(task.threads)),
            ("OMP_PLACES", omp_places(task.places or tuple(_singletons(task.cpus)))),
            ("OMP_PROC_BIND", "close")]
    env += _nic_env(topo, task)
    bad = next(((n, v) for n, v in env if not v.isprintable()), None)
    if bad:  # the last check of every form: a tab or a newline is a separator of one of them
        raise NodemapError(f"task {task.task}: {bad[0]}={shown(bad[1])} holds a character that is not printable: "
                           "no task's environment gets it (fix the names of the topology it was planned on)")
    return env


def with_env(topo, plan):
    """The plan with every task's environment filled in."""
    from ..topology.model import replace

    return replace(plan, tasks=tuple(replace(t, env=tuple(task_env(topo, plan, t))) for t in plan.tasks))


def omp_places(places) -> str:
    """OpenMP places, one {..} per place; runs of 3+ PUs as start:length."""
    return ",".join("{" + ",".join(_res(a, b) for a, b in p.ranges()) + "}" for p in places)


def _res(a: int, b: int) -> str:
    if b - a >= 2:
        return f"{a}:{b - a + 1}"
    return ",".join(str(i) for i in range(a, b + 1))


def _singletons(cpus):
    from ..topology.cpuset import CpuSet

    return (CpuSet((c,)) for c in cpus)


def _turns(plan, task) -> dict[int, int]:
    """For each GPU of `task`, how many tasks before it hold that GPU: the
    task's turn among them picks its MIG device."""
    return {g: sum(g in t.gpus for t in plan.tasks[:task.task]) for g in task.gpus}


def _mig_ids(topo, nv, ids: str, turns: dict[int, int]) -> list[str]:
    """CUDA_VISIBLE_DEVICES entries of GPUs in MIG mode: one MIG device each
    (CUDA uses one per process), dealt in turn to the tasks sharing the GPU."""
    whole = [g.index for g in nv if not g.mig]
    if ids != "uuid" or whole:
        why = (f"GPU(s) {_ids([g for g in nv if g.mig])} are in MIG mode and GPU(s) {','.join(map(str, whole))} "
               "are not: CUDA cannot use both in one process; plan them apart (--cpus/--mems or CUDA_VISIBLE_DEVICES)"
               if whole else f"GPU(s) {_ids(nv)} are in MIG mode: indexes do not address MIG devices; pass --gpu-ids uuid")
        raise NodemapError(why)
    return [g.mig[turns.get(g.index, 0) % len(g.mig)] for g in nv]


def listed(var: str, names, kind: str = "id") -> str:
    """`names` as `var`'s comma-separated list. A name that is not a device
    name or id (kind, text.name_problem) is refused: a comma, a tab or a
    space in it would add entries, variables or words of its own."""
    for n in names:
        why = name_problem(n, kind) or ("is empty" if not n else "")
        if why:
            raise NodemapError(f"{var}: the name {shown(n)} {why}: it cannot go into a list of names; plan on the "
                               "live node, or fix the topology file's names")
    return ",".join(names)


def gpu_env(topo, indexes, ids: str = "index", turns: dict[int, int] | None = None) -> list[tuple[str, str]]:
    """The variables that make the GPUs of physical `indexes` visible, as each vendor's runtime numbers
    them (a plan's task; compare's ranks)."""
    gpus = [topo.gpu(i) for i in indexes]
    by_vendor: dict[str, list] = {}
    for g in gpus:
        by_vendor.setdefault(gpu_family(g.vendor), []).append(g)
    # nodemap's own record of the planned GPUs (physical indexes): `nodemap show` checks against it
    env = [("NODEMAP_GPUS", _ids(gpus))] if gpus else []
    if "NVIDIA" in by_vendor:
        nv = by_vendor["NVIDIA"]
        if any(g.mig for g in nv):
            mig = _mig_ids(topo, nv, ids, turns or {})
            env += [(GPU_VISIBILITY_OF["NVIDIA"], listed("CUDA_VISIBLE_DEVICES", mig)),
                    ("CUDA_DEVICE_ORDER", "PCI_BUS_ID")]
        elif ids == "uuid":
            missing = [g.index for g in nv if not g.uuid]
            if missing:
                raise NodemapError(f"--gpu-ids uuid: GPU {_ids([topo.gpu(i) for i in missing])} has no UUID in "
                                   "this topology; install nvidia-ml-py (NVML) or use --gpu-ids index")
            env += [(GPU_VISIBILITY_OF["NVIDIA"], listed("CUDA_VISIBLE_DEVICES", [g.uuid for g in nv])),
                    ("CUDA_DEVICE_ORDER", "PCI_BUS_ID")]
        else:
            env += [(GPU_VISIBILITY_OF["NVIDIA"], _runtime_ids(topo, nv)), ("CUDA_DEVICE_ORDER", "PCI_BUS_ID")]
        if ids == "pci":  # CUDA takes only indexes or UUIDs; codes that open GPUs by bus id read this
            env.append(("NODEMAP_GPU_PCI", listed("NODEMAP_GPU_PCI", [g.pci_bus_id for g in nv])))
    if "AMD" in by_vendor:
        amd = by_vendor["AMD"]
        # by UUID only in ROCr's form (a topology saved before the sources wrote "GPU-<hex>": indexes)
        uuids = [g.uuid for g in amd]
        ids = listed("ROCR_VISIBLE_DEVICES", uuids) if all(u.startswith("GPU-") for u in uuids) \
            else _runtime_ids(topo, amd)
        env.append((GPU_VISIBILITY_OF["AMD"], ids))
        if "NVIDIA" in by_vendor:  # HIP would read the CUDA list as its own: every GPU ROCr now shows
            env.append((HIP_VISIBILITY, ",".join(map(str, range(len(amd))))))
    if "INTEL" in by_vendor:
        env += [(GPU_VISIBILITY_OF["INTEL"], _runtime_ids(topo, by_vendor["INTEL"])),
                ("ZE_ENABLE_PCI_ID_DEVICE_ORDER", "1")]
    return env


def _ids(gpus) -> str:
    return ",".join(str(g.index) for g in gpus)


def _runtime_ids(topo, gpus) -> str:
    return ",".join(str(runtime_index(topo, g)) for g in gpus)


def runtime_index(topo, gpu) -> int:
    """`gpu` as its vendor's runtime and driver number it in PCI order: among the node's GPUs of that
    family only (CUDA and /dev/nvidiaN count NVIDIA's), where the physical index counts every GPU of
    the node (an Intel iGPU at 00:02.0 is GPU0, and the NVIDIA GPU after it is CUDA's 0, not 1)."""
    return runtime_indexes(topo)[gpu.index]


def runtime_indexes(topo) -> dict[int, int]:
    """runtime_index of every GPU, by physical index, in one pass (gres.conf on a node of thousands)."""
    out, counted = {}, {}
    for g in sorted(topo.gpus, key=lambda g: g.index):
        family = gpu_family(g.vendor)
        out[g.index] = counted.get(family, 0)
        counted[family] = out[g.index] + 1
    return out


def _nic_env(topo, task) -> list[tuple[str, str]]:
    nics = [topo.nic(n) for n in task.nics]
    ports = [p for p in (rdma_port(n) for n in nics) if p]
    env = [("NODEMAP_NIC", listed("NODEMAP_NIC", [n.name for n in nics], "device"))] if nics else []
    if ports:
        env += [("UCX_NET_DEVICES", ",".join(ports)), ("NCCL_IB_HCA", "=" + ",".join(ports))]  # names checked above
    if len(ports) > 1:  # UCX uses 1 rail for eager and 2 for rendezvous by default: use them all
        env += [("UCX_MAX_RNDV_RAILS", str(len(ports))), ("UCX_MAX_EAGER_RAILS", str(len(ports)))]
    if any(n.kind == "Slingshot" for n in nics):
        env.append(("MPICH_OFI_NIC_POLICY", "GPU" if task.gpus else "NUMA"))
    plain = [n.name for n in nics if n.name in n.netdevs]  # no RDMA device: sockets over the netdev
    if plain and not ports:
        env += [("FI_TCP_IFACE", plain[0]), ("UCX_NET_DEVICES", ",".join(plain)),
                ("NCCL_SOCKET_IFNAME", "=" + ",".join(plain))]
    return env


def rdma_port(nic) -> str:
    """'mlx5_1:1' for the NIC's first ACTIVE port; '' when it has no usable one.

    Ports whose state no source reported count as usable (a saved topology
    may not say); a NIC whose ports are all known to be down gets none.
    """
    if nic.kind not in RDMA_KINDS or not nic.ports:
        return ""
    ports = sorted(nic.ports, key=lambda p: p.number)
    active = [p for p in ports if "ACTIVE" in p.state.upper()]
    unknown = [p for p in ports if not p.state]
    pick = (active or unknown or [None])[0]
    return f"{nic.name}:{pick.number}" if pick else ""


# --- the user's environment vs the plan --------------------------------------------


def merge_env(planned, current, override: bool = False):
    """(final changes, decisions) for the planned variables over `current`.

    A variable the user already set keeps the user's value unless
    `override`; device-visibility variables take the plan's value (the plan
    was made inside the user's value, so it only narrows it), and a
    variable in FOLLOWS goes with the winner of the one it qualifies.
    Decisions are dicts: name, planned, current, used ("plan"|"user"|"same"), why.
    """
    planned = list(planned)
    final: dict[str, str] = {}
    decisions: list[dict] = []
    winner: dict[str, str] = {}
    for name, value in sorted(planned, key=lambda kv: kv[0] in FOLLOWS):
        cur = current.get(name)
        used, why = _decide(name, value, cur, override, winner)
        winner[name] = used
        if used in ("plan", "same"):
            final[name] = value
        decisions.append({"name": name, "planned": value, "current": cur, "used": used, "why": why})
    order = {n: i for i, (n, _) in enumerate(planned)}
    decisions.sort(key=lambda d: order[d["name"]])
    return final, decisions


def _decide(name: str, value: str, cur, override: bool, winner: dict[str, str]) -> tuple[str, str]:
    if cur is None:
        return "plan", "not set before"
    if cur == value:
        return "same", "already set to the planned value"
    if name in FOLLOWS and FOLLOWS[name] in winner:
        lead = FOLLOWS[name]
        if winner[lead] == "user":
            return "user", f"goes with your {lead}"
        return "plan", f"goes with the planned {lead}"
    if override:
        return "plan", "--override-env"
    if name in VISIBILITY:
        return "plan", f"narrows your {name}={cur} (the plan only used devices it shows)"
    return "user", "you set it (pass --override-env to use the plan's value)"


# --- launch lines ----------------------------------------------------------------


def launch_lines(plan, run_args, app=("./app",)) -> dict[str, str]:
    """Lines that start the plan's tasks on each node through `nodemap run`.

    Keys: srun, mpirun (Open MPI), mpiexec (MPICH/Hydra), flux. Every
    launcher is told not to bind: `nodemap run` binds, and a launcher's
    binding would also narrow what each rank sees when it plans.
    """
    import shlex

    n = len(plan.tasks)
    tail = " ".join(shlex.quote(a) for a in ["nodemap", "run", *run_args, "--", *app])
    return {
        "srun": f"srun --ntasks-per-node={n} --cpu-bind=none --gpu-bind=none {tail}",
        "mpirun": f"mpirun --map-by ppr:{n}:node --bind-to none {tail}",
        "mpiexec": f"mpiexec -ppn {n} -bind-to none {tail}",
        "flux": f"flux run --tasks-per-node={n} -o cpu-affinity=off -o gpu-affinity=off {tail}",
    }


# --- launcher-native bindings ------------------------------------------------------
#
# `nodemap plan --launcher L --emit native` hands the plan to the launcher in
# its own syntax, so no nodemap runs on the compute nodes. Each launcher binds
# CPUs (and GPUs, memory where it can) from a per-local-task list; what it
# cannot express per task (OpenMP, UCX/NCCL NICs...) goes into a one-line
# POSIX sh wrapper keyed on the launcher's local-rank variable.

NATIVE_LAUNCHERS = ("srun", "mpirun", "mpiexec", "flux")
MAX_NODES = 1 << 16  # --nodes of an Open MPI rankfile
MAX_RANKFILE = 64 << 20  # bytes of one rankfile: about two million ranks


def native(topo, plan, launcher: str, rankfile: str = "", nodes: int = 1, host: str = "") -> dict:
    """The plan in `launcher`'s syntax: {"launcher", "args" (words, safe to
    splice unquoted), "wrapper" (one sh line, run as `sh -c WRAPPER sh APP`),
    "local_rank_var", and for mpirun "rankfile" (its text, for `rankfile`)}.
    `host` (mpirun, one node): the node's name, for a run outside any
    scheduler's allocation."""
    out = {"srun": srun_native, "mpirun": mpirun_native, "mpiexec": mpiexec_native, "flux": flux_native}[launcher](
        topo, plan, rankfile=rankfile, nodes=nodes, host=host)
    for word in out["args"]:
        check_word(word)
    return out


# What `launcher $(nodemap plan --emit native) app` would split or expand
# (IFS, globs) and what shlex would read as quoting: never in an option word.
_UNSPLICEABLE = frozenset(" \t\n\r\v\f'\"\\*?[")


def check_word(word: str) -> None:
    """Refuse an option word that would not reach the launcher as one word."""
    bad = next((c for c in word if c in _UNSPLICEABLE or not c.isprintable()), None)
    if bad is not None or not word:
        raise NodemapError(f"the launcher option {shown(word)} holds {ascii(bad)}: spliced into a command line it "
                           "would not stay one word; plan on the live node, or fix the topology file's names")


def srun_native(topo, plan, **_) -> dict:
    """Slurm: --cpu-bind=mask_cpu (hex masks of OS CPU ids, one per local
    task, checked against the step's CPUs), --mem-bind=mask_mem (hex masks
    of NUMA nodes), --gpu-bind=map_gpu (one GPU a task) or mask_gpu (hex);
    GPU ids are relative to the job's GPUs where cgroup ConstrainDevices is
    set, so they are the plan's physical indexes only with every GPU of the
    node allocated."""
    tasks = plan.tasks
    args = [f"--ntasks-per-node={len(tasks)}", "--cpu-bind=mask_cpu:" + ",".join(_hex(t.cpus.mask) for t in tasks)]
    if all(t.mems for t in tasks):
        args.append("--mem-bind=mask_mem:" + ",".join(_hex(t.mems.mask) for t in tasks))
    gpus = _launcher_gpus(topo, plan)
    if gpus is None:
        args.append("--gpu-bind=none")
    elif all(len(g) == 1 for g in gpus):
        args.append("--gpu-bind=map_gpu:" + ",".join(str(g[0]) for g in gpus))
    else:
        args.append("--gpu-bind=mask_gpu:" + ",".join(_hex(sum(1 << i for i in g)) for g in gpus))
    var = _local_var("srun")
    return {"launcher": "srun", "args": args, "local_rank_var": var,
            "wrapper": wrapper(var, _left_env(topo, plan, gpus is not None))}


def mpirun_native(topo, plan, rankfile: str = "", nodes: int = 1, host: str = "", **_) -> dict:
    """Open MPI 5 (PRRTE): a rankfile of hwloc logical PU indexes (`:hwtcpus`;
    only logical locations are supported), one line per rank with relative
    hosts +n0.. for `nodes` nodes; -x for the variables every task shares.
    Relative hosts name the nodes of a scheduler's allocation; outside one
    mpirun refuses them, so a `host` (one node) is given as `--host
    HOST:TASKS`, which is then the allocation they count in.
    Open MPI binds no GPU and sets no memory policy: GPU visibility goes in
    the wrapper, memory follows first touch on the bound CPUs."""
    from ..errors import InputError
    from ..topology.render import logical_pus

    if not rankfile or rankfile == "-" or any(c in _UNSPLICEABLE or c == ":" for c in rankfile):
        raise InputError("--rankfile", "mpirun's native binding needs a rankfile path without spaces, quotes, "
                                       "globs or ':' (e.g. --rankfile nodemap.rankfile): nodemap writes it, mpirun "
                                       "reads it from --map-by rankfile:file=PATH:hwtcpus")
    if not 1 <= nodes <= MAX_NODES:
        raise InputError("--nodes", f"{str(nodes)[:30]} is not a node count nodemap writes a rankfile for "
                                    f"(1 to {MAX_NODES}; the largest machines have tens of thousands)")
    logical = logical_pus(topo)
    n = len(plan.tasks)
    slots = [_list(logical[p] for p in t.cpus) for t in plan.tasks]  # the same on every node
    size = nodes * sum(len(f"rank {nodes * n}=+n{nodes} slot={s}\n") for s in slots)  # at most
    if size > MAX_RANKFILE:
        from ..units import format_size

        raise InputError("--nodes", f"{nodes} nodes of {n} ranks make a rankfile of up to {format_size(size)}, over "
                                    f"nodemap's {format_size(MAX_RANKFILE)}: give fewer nodes, or one rankfile per "
                                    "part of the job")
    lines = [f"rank {k * n + t}=+n{k} slot={s}" for k in range(nodes) for t, s in enumerate(slots)]
    envs = _left_env(topo, plan, False)
    shared = _shared(envs)
    args = ["--np", str(n * nodes)] + (["--host", f"{host}:{n}"] if host and nodes == 1 else [])
    args += ["--map-by", f"rankfile:file={rankfile}:hwtcpus"]
    if _overlap(plan.tasks):  # mpirun refuses ranks sharing a PU unless told (an --oversubscribe plan)
        args += ["--bind-to", ":overload-allowed"]
    args += [w for name, value in shared for w in ("-x", f"{name}={value}")]
    var = _local_var("mpirun")
    return {"launcher": "mpirun", "args": args, "local_rank_var": var, "rankfile": "\n".join(lines) + "\n",
            "wrapper": wrapper(var, [[kv for kv in e if kv not in shared] for e in envs])}


def mpiexec_native(topo, plan, **_) -> dict:
    """MPICH's Hydra: -ppn tasks on every node of the allocation (or this
    host), `-bind-to user:` one entry per local rank (MPI_LOCALRANKID k gets
    entry k), each entry OS PU indexes joined by '+' with ranges a-b (Hydra's
    topo_hwloc.c, handle_user_binding); -genv NAME=VALUE (one word: Hydra
    splits it at the first '=') for the variables every task shares. Hydra
    binds no GPU, and with a user binding sets no memory policy: GPU
    visibility goes in the wrapper, memory follows first touch."""
    envs = _left_env(topo, plan, False)
    shared = _shared(envs)
    user = ",".join(t.cpus.format().replace(",", "+") for t in plan.tasks)
    args = ["-ppn", str(len(plan.tasks)), "-bind-to", f"user:{user}"]
    args += [w for name, value in shared for w in ("-genv", f"{name}={value}")]
    var = _local_var("mpiexec")
    return {"launcher": "mpiexec", "args": args, "local_rank_var": var,
            "wrapper": wrapper(var, [[kv for kv in e if kv not in shared] for e in envs])}


def flux_native(topo, plan, **_) -> dict:
    """Flux: -o cpu-affinity=map:LIST and -o gpu-affinity=map:LIST, one entry
    per local task separated by ';' (hwloc list syntax: OS CPU ids; GPU ids
    of the node). Flux sets no memory policy."""
    tasks = plan.tasks
    args = [f"--tasks-per-node={len(tasks)}", "-o", "cpu-affinity=map:" + ";".join(t.cpus.format() for t in tasks)]
    gpus = _launcher_gpus(topo, plan)
    args += ["-o", "gpu-affinity=off" if gpus is None else
             "gpu-affinity=map:" + ";".join(_list(g) for g in gpus)]
    var = _local_var("flux")
    return {"launcher": "flux", "args": args, "local_rank_var": var,
            "wrapper": wrapper(var, _left_env(topo, plan, gpus is not None))}


# What the plugin's reader (slurm/apply.c, nm_parse_plan) takes: 8 MiB of
# plan (any number of variables a task); it has no escapes, so a value
# holding its separators (tab, newline) or C's string end cannot be written.
TASK_TEXT = 8 << 20


def task_lines(topo, plan) -> str:
    """The plan for the SPANK plugin (slurm/nodemap_spank.c): one line per
    task, tab-separated: local rank, PUs and NUMA nodes in list syntax, then
    NAME=VALUE for its environment. Plain text, so the C side needs no JSON."""
    lines = []
    for t in plan.tasks:
        env = task_env(topo, plan, t)
        _check_task_env(t.task, env)
        fields = [str(t.task), t.cpus.format(), t.mems.format(), *(f"{n}={v}" for n, v in env)]
        lines.append("\t".join(fields) + "\n")
    text = "".join(lines)
    size = len(text.encode())
    if size > TASK_TEXT:
        from ..units import format_size

        raise NodemapError(f"the plan's task lines are {format_size(size)}, over the {format_size(TASK_TEXT)} the "
                           "Slurm plugin reads: plan fewer tasks a node")
    return text


def _check_task_env(task: int, env) -> None:
    for name, value in env:
        bad = next((c for c in value if c in "\t\n\r\0"), None)
        if not _VAR.fullmatch(name) or bad is not None:
            raise NodemapError(f"task {task}: {shown(name)}={shown(value)} would not stay one NAME=VALUE field of the "
                               "Slurm plugin's task line: fix the names of the topology it was planned on")


def wrapper(var: str, envs) -> str:
    """One POSIX sh line that exports task k's variables when the launcher's
    local-rank variable `var` is k, then execs its arguments; a rank the
    plan does not know exits 2 with one line. Run as: sh -c LINE sh APP ARGS.
    Values are quoted for sh (_dq); one that is not printable (a NUL no
    argument can carry, a control character no variable should) is refused."""
    for name, value in (kv for env in envs for kv in env):
        if not _VAR.fullmatch(name) or not value.isprintable():
            raise NodemapError(f"{shown(name)}={shown(value)} cannot be exported by a sh line: fix the names of the "
                               "topology it was planned on")
    cases = " ".join(f"{k}) {'export ' + ' '.join(f'{n}={_dq(v)}' for n, v in env) if env else ':'};;"
                     for k, env in enumerate(envs))
    bad = (f'echo "nodemap: {var}=${{{var}-unset}} is not a local rank of this plan ({len(envs)} tasks per node)" '
           ">&2; exit 2;;")
    return f'case "${{{var}-}}" in {cases} *) {bad} esac; exec "$@"'


_VAR = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # a variable's name, as sh and setenv take it


def _launcher_gpus(topo, plan):
    """Each task's GPU ids when the launcher can bind them (every task has
    NVIDIA GPUs named by index, none in MIG mode); else None: the wrapper
    sets the visibility variables instead."""
    gpus = [t.gpus for t in plan.tasks]
    if not all(gpus) or getattr(plan.request, "gpu_ids", "index") != "index":
        return None
    devs = [topo.gpu(i) for g in gpus for i in g]
    if any(d.vendor.upper() != "NVIDIA" or d.mig for d in devs):
        return None
    return gpus


def _left_env(topo, plan, gpus_bound: bool) -> list[list[tuple[str, str]]]:
    """Each task's environment minus what the launcher sets itself."""
    skip = set(VISIBILITY) if gpus_bound else set()
    return [[(n, v) for n, v in task_env(topo, plan, t) if n not in skip] for t in plan.tasks]


def _overlap(tasks) -> bool:
    """Whether two tasks share a PU."""
    from ..topology.cpuset import CpuSet

    return sum(len(t.cpus) for t in tasks) != len(CpuSet.union_all(t.cpus for t in tasks))


def _shared(envs) -> list[tuple[str, str]]:
    """The variables every task gets with the same value: the launcher's options pass them to all."""
    return [kv for kv in envs[0] if all(kv in e for e in envs[1:])] if envs else []


def _local_var(launcher: str) -> str:
    from ..env import FLUX_LOCAL, LOCAL_PAIRS, SLURM_LOCAL

    return {"srun": SLURM_LOCAL, "flux": FLUX_LOCAL, "mpirun": LOCAL_PAIRS[0][1], "mpiexec": LOCAL_PAIRS[1][1]}[launcher]


def _hex(mask: int) -> str:
    return f"0x{mask:x}"


def _list(ids) -> str:
    """Indexes in list syntax: 0-3,8."""
    from ..topology.cpuset import CpuSet

    return CpuSet(ids).format()


def _dq(value: str) -> str:
    """`value` inside double quotes for sh (the wrapper is itself one word)."""
    return '"' + "".join("\\" + c if c in '\\"$`' else c for c in value) + '"'
