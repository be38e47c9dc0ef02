"""A node's Slurm configuration from its Topology: gres.conf lines for GPUs
and NICs with their local cores, and the node's features.

gres.conf's Cores= are logical core indexes (Core L#, socket by socket, as
`lstopo -l` numbers them), not OS CPU numbers; Links= lists, for each GPU,
its NVLink count to every GPU in order (-1 itself, 0 none), GPUs on a
switch fabric counted as linked by the thinner side's switch links (what
`nodemap topo --matrix` shows as NV#). NVIDIA GPUs are /dev/nvidiaN, N their
place in PCI order among the node's NVIDIA GPUs (the minor number of NVIDIA's
standard driver), not their physical index, which counts every vendor's GPUs.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

from ..mapping.emit import runtime_index
from ..topology.cpuset import CpuSet
from ..topology.model import GPU, NIC, Topology
from ..topology.paths import cpu_affinity, nvlink
from ..topology.render import logical_cores


@dataclass(frozen=True)
class Gres:
    name: str  # "gpu" | "nic"
    type: str
    file: str = ""  # device file, "" for a count-only GRES
    cores: str = ""  # logical core list, "" when the device's locality is unknown
    links: str = ""  # "-1,12,12,...", "" without NVLink

    def line(self) -> str:
        parts = [f"Name={self.name}", f"Type={self.type}"]
        parts.append(f"File={self.file}" if self.file else "Count=1")
        if self.cores:
            parts.append(f"Cores={self.cores}")
        if self.links:
            parts.append(f"Links={self.links}")
        return " ".join(parts)

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


def type_name(model: str) -> str:
    """A GRES type or feature name from a model ("NVIDIA A100-SXM4-40GB" ->
    "a100-sxm4-40gb"): lower case, vendor words dropped, nothing Slurm's
    parsers split on (spaces, commas, colons, '=')."""
    words = [w for w in model.lower().split() if w not in ("nvidia", "tesla", "amd", "intel", "(r)", "corporation")]
    return re.sub(r"[^a-z0-9._-]+", "_", "-".join(words)).strip("_") or "unknown"


def local_cores(topo: Topology, key: str) -> str:
    """The logical indexes of the cores with a PU among the device's local CPUs."""
    cpus = cpu_affinity(topo, key)
    if not cpus:
        return ""
    lid = logical_cores(topo)
    return CpuSet(lid[c.cpuset.first()] for c in topo.cores
                  if c.cpuset and not c.cpuset.isdisjoint(cpus) and c.cpuset.first() in lid).format()


def _gpu_file(topo: Topology, g: GPU) -> str:
    if g.vendor == "NVIDIA":  # the driver's minor number counts NVIDIA's GPUs only (not an iGPU before them)
        return f"/dev/nvidia{runtime_index(topo, g)}"
    render = sorted(n for n in g.os_names if n.startswith("renderD"))
    return f"/dev/dri/{render[0]}" if render else ""


def gpu_links(topo: Topology, g: GPU) -> str:
    counts = [-1 if o.index == g.index else nvlink(topo, g.key, o.key)[0] for o in topo.gpus]
    return ",".join(map(str, counts)) if any(c > 0 for c in counts) else ""


def gres(topo: Topology) -> list[Gres]:
    out = [Gres("gpu", type_name(g.model), _gpu_file(topo, g), local_cores(topo, g.key), gpu_links(topo, g))
           for g in topo.gpus]
    out += [Gres("nic", _nic_type(n), "", local_cores(topo, n.key)) for n in topo.nics if _fabric(n)]
    return out


def _fabric(n: NIC) -> bool:
    """NICs a job picks: RDMA devices (a NIC named for its netdev, with no
    RDMA device, is the host's Ethernet)."""
    return n.kind in ("InfiniBand", "Slingshot", "OmniPath") or (bool(n.ports) and n.name not in n.netdevs)


def _nic_type(n: NIC) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", n.name)


def gres_counts(items: list[Gres]) -> str:
    """slurm.conf's Gres= for the node: 'gpu:a100:8,nic:mlx5_0:1,...'."""
    counts: dict[tuple[str, str], int] = {}
    for g in items:
        counts[(g.name, g.type)] = counts.get((g.name, g.type), 0) + 1
    return ",".join(f"{n}:{t}:{c}" for (n, t), c in counts.items())


_NIC_WORD = {"InfiniBand": "ib", "Ethernet": "eth", "Slingshot": "slingshot", "OmniPath": "opa"}


def features(topo: Topology) -> list[str]:
    """Node features: GPU model and count, NVLink class, NIC count and rate,
    NUMA layout; each a word Slurm accepts in Features= and --constraint."""
    out = []
    models = sorted({type_name(g.model) for g in topo.gpus})
    out += models
    if topo.gpus:
        out.append(f"gpus{len(topo.gpus)}")
        out.append(_link_class(topo))
    nics = [n for n in topo.nics if _fabric(n)]
    if nics:
        out.append(f"nics{len(nics)}")
        for kind in sorted({n.kind for n in nics}):
            rates = [p.rate_gbps for n in nics if n.kind == kind for p in n.ports if p.rate_gbps]
            word = _NIC_WORD.get(kind, "nic")
            out.append(f"{word}{max(rates):g}g" if rates else word)
    cpu_nodes = [n for n in topo.host_numa_nodes if n.cpuset]
    out.append(f"sockets{len(topo.packages)}" if topo.packages else "")
    out.append(f"numa{len(cpu_nodes)}")
    return [f for f in dict.fromkeys(out) if f]


def _link_class(topo: Topology) -> str:
    """'nvlink-nv12' (the fewest links between any two GPUs, every pair
    linked), 'nvlink-partial' (some pairs only), 'xgmi', or 'pcie'."""
    gpus = topo.gpus
    if len(gpus) < 2:
        return "pcie" if not any(ln.kind.startswith("NVLink") for ln in topo.links) else "nvlink"
    counts = [nvlink(topo, a.key, b.key)[0] for i, a in enumerate(gpus) for b in gpus[i + 1:]]
    if all(counts):
        return f"nvlink-nv{min(counts)}"
    if any(counts):
        return "nvlink-partial"
    return "xgmi" if any(ln.kind == "xGMI" for ln in topo.links) else "pcie"


def node_line(name: str, topo: Topology, items: list[Gres] | None = None) -> str:
    """slurm.conf's NodeName line: features, and the Gres= count when given."""
    parts = [f"NodeName={name}"]
    if items:
        parts.append(f"Gres={gres_counts(items)}")
    parts.append(f"Features={','.join(features(topo))}")
    return " ".join(parts)
