"""Issue 16's tiny hostile inputs, run by two revisions side by side.

Each case is a few bytes to a few MB that once cost gigabytes or minutes
(a CPU list of 0-99999999999, an hwloc XML with os_index=4000000000, an
11 MB cpuset mask, a tarball with an 8 MB member name or 9000 long names,
250,000 empty folders in a tarball, an .npz declaring 2.2 GiB, a Slurm tasks-per-node list of 10^11 nodes, a
rank that never starts MPI). Both revisions' src/ are extracted (git
archive) and run with `python -S` (the editable install's hook left out,
site-packages on PYTHONPATH for defusedxml and numpy), each capped by
--cap of address space and --timeout seconds so that the old revision
cannot eat the shared machine (a run over the cap ends in MemoryError).
Prints wall seconds, exit status and the last line of stderr per case
and revision.

Run: python benchmarks/hostile_inputs.py REV_BEFORE REV_AFTER [--cap 2GiB] [--timeout 20]
"""

from __future__ import annotations

import argparse
import io
import gzip
import os
import resource
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
import zipfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from hostile import hwloc_xml  # noqa: E402  the test suite's 2-PU XML


def _tree(rev: str, into: str) -> str:
    os.makedirs(into)
    archive = subprocess.run(["git", "archive", rev, "src"], capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as t:
        t.extractall(into, filter="data")
    return os.path.join(into, "src")


def _inputs(d: str) -> list[tuple[str, list[str], dict[str, str]]]:
    """(case, nodemap arguments, extra environment)."""
    with open(f"{d}/index.xml", "w") as f:
        f.write(hwloc_xml(pu1="4000000000"))
    with open(f"{d}/mask.xml", "w") as f:
        f.write(hwloc_xml(mask="0x00000001," + "0x00000000," * 1_000_000 + "0x00000003"))
    with tarfile.open(f"{d}/name.tar.gz", "w:gz", format=tarfile.GNU_FORMAT) as t:
        t.addfile(tarfile.TarInfo("sys/" + "a" * (8 << 20)))
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as t:
        ti = tarfile.TarInfo("./" * 2000)
        ti.type = tarfile.DIRTYPE
        t.addfile(ti)
    with open(f"{d}/names.tar.gz", "wb") as f:
        f.write(gzip.compress(raw.getvalue()[:5120] * 20_000, 1))
    with tarfile.open(f"{d}/folders.tar.gz", "w:gz", compresslevel=1) as t:
        for i in range(250_000):
            ti = tarfile.TarInfo(f"d{i}")
            ti.type = tarfile.DIRTYPE
            t.addfile(ti)
    import numpy as np

    rows = (2300 << 20) // 64
    with zipfile.ZipFile(f"{d}/counts.npz", "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        with z.open("counts.npy", "w", force_zip64=True) as f:
            np.lib.format.write_array_header_1_0(f, {"descr": "<i8", "fortran_order": False, "shape": (rows, 8)})
            zeros = bytes(1 << 20)
            for _ in range(2300):
                f.write(zeros)
        for name, a in (("alloc_sizes", np.array([rows << 21])), ("chunk_size", np.array(1 << 21))):
            b = io.BytesIO()
            np.lib.format.write_array(b, a.astype(np.int64))
            z.writestr(f"{name}.npy", b.getvalue())
    slurm = {"SLURM_JOB_ID": "1", "SLURM_LOCALID": "0", "SLURM_TASKS_PER_NODE": "1(x99999999999)"}
    return [
        ("--cpus 0-99999999999", ["plan", "--tasks", "1", "--cpus", "0-99999999999"], {}),
        ("--cpus 0-3000000000:7", ["plan", "--tasks", "1", "--cpus", "0-3000000000:7"], {}),
        ("XML os_index=4000000000", ["topo", "--input", f"{d}/index.xml"], {}),
        ("XML 11 MB cpuset mask, high bit set", ["topo", "--input", f"{d}/mask.xml"], {}),
        ("tar 8 MB member name", ["topo", "--input", f"{d}/name.tar.gz"], {}),
        ("tar 20000 long names", ["topo", "--input", f"{d}/names.tar.gz"], {}),
        (".npz declaring 2.2 GiB", ["place", "plan", "--counts", f"{d}/counts.npz", "--budget", "1GiB"], {}),
        ("SLURM_TASKS_PER_NODE=1(x99999999999)", ["run", "--dry-run", "--", "true"], slurm),
        ("--tasks 10**20 --oversubscribe", ["plan", "--tasks", str(10**20), "--oversubscribe"], {}),
        ("tar 250000 empty folders", ["topo", "--input", f"{d}/folders.tar.gz"], {}),
        ("--cpus 0-1048575:2 (error line length)", ["plan", "--tasks", "1", "--cpus", "0-1048575:2"], {}),
    ]


def _run(src: str, args: list[str], extra: dict[str, str], cap: int, timeout: float) -> tuple[float, str, str]:
    site = sysconfig.get_paths()["purelib"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OMPI_", "PMI_"))}
    env.update(extra, PYTHONPATH=f"{src}:{site}", NODEMAP_CACHE_DIR=tempfile.mkdtemp(), OPENBLAS_NUM_THREADS="1")

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    t0 = time.monotonic()
    p = subprocess.Popen([sys.executable, "-S", "-m", "nodemap", *args], env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, preexec_fn=limit)
    status = ""
    try:
        err = p.communicate(timeout=timeout)[1]
    except subprocess.TimeoutExpired:
        p.kill()
        err = p.communicate()[1]
        status = f"killed after {timeout:g} s"
    wall = time.monotonic() - t0
    text = err.decode("utf-8", "replace").strip().splitlines()
    last = text[-1] if text else ""
    return wall, status or f"exit {p.returncode}", last[:110] + (f"... ({len(last)} characters)" if len(last) > 110 else "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--cap", default="2GiB", help="address space per run (default 2GiB)")
    ap.add_argument("--timeout", type=float, default=20.0, help="seconds per run (default 20)")
    a = ap.parse_args()
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
    from nodemap.units import parse_size

    cap = parse_size(a.cap, "--cap")
    work = tempfile.mkdtemp(prefix="nodemap-hostile-")
    try:
        trees = {rev: _tree(rev, os.path.join(work, f"rev{k}")) for k, rev in enumerate((a.before, a.after))}
        os.makedirs(f"{work}/in")
        print(f"cap {a.cap} address space, {a.timeout:g} s per run; {sys.platform}, Python {sys.version.split()[0]}")
        for case, args, extra in _inputs(f"{work}/in"):
            print(case)
            for rev, src in trees.items():
                wall, status, line = _run(src, args, extra, cap, a.timeout)
                print(f"  {rev[:12]:12} {wall:7.2f} s  {status:20}  {line}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
