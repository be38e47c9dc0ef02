"""Synthetic node check documents (schema nodemap.check/1) for the fleet's
tests and benchmarks/fleet_scale.py: an 8-GPU node shape, values with a
chosen noise, and the faults to inject (a slow figure, a GPU gone, an
NVLink down, a NIC on another NUMA node, a GPU's PCIe link narrower)."""

from __future__ import annotations

import random
from typing import Any

GPU_MODEL = "NVIDIA H100 80GB HBM3"
# The keys, labels and paths `nodemap check` emits (benchmarks/results/check_h100_20261123/full/check.json,
# check/figures.py): key -> (area, label, unit, higher_is_better, typical value, path)
NODE_FIGURES = {
    "host/stream/triad": ("host memory", "STREAM triad, 112 threads (1/core)", "GB/s", True, 330.0,
                          "NUMA0 cores(0-55) -> NUMA0 memory (first touch)"),
    "host/latency/L1d": ("latency", "load latency, L1d (16 KiB working set)", "ns", False, 2.2, "CPU0 (NUMA0) -> L1d"),
    "host/latency/L2": ("latency", "load latency, L2 (512 KiB working set)", "ns", False, 8.2, "CPU0 (NUMA0) -> L2"),
    "host/latency/L3": ("latency", "load latency, L3 (32768 KiB working set)", "ns", False, 40.0, "CPU0 (NUMA0) -> L3"),
    "host/latency/DRAM": ("latency", "load latency, DRAM (1228800 KiB working set)", "ns", False, 110.0,
                          "CPU0 (NUMA0) -> NUMA0 memory"),
    "nccl/all_reduce": ("NCCL", "NCCL all_reduce busbw, 8 GPUs, 1 GiB", "GB/s", True, 480.0, "GPU0-7 NVSwitch"),
}
# per GPU i (NUMA node n = i // 4): key template -> spec
GPU_FIGURES = {
    "gpu/{i}/hbm_triad": ("GPU memory", "GPU{i} HBM triad (float64)", "GB/s", True, 3000.0, "GPU{i} HBM"),
    "h2d/numa{n}->gpu{i}": ("host<->GPU", "H2D NUMA{n} -> GPU{i} (copy engine)", "GB/s", True, 55.0,
                            "NUMA{n} memory -> GPU{i}"),
    "d2h/gpu{i}->numa{n}": ("host<->GPU", "D2H GPU{i} -> NUMA{n} (copy engine)", "GB/s", True, 54.0,
                            "GPU{i} -> NUMA{n} memory"),
}
P2P = ("d2d/gpu{i}->gpu{j}", ("GPU<->GPU", "D2D GPU{i} -> GPU{j} (copy engine)", "GB/s", True, 370.0,
                              "GPU{i} -> GPU{j} NVLink"))


def topology(gpus: int = 8, *, absent: int | None = None, nvlink: dict[int, int] | None = None,
             nic_numa: dict[str, int] | None = None, width: dict[int, int] | None = None) -> dict[str, Any]:
    """The JSON form of a topology with the fields the fleet compares."""
    nvlink, nic_numa, width = nvlink or {}, nic_numa or {}, width or {}
    shown = [i for i in range(gpus) if i != absent]
    return {
        "machine": {"hostname": "x"},
        "packages": [{"os_index": 0, "cpu_model": "Intel Xeon Platinum 8480+"},
                     {"os_index": 1, "cpu_model": "Intel Xeon Platinum 8480+"}],
        "numa_nodes": [{"os_index": 0}, {"os_index": 1}],
        "pus": [{"os_index": i, "online": True} for i in range(112)],
        "gpus": [{"index": i, "model": GPU_MODEL, "pcie_gen": 5, "pcie_width": width.get(i, 16),
                  "numa_node": i // 4} for i in shown],
        "links": [{"a": f"GPU{i}", "b": "NVSwitch", "kind": "NVLink", "count": nvlink.get(i, 18)} for i in shown],
        "nics": [{"name": f"mlx5_{k}", "kind": "InfiniBand", "numa_node": nic_numa.get(f"mlx5_{k}", k // 2),
                  "pci_bus_id": "", "ports": [{"number": 1, "state": "ACTIVE", "rate_gbps": 400}]}
                 for k in range(4)],
        "pci_devices": [],
    }


def figure(key: str, spec: tuple, value: float, **names: int) -> dict[str, Any]:
    area, label, unit, hib, _, path = spec
    return {"key": key.format(**names), "area": area, "label": label.format(**names), "path": path.format(**names),
            "unit": unit, "value": value, "higher_is_better": hib}


def node_doc(host: str, rng: random.Random, *, gpus: int = 8, noise: float = 0.01,
             slow: dict[str, float] | None = None, absent: int | None = None, **topo: Any) -> dict[str, Any]:
    """One node's check document; `slow` scales the named figure keys."""
    slow = slow or {}
    figs = []

    def add(key: str, spec: tuple, **names: int) -> None:
        v = spec[4] * rng.gauss(1.0, noise) * slow.get(key.format(**names), 1.0)
        figs.append(figure(key, spec, v, **names))

    for key, spec in NODE_FIGURES.items():
        add(key, spec)
    shown = [i for i in range(gpus) if i != absent]
    for i in shown:
        for key, spec in GPU_FIGURES.items():
            add(key, spec, i=i, n=i // 4)
        for j in shown:
            if i != j:
                add(*P2P, i=i, j=j)
    return {"schema": "nodemap.check/1", "host": host, "level": "quick", "complete": True,
            "topology": topology(gpus, absent=absent, **topo), "environment": {}, "figures": figs,
            "findings": [], "skipped": []}


def fleet_docs(n: int, seed: int = 1, noise: float = 0.01) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """n node documents with one of each injected fault per 100 nodes
    (at least one each); returns the docs and node -> the fault injected."""
    rng = random.Random(seed)
    faults: dict[str, str] = {}
    kinds = ["hbm", "h2d", "p2p", "latency", "absent", "nvlink", "numa", "width"]
    stride = max(1, n // max(1, (n // 100) * len(kinds) or len(kinds)))
    injected = {}
    for k, idx in zip(kinds * max(1, n // 100), range(stride // 2, n, stride)):
        injected[idx] = k
    docs = []
    for i in range(n):
        host = f"node{i:05d}"
        kind = injected.get(i)
        kw: dict[str, Any] = {}
        if kind == "hbm":
            kw["slow"] = {"gpu/5/hbm_triad": 0.81}
        elif kind == "h2d":
            kw["slow"] = {"h2d/numa0->gpu2": 0.6}
        elif kind == "p2p":
            kw["slow"] = {"d2d/gpu5->gpu6": 0.85}
        elif kind == "latency":
            kw["slow"] = {"host/latency/DRAM": 1.3}
        elif kind == "absent":
            kw["absent"] = 7
        elif kind == "nvlink":
            kw["nvlink"] = {5: 12}
        elif kind == "numa":
            kw["nic_numa"] = {"mlx5_0": 1}
        elif kind == "width":
            kw["width"] = {3: 8}
        if kind:
            faults[host] = kind
        docs.append(node_doc(host, rng, noise=noise, **kw))
    return docs, faults
