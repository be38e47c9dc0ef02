"""Apply one task's binding to this process, then exec the application.

The only code in nodemap that binds a process (`nodemap run`, and each rank
of `nodemap compare` between fork and exec): CPU affinity
(sched_setaffinity), memory policy (set_mempolicy through the native
library; kept across exec by the kernel), environment, then execvpe, so
the application keeps this PID and its exit code and signals are its own.

Every rank of every job runs this path, so it imports little. The plan
itself is made once per node and shared (nodemap.mapping.plancache).
"""

from __future__ import annotations

import errno
import os
import sys
from collections import namedtuple

from ..errors import NodemapError

MEM_POLICIES = ("bind", "preferred", "none")


# What apply applies: PUs, NUMA memory nodes (sorted lists), the memory policy and every NUMA node of the
# node, to recognise a binding that restricts nothing (then a refused set_mempolicy does no harm). A named
# tuple, not a dataclass: on every rank's launch path, where dataclasses (and inspect) cost several ms.
Binding = namedtuple("Binding", "cpus mems mem_policy node_mems", defaults=("bind", ()))


def undo_launcher_binding(env) -> str:
    """Widen this rank's CPU affinity back to its parent's when the launcher
    bound it, so that every rank plans the same node; returns a note ("" if
    nothing was done).

    Open MPI binds ranks by default (to cores for 2 ranks, to sockets for
    more) and says so in OMPI_MCA_orte_bound_at_launch; its ranks are
    children of mpirun or its daemon, which are not bound. Slurm's
    task/affinity binds every task of srun (one core each by default) and
    says so in SLURM_CPU_BIND_TYPE; the tasks are children of slurmstepd,
    which holds the step's CPUs on the node. nodemap run binds the rank
    itself a moment later. Without these variables a narrow affinity is
    taken as the user's choice (taskset, a cgroup).
    """
    launcher = _binding_launcher(env)
    if not launcher:
        return ""
    mine = os.sched_getaffinity(0)
    try:
        parent = os.sched_getaffinity(os.getppid())
    except OSError:
        return ""
    if not mine < parent:
        return ""
    try:
        os.sched_setaffinity(0, parent)
    except OSError:
        return ""
    if launcher == "Slurm":
        return ("srun bound the tasks (task/affinity); nodemap run binds them itself within the step's CPUs "
                "(srun --cpu-bind=none avoids the double work)")
    return ("Open MPI bound the ranks (its default); nodemap run binds them itself "
            "(mpirun --bind-to none avoids the double work)")


def _binding_launcher(env) -> str:
    """The launcher that says it bound this rank: "Open MPI", "Slurm" or ""."""
    if env.get("OMPI_MCA_orte_bound_at_launch"):
        return "Open MPI"
    if env.get("SLURM_CPU_BIND_TYPE", "none") in ("", "none"):
        return ""
    from ..launcher import which

    # only srun's own tasks: an mpiexec inside the job may forward the variable from its environment
    return "Slurm" if which(env) == "Slurm" else ""


def apply(binding: Binding) -> list[str]:
    """Bind this process; returns what could not be applied: a memory policy the kernel or a container
    refuses is said, not raised (the PUs, GPUs and environment are still the plan's), unless the task
    spans every NUMA node (`node_mems`) anyway."""
    if binding.cpus:
        try:
            os.sched_setaffinity(0, binding.cpus)
        except OSError as e:
            raise NodemapError(f"cannot bind to PUs {_list(binding.cpus)} ({e.strerror}): they are outside "
                               "this process's allowed set; plan within it (drop --cpus/--input)") from None
    return _mempolicy(binding)


def _mempolicy(b: Binding) -> list[str]:
    if b.mem_policy == "none" or not b.mems:
        return []
    if b.mem_policy not in MEM_POLICIES:
        raise NodemapError(f"unknown --mem-policy {b.mem_policy!r}: choose one of {', '.join(MEM_POLICIES)}")
    from .. import native

    if b.mem_policy == "preferred":
        if len(b.mems) != 1:
            raise NodemapError(f"--mem-policy preferred needs one NUMA node but this task has {_list(b.mems)}: "
                               "use --mem-policy bind")
        mode = native.MPOL_PREFERRED
    else:
        mode = native.MPOL_BIND
    try:
        native.set_mempolicy(mode, b.mems)
    except OSError as e:
        if not (b.node_mems and b.mems == b.node_mems):
            return [f"set_mempolicy(MPOL_{native.MPOL_NAMES[mode].upper()}, NUMA {_list(b.mems)}): "
                    f"{e.strerror or e}; memory is first-touch"]
    return []


POLICY_REFUSED = "memory binding not applied:"  # before each of apply's notes (compare reads them back)


def apply_and_exec(binding: Binding, env: dict[str, str], argv: list[str], say=lambda text: None) -> None:
    """Bind (`say` gets what could not be), set `env` over the current environment and exec argv. Never
    returns (nodemap run --watch calls it in the child it starts, the launcher staying beside it as its monitor)."""
    prog = program(argv, env)
    for note in apply(binding):
        say(f"{POLICY_REFUSED} {note}")
    full = {**os.environ, **env}
    sys.stdout.flush()
    sys.stderr.flush()
    _default_signals()
    try:
        os.execve(prog, argv, full)
    except (OSError, ValueError) as e:
        raise _exec_error(argv[0], e, full) from None


def program(argv: list[str], env: dict[str, str]) -> str:
    """The file exec will run, with `env` set over the current environment: argv[0] itself when it holds a
    slash, else the first executable of that name on the application's PATH (as execvp searches it)."""
    import shutil  # already loaded by the run path

    if not argv:
        raise NodemapError("no application given: put it after --, e.g. nodemap run -- ./app args")
    if not argv[0] or "\0" in argv[0]:
        raise NodemapError(f"the application name {argv[0]!r} is empty or holds a NUL byte: give a program after --, "
                           "e.g. nodemap run -- ./app args")
    name, env = argv[0], {**os.environ, **env}
    if "/" in name:
        if not os.path.lexists(name):
            raise _exec_error(name, FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT)), env)
        return name
    found = shutil.which(name, path=env.get("PATH", os.defpath))
    if found is None:
        raise _exec_error(name, FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT)), env)
    return found


def _exec_error(name: str, e: Exception, env: dict[str, str]) -> NodemapError:
    err = NodemapError(f"cannot run {name!r}: {_exec_problem(name, e, env)}")
    err.exit_code = 127 if isinstance(e, FileNotFoundError) else 126  # the shell's codes
    return err


def _exec_problem(prog: str, e: Exception, env: dict[str, str]) -> str:
    """Why exec failed, in words: execve says ENOENT both for a missing
    program and for a script whose #! interpreter is missing."""
    if not isinstance(e, OSError):
        return f"{e} (check the arguments after --)"
    import shutil

    found = shutil.which(prog, path=env.get("PATH", os.defpath)) if "/" not in prog else prog
    if isinstance(e, FileNotFoundError) and found and os.path.isfile(found):
        try:
            with open(found, "rb") as f:
                head = f.readline(256)
        except OSError:
            head = b""
        if head.startswith(b"#!"):
            interp = head[2:].strip().split(b" ")[0].decode("utf-8", "replace")
            return f"its interpreter {interp!r} (the script's #! line) does not exist: install it or fix the #! line"
    return f"{e.strerror} (check the path and that it is executable)"


def _default_signals() -> None:
    """Undo what Python did to signals at start-up, which exec would keep.

    Python ignores SIGPIPE and SIGXFSZ (the set subprocess restores): an
    application exec'd with them ignored gets EPIPE instead of dying in
    `app | head`. Ignored dispositions we did not make (nohup's SIGHUP, a
    background job's SIGINT) stay; the signal mask is emptied. `_signal`,
    not `signal`: the wrapper's imports cost every rank ~1 ms.
    """
    import _signal

    for name in ("SIGPIPE", "SIGXFSZ", "SIGXFZ"):
        if hasattr(_signal, name):
            _signal.signal(getattr(_signal, name), _signal.SIG_DFL)
    _signal.pthread_sigmask(_signal.SIG_SETMASK, ())


def _list(items) -> str:
    from ..topology.cpuset import CpuSet

    return CpuSet(items).format()
