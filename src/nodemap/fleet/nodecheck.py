"""What a node leader runs for the fleet: the node's own check, as one
document (schema nodemap.check/1), plus the test hooks that let ranks on
one machine act as different nodes and inject faults.

INTERIM: until `nodemap check` (issue 14) is on main, `interim_check` measures
only host STREAM triad per NUMA node and the topology, in the same document
shape; it is replaced by the check's own entry function, not a finished
node check.

Test hooks (environment, read only here):
  NODEMAP_FLEET_NODE=NAME      this rank's node name instead of the hostname
                               ("{rank}" in it becomes the MPI rank)
  NODEMAP_FLEET_NODE_DOC=FILE  the node check replays this saved document
                               (its host replaced by the node name)
  NODEMAP_FLEET_SCALE=X        fault injection: every figure of this node X
                               times worse (0.8: 20% less bandwidth)
  NODEMAP_FLEET_HANG=check|join  fault injection: this rank never answers
                               (its node check never returns / it never joins)
"""

from __future__ import annotations

import json
import os
import socket
import time
from typing import Any, Callable

from .. import __version__

NODE_ENV = "NODEMAP_FLEET_NODE"
DOC_ENV = "NODEMAP_FLEET_NODE_DOC"
SCALE_ENV = "NODEMAP_FLEET_SCALE"
HANG_ENV = "NODEMAP_FLEET_HANG"
SCHEMA = "nodemap.check/1"

CheckFn = Callable[[str, str, "str | None"], dict[str, Any]]  # (node name, level, expect file) -> document


def node_name(rank: int) -> str:
    name = os.environ.get(NODE_ENV, "")
    return name.replace("{rank}", str(rank)) if name else socket.gethostname()


def hang_point() -> str:
    return os.environ.get(HANG_ENV, "")


def hang_forever() -> None:
    while True:  # fault injection: a rank that is alive but never answers
        time.sleep(3600)


def run_check(check: CheckFn, node: str, level: str, expect: str | None) -> dict[str, Any]:
    """The node's document, through the hooks."""
    if hang_point() == "check":
        hang_forever()
    path = os.environ.get(DOC_ENV)
    if path:
        with open(path) as f:
            doc = json.load(f)
    else:
        doc = check(node, level, expect)
    doc["host"] = node
    scale = os.environ.get(SCALE_ENV)
    if scale:
        doc = scaled(doc, float(scale))
    return doc


def scaled(doc: dict[str, Any], x: float) -> dict[str, Any]:
    """Every figure x times as good (x < 1: worse), recorded in the document."""
    figs = []
    for f in doc.get("figures", ()):
        f = dict(f)
        f["value"] = f["value"] * x if f.get("higher_is_better", True) else f["value"] / x
        figs.append(f)
    env = dict(doc.get("environment", {}), fault_injected=f"{SCALE_ENV}={x:g}")
    return {**doc, "figures": figs, "environment": env}


def interim_check(node: str, level: str, expect: str | None) -> dict[str, Any]:
    """INTERIM node check (see the module doc): topology + STREAM triad per NUMA node."""
    from ..bench import host_memory
    from ..topology.cpuset import CpuSet
    from ..topology.discover import discover

    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    topo = discover()
    figs, skipped = [], ["interim node check: only host STREAM triad per NUMA node (nodemap check not yet wired)"]
    allowed = CpuSet(os.sched_getaffinity(0))
    complete = True
    for numa in topo.numa_nodes:
        cpus = numa.cpuset & allowed
        if not cpus:
            continue
        try:
            n, _ = host_memory.array_size(topo, cpus, CpuSet([numa.os_index]), "16MiB" if level == "quick" else None)
            (r,) = host_memory.measure(topo, sorted(cpus), n // 8, ["triad"], 5 if level == "quick" else 10,
                                       mem_nodes=CpuSet([numa.os_index]))
        except Exception as e:  # noqa: BLE001 - one node part failing is a skipped figure, not a lost run
            skipped.append(f"STREAM on NUMA{numa.os_index}: {e}")
            complete = False
            continue
        figs.append({"key": f"memory/triad/NUMA{numa.os_index}", "area": "host memory", "label": "STREAM triad",
                     "path": f"NUMA{numa.os_index}", "unit": "GB/s", "value": r.stats.median,
                     "higher_is_better": True, "stats": {"n": r.stats.n, "min": r.stats.min, "max": r.stats.max}})
    return {"schema": SCHEMA, "nodemap_version": __version__, "host": node, "level": level, "started": started,
            "complete": complete, "topology": topo.to_dict(), "environment": {"node_check": "interim"},
            "figures": figs, "findings": [], "skipped": skipped}
