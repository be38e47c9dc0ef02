"""Multi-rail binding measured across NICs: two ranks per node, one rail each (nodemap's plan), against
both ranks on one rail (a deliberately bad binding), every rail shaped to the same rate.

  python3 benchmarks/multirail.py [--rounds 4] [--repeats 5] [--size 4MiB] [--count 8] [--out PREFIX]   (root)

On a networked test cluster (scripts/slurm-test-cluster start --network: each node in its own
namespace with rails rail0 and rail1, each shaped by tbf to --rate), `srun -N2 --ntasks-per-node=2
nodemap run -- python -c BW`: local rank k of n1 sends local rank k of n2 --count messages of --size
bytes (a window of nonblocking sends, after one untimed message that makes the connection), all
pairs at once between barriers; a repetition's figure is the bytes of both pairs over the time from
the first barrier to the last (the aggregate node-to-node bandwidth). The plan
binding is what `nodemap run` gives (local rank k: FI_TCP_IFACE=railk, with NODEMAP_NIC,
UCX_NET_DEVICES, NCCL_SOCKET_IFNAME); the bad one is the same run with FI_TCP_IFACE=rail0 set for
every rank after it (`nodemap run -- env FI_TCP_IFACE=rail0 ...`): CPUs and memory bound the same,
only the NIC differs. Each rank reports the interface it used, and n1's first rank the bytes each
rail sent in the run (its namespace's /sys/class/net/*/statistics/tx_bytes): the rails the traffic
took, not the ones asked for. Bindings alternate (plan, bad, bad, plan, ...) over --rounds launches
each so that drift in the shared host's load biases neither.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from fleet_false_drain import ROOT, Live, commit, record  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "src"))

from nodemap.bench.results import Stats  # noqa: E402
from nodemap.units import parse_size  # noqa: E402

BW = r"""
import json, os, sys, time
import numpy as np
from mpi4py import MPI
c = MPI.COMM_WORLD
size, count, repeats = (int(x) for x in sys.argv[1:4])
half = c.Get_size() // 2
me = c.Get_rank()
peer = me + half if me < half else me - half
# the data is checked: each sender's own pattern, the receiver's buffer poisoned before every repetition
want = ((np.arange(size) + 7 * (me % half)) % 251).astype(np.uint8)
buf = want.copy() if me < half else np.full(size, 255, dtype=np.uint8)
bad = 0
def rails():
    base = "/sys/class/net"
    return {d: int(open(f"{base}/{d}/statistics/tx_bytes").read()) for d in sorted(os.listdir(base))
            if d.startswith("rail")}
c.Barrier()  # a first message each way, not timed: the connections are made on first use
if me < half:
    c.Send(buf[:1], peer, 6)
else:
    c.Recv(buf[:1], peer, 6)
before = rails() if me == 0 else None
times = []
for _ in range(repeats):
    if me >= half:
        buf.fill(255)
    c.Barrier()
    t = time.perf_counter()
    if me < half:
        MPI.Request.Waitall([c.Isend(buf, peer, 7) for _ in range(count)])
    else:
        for _ in range(count):
            c.Recv(buf, peer, 7)
    c.Barrier()
    times.append(time.perf_counter() - t)
    bad += me >= half and not np.array_equal(buf, want)
bad = c.allreduce(int(bad))
sent = {k: v - before[k] for k, v in rails().items()} if me == 0 else None
iface = c.gather(os.environ.get("FI_TCP_IFACE", ""), root=0)
if me == 0:
    print(json.dumps({"mbs": [half * size * count / t / 1e6 for t in times], "ifaces": iface, "tx_bytes": sent,
                      "wrong_data": bad}))
"""


def launch(c: Live, binding: str, size: int, count: int, repeats: int) -> dict[str, Any]:
    bad = ["env", "FI_TCP_IFACE=rail0"] if binding == "one rail" else []
    argv = ["srun", "--mpi=pmi2", "-N2", "-w", "n1,n2", "--ntasks-per-node=2", sys.executable, "-m", "nodemap", "run",
            "--", *bad, sys.executable, "-c", BW, str(size), str(count), str(repeats)]
    load = os.getloadavg()[0]
    p = subprocess.run(argv, capture_output=True, text=True, env=c.env, timeout=600)
    if p.returncode:
        raise SystemExit(f"multirail: {binding}: exit {p.returncode}: {p.stderr[-600:]}")
    got = json.loads(p.stdout.strip().splitlines()[-1])
    if got["wrong_data"]:
        raise SystemExit(f"multirail: {binding}: {got['wrong_data']} repetitions received other data than was sent")
    return {"binding": binding, "load": round(load, 1), **got}


def rate_mbs(rate: str) -> float:
    """A tc rate ("200mbit") in MB/s, by the test cluster's own reader (it refuses a bad one in one line)."""
    from soak import cluster_script

    return cluster_script().rate_bits(rate) / 8e6


def stats(xs: list[float]) -> dict[str, float]:
    """The project's Stats of the repetitions, with their quartiles (the IQR the table shows)."""
    q = statistics.quantiles(xs, n=4) if len(xs) > 1 else [xs[0]] * 3
    return {k: round(v, 2) for k, v in asdict(Stats.of(xs)).items()} | {"q1": round(q[0], 2), "q3": round(q[2], 2)}


def markdown(res: dict[str, Any], machine: str, date: str, command: str, commit: str) -> str:
    s, loads = res["stats"], [r["load"] for r in res["launches"]]
    lines = [f"# Multi-rail: one rail per rank against both on one rail ({date}, {machine})", "",
             f"`{command}` at commit {commit}; load (1-min average at each launch) {min(loads):.1f}-{max(loads):.1f}.",
             "", f"Cluster: 2 nodes in network namespaces, rails rail0 and rail1 each shaped to {res['rate']} "
             f"({res['rate_mbs']:.0f} MB/s); n1 -> n2, 2 ranks a node, {res['count']} x {res['size']} bytes a pair "
             f"a repetition, {res['repeats']} repetitions a launch, {res['rounds']} launches a binding.", "",
             "| binding | repetitions | median MB/s | IQR | min-max | rails the traffic took (n1's tx, MB) |",
             "|---|---|---|---|---|---|"]
    for b in ("plan", "one rail"):
        st = s[b]
        tx = res["tx_mb"][b]
        lines.append(f"| {b} | {st['n']} | {st['median']} | {st['q1']}-{st['q3']} | {st['min']}-{st['max']} | "
                     f"{', '.join(f'{k} {v:.0f}' for k, v in tx.items())} |")
    lines += ["", f"Aggregate bandwidth ratio, plan / one rail: **{res['ratio']:.2f}x** (medians); per round "
              f"(each launch's median against its neighbour's): {', '.join(f'{x:.2f}' for x in res['round_ratios'])}"
              f" (min {min(res['round_ratios']):.2f}). Target >= 1.8x.", "",
              "The interfaces each rank used (FI_TCP_IFACE as the rank saw it, ranks in order): plan "
              f"{res['ifaces']['plan']}, one rail {res['ifaces']['one rail']}.", "",
              "Data checked: in every repetition each receiver's buffer was poisoned before and held its sender's "
              f"pattern after (wrong: {sum(r['wrong_data'] for r in res['launches'])} of "
              f"{sum(len(r['mbs']) for r in res['launches'])} repetitions).", "",
              "| launch | binding | load | repetitions (MB/s) |", "|---|---|---|---|"]
    for i, r in enumerate(res["launches"], 1):
        lines.append(f"| {i} | {r['binding']} | {r['load']} | {', '.join(f'{x:.1f}' for x in r['mbs'])} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=4, help="launches of each binding")
    ap.add_argument("--repeats", type=int, default=5, help="repetitions in each launch")
    ap.add_argument("--size", default="4MiB", help="bytes a message")
    ap.add_argument("--count", type=int, default=8, help="messages a pair a repetition")
    ap.add_argument("--rate", default="200mbit", help="each rail's rate")
    ap.add_argument("--machine", default=f"{platform.node()} ({os.cpu_count()} CPUs)")
    ap.add_argument("--date", default=time.strftime("%Y%m%d"))
    ap.add_argument("--out", help="write PREFIX.json and PREFIX.md")
    a = ap.parse_args(argv)
    size = parse_size(a.size)
    rate_mbs(a.rate)  # refused before a cluster starts
    c = Live(tempfile.mkdtemp(prefix="nmmr-"), nodes=2, rate=a.rate)
    launches = []
    try:
        for i in range(a.rounds):
            for b in (("plan", "one rail") if i % 2 == 0 else ("one rail", "plan")):
                launches.append(launch(c, b, size, a.count, a.repeats))
                r = launches[-1]
                print(f"{b}: median {statistics.median(r['mbs']):.1f} MB/s at load {r['load']}, "
                      f"{r['ifaces']}, tx {r['tx_bytes']}", flush=True)
    finally:
        c.close()
    by = {b: [r for r in launches if r["binding"] == b] for b in ("plan", "one rail")}
    st = {b: stats([x for r in rs for x in r["mbs"]]) for b, rs in by.items()}
    meds = [statistics.median(r["mbs"]) for r in launches]
    round_ratios = [(meds[i] / meds[i + 1]) if launches[i]["binding"] == "plan" else meds[i + 1] / meds[i]
                    for i in range(0, len(launches) - 1, 2)]
    tx = {b: {k: sum(r["tx_bytes"].get(k, 0) for r in rs) / 1e6 / len(rs) for k in rs[0]["tx_bytes"]}
          for b, rs in by.items()}
    res = {"rate": a.rate, "rate_mbs": rate_mbs(a.rate),
           "size": size, "count": a.count, "repeats": a.repeats, "rounds": a.rounds, "stats": st,
           "ratio": st["plan"]["median"] / st["one rail"]["median"], "round_ratios": round_ratios, "tx_mb": tx,
           "ifaces": {b: rs[0]["ifaces"] for b, rs in by.items()}, "launches": launches}
    command = shlex.join(["python3", "benchmarks/multirail.py", *(argv if argv is not None else sys.argv[1:])])
    record(a.out, {"machine": a.machine, "date": a.date, "commit": commit(), "command": command}, res,
           lambda head: markdown(res, a.machine, a.date, command, head["commit"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
