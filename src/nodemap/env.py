"""Launcher and GPU-visibility variables: the one list of each, and the one
way to read an integer from them.

Launchers tell a process its rank in their own variables (docs/mapping.md
lists them; `nodemap.launcher` decides the node-local rank from the pairs
below). GPU runtimes choose their devices by visibility variables. Every
reader of these names imports them from here, and every integer read from
the environment goes through `integer`, so a malformed value is one line
(exit 2), never a ValueError. Stdlib only: every rank's launch path imports
this.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .errors import NodemapError
from .text import is_decimal, name_problem, shown

# (launcher, local rank variable, local size variable), in the order they are believed
LOCAL_PAIRS = (
    ("Open MPI", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"),
    ("MPICH/Hydra", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
    ("MVAPICH2", "MV2_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_SIZE"),
    ("Cray PALS", "PALS_LOCAL_RANKID", "PALS_LOCAL_SIZE"),
)
FLUX_LOCAL = "FLUX_TASK_LOCAL_ID"  # size: FLUX_JOB_SIZE / FLUX_JOB_NNODES (no local size variable)
TORCHRUN_LOCAL = ("LOCAL_RANK", "LOCAL_WORLD_SIZE")
SLURM_LOCAL = "SLURM_LOCALID"  # size: SLURM_STEP_TASKS_PER_NODE at index SLURM_NODEID
LOCAL_RANK_VARS = tuple(p[1] for p in LOCAL_PAIRS) + (FLUX_LOCAL, TORCHRUN_LOCAL[0], SLURM_LOCAL)

# A process's rank in the whole job, as MPI launchers set it
LAUNCHER_RANK_VARS = ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "PALS_RANKID", "FLUX_TASK_RANK",
                      "MV2_COMM_WORLD_RANK")
GLOBAL_RANK_VARS = LAUNCHER_RANK_VARS + ("SLURM_PROCID", "RANK")  # and srun's, torchrun's
# The number of ranks an MPI launcher started (MPI_LOCALNRANKS: Hydra says only the node's)
WORLD_SIZE_VARS = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS", "PALS_SIZE")
# Any of these set: this process is a rank of an MPI job (srun sets PMI_RANK or PMIX_RANK)
MPI_JOB_VARS = LAUNCHER_RANK_VARS + ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MPI_LOCALRANKID")

# The variable that chooses a vendor's GPUs (vendor as GPU.vendor.upper()): what `plan` emits and
# `topo`/`show` read back. HIP_VISIBLE_DEVICES is HIP's, under ROCr's (HIP takes CUDA_VISIBLE_DEVICES
# as its alias when that is unset).
GPU_VISIBILITY_OF = {"NVIDIA": "CUDA_VISIBLE_DEVICES", "AMD": "ROCR_VISIBLE_DEVICES", "INTEL": "ZE_AFFINITY_MASK"}
HIP_VISIBILITY = "HIP_VISIBLE_DEVICES"


def gpu_family(vendor: str) -> str:
    """The key of GPU_VISIBILITY_OF for a GPU of `vendor`: AMD's and Intel's runtimes read their own
    variable and number only their own GPUs; CUDA's is every other's."""
    v = vendor.upper()
    return v if v in ("AMD", "INTEL") else "NVIDIA"


# What chooses the GPUs a process sees
GPU_VISIBILITY_VARS = (GPU_VISIBILITY_OF["NVIDIA"], GPU_VISIBILITY_OF["AMD"], HIP_VISIBILITY, GPU_VISIBILITY_OF["INTEL"])
# What says how the visibility variables number GPUs: (variable, the visibility variable it qualifies)
GPU_ORDER_VARS = {"CUDA_DEVICE_ORDER": "CUDA_VISIBLE_DEVICES", "ZE_ENABLE_PCI_ID_DEVICE_ORDER": "ZE_AFFINITY_MASK"}

# The variables that choose a process's NICs, as `plan` emits them (mapping/emit.py): MPI and NCCL read them once,
# when they start. Steering: the ones a transport obeys (`show` checks them against NODEMAP_NIC, the plan's record)
NIC_STEERING = ("FI_TCP_IFACE", "UCX_NET_DEVICES", "NCCL_IB_HCA", "NCCL_SOCKET_IFNAME")
NIC_VARS = ("NODEMAP_NIC", *NIC_STEERING, "UCX_MAX_RNDV_RAILS", "UCX_MAX_EAGER_RAILS", "MPICH_OFI_NIC_POLICY")

LAUNCHER_FIX = "fix the launcher's environment"

# A scheduler's allocation as Open MPI's mpirun finds one (PRRTE 3's ras components: every variable of
# one entry set): inside one, a rankfile's relative hosts +n0.. name its nodes; outside, mpirun refuses them
MPIRUN_ALLOCATIONS = (("Slurm", ("SLURM_JOBID", "SLURM_NODELIST")), ("PBS", ("PBS_ENVIRONMENT", "PBS_JOBID")),
                      ("LSF", ("LSB_JOBID",)), ("Grid Engine", ("SGE_ROOT", "ARC", "PE_HOSTFILE", "JOB_ID")))


def mpirun_allocation(env: Mapping[str, str]) -> str:
    """The scheduler whose allocation Open MPI's mpirun would take its hosts from here; "" for none."""
    return next((name for name, names in MPIRUN_ALLOCATIONS if all(env.get(n) for n in names)), "")

# The node name slurmd gives its programs and tasks (srun's, prolog, HealthCheckProgram)
SLURM_NODE = "SLURMD_NODENAME"


def slurm_node_name(name: str) -> bool:
    """Whether `name` is a Slurm node name nodemap uses: Slurm's own are letters, digits, ".", "_", "-" (the
    first a letter or digit), at most 64; it ends up in file names and scontrol command lines."""
    return name[:1].isascii() and name[:1].isalnum() and not name_problem(name)


def integer(env: Mapping[str, str], name: str, fix: str = LAUNCHER_FIX) -> int:
    """The non-negative integer in env[name] (below 10^9), or one line naming it and `fix`."""
    text = env[name].strip()
    if not is_decimal(text, 9):
        raise NodemapError(f"{name}={shown(env[name])} is not a non-negative integer below 10^9: {fix}")
    return int(text)


def first_integer(env: Mapping[str, str], names: Sequence[str], fix: str = LAUNCHER_FIX) -> int | None:
    """The integer in the first of `names` that is set and not empty; None when none is."""
    for name in names:
        if env.get(name, "").strip():
            return integer(env, name, fix)
    return None


def global_rank(env: Mapping[str, str]) -> int | None:
    """This process's rank in the job as its launcher set it; None when no launcher did."""
    return first_integer(env, GLOBAL_RANK_VARS)


def global_rank_or(env: Mapping[str, str], default: int | str) -> int | str:
    """global_rank, `default` when no launcher set one or its variable is no number: where the rank only
    names something (a timeline, a message) a malformed variable must not stop the process."""
    try:
        rank = global_rank(env)
    except NodemapError:
        return default
    return default if rank is None else rank


def world_size(env: Mapping[str, str]) -> int:
    """The ranks an MPI launcher started (1 when none did)."""
    return max([integer(env, v) for v in WORLD_SIZE_VARS if env.get(v, "").strip()] or [1])
