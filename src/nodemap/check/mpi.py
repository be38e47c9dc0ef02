"""MPI in the check: a launched kind (its STORY, bench/story.py: `bench
mpi`) started under a launcher beside the check, and whether the MPI
library is CUDA-aware.

MPI ranks need a launcher, so unlike the other kinds this one cannot run
in-process: when mpi4py and an mpiexec are found and the check is not
itself a rank, it starts `mpiexec -n 2 <python> -m nodemap bench mpi`
(host buffers; device buffers too where a GPU is visible) with a timeout
and reads the ResultSet it saved. Anything that stops it becomes a skipped
item with the launcher's last line, never a failed check.

A check that is itself a rank (`check --fleet`) is handed an `InJob`: the
step run with ranks already there (fleet/localpair.py), or why it cannot be.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from ..text import number
from ..bench.comm.mpi_common import figure_size
from ..bench.results import ResultSet
from ..env import MPI_JOB_VARS
from ..proc import run_group
from .inventory import Check

AWARE_KEY = "inventory/mpi/cuda_aware"
# The ranks of an MPI job carry one of these: such a process must not start ranks of its own
RANK_VARS = MPI_JOB_VARS
ROOT_VARS = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
TIMEOUT_S = {"quick": 180.0, "full": 900.0}


@dataclass(frozen=True)
class Launcher:
    path: str
    flavor: str  # "openmpi" | "mpich" | "" (unknown: no flavor-specific options)


def under_launcher(env: Mapping[str, str]) -> str:
    """The variable that shows this process is an MPI rank, '' if none."""
    return next((v for v in RANK_VARS if env.get(v)), "")


def find_launcher(env: Mapping[str, str]) -> Launcher | None:
    """mpiexec beside this Python (the mpich wheel mpi4py loads), beside the
    mpicc mpi4py was built with, then on PATH; mpirun where no mpiexec."""
    dirs = [os.path.dirname(sys.executable)]
    try:
        import mpi4py

        cc = mpi4py.get_config().get("mpicc", "")
        if cc:
            dirs.append(os.path.dirname(shutil.which(cc) or cc))
    except ImportError:
        pass
    for name in ("mpiexec", "mpirun"):
        for d in dirs:
            p = os.path.join(d, name)
            if os.access(p, os.X_OK):
                return Launcher(p, flavor(p))
        p = shutil.which(name, path=env.get("PATH", os.defpath))
        if p:
            return Launcher(p, flavor(p))
    return None


QUERY_TIMEOUT_S = 15.0  # a tool asked what it is (mpiexec --version, mpichversion): ompi_info gets twice as long


def _query(cmd: list[str], timeout: float | None = None) -> tuple[str, str]:
    """(stdout, stderr) of an information query, ("", "") when it fails or hangs: in its own process
    group, so one that hangs ends with everything it started (proc.run_group)."""
    try:
        return run_group(cmd, None, QUERY_TIMEOUT_S if timeout is None else timeout)[1:]
    except (OSError, subprocess.SubprocessError):
        return "", ""


@functools.lru_cache(maxsize=None)  # asked at plan time and again when measuring: one `--version` run
def flavor(mpiexec: str) -> str:
    text = "".join(_query([mpiexec, "--version"]))
    if re.search(r"Open MPI|OpenRTE|open-mpi", text):
        return "openmpi"
    if re.search(r"HYDRA|MPICH", text):
        return "mpich"
    return ""


def availability(env: Mapping[str, str]) -> tuple[Launcher | None, str]:
    """(launcher, '') when the MPI step can run, else (None, why not)."""
    if importlib.util.find_spec("mpi4py") is None:
        return None, "mpi4py is not installed: pip install 'nodemap[mpi]' (mpi4py and the mpich wheel)"
    rank = under_launcher(env)
    if rank:
        return None, (f"the check runs as an MPI rank ({rank} is set): it starts its own 2 ranks, so run "
                      "`nodemap check` without mpiexec/srun")
    found = find_launcher(env)
    if found is None:
        return None, "no mpiexec or mpirun next to Python, beside mpi4py's mpicc or on PATH: put your MPI's on PATH"
    return found, ""


def command(launcher: Launcher, kind: str, argv: Sequence[str], output: str, euid: int | None = None) -> list[str]:
    """The launcher line: 2 ranks, not bound (the check's own placement is
    judged elsewhere), Open MPI allowed to run as root where it is root."""
    euid = os.geteuid() if euid is None else euid
    extra = ["--allow-run-as-root"] if launcher.flavor == "openmpi" and euid == 0 else []
    if launcher.flavor == "openmpi" and (os.cpu_count() or 1) < 2:
        extra.append("--oversubscribe")
    return [launcher.path, *extra, "--bind-to", "none", "-n", "2", sys.executable, "-m", "nodemap", "bench", kind,
            *argv, "-q", "-o", output]


def launch_env(launcher: Launcher, env: Mapping[str, str], euid: int | None = None) -> dict[str, str]:
    euid = os.geteuid() if euid is None else euid
    out = dict(env)
    if launcher.flavor == "openmpi" and euid == 0:
        out.update(ROOT_VARS)
    return out


class MPIFailed(Exception):
    """The launcher or the ranks stopped: the one line to show as the reason."""


@dataclass(frozen=True)
class InJob:
    """The MPI step of a check that runs as a rank of an MPI job, which
    cannot start `mpiexec -n 2` of its own: `measure(level, topology)`
    measures with the job's ranks and returns a ResultSet shaped as `bench
    mpi`'s (raising MPIFailed with the reason), or None and `why` not."""

    measure: Callable[[str, Any], ResultSet] | None = None
    why: str = ""


def measure(kind: str, level: str, argv: Sequence[str], env: Mapping[str, str] | None = None) -> ResultSet:
    """Run `bench KIND argv` under the launcher and return its ResultSet."""
    env = dict(os.environ if env is None else env)
    launcher, why = availability(env)
    if launcher is None:
        raise MPIFailed(why)
    timeout = TIMEOUT_S.get(level, TIMEOUT_S["full"])
    with tempfile.TemporaryDirectory(prefix="nodemap-check-mpi-") as tmp, _hydra_files_removed():
        out = os.path.join(tmp, f"{kind}.json")
        cmd = command(launcher, kind, argv, out)
        try:
            code, stdout, stderr = run_group(cmd, launch_env(launcher, env), timeout)
        except subprocess.TimeoutExpired:
            raise MPIFailed(f"{os.path.basename(launcher.path)} -n 2 nodemap bench {kind} did not finish within "
                            f"{timeout:g} s") from None
        except OSError as e:
            raise MPIFailed(f"{launcher.path} does not start ({e.strerror or e})") from None
        rs = _saved(out)
        if rs is None or (code != 0 and not rs.results):
            raise MPIFailed(f"{os.path.basename(launcher.path)} -n 2 nodemap bench {kind} exited {code}: "
                            f"{_last_line(stderr) or _last_line(stdout) or 'no message'}")
        rs.environment["launcher"] = " ".join(cmd[:cmd.index("-o")])  # how the ranks were started, for the record
        return rs


def _saved(path: str) -> ResultSet | None:
    from ..bench.resultfile import decode
    from ..errors import InputError

    try:
        with open(path, "rb") as f:
            return decode(path, f.read())
    except (OSError, InputError):
        return None


# What Hydra (MPICH, Intel MPI) prints around a rank that died: a banner of
# "=" lines, its own "[mpiexec@host]" and "[proxy:...]" lines. The rank's
# own last line (an ImportError from a broken libmpi) says more.
_LAUNCHER_NOISE = re.compile(r"^(=+|=\s.*|\[(mpiexec|proxy)[@:][^\]]*\].*|YOUR APPLICATION TERMINATED.*"
                             r"|This typically refers to a problem with your application.*"
                             r"|Please see the FAQ page for debugging suggestions)$")


def _last_line(text: str) -> str:
    """The last line that is not the launcher's boilerplate (else the last line)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    said = [ln for ln in lines if not _LAUNCHER_NOISE.match(ln)]
    return (said or lines or [""])[-1]


HYDRA_DIR, HYDRA_XML = "/tmp", "hydra_hwloc_xmlfile_"  # Hydra's topology export: /tmp/hydra_hwloc_xmlfile_XXXXXX,
# a fixed folder (not $TMPDIR) that the killed step never removes


def _hydra_files() -> set[str]:
    try:
        return {n for n in os.listdir(HYDRA_DIR) if n.startswith(HYDRA_XML)}
    except OSError:
        return set()


@contextlib.contextmanager
def _hydra_files_removed():
    """Remove the topology files Hydra left in /tmp during the step (MPICH
    4 leaves one per step, an interrupted step always): those new since it
    started, of this user, held open by none of this user's processes (a
    concurrent job's own is open in its proxy)."""
    before = _hydra_files()
    try:
        yield
    finally:
        new = _hydra_files() - before
        held = _held_open() if new else set()
        for name in new:
            path = os.path.join(HYDRA_DIR, name)
            try:
                if os.lstat(path).st_uid == os.getuid() and path not in held:
                    os.unlink(path)
            except OSError:
                pass


def _held_open() -> set[str]:
    """The files this user's processes hold open (their /proc/PID/fd links)."""
    out: set[str] = set()
    for pid in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not pid.isdigit():
            continue
        fd_dir = f"/proc/{pid}/fd"
        try:
            for fd in os.listdir(fd_dir):
                out.add(os.readlink(f"{fd_dir}/{fd}"))
        except OSError:  # another user's process, or one that ended
            continue
    return out


# --- CUDA-awareness -----------------------------------------------------------------


def awareness_check(gpu: bool, results: Sequence[ResultSet], env: Mapping[str, str]) -> Check | None:
    """Whether MPI hands device buffers to the library: from the MPI run's
    own probe (MPIX_Query_cuda_support and a verified device transfer)
    when it ran, else from the library's build (ompi_info) or settings."""
    measured = next((rs.environment["cuda_aware"] for rs in results if "cuda_aware" in rs.environment), None)
    if measured is not None and (measured.get("gpu") or not gpu):
        aware: bool | None = bool(measured.get("aware") and measured.get("proven"))
        how = measured.get("how", "")
        how += "; a verified device transfer proved it" if aware else ""
    else:
        aware, how = static_awareness(env)
    return _aware_check(gpu, aware, how, _staged_numbers(results))


def static_awareness(env: Mapping[str, str]) -> tuple[bool | None, str]:
    """(aware, how) without starting MPI: Open MPI's ompi_info, MPICH's
    MPIR_CVAR_ENABLE_GPU, Cray MPICH's MPICH_GPU_SUPPORT_ENABLED."""
    if env.get("MPIR_CVAR_ENABLE_GPU", "").strip() == "0":
        return False, "MPIR_CVAR_ENABLE_GPU=0 turns MPICH's GPU support off"
    if env.get("MPICH_GPU_SUPPORT_ENABLED", "").strip() == "1":
        return True, "MPICH_GPU_SUPPORT_ENABLED=1 (Cray MPICH)"
    info = shutil.which("ompi_info", path=env.get("PATH", os.defpath))
    if info:
        out = _query([info, "--parsable", "--all"], 2 * QUERY_TIMEOUT_S)[0]
        m = re.search(r"mpi_built_with_cuda_support:value:(true|false)", out)
        if m:
            return m.group(1) == "true", f"ompi_info: mpi_built_with_cuda_support:value:{m.group(1)}"
    if _mpich_configured_with_cuda(env):
        return True, "mpichversion: MPICH configured --with-cuda (GPU support on unless MPIR_CVAR_ENABLE_GPU=0)"
    return None, "unknown: the MPI run did not probe it and no ompi_info or MPICH GPU setting says"


def _mpich_configured_with_cuda(env: Mapping[str, str]) -> bool:
    """MPICH's configure line names --with-cuda (its absence proves nothing:
    configure also finds CUDA by itself)."""
    tool = shutil.which("mpichversion", path=os.pathsep.join([os.path.dirname(sys.executable),
                                                               env.get("PATH", os.defpath)]))
    if not tool:
        return False
    out = _query([tool])[0]
    return bool(re.search(r"configure:.*--with-cuda(?!=no)", out, re.I))


def _staged_numbers(results: Sequence[ResultSet]) -> str:
    """'(DD 8.1 GB/s staged vs HH 12 GB/s)' from the MPI run (the set that probed CUDA-awareness), '' without one."""
    mpi = [r for rs in results if "cuda_aware" in rs.environment for r in rs.results]
    size = figure_size(mpi)
    bw = {r.params.get("buffers"): r for r in mpi if r.metric == "bw" and r.params.get("size") == size}
    dd, hh = bw.get("DD"), bw.get("HH")
    if dd is None or dd.params.get("transport") != "staged":
        return ""
    vs = f" vs {number(hh.stats.best)} GB/s with host buffers" if hh else ""
    return f" ({number(dd.stats.best)} GB/s{vs}, {dd.params['size'] >> 20} MiB messages)"


def _aware_check(gpu: bool, aware: bool | None, how: str, staged: str) -> Check:
    label = "MPI CUDA-awareness"
    if not gpu:
        return Check(AWARE_KEY, label, "CUDA-aware" if aware else "not CUDA-aware" if aware is False else "unknown",
                     "", "info", f"no GPU: device buffers do not arise ({how})", "", "", "MPI")
    if aware:
        return Check(AWARE_KEY, label, "CUDA-aware", "CUDA-aware", "pass", how, "", "", "MPI")
    if aware is None:
        return Check(AWARE_KEY, label, "unknown", "CUDA-aware", "info", how, "configuration",
                     "run the check where mpi4py and mpiexec are installed, or ompi_info is on PATH", "MPI")
    return Check(AWARE_KEY, "MPI is not CUDA-aware", f"device buffers are staged{staged}", "", "warn", how,
                 "configuration", "use a CUDA-aware MPI build (Open MPI/UCX built with CUDA, MPICH with "
                 "MPIR_CVAR_ENABLE_GPU=1, Cray MPICH with MPICH_GPU_SUPPORT_ENABLED=1) and pass device pointers", "MPI")
