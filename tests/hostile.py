"""Running the CLI on hostile input, as issue 16's proof asks: a subprocess
with its address space capped at 1 GiB and a 10 s limit; a refusal is exit 2
with one line on stderr that names the input, never a traceback."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

CAP = 1 << 30  # bytes of address space
LIMIT = 10.0  # s per case

# A 2-CPU, 1-NUMA-node sysfs snapshot: the smallest tree the reader accepts.
CPU = "sys/devices/system/cpu"
NODE = "sys/devices/system/node"


def _cap() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (CAP, CAP))


def env(tmp: Path | None = None, **extra: str) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items()
         if not k.startswith(("SLURM_", "OMPI_", "PMI_", "PALS_", "FLUX_", "MV2_", "MPI_LOCAL"))
         and k not in ("CUDA_VISIBLE_DEVICES", "LOCAL_RANK", "LOCAL_WORLD_SIZE")}
    e["OPENBLAS_NUM_THREADS"] = "1"  # each BLAS thread reserves address space
    if tmp is not None:
        e["NODEMAP_CACHE_DIR"] = str(tmp / "cache")
    e.update(extra)
    return e


def nodemap(*args: str, env_: dict[str, str] | None = None, timeout: float = LIMIT, **kw) -> subprocess.CompletedProcess:
    """`nodemap ARGS` capped; fails the test when it runs past `timeout`."""
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "nodemap", *args], env=env() if env_ is None else env_,
                       capture_output=True, text=True, timeout=timeout, preexec_fn=_cap, **kw)
    r.seconds = time.monotonic() - t0
    return r


def refused(r: subprocess.CompletedProcess, *words: str) -> str:
    """Exit 2, one short line on stderr holding `words`; returns the line."""
    lines = r.stderr.splitlines()
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert len(lines[0]) < 600, lines[0][:600]
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


def terminate_when(p: subprocess.Popen, folder: Path, pattern: str) -> None:
    """SIGTERM `p` once `pattern` exists in `folder` (a temporary file or
    folder it made); it must end with status 143."""
    deadline = time.monotonic() + LIMIT
    while not list(folder.glob(pattern)) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert list(folder.glob(pattern)), f"{pattern} never appeared in {folder}"
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=LIMIT) == 128 + signal.SIGTERM


def put(root: Path, rel: str, text: str) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")
    return path


def snapshot(root: Path) -> Path:
    """A 2-CPU snapshot under root (tests then spoil one file of it)."""
    put(root, f"{CPU}/online", "0-1")
    for i in (0, 1):
        put(root, f"{CPU}/cpu{i}/topology/physical_package_id", "0")
        put(root, f"{CPU}/cpu{i}/topology/core_id", str(i))
        put(root, f"{CPU}/cpu{i}/topology/thread_siblings_list", str(i))
    put(root, f"{NODE}/node0/cpulist", "0-1")
    put(root, f"{NODE}/node0/meminfo", "Node 0 MemTotal:       1000 kB")
    return root


def hwloc_xml(pu1: str = "1", mask: str = "0x00000003") -> str:
    """A 2-PU hwloc v2 XML; `pu1` is the second PU's os_index, `mask` the machine's cpuset."""
    def obj(kind: str, index: str, cpus: str, gp: int, inner: str = "") -> str:
        attrs = (f'type="{kind}" os_index="{index}" cpuset="{cpus}" complete_cpuset="{cpus}" nodeset="0x1" '
                 f'complete_nodeset="0x1" gp_index="{gp}"')
        return f"<object {attrs}>{inner}</object>"
    cores = obj("Core", "0", "0x1", 4, obj("PU", "0", "0x1", 5)) + obj("Core", "1", "0x2", 6, obj("PU", pu1, "0x2", 7))
    numa = '<object type="NUMANode" os_index="0" cpuset="0x3" nodeset="0x1" gp_index="2" local_memory="1024000"/>'
    machine = obj("Machine", "0", mask, 1, numa + obj("Package", "0", "0x3", 3, cores))
    return f'<?xml version="1.0" encoding="UTF-8"?>\n<topology version="2.0">\n{machine}\n</topology>\n'
