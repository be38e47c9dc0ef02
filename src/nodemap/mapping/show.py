"""What binding is really in effect for a rank, and verdicts on it.

`own_row` reads this process (affinity, the PU it runs on, memory policy,
the GPUs its environment lets it see, NIC and thread variables); `judge`
adds verdicts over all rows of a job (PUs shared between ranks of one node
need every row); `table` prints them sorted by node and rank, like OLCF's
hello_jobstep or Cray's xthi.
"""

from __future__ import annotations

import os
import socket
from typing import Any, Mapping

from ..text import is_decimal, table as columns
from .. import env as launcher_env
from ..topology.cpuset import CpuSet

NIC_VARS = ("NODEMAP_NIC", *launcher_env.NIC_STEERING, "MPICH_OFI_NIC_POLICY", "FI_PROVIDER")
THREAD_VARS = ("OMP_NUM_THREADS", "OMP_PLACES", "OMP_PROC_BIND")


def own_row(topo, env: Mapping[str, str], rank: int | None = None, threads: bool = False) -> dict[str, Any]:
    """This process's binding as a JSON-ready dict (verdicts come from `judge`);
    with `threads`, also one entry per OpenMP thread (nodemap.mapping.threads)."""
    from .. import native
    from .. import launcher

    try:
        lr = launcher.detect(env)
        local = lr.rank
    except Exception:  # no launcher: a lone process is its node's rank 0
        local = 0
    try:
        mode, nodes = native.get_mempolicy()
        cpu = native.current_cpu()
    except Exception as e:  # no native library (NodemapError) or a refused call: say so, keep reporting
        mode, nodes, cpu = f"unknown ({e})", [], -1
    gpus, gpu_note = visible_gpus_checked(topo, env)
    nic_env = {k: env[k] for k in NIC_VARS if k in env}
    row = {
        "host": launcher.node_name(env),  # Slurm's node: nodes sharing a host are told apart
        "hostname": socket.gethostname(),
        "rank": rank if rank is not None else (launcher_env.global_rank(env) or 0),
        "local_rank": local,
        "pid": os.getpid(),
        "cpus": CpuSet(os.sched_getaffinity(0)).format(),
        "cpu": cpu,
        "mem_policy": mode,
        "mem_nodes": CpuSet(nodes).format(),
        "gpus": gpus,
        "gpu_note": gpu_note,
        "planned_gpus": env.get("NODEMAP_GPUS"),
        "nic_env": nic_env,
        "nic_note": nics_checked(topo, nic_env),
        "thread_env": {k: env[k] for k in THREAD_VARS if k in env},
        "verdicts": [],
    }
    if threads:  # after the process's own binding is read: the runtime binds this thread too
        from . import threads as omp

        row["threads"], row["threads_note"] = omp.openmp_rows()
    return row


def visible_gpus_checked(topo, env: Mapping[str, str]) -> tuple[list[dict[str, Any]], str]:
    """The GPUs this environment lets CUDA/ROCm see, by physical index, with
    UUID and NUMA node, and what is wrong with the variables ("" if nothing):
    an entry that names no GPU of this node (the runtime ignores it and every
    later one), or a variable naming GPUs of a vendor the node lacks."""
    from ..env import GPU_VISIBILITY_OF
    from ..topology import paths
    from ..topology.nvml import hidden_gpus

    hidden, _, notes = hidden_gpus(topo, env)
    out = []
    for vendor, var in GPU_VISIBILITY_OF.items():
        gpus = [g for g in topo.gpus if g.vendor.upper() == vendor]
        if not gpus and env.get(var, "").strip(" ,") and not (vendor == "NVIDIA" and any(
                g.vendor.upper() == "AMD" for g in topo.gpus)):  # HIP reads CUDA_VISIBLE_DEVICES too
            notes.append(f"{var}={env[var][:40]} names GPUs but this node has no {vendor} GPU")
        for g in sorted(gpus, key=lambda g: g.index):
            if g.index not in hidden:
                numa = paths.device_numa(topo, g.key)
                out.append({"index": g.index, "uuid": g.uuid, "numa": numa, "vendor": g.vendor})
    return out, "; ".join(notes)


def nics_checked(topo, nic_env: Mapping[str, str]) -> str:
    """What is wrong with the NICs in effect against the plan's (NODEMAP_NIC), "" if nothing: a
    steering variable that names other NICs (changed after nodemap run), a planned NIC this node
    lacks or whose ports are all down."""
    from .devices import nic_up

    planned = [n for n in nic_env.get("NODEMAP_NIC", "").split(",") if n]
    if not planned:
        return ""
    known = {n.name: n for n in topo.nics}
    by_netdev = {d: n.name for n in topo.nics for d in n.netdevs}
    notes = []
    # names, a ":port" after RDMA ones, NCCL's "=" for exact names (a leading "^" excludes: no choice to check);
    # FI_TCP_IFACE takes one interface
    for var in launcher_env.NIC_STEERING:
        value = nic_env.get(var, "").strip()
        if not value or value.startswith("^"):
            continue
        named = {by_netdev.get(x, x) for x in (w.split(":")[0] for w in value.lstrip("=").split(",")) if x}
        if not (named <= set(planned) if var == "FI_TCP_IFACE" else named == set(planned)):
            notes.append(f"{var}={value[:40]} steers to {','.join(sorted(named))}, the plan gave "
                         f"{','.join(planned)} (NODEMAP_NIC): the variable was changed after nodemap run")
    missing = [n for n in planned if n not in known]
    down = [n for n in planned if n in known and not nic_up(known[n])]
    if missing:
        notes.append(f"planned NIC(s) {','.join(missing)} are not NICs of this node")
    if down:
        notes.append(f"planned NIC(s) {','.join(down)} are down")
    return "; ".join(notes)


def judge(rows: list[dict[str, Any]], topo) -> list[dict[str, Any]]:
    """Rows with their verdicts filled in (empty: the binding is clean)."""
    for r in rows:
        r["verdicts"] = _own_verdicts(r, topo) + _shared(r, rows)
    return rows


def _own_verdicts(r: dict[str, Any], topo) -> list[str]:
    cpus = CpuSet.parse(r["cpus"])
    homes = topo.numa_of(cpus) if topo.numa_nodes else CpuSet()
    out = []
    far = [g for g in r["gpus"] if g["numa"] is not None and g["numa"] >= 0 and homes and g["numa"] not in homes]
    for g in far:
        out.append(f"GPU {g['index']} (NUMA {g['numa']}) is not local to the rank's CPUs (NUMA {homes.format()})")
    if len(homes) > 1:
        out.append(f"CPUs span NUMA domains {homes.format()}")
    if r.get("gpu_note"):
        out.append(r["gpu_note"])
    if r.get("nic_note"):
        out.append(r["nic_note"])
    planned = r.get("planned_gpus")
    if planned is not None:
        seen = ",".join(str(g["index"]) for g in sorted(r["gpus"], key=lambda g: g["index"]))
        if seen != ",".join(sorted(planned.split(","), key=lambda x: int(x) if x.isdecimal() else -1)):
            out.append(f"sees GPU(s) {seen or 'none'}, the plan gave {planned} (NODEMAP_GPUS): "
                       "CUDA_VISIBLE_DEVICES was changed after nodemap run")
    if r.get("threads"):
        from .threads import verdicts

        out += verdicts(r["threads"], set(cpus))
    out += _thread_count_verdicts(r["thread_env"].get("OMP_NUM_THREADS"), len(cpus))
    return out


def _thread_count_verdicts(value: str | None, npus: int) -> list[str]:
    """OMP_NUM_THREADS is a positive count, or a list of them for nested
    levels ("8,2"); anything else the OpenMP runtime rejects or ignores."""
    if value is None:
        return []
    levels = value.strip().split(",")
    if not all(is_decimal(x.strip(), 9) and int(x) > 0 for x in levels):  # ASCII digits only, as the runtime
        return [f"OMP_NUM_THREADS={value[:20]!r} is not a positive count (or list of them): "
                "the OpenMP runtime ignores or rejects it"]
    if int(levels[0]) > npus:
        return [f"{int(levels[0])} threads on {npus} PU(s)"]
    return []


def _shared(r: dict[str, Any], rows: list[dict[str, Any]]) -> list[str]:
    mine = CpuSet.parse(r["cpus"])
    others = [o for o in rows if o is not r and o["host"] == r["host"] and not mine.isdisjoint(CpuSet.parse(o["cpus"]))]
    if not others:
        return []
    return ["PUs shared with rank(s) " + ",".join(str(o["rank"]) for o in sorted(others, key=lambda o: o["rank"]))]


def sort_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: (r["host"], r["rank"]))


def _nic_cell(nic_env: Mapping[str, str]) -> str:
    """The plan's NICs (NODEMAP_NIC), marked `(no NIC variable)` when no
    library variable steers traffic to them (plain Ethernet: sockets use
    the routing table); without NODEMAP_NIC, the variables themselves."""
    steering = {k: v for k, v in nic_env.items() if k != "NODEMAP_NIC"}
    if "NODEMAP_NIC" in nic_env:
        return nic_env["NODEMAP_NIC"] + ("" if steering else " (no NIC variable)")
    return " ".join(f"{k}={v}" for k, v in steering.items()) or "-"


def table(rows: list[dict[str, Any]]) -> str:
    head = ("host", "rank", "local", "PUs", "on", "memory", "GPUs", "NIC", "threads", "verdict")
    lines = [head]
    for r in sort_rows(rows):
        gpus = ",".join(f"{g['index']}(N{g['numa']})" for g in r["gpus"]) or "-"
        nic = _nic_cell(r["nic_env"])
        t = r["thread_env"]
        threads = f"{t.get('OMP_NUM_THREADS', '-')}/{t.get('OMP_PROC_BIND', '-')}"
        mem = f"{r['mem_policy']}:{r['mem_nodes']}" if r["mem_nodes"] else r["mem_policy"]
        lines.append((r["host"], str(r["rank"]), str(r["local_rank"]), r["cpus"], str(r["cpu"]), mem, gpus, nic,
                      threads, "; ".join(r["verdicts"]) or "ok"))
    text = columns(lines[0], lines[1:], right=False, rule=False) + "\n"
    if any("threads" in r for r in rows):
        text += "\n" + thread_table(rows)
    return text


def thread_table(rows: list[dict[str, Any]]) -> str:
    """One line per OpenMP thread of every rank (like xthi): where it runs now
    and where it may run."""
    lines = [("host", "rank", "thread", "tid", "on", "PUs")]
    notes = set()
    for r in sort_rows(rows):
        for t in r.get("threads", []):
            lines.append((r["host"], str(r["rank"]), str(t["thread"]), str(t["tid"]), str(t["cpu"]),
                          CpuSet(t["cpus"]).format()))
        if r.get("threads_note"):
            notes.add(r["threads_note"])
    text = columns(lines[0], lines[1:], right=False, rule=False) + "\n"
    return text + "".join(f"note: {n}\n" for n in sorted(notes))
