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

Issue 26's inputs to the judging layer (--set 26): site files (a dotted
key of 20,000 parts, 400- and 5000-digit integers, 100,000 nested
brackets, peak = nan, the fleet's link_bad = nan), saved documents (a FIFO
and a link to /dev/zero given to report and in a --from folder, a JSON
bomb, a non-object nodes.jsonl line, a verdict that is markup), a
3,000-timeline watch folder, a 100,000-PU topology, run --input /, and
compare -o into a folder.

Run: python benchmarks/hostile_inputs.py REV_BEFORE REV_AFTER [--cap 2GiB] [--timeout 20] [--set 16|26|all]
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


def _inputs_26(d: str) -> list[tuple[str, list[str], dict[str, str]]]:
    """Issue 26's cases (see the module's doc); made with this tree's nodemap and tests."""
    import json

    import check_synth as syn
    import nodes
    from nodemap.check import expectations
    from nodemap.check.document import CheckDoc

    def put(name: str, text: str | bytes) -> str:
        path = os.path.join(d, name)
        with open(path, "wb") as f:
            f.write(text.encode() if isinstance(text, str) else text)
        return path

    doc = CheckDoc(level="quick", topology=None, expectations=expectations.shipped(), host="n1",
                   results=[syn.stream({"1/L3": (16, 339.0), "1/core": (128, 298.0)}),
                            syn.hbm({0: 1400.0, 1: 900.0, 2: 1400.0})])
    doc.rejudge()
    check = put("check.json", doc.to_json())
    marked = json.loads(doc.to_json())
    marked["findings"][0]["verdict"] = "<form action='https://evil.example'><input type='password'></form>"
    markup = put("markup.json", json.dumps(marked))
    sites = {"dotted": "a" + ".a" * 19_999 + " = 1\n", "digits400": "[thresholds]\nrelative_warn = " + "9" * 400,
             "digits5000": "[thresholds]\nrelative_warn = " + "9" * 5000, "nested": "a = " + "[" * 100_000 + "]" * 100_000,
             "nan": '[[limit]]\nkind = "placement"\nmatch = "."\nwarn = 0.9\npeak = nan\nsource = "x"\n',
             "fleet_nan": "[fleet]\nlink_bad = nan\nmin_nodes = -3\n"}
    site = {k: put(f"{k}.toml", v) for k, v in sites.items()}
    os.mkfifo(os.path.join(d, "fifo.json"))
    os.symlink("/dev/zero", os.path.join(d, "zero.json"))
    os.makedirs(f"{d}/from-fifo")
    os.mkfifo(f"{d}/from-fifo/x.json")
    os.makedirs(f"{d}/from-lines")
    put("from-lines/nodes.jsonl", '{"schema": "x"}\n[1, 2]\n')
    put("bomb.json", b"[" * 100_000 + b"]" * 100_000)
    os.makedirs(f"{d}/empty")
    os.makedirs(f"{d}/watch")
    for r in range(3000):
        head = {"schema": "nodemap.watch/1", "host": f"n{r // 4}", "job": "7", "rank": r, "pid": 1000 + r,
                "start": 1.0, "interval": 1.0, "mem_total": 1 << 36}
        lines = [json.dumps(head), json.dumps({"gpus": [{"index": r % 4, "name": "H100", "total": 80 << 30}]})]
        lines += [json.dumps([float(t), (1 << 30) + t, 1 << 35, [1 << 30], [2 << 30], [0]]) for t in range(60)]
        put(f"watch/n{r // 4}.r{r}.{1000 + r}.watch", "\n".join(lines + [json.dumps({"end": {"t": 60.0}})]) + "\n")
    put("pus100k.json", nodes.build(nodes.Spec(100, 4, 4, 32, smt=2, hostname="big")).to_json())
    os.makedirs(f"{d}/out-folder.json")
    rep = ["report", check, "--expect"]
    return [
        ("site file: dotted key of 20,000 parts (40 KB)", rep + [site["dotted"]], {}),
        ("site file: 400-digit integer", rep + [site["digits400"]], {}),
        ("site file: 5000-digit integer", rep + [site["digits5000"]], {}),
        ("site file: 100,000 nested brackets", rep + [site["nested"]], {}),
        ("site file: peak = nan (report --expect)", rep + [site["nan"]], {}),
        ("site file: [fleet] link_bad = nan, min_nodes = -3", ["check", "--fleet", "--from", f"{d}/empty", "--expect",
                                                               site["fleet_nan"], "-o", f"{d}/fleet-out"], {}),
        ("site file is a FIFO (check --expect)", ["check", "--expect", f"{d}/fifo.json", "-o", f"{d}/c"], {}),
        ("report FIFO", ["report", f"{d}/fifo.json"], {}),
        ("report link to /dev/zero", ["report", f"{d}/zero.json"], {}),
        ("report JSON bomb (100,000 nested)", ["report", f"{d}/bomb.json"], {}),
        ("report --html: a finding's verdict is a password form", ["report", markup, "--html", f"{d}/m.html"], {}),
        ("check --fleet --from: a FIFO x.json in the folder", ["check", "--fleet", "--from", f"{d}/from-fifo", "-o",
                                                               f"{d}/fleet-out2"], {}),
        ("check --fleet --from: nodes.jsonl line [1, 2]", ["check", "--fleet", "--from", f"{d}/from-lines", "-o",
                                                           f"{d}/fleet-out3"], {}),
        ("report of 3,000 watch timelines", ["report", f"{d}/watch"], {}),
        ("topo of a 100,000-PU node (19 MB JSON)", ["topo", "--input", f"{d}/pus100k.json"], {}),
        ("run --input / --dry-run (plan cache key)", ["run", "--local-rank", "0", "--local-size", "1", "--input", "/",
                                                      "--dry-run", "--", "true"], {}),
        ("compare -o FOLDER (checked after the probes?)", ["compare", "--probes", "stream", "--size", "4M",
                                                           "--tasks", "2", "-q", "-o", f"{d}/out-folder.json"], {}),
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
    ap.add_argument("--set", choices=("16", "26", "all"), default="all", help="whose cases: issue 16's, 26's, both")
    a = ap.parse_args()
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
    from nodemap.units import parse_size

    cap = parse_size(a.cap, "--cap")
    work = tempfile.mkdtemp(prefix="nodemap-hostile-")
    try:
        trees = {rev: _tree(rev, os.path.join(work, f"rev{k}")) for k, rev in enumerate((a.before, a.after))}
        os.makedirs(f"{work}/in")
        print(f"cap {a.cap} address space, {a.timeout:g} s per run; {sys.platform}, Python {sys.version.split()[0]}")
        cases = (_inputs(f"{work}/in") if a.set in ("16", "all") else []) + (
            _inputs_26(f"{work}/in") if a.set in ("26", "all") else [])
        for case, args, extra in cases:
            print(case)
            for rev, src in trees.items():
                wall, status, line = _run(src, args, extra, cap, a.timeout)
                print(f"  {rev[:12]:12} {wall:7.2f} s  {status:20}  {line}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
