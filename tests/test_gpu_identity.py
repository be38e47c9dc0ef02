"""A GPU's identity in results, figures and reports: the Topology's GPU (its
physical index, PCI order), never a CUDA ordinal read as one.

"cuda0" is CUDA device 0 of the run that measured it: CUDA_VISIBLE_DEVICES
renumbers the GPUs (and CUDA orders them fastest first unless
CUDA_DEVICE_ORDER=PCI_BUS_ID), so under CUDA_VISIBLE_DEVICES=2,1 "cuda0"
is the node's GPU2. The GPU kinds name a GPU by the Topology (bus id, then
UUID: bench/gpu/devices.py) and write "cudaN" only for a GPU their topology
did not know; a check or report maps it by the bus id the ResultSet's
environment records for it, and otherwise keeps it a CUDA ordinal.
"""

from __future__ import annotations

import types

import pytest

from nodemap.bench.endpoints import Endpoint
from nodemap.bench.gpu import devices
from nodemap.bench.results import ResultSet, make_result
from nodemap.check import expectations, inventory
from nodemap.check.document import CheckDoc
from nodemap.report import plots

import nodes
from test_paths import sample_node

GEN5 = (63.0, "PCIe Gen5 x16 (3.938 GB/s per lane per direction)")


def visible(topo, physical):
    """A CuPy whose CUDA device i is the Topology's GPU physical[i] (CUDA_VISIBLE_DEVICES=2,1 -> [2, 1])."""
    def props(d):
        dom, bus, rest = topo.gpus[physical[d]].pci_bus_id.split(":")
        return {"name": b"NVIDIA H200", "totalGlobalMem": 141 << 30, "pciDomainID": int(dom, 16),
                "pciBusID": int(bus, 16), "pciDeviceID": int(rest.split(".")[0], 16), "uuid": b""}

    rt = types.SimpleNamespace(getDeviceProperties=props, getDeviceCount=lambda: len(physical),
                               runtimeGetVersion=lambda: 12040, driverGetVersion=lambda: 12040)
    return types.SimpleNamespace(__version__="fake", cuda=types.SimpleNamespace(runtime=rt))


def h2d_results(devs, gbs, environment):
    """What `bench copies` records for a host->GPU copy from NUMA1 to each device (its .key), GB/s."""
    rs = ResultSet("bench copies", environment=environment)
    for d, v in zip(devs, gbs):
        rs.add(make_result("copies", "h2d_ce", "GB/s", [v, v * 0.99, v * 0.995], verified=True,
                           params={"src": "NUMA1", "dst": d.key, "host_node": 1},
                           path=f"NUMA1 memory -> {d.key}", path_class="NODE", peak=GEN5[0], peak_source=GEN5[1]))
    return rs


def judged_copy(monkeypatch, with_devices: bool):
    """CUDA_VISIBLE_DEVICES=2,1 on a node whose GPU0 has a degraded PCIe link; the copy kind's topology
    was unavailable, so it named the GPUs cuda0 (physical GPU2, slow) and cuda1 (GPU1)."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,1")
    topo = sample_node()
    topo = nodes.with_links(topo, {g.pci_bus_id: (4 if g.index == 0 else 5, 16, 5, 16) for g in topo.gpus})
    cp = visible(topo, [2, 1])
    devs = devices.gpus(cp, None, None)
    assert [d.key for d in devs] == ["cuda0", "cuda1"]
    env = devices.environment(cp, devs) if with_devices else {"CUDA_VISIBLE_DEVICES": "2,1"}
    doc = CheckDoc(level="quick", topology=topo, expectations=expectations.shipped(),
                   results=[h2d_results(devs, [24.0, 52.0], env)], checks=inventory.pcie_links(topo))
    doc.rejudge()
    return doc


def test_a_cuda_ordinal_without_its_bus_id_is_not_the_topologys_gpu(monkeypatch):
    """was: "cuda0" (physical GPU2 here) was judged as GPU0: key h2d/numa1->gpu0, and the slow copy blamed
    on GPU0's degraded PCIe link."""
    doc = judged_copy(monkeypatch, with_devices=False)
    keys = {j.figure.key: j for j in doc.judged}
    assert sorted(keys) == ["h2d/numa1->cuda0", "h2d/numa1->cuda1"]
    slow = keys["h2d/numa1->cuda0"]
    assert slow.verdict == "fail" and slow.figure.endpoints()[1] == Endpoint("cuda", 0)
    f = next(f for f in doc.findings if slow.figure.key in f.keys)
    assert "inventory/pcie/gpu0" not in f.keys and "GPU0" not in f.text
    cells, rows, cols = plots._matrix(doc, "h2d/")
    assert rows == ["NUMA1"] and cols == ["cuda0 (CUDA ordinal)", "cuda1 (CUDA ordinal)"]


def test_a_cuda_ordinal_is_mapped_by_the_bus_id_its_results_record(monkeypatch):
    """The ResultSet's environment records each device's bus id (devices.environment): the check maps
    cuda0 to the Topology's GPU2, whose link is fine, and leaves GPU0's link out of the finding."""
    doc = judged_copy(monkeypatch, with_devices=True)
    keys = {j.figure.key: j for j in doc.judged}
    assert sorted(keys) == ["h2d/numa1->gpu1", "h2d/numa1->gpu2"]
    slow = keys["h2d/numa1->gpu2"]
    assert slow.verdict == "fail" and slow.figure.label.startswith("H2D NUMA1 -> GPU2")
    f = next(f for f in doc.findings if slow.figure.key in f.keys)
    assert "inventory/pcie/gpu0" not in f.keys and "GPU0" not in f.text
    assert doc.results[0].results[0].params["dst"] == "cuda0"  # the saved results stay as measured


def test_with_a_topology_the_kinds_name_the_physical_gpu(monkeypatch):
    """The case that was right already: CUDA device 0 under CUDA_VISIBLE_DEVICES=2,1 is GPU2."""
    topo = sample_node()
    assert [d.key for d in devices.gpus(visible(topo, [2, 1]), None, topo)] == ["GPU2", "GPU1"]


@pytest.mark.parametrize("text, want", [("GPU3", Endpoint("gpu", 3)), ("gpu3", Endpoint("gpu", 3)),
                                        ("cuda3", Endpoint("cuda", 3)), ("CUDA3", Endpoint("cuda", 3))])
def test_a_cuda_ordinal_is_its_own_endpoint(text, want):
    assert Endpoint.parse(text) == want
    assert Endpoint("cuda", 3).key == "cuda3" and Endpoint("cuda", 3).label == "cuda3 (CUDA ordinal)"
    assert Endpoint("cuda", 3).is_gpu and Endpoint("gpu", 3).is_gpu and not Endpoint("numa", 3).is_gpu
