"""A node's Slurm configuration from its Topology: gres.conf lines for GPUs
and NICs with their local cores, and the node's features.

gres.conf's Cores= are logical core indexes (Core L#, socket by socket, as
`lstopo -l` numbers them), not OS CPU numbers; Links= lists, for each GPU,
its NVLink count to every GPU in order (-1 itself, 0 none), GPUs on a
switch fabric counted as linked by the thinner side's switch links (what
`nodemap topo --matrix` shows as NV#). NVIDIA GPUs are /dev/nvidiaN, N their
place in PCI order among the node's NVIDIA GPUs (the minor number of NVIDIA's
standard driver), not their physical index, which counts every vendor's GPUs.

Linear in the node's devices (and in Links=' own length): the links, local
CPUs and cores are looked up from one pass each, not device by device
(2,000 GPUs took 21.5 s, benchmarks/slurm_config_speed.py). Every value is
a word of gres.conf's key=value syntax, checked last (`Gres.line`): a name
from a topology file cannot add a line or a key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import NodemapError
from ..mapping.emit import runtime_indexes
from ..text import shown
from ..topology.cpuset import CpuSet
from ..topology.model import GPU, NIC, Topology
from ..topology.paths import NvLinks, cpu_affinities
from ..topology.render import logical_cores

# A value of gres.conf (and slurm.conf): no space, '#' (a comment), '=' or quote; Slurm's own words and lists
_WORD = re.compile(r"[A-Za-z0-9_.,:/+-]+")


@dataclass(frozen=True)
class Gres:
    name: str  # "gpu" | "nic"
    type: str
    file: str = ""  # device file, "" for a count-only GRES
    cores: str = ""  # logical core list, "" when the device's locality is unknown
    links: str = ""  # "-1,12,12,...", "" without NVLink

    def line(self) -> str:
        parts = [("Name", self.name), ("Type", self.type), ("File", self.file) if self.file else ("Count", "1")]
        parts += [(k, v) for k, v in (("Cores", self.cores), ("Links", self.links)) if v]
        return " ".join(f"{k}={word(k, v)}" for k, v in parts)


def word(key: str, value: str) -> str:
    """`value` of gres.conf's (slurm.conf's) `key`, refused unless it is one word of its syntax."""
    if not _WORD.fullmatch(value):
        raise NodemapError(f"{key}={shown(value)} is not one word of Slurm's key=value syntax: fix the "
                           "topology's names (device names are letters, digits, _ . -)")
    return value


TYPE_MAX = 64  # characters of a GRES type or feature made from a model name


def type_name(model: str) -> str:
    """A GRES type or feature name from a model ("NVIDIA A100-SXM4-40GB" ->
    "a100-sxm4-40gb"): lower case, vendor words dropped, nothing Slurm's
    parsers split on (spaces, commas, colons, '='), at most TYPE_MAX characters."""
    words = [w for w in model.lower().split() if w not in ("nvidia", "tesla", "amd", "intel", "(r)", "corporation")]
    return re.sub(r"[^a-z0-9._-]+", "_", "-".join(words))[:TYPE_MAX].strip("_") or "unknown"


class _Cores:
    """Logical core indexes of devices' local CPUs, from one pass over the cores."""

    def __init__(self, topo: Topology) -> None:
        lid = logical_cores(topo)
        self.of_pu = {p: lid[c.cpuset.first()] for c in topo.cores if c.cpuset and c.cpuset.first() in lid
                      for p in c.cpuset}

    def near(self, cpus: CpuSet) -> str:
        """The logical indexes of the cores with a PU among `cpus`."""
        return CpuSet(self.of_pu[p] for p in cpus if p in self.of_pu).format()


_RENDER = re.compile(r"renderD[0-9]{1,6}")


def _gpu_files(topo: Topology) -> dict[int, str]:
    """Each GPU's device file by index: NVIDIA's minor number counts NVIDIA's GPUs only (not an iGPU
    before them: emit.runtime_index); other GPUs their DRM render node."""
    minor, out = runtime_indexes(topo), {}
    for g in topo.gpus:
        render = sorted(n for n in g.os_names if n.startswith("renderD"))
        if g.vendor != "NVIDIA" and render and not _RENDER.fullmatch(render[0]):
            raise NodemapError(f"GPU {g.index}: {shown(render[0])} is not a DRM render node (renderD128): fix the "
                               "topology's os_names")
        out[g.index] = f"/dev/nvidia{minor[g.index]}" if g.vendor == "NVIDIA" else \
            f"/dev/dri/{render[0]}" if render else ""
    return out


def gpu_links(topo: Topology, g: GPU, links: NvLinks | None = None) -> str:
    """Links= of `g`: its NVLink count to every GPU in order (-1 itself), "" without NVLink."""
    links = links or NvLinks(topo)
    if not (links.switch.get(g.key) or any(g.key in pair for pair in links.direct)):
        return ""  # no NVLink of its own: no pair to count (a node of thousands needs no n x n walk)
    counts = [-1 if o.index == g.index else links.count(g.key, o.key) for o in topo.gpus]
    return ",".join(map(str, counts)) if any(c > 0 for c in counts) else ""


def gres(topo: Topology) -> list[Gres]:
    links, near, cpus, files = NvLinks(topo), _Cores(topo), cpu_affinities(topo), _gpu_files(topo)
    out = [Gres("gpu", type_name(g.model), files[g.index], near.near(cpus[g.key]), gpu_links(topo, g, links))
           for g in topo.gpus]
    out += [Gres("nic", _nic_type(n), "", near.near(cpus[n.key])) for n in topo.nics if _fabric(n)]
    return out


def _fabric(n: NIC) -> bool:
    """NICs a job picks: RDMA devices (a NIC named for its netdev, with no
    RDMA device, is the host's Ethernet)."""
    return n.kind in ("InfiniBand", "Slingshot", "OmniPath") or (bool(n.ports) and n.name not in n.netdevs)


def _nic_type(n: NIC) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", n.name)[:TYPE_MAX]


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
    out = [f for f in dict.fromkeys(out) if f]
    bad = next((f for f in out if not _FEATURE.fullmatch(f)), None)
    if bad is not None:  # the last check: Features= and --constraint split on ',', '&', '|', '[', '*'...
        raise NodemapError(f"feature {shown(bad)} is not a word Slurm's Features= takes: fix the topology's names")
    return out


_FEATURE = re.compile(r"[a-z0-9._-]{1,%d}" % (TYPE_MAX + 16))


def _link_class(topo: Topology) -> str:
    """'nvlink-nv12' (the fewest links between any two GPUs, every pair
    linked), 'nvlink-partial' (some pairs only), 'xgmi', or 'pcie'."""
    gpus = topo.gpus
    if len(gpus) < 2:
        return "pcie" if not any(ln.kind.startswith("NVLink") for ln in topo.links) else "nvlink"
    fewest, linked = NvLinks(topo).fewest([g.key for g in gpus])
    if fewest:
        return f"nvlink-nv{fewest}"
    if linked:
        return "nvlink-partial"
    return "xgmi" if any(ln.kind == "xGMI" for ln in topo.links) else "pcie"


def merge_note(name: str, what: str) -> str:
    """The comment that says where `what` (Features=, Gres=) goes: slurm.conf
    holds one line per node, and a second NodeName=NAME line beside the
    node's own stops slurmctld and every slurmd ("Duplicated NodeHostName")."""
    return (f"# slurm.conf: add {what} to NodeName={name}'s existing line (a second NodeName={name} line is fatal: "
            "Duplicated NodeHostName)")


def features_line(topo: Topology) -> str:
    """The `Features=...` word to add to the node's slurm.conf line."""
    return f"Features={word('Features', ','.join(features(topo)))}"
