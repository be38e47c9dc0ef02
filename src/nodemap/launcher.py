"""What this process's launcher and scheduler say about it: its node-local
rank and local size, the launcher, the srun step's tasks, and its node's name.
On the ground floor: mapping plans with it, and check, bench, fleet and
slurm name the node with it (`node_name` is the only reader of SLURMD_NODENAME).

Each launcher says it in its own variables: docs/mapping.md, "Launch", lists them.

MPI launchers come before Slurm: `mpirun` inside an sbatch script leaves the
batch step's SLURM_LOCALID=0 in every rank's environment, so Slurm's
variables are only believed when no other launcher spoke. Stdlib only: this
runs on every rank's launch path.
"""

from __future__ import annotations

import re
import socket
from collections import namedtuple
from collections.abc import Mapping

from . import env as launcher_env
from .env import FLUX_LOCAL, LOCAL_PAIRS, LOCAL_RANK_VARS, SLURM_LOCAL, TORCHRUN_LOCAL
from .errors import NodemapError
from .text import shown

OVERRIDE_HINT = "pass --local-rank R --local-size N"


# a named tuple, not a dataclass: every rank's launch builds one, and importing dataclasses (it pulls in
# inspect) would cost each rank several ms
LocalRank = namedtuple("LocalRank", "rank size launcher")


def detect(env: Mapping[str, str], rank: int | None = None, size: int | None = None) -> LocalRank:
    """Local rank and size: the flags when given, else the launcher's variables.

    A flag given alone completes what the launcher says (e.g. --local-size
    under Flux, whose size is not always in the environment). size 0: unknown.
    """
    found = _from_env(env)
    if rank is None and found is None:
        raise NodemapError(
            f"no launcher told this process its node-local rank (none of {', '.join(LOCAL_RANK_VARS)} "
            f"is set): {OVERRIDE_HINT}")
    if found is None:
        launcher = "flags"
    elif rank is None and size is None:
        launcher = found.launcher
    else:
        launcher = f"{found.launcher} + flags"
    r = rank if rank is not None else found.rank
    s = size if size is not None else (found.size if found else 0)
    if r < 0 or s < 0 or (s and r >= s):
        raise NodemapError(f"local rank {r} does not fit a local size of {s} ({launcher}): "
                           f"{OVERRIDE_HINT} with 0 <= R < N")
    return LocalRank(r, s, launcher)


def launched(env: Mapping[str, str]) -> bool:
    """Whether a known launcher started this process."""
    return _from_env(env) is not None


def which(env: Mapping[str, str]) -> str:
    """The launcher whose variables this process carries, in the order they
    are believed ("Slurm", "Open MPI"...); "" for none, "?" when one of
    them is not a number (then none is believed)."""
    try:
        found = _from_env(env)
    except NodemapError:
        return "?"
    return found.launcher if found is not None else ""


def srun_tasks(env: Mapping[str, str]) -> int:
    """The tasks of the srun step that started this process (SLURM_STEP_NUM_TASKS);
    0 when srun did not (no step, or another launcher spoke)."""
    if which(env) != "Slurm":
        return 0
    try:
        return launcher_env.first_integer(env, ("SLURM_STEP_NUM_TASKS",)) or 0
    except NodemapError:
        return 0


ALONE_FIX = "srun --mpi=pmi2 (or pmix) makes them one MPI job"


def foreign_mpi(env: Mapping[str, str], library: str) -> str:
    """Why the MPI library this process loaded cannot join the launcher that
    started it ("" when it can): MPICH's MPI_Init aborts the process under
    Open MPI's mpirun (PMIx), which no deadline or retry can save."""
    if "OMPI_COMM_WORLD_SIZE" not in env or "open mpi" in library.lower():
        return ""
    name = " ".join(library.split("\n", 1)[0].split())[:60] or "another MPI"
    return (f"Open MPI's mpirun started this rank but mpi4py is built for {name} (its MPI_Init would abort); "
            "start it with that library's mpiexec, or install mpi4py for Open MPI")


def _from_env(env: Mapping[str, str]) -> LocalRank | None:
    for launcher, rv, sv in LOCAL_PAIRS:
        if rv in env:
            return LocalRank(_int(env, rv), _int(env, sv) if sv in env else 0, launcher)
    if FLUX_LOCAL in env:
        return LocalRank(_int(env, FLUX_LOCAL), _flux_size(env), "Flux")
    if all(v in env for v in TORCHRUN_LOCAL):
        return LocalRank(_int(env, TORCHRUN_LOCAL[0]), _int(env, TORCHRUN_LOCAL[1]), "torchrun")
    if SLURM_LOCAL in env:
        return LocalRank(_int(env, SLURM_LOCAL), _slurm_size(env), "Slurm")
    return None


def node_name(env: Mapping[str, str], given: str | None = None, for_slurm: bool = False,
              hostname: str | None = None) -> str:
    """This process's node as its scheduler names it: `given` (--node-name),
    else SLURMD_NODENAME when srun or slurmd started it (several slurmd may
    share one host, each its own node), else the hostname (`hostname`, by
    default this machine's).

    SLURMD_NODENAME is not believed when an MPI launcher spoke: Hydra
    forwards mpiexec's whole environment, so inside a job every rank would
    carry the batch node's name (and `--slurm-drain` would drain it). Nor
    when it is not a plain name (it ends up in file names and scontrol
    commands): then the hostname stands in.

    `for_slurm`: the name goes into scontrol. The hostname stands in by its
    short form (slurmd's default NodeName), and a name that is not a plain
    one (given, believed from SLURMD_NODENAME, or the hostname) is refused
    with one line instead of replaced: the hostname may be another node's
    (several slurmd on one host).
    """
    slurmd = env.get(launcher_env.SLURM_NODE, "") if which(env) in ("", "Slurm") else ""
    host = hostname or socket.gethostname()
    if for_slurm:
        name = given or slurmd or host.split(".")[0]
        if not launcher_env.slurm_node_name(name):
            raise NodemapError(f"node name {shown(name)} has characters a Slurm node name cannot have (letters, "
                               "digits, '.', '_', '-'): set SLURMD_NODENAME or --node-name to the node's NodeName")
        return name
    for name in (given or "", slurmd):
        if launcher_env.slurm_node_name(name):
            return name
    return host


def _int(env: Mapping[str, str], name: str) -> int:
    return launcher_env.integer(env, name, f"{launcher_env.LAUNCHER_FIX} or {OVERRIDE_HINT}")


def _flux_size(env: Mapping[str, str]) -> int:
    """Tasks per node when Flux spread them evenly; 0 when unknown."""
    if "FLUX_JOB_SIZE" not in env or "FLUX_JOB_NNODES" not in env:
        return 0
    tasks, nodes = _int(env, "FLUX_JOB_SIZE"), _int(env, "FLUX_JOB_NNODES")
    return tasks if nodes == 1 else (tasks // nodes if nodes and tasks % nodes == 0 else 0)


def _slurm_size(env: Mapping[str, str]) -> int:
    text = env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE")
    if not text:
        return 0
    counts = tasks_per_node(text)
    node = _int(env, "SLURM_NODEID") if "SLURM_NODEID" in env else 0
    if node >= len(counts):
        raise NodemapError(f"SLURM_NODEID={node} but the tasks per node {text!r} list {len(counts)} node(s): "
                           f"{OVERRIDE_HINT}")
    return counts[node]


_ITEM = re.compile(r"^([0-9]{1,9})(?:\(x([0-9]{1,12})\))?$")
MAX_NODES = 1 << 20  # nodes a tasks-per-node list may describe


def tasks_per_node(text: str) -> list[int]:
    """Slurm's compressed list: "2(x3),1" -> [2, 2, 2, 1]."""
    out: list[int] = []
    for item in text.split(","):
        m = _ITEM.match(item.strip())
        if not m:
            raise NodemapError(f"cannot read Slurm tasks per node {shown(text)} (expected e.g. '2(x3),1'): "
                               f"{OVERRIDE_HINT}")
        repeat = int(m.group(2) or 1)
        if len(out) + repeat > MAX_NODES:
            raise NodemapError(f"Slurm tasks per node {shown(text)} describe more than {MAX_NODES} nodes: "
                               f"fix the launcher's environment or {OVERRIDE_HINT}")
        out += [int(m.group(1))] * repeat
    return out
