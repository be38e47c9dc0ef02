"""`nodemap slurm gres` and `slurm features` beside `nodemap topo --input` on the same file.

Issue 36: on a 2,000-GPU topology (533 KB) gres took 21.5 s and features
31.8 s while topo read the file in 0.5 s: both asked every pair of GPUs for
its NVLinks (each asking walked every link) and every device for its cores.
They now read the links, local CPUs and cores once each. This times the
three commands on nodes of N GPUs (tests/nodes.py: 2 sockets, GPUs on both;
"nvswitch": every GPU with 18 links to NVSwitches, so gres prints Links= of
N counts for each GPU, an output of N^2 numbers), best of --repeat runs
each, and prints each command's ratio to topo's: flat as N doubles means
linear. Times are the child's CPU seconds (user + system, start-up
included): on the shared 2-vCPU VM under a load of 15-20, wall times
swung 3-10x between runs. --before REV runs the same under another
revision's src (git archive, as hostile_inputs.py), killed after
--timeout seconds a run (then the wall time is shown, marked '>').

Run: python benchmarks/slurm_config_speed.py [--gpus 250,500,1000] [--repeat 3] [--before REV]
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE))

import nodes  # noqa: E402  (the tests' synthetic nodes)
from hostile_inputs import _tree  # noqa: E402  (a revision's src)

from nodemap.topology.model import Link, replace  # noqa: E402

COMMANDS = (("topo", ["topo", "--input"]), ("gres", ["slurm", "gres", "--input"]),
            ("features", ["slurm", "features", "--input"]))


def node_file(folder: str, gpus: int, nvswitch: bool) -> str:
    topo = nodes.build(nodes.Spec(2, 1, 1, 4, gpus=[nodes.Dev(k % 2) for k in range(gpus)]))
    if nvswitch:
        topo = replace(topo, links=tuple(Link(g.key, "NVSwitch", "NVLink", 18, 450.0, 4) for g in topo.gpus))
    path = os.path.join(folder, f"gpus{gpus}{'-nvswitch' if nvswitch else ''}.json")
    with open(path, "w") as f:
        f.write(topo.to_json())
    return path


def cpu_seconds(src: str, args: list[str], timeout: float) -> tuple[float, str]:
    """(CPU seconds of `nodemap ARGS` run from `src`, "" or why it failed); killed after `timeout` s."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OMPI_", "PMI_"))}
    env.update(PYTHONPATH=f"{src}:{sysconfig.get_paths()['purelib']}", NODEMAP_CACHE_DIR=tempfile.mkdtemp())
    before, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
    p = subprocess.Popen([sys.executable, "-S", "-m", "nodemap", *args], env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE)
    try:
        err = p.communicate(timeout=timeout)[1]
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        return time.monotonic() - t0, f"killed after {timeout:g} s"
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    last = (err.decode(errors="replace").strip().splitlines() or [""])[-1][:100]
    return cpu, "" if p.returncode == 0 else f"exit {p.returncode}: {last}"


def best(src: str, args: list[str], repeat: int, timeout: float) -> tuple[float, str]:
    runs = [cpu_seconds(src, args, timeout) for _ in range(repeat)]
    return min(runs, key=lambda r: (bool(r[1]), r[0]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpus", default="250,500,1000", help="GPU counts, comma-separated (default 250,500,1000)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per command, the best kept (default 3; --before's: 1)")
    ap.add_argument("--before", metavar="REV", help="also time this revision's src (e.g. f650703)")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds a run may take (default 60)")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="nodemap-slurm-speed-")
    try:
        trees = {"HEAD": str(HERE.parent / "src")}
        if a.before:
            trees = {a.before: _tree(a.before, os.path.join(work, "before")), "this tree": trees["HEAD"]}
        print(f"{platform.node()}: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}, Python "
              f"{platform.python_version()}; best of {a.repeat}, CPU seconds of the whole command (start-up included)")
        print(f"{'tree':>12} {'GPUs':>6} {'links':>9} {'file':>9} {'topo s':>8} {'gres s':>8} {'feat. s':>8} "
              f"{'gres/topo':>9} {'feat./topo':>10}")
        for gpus in (int(n) for n in a.gpus.split(",")):
            for nvswitch in (False, True):
                path = node_file(work, gpus, nvswitch)
                size = os.path.getsize(path)
                for name, src in trees.items():
                    reps = 1 if name == a.before else a.repeat  # the old tree's seconds need no best of three
                    t = {c: best(src, [*args, path], reps, a.timeout) for c, args in COMMANDS}
                    bad = "; ".join(f"{c} {why}" for c, (_, why) in t.items() if why)
                    ratio = {c: t[c][0] / t["topo"][0] for c in t}
                    cell = {c: ("> " if why.startswith("killed") else "") + f"{v:.2f}" for c, (v, why) in t.items()}
                    print(f"{name[:12]:>12} {gpus:6d} {'nvswitch' if nvswitch else 'none':>9} {size / 1e3:7.0f}KB "
                          f"{cell['topo']:>8} {cell['gres']:>8} {cell['features']:>8} "
                          f"{('> ' if t['gres'][1] else '') + format(ratio['gres'], '.1f'):>9} "
                          f"{('> ' if t['features'][1] else '') + format(ratio['features'], '.1f'):>10}"
                          + (f"  ({bad})" if bad else ""))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
