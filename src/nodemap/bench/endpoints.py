"""Typed endpoints of a measurement: a GPU, a NUMA node or a NIC with its
index (DESIGN point 6).

Kinds and saved files spell one GPU "GPU3" or "gpu3" and a NUMA node
"NUMA0"; an Endpoint reads any spelling once and gives the part of a figure
key ("gpu3") and the label ("GPU3"), so keys are derived from endpoints,
never parsed back out of other keys.

"GPU3" is the Topology's GPU 3 (physical index, PCI order). "cuda3" is a
different thing: CUDA device 3 of the run that measured it, which a GPU
kind writes only for a GPU its topology did not know (bench/gpu/devices.py).
CUDA_VISIBLE_DEVICES renumbers CUDA devices (and CUDA orders them fastest
first unless CUDA_DEVICE_ORDER=PCI_BUS_ID): under CUDA_VISIBLE_DEVICES=2,3
"cuda0" is GPU2. So "cuda3" is its own kind of endpoint, never GPU3; a
reader with a Topology maps it by the bus id its results record
(`devices.ordinal_gpus`), else says it is an ordinal.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

_KINDS = {"gpu": "gpu", "cuda": "cuda", "numa": "numa", "nic": "nic"}


@dataclass(frozen=True, order=True)
class Endpoint:
    kind: str  # "gpu" | "cuda" (a CUDA ordinal, not a Topology GPU) | "numa" | "nic"
    index: int

    @property
    def key(self) -> str:
        """As figure keys write it: "gpu3", "numa0"."""
        return f"{self.kind}{self.index}"

    @property
    def label(self) -> str:
        """As people read it: "GPU3", "NUMA0", "cuda3 (CUDA ordinal)"."""
        return f"{self.key} (CUDA ordinal)" if self.kind == "cuda" else f"{self.kind.upper()}{self.index}"

    @property
    def is_gpu(self) -> bool:
        """A GPU, whether the Topology's or a CUDA ordinal: a GPU figure either way, but only a "gpu" is
        the node's GPU of that index (its PCIe link, its health counters)."""
        return self.kind in ("gpu", "cuda")

    @classmethod
    def parse(cls, text: Any) -> "Endpoint | None":
        """Any spelling nodemap writes ("GPU3", "gpu3", "NUMA0"; "cuda3": an ordinal); None for anything else."""
        t = str(text).strip().lower()
        name = t.rstrip("0123456789")
        kind = _KINDS.get(name)
        return cls(kind, int(t[len(name):])) if kind and len(t) > len(name) else None


def of_params(params: dict[str, Any]) -> tuple[Endpoint | None, Endpoint | None]:
    """(source, destination) of a Result from its parameters, as the kinds
    name them: src/dst (copies, GPU latency), cpu_node/mem_node (NUMA), the
    one GPU of gpus (HBM)."""
    if "src" in params or "dst" in params:
        return Endpoint.parse(params.get("src", "")), Endpoint.parse(params.get("dst", ""))
    i, j = params.get("cpu_node"), params.get("mem_node")
    if isinstance(i, int) and isinstance(j, int):
        return Endpoint("numa", i), Endpoint("numa", j)
    gpus = params.get("gpus")
    if isinstance(gpus, list) and len(gpus) == 1:
        g = Endpoint.parse(gpus[0])
        return g, g
    return None, None


def renamed(params: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
    """`params` with the endpoints `of_params` reads renamed by `names` ({"cuda0": "GPU2"})."""
    out = dict(params)
    for k in ("src", "dst"):
        if isinstance(out.get(k), str) and out[k] in names:
            out[k] = names[out[k]]
    if isinstance(out.get("gpus"), list):
        out["gpus"] = [names.get(g, g) if isinstance(g, str) else g for g in out["gpus"]]
    return out


def of_key(key: str) -> tuple[Endpoint | None, Endpoint | None]:
    """The endpoints a figure key ends in ("h2d/numa1->gpu0"): only for
    figures saved before figures carried their endpoints (check/figures.py)."""
    tail = key.rsplit("/", 1)[-1]
    a, arrow, b = tail.partition("->")
    return (Endpoint.parse(a), Endpoint.parse(b)) if arrow else (None, None)
