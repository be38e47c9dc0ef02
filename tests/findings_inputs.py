"""Inputs whose findings the golden renderer tests print (tests/test_findings_golden.py):
a check document with hardware and configuration findings of both verdicts, a fleet with
figure, absent, topology, own-check, busy, link and missing findings, and a watch run with
growth, imbalance, foreign-memory and shared-GPU findings."""

from __future__ import annotations

import random

import check_synth as syn
import nodes
from fleet_docs import node_doc, topology
from nodemap.check import expectations
from nodemap.check.document import CheckDoc, Environment
from nodemap.check.inventory import Check
from nodemap.fleet.nodefile import PairResult
from nodemap.units import GiB, MiB


def check_doc() -> CheckDoc:
    d = CheckDoc(level="quick", topology=nodes.karolina(), expectations=expectations.shipped(),
                 results=[syn.hbm({0: 1400.0, 1: 1410.0, 2: 900.0, 3: 1405.0}),
                          syn.latency({"L1d": (32, 1.2), "DRAM": (1 << 20, 547.0)}),
                          syn.copies({(3, 0): 24.0, (3, 1): 12.0}, {0: 3, 1: 3})],
                 checks=[Check("inventory/pcie/GPU1", "GPU1 PCIe link", "Gen4 x8", "Gen4 x16", "fail",
                               "link below its capability", "hardware", "reseat it"),
                         Check("inventory/env/OMP", "OMP_PROC_BIND", "unset", "close", "warn", "threads unbound",
                               "configuration", "export OMP_PROC_BIND=close")],
                 environment=Environment(transparent_hugepage="never", variables={}),
                 host="node7", hostname="node7", started="2026-11-28T02:00:00+0000")
    d.rejudge()
    return d


def fleet_docs() -> list[dict]:
    rng = random.Random(5)
    docs = [node_doc(f"n{i:02d}", rng) for i in range(8)]
    docs[1] = node_doc("n01", rng, slow={"gpu/2/hbm_triad": 0.7})
    docs[2] = node_doc("n02", rng, absent=5)
    docs[3]["topology"] = topology(nvlink={4: 12})
    docs[4]["findings"] = [{"verdict": "fail", "cause": "hardware", "area": "GPU memory", "keys": ["gpu/1/hbm_triad"],
                            "text": "GPU1 HBM triad 1,211 GB/s is below its floor"},
                           "a sentence of an older node check"]
    docs[5]["busy"] = {"busy": True, "reasons": ["pid 77 used GPU3"]}
    docs[6]["complete"] = False
    return docs


def fleet_pairs(names: list[str]) -> list[PairResult]:
    return [PairResult(a=names[i], b=names[(i + 1) % len(names)], key="mpi bw host", unit="GB/s",
             value=12.0 if 7 in (i, (i + 1) % len(names)) else 25.0, higher_is_better=True)
            for i in range(len(names))]


def watch_dir(d) -> None:
    from test_watch import _write

    d.mkdir()
    _write(d / "n1.r0.1.watch", 0, [4 * GiB + i * 50 * MiB for i in range(100)], libs=["cupy"])
    _write(d / "n1.r1.2.watch", 1, [4 * GiB] * 100, gpus=(1,))
    _write(d / "n1.r2.3.watch", 2, [int(76 * GiB)] * 100, gpus=(2,), others={"2": [[999, "python", []], [1001, "app", []]]},
           held=2 * GiB, rss=[2 * GiB + i * 40 * MiB for i in range(100)])
