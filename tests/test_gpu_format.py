"""CPU-side parts of the GPU benchmarks: device matching, path labels and
peaks, gold values, patterns, sizes, result tables and matrices."""

from __future__ import annotations

import dataclasses
import json
import types

import numpy as np
import pytest
from hypothesis import given, strategies as st

import nodes
from nodemap.bench.gpu import copies, common as gc, latency as gpu_latency, memory as gpu_memory, host_buffer
from nodemap.bench import options, resultfile
from nodemap.bench.harness import finish
from nodemap.bench.peaks import Peak, pcie_peak
from nodemap.bench.results import ResultSet, make_result
from nodemap.errors import NodemapError
from nodemap.topology.model import Link, replace
from test_paths import NV4, sample_node


def _gpu(topo, key, ordinal=0):
    g = next(x for x in topo.gpus if x.key == key)
    m = gc.match_gpu(topo, g.pci_bus_id.upper(), "")
    return gc.Gpu(ordinal, g.model, g.memory, 132, 60 << 20, g.pci_bus_id, g.uuid, m.key, m.numa_node,
                  pcie=gc.gpu_pcie(topo, m))


# --- devices ---------------------------------------------------------------


def test_match_by_bus_id_then_uuid():
    t = sample_node()
    assert gc.match_gpu(t, "00000000:1C:00.0").key == "GPU1"  # NVML's 8-digit domain, upper case
    assert gc.match_gpu(t, "1c:00.0").key == "GPU1"
    # A VM may renumber the bus: the UUID still finds the GPU
    assert gc.match_gpu(t, "0000:ff:00.0", "GPU-2aaa").key == "GPU2"
    assert gc.match_gpu(t, "0000:ff:00.0", "2AAA").key == "GPU2"
    assert gc.match_gpu(t, "0000:ff:00.0", "GPU-nope") is None
    assert gc.match_gpu(None, "0000:18:00.0") is None


def test_pcie_peak_is_the_links_maximum_from_the_topology():
    t = sample_node()
    g = t.gpus[0]
    assert gc.gpu_pcie(t, g).gbs == pcie_peak(5, 16).gbs  # no maximum known: the current link
    # An idle GPU trains its link down: the model's maximum (sysfs max_link_*, or NVML's) is the limit.
    # was: NVML opened per GPU for it (never closed), and without NVML the Gen1 link was the peak
    t = nodes.with_links(t, {g.pci_bus_id: (1, 16, 5, 16)})
    idle = replace(g, pcie_gen=1, pcie_width=16)
    assert gc.gpu_pcie(t, idle).gbs == pcie_peak(5, 16).gbs
    assert gc.gpu_pcie(None, None) is None


def test_a_cuda_device_is_named_by_the_topology_else_by_its_ordinal():
    # one name for an unknown CUDA device, where world, nccl and mpi each wrote "cuda{d}" themselves
    def props(d):
        if d == 0:
            raise RuntimeError("cudaErrorInvalidDevice")
        return {"name": b"NVIDIA H200", "pciDomainID": 0, "pciBusID": 0x1C, "pciDeviceID": 0}

    cp = types.SimpleNamespace(cuda=types.SimpleNamespace(runtime=types.SimpleNamespace(getDeviceProperties=props)))
    t = sample_node()
    assert gc.key(cp, 1, t) == "GPU1"  # bus 1c:00.0, whatever its CUDA ordinal
    assert gc.key(cp, 1, None) == gc.ordinal_key(1) == "cuda1"
    assert gc.key(cp, 0, t) == "cuda0"  # a label, never a reason to stop


@pytest.mark.parametrize("spec, n, want", [(None, 3, [0, 1, 2]), ("all", 2, [0, 1]), ("1,0", 2, [1, 0])])
def test_parse_ordinals(spec, n, want):
    assert options.gpus(spec, n) == want


@pytest.mark.parametrize("spec", ["2", "0,0", "x", "-1", ","])
def test_parse_ordinals_refuses(spec):
    with pytest.raises(NodemapError, match="--gpus"):
        options.gpus(spec, 2)


# --- paths and peaks ---------------------------------------------------------------


def test_d2d_path_nvlink_and_pcie():
    t = sample_node(links=[Link("GPU0", "GPU2", count=18, bandwidth=18 * NV4, version=4)])
    g0, g1, g2 = (_gpu(t, f"GPU{i}", i) for i in range(3))
    label, peak, _ = copies.d2d_path(t, g0, g2)
    assert label == "NV18" and peak.gbs == pytest.approx(450.0)
    label, peak, _ = copies.d2d_path(t, g0, g1)
    assert label == "PXB" and peak.gbs == pytest.approx(63.008) and "Gen5" in peak.source
    unknown = dataclasses.replace(g1, key="cuda1")
    assert copies.d2d_path(t, g0, unknown)[:2] == ("?", None)


def test_d2d_path_on_xgmi_is_judged_by_the_link_not_pcie():
    t = sample_node(links=[Link("GPU0", "GPU2", kind="xGMI", bandwidth=50.0, hops=1)])
    g0, g2 = _gpu(t, "GPU0", 0), _gpu(t, "GPU2", 2)
    label, peak, _ = copies.d2d_path(t, g0, g2)
    assert label == "XGMI1" and peak.gbs == pytest.approx(50.0) and "xGMI" in peak.source


def test_fan_peak_is_capped_by_the_hub_ports_behind_a_switch():
    links = [Link(f"GPU{i}", "NVSwitch", count=18, bandwidth=18 * NV4, version=4) for i in range(3)]
    t = sample_node(links=links)
    g0, g1, g2 = (_gpu(t, f"GPU{i}", i) for i in range(3))
    pair = Peak(18 * NV4, "NV18")
    capped = copies.fan_peak(t, g0, [pair, pair], "source")
    assert capped.gbs == pytest.approx(450.0) and "ports" in capped.source  # not 2 x 450
    # direct links (no switch): each pair has its own links, so the sum stands
    direct = sample_node(links=[Link("GPU0", "GPU1", count=4, bandwidth=4 * NV4),
                                Link("GPU0", "GPU2", count=4, bandwidth=4 * NV4)])
    h0 = _gpu(direct, "GPU0", 0)
    four = Peak(4 * NV4, "NV4")
    assert copies.fan_peak(direct, h0, [four, four], "source").gbs == pytest.approx(8 * NV4)
    assert copies.fan_peak(t, g0, [pair, None], "source") is None


def test_karolina_host_classes():
    # GPU0 hangs off NUMA 3: its memory is NODE, every other node SYS
    t = nodes.karolina()
    g = _gpu(t, "GPU0")
    assert g.numa == 3
    assert copies.host_class(g, 3) == "NODE"
    assert {copies.host_class(g, n) for n in copies.numa_nodes(t) if n != 3} == {"SYS"}
    assert copies.numa_nodes(t) == list(range(8))
    assert copies.host_class(dataclasses.replace(g, numa=-1), 2) == "?"
    assert copies.numa_nodes(None) == [-1]


def test_numa_nodes_skip_memoryless_and_disallowed():
    t = nodes.karolina()
    t = replace(t, numa_nodes=tuple(replace(n, memory=0) if n.os_index == 1 else n
                                                 for n in t.numa_nodes),
                            allowed_mems=type(t.allowed_mems).parse("0-3"))
    assert copies.numa_nodes(t) == [0, 2, 3]


def test_real_fixture_gpus_are_matched(fixtures):
    from nodemap.topology.discover import discover

    try:
        t = discover(fixtures / "hwloc-xml" / "power8gpudistances.xml")
    except NodemapError as e:
        pytest.skip(f"hwloc XML reader not available: {e}")
    assert len(t.gpus) == 4
    for g in t.gpus:
        assert gc.match_gpu(t, g.pci_bus_id.upper()).key == g.key


# --- BabelStream gold values and sizes ----------------------------------------------


def test_gold_follows_babelstream():
    a, b, c, dot = gpu_memory.gold("float64", [gpu_memory.CLASSIC], 10)
    # copy c=a; mul b=0.4c; add c=a+b; triad a=b+0.4c; dot = a.b over 10 elements
    c1 = 0.1
    b1 = 0.4 * c1
    c2 = 0.1 + b1
    a1 = b1 + 0.4 * c2
    assert (a, b, c) == pytest.approx((a1, b1, c2))
    assert dot == pytest.approx(a1 * b1 * 10)


def test_gold_nstream_after_classic():
    a0, b0, c0, _ = gpu_memory.gold("float64", [gpu_memory.CLASSIC] * 3, 4)
    a, b, c, _ = gpu_memory.gold("float64", [gpu_memory.CLASSIC] * 3 + [("nstream",)] * 3, 4)
    assert (b, c) == (b0, c0)
    assert a == pytest.approx(a0 + 3 * (b0 + 0.4 * c0))


@given(st.integers(1, 300), st.sampled_from(gpu_memory.DTYPES))
def test_gold_stays_finite(rounds, dtype):
    assert all(np.isfinite(gpu_memory.gold(dtype, [gpu_memory.CLASSIC] * rounds + [("nstream",)] * rounds, 1 << 28)))


def test_gold_replays_alternating_parts_in_their_order():
    # ranks repeating together run one classic round, one nstream round, ...: nstream changes a, which copy reads
    c, n = gpu_memory.CLASSIC, ("nstream",)
    assert gpu_memory.gold("float64", [c, n, c, n], 4) != gpu_memory.gold("float64", [c, c, n, n], 4)


def test_elements_default_and_given():
    g = gc.Gpu(0, "NVIDIA H200", 141 << 30, 132, 60 << 20, "0000:18:00.0")
    assert gpu_memory.elements(g, 8, None) * 8 == 2**30  # 1 GiB > 4 x 60 MiB
    big_l2 = dataclasses.replace(g, l2_bytes=512 << 20)
    assert gpu_memory.elements(big_l2, 4, None) * 4 == 4 * (512 << 20)
    n = gpu_memory.elements(g, 8, 1000)
    assert n * 8 % 16 == 0 and n * 8 <= 1000


# --- verification helpers --------------------------------------------------------------


def _pattern_scalar(i, seed):
    """copies.cu's nm_pattern, transcribed operation by operation."""
    m = 0xFFFFFFFF
    x = ((i & m) * 0x9E3779B1 & m) ^ (i >> 32) & m ^ seed
    x ^= x >> 16
    x = x * 0x7FEB352D & m
    x ^= x >> 15
    x = x * 0x846CA68B & m
    x ^= x >> 16
    return x


@given(st.integers(0, 2**40), st.integers(0, 2**32 - 1))
def test_pattern_matches_the_kernel_formula(i, seed):
    assert int(gc.pattern(i, 1, seed)[0]) == _pattern_scalar(i, seed)


def test_pattern_catches_shifted_and_repeated_data():
    p = gc.pattern(0, 1 << 16, 0x5EED)
    assert len(np.unique(p)) > 0.99 * len(p)
    assert not np.array_equal(p[1:], p[:-1])
    assert not np.any(p == gc.pattern(0, 1 << 16, 0xBAD))  # poison never passes the check


@given(st.integers(1, 2000), st.integers(0, 10**6))
def test_chase_cycle_visits_every_line(slots, steps):
    nxt, order = gpu_latency.cycle(slots, seed=slots)
    seen, i = set(), int(order[0])
    for _ in range(slots):
        seen.add(i)
        assert i % (gpu_latency.LINE // 8) == 0
        i = int(nxt[i])
    assert i == int(order[0]) and len(seen) == slots  # one cycle through every line
    assert gpu_latency.end_of_walk(order, steps) == int(order[steps % slots])


# --- tables and matrices ---------------------------------------------------------------------


def _copy_result(metric, src, dst, gbs, klass, peak):
    return make_result("copies", metric, "GB/s", [gbs * 0.98, gbs, gbs * 0.99], verified=True,
                       params={"src": src, "dst": dst, "engine": "ce"}, path=f"{src} -> {dst} {klass}",
                       path_class=klass, peak=peak, peak_source="test", verification="test")


def _matrix_set():
    rs = ResultSet("bench copies")
    for s, d in [("GPU0", "GPU1"), ("GPU1", "GPU0")]:
        rs.add(_copy_result("d2d_write_ce", s, d, 400.0, "NV18", 478.125))
    for n in (0, 1):
        rs.add(_copy_result("h2d_ce", f"NUMA{n}", "GPU0", 55.0 - 10 * n, "NODE" if n == 0 else "SYS", 63.008))
    rs.add(make_result("copies", "load_latency", "ns", [700.0, 710.0], verified=True,
                       params={"src": "GPU0", "dst": "GPU0"}, path="GPU0 -> GPU0 HBM", path_class="HBM",
                       verification="test"))
    return rs


def test_matrix_cells_carry_class_and_percent():
    out = copies.matrices(_matrix_set())
    lines = out.splitlines()
    i = lines.index(next(x for x in lines if x.startswith("d2d_write_ce")))
    assert lines[i + 1].split() == ["src\\dst", "GPU0", "GPU1"]
    row0 = lines[i + 3]  # after the header's rule
    assert row0.startswith("GPU0") and "-" in row0 and "396.0 NV18 83%" in row0
    h2d = out[out.index("h2d_ce"):]
    assert h2d.index("NUMA0") < h2d.index("NUMA1")
    assert "54.5 NODE 86%" in h2d and " SYS 71%" in h2d  # median 54.45 of 63.008
    # NUMA rows first, then GPUs; values that are not matrices go to the table
    assert "load_latency" in out.splitlines()[-1]


def test_text_table_and_json_round_trip():
    rs = _matrix_set()
    out = copies.text(rs)
    assert out.splitlines()[0].split()[:3] == ["metric", "path", "class"]
    assert "83.7%" in out  # best / peak
    back = resultfile.convert("test", json.loads(rs.to_json()))
    assert back.results == rs.results


def test_finish_prints_json_or_text(capsys, tmp_path):
    rs = _matrix_set()
    rs.messages.append("a note")
    args = type("A", (), {"json": True, "output": str(tmp_path / "r.json")})()
    assert finish(rs, args, copies.text) == 0
    assert json.loads(capsys.readouterr().out)["command"] == "bench copies"
    assert json.loads((tmp_path / "r.json").read_text())["results"]
    args.json = False
    rs.complete = False
    assert finish(rs, args, copies.text) == 1
    assert "note: a note" in capsys.readouterr().out


def test_results_refuse_unverified():
    with pytest.raises(ValueError):
        make_result("copies", "h2d_ce", "GB/s", [1.0], verified=False)


def test_peak_of_bidirectional_cases_doubles():
    p = Peak(478.125, "NV18")
    assert Peak(2 * p.gbs, "x").gbs == 956.25


# --- host buffers on a NUMA node (CPU side: mbind + move_pages) ---------------------------


def test_host_pages_bound_and_reported():
    import ctypes

    if host_buffer._native() is None:
        pytest.skip("native library without the host-buffer helpers")
    n = 4 << 20
    p = host_buffer._mmap(n)
    try:
        assert host_buffer._bind(p, n, 0) == ""
        ctypes.memset(p, 1, n)
        assert host_buffer.page_nodes(p, n) == {0: pytest.approx(1.0)}
        with pytest.raises(NodemapError, match="NUMA node 1023"):
            host_buffer._bind(p, n, 1023)
    finally:
        host_buffer._libc().munmap(ctypes.c_void_p(p), ctypes.c_size_t(n))


def test_arrays_within_4x_l2_get_the_cache_caution():
    """As host arrays that fit in the LLC: a small --size measures L2, not HBM."""
    g = gc.Gpu(0, "NVIDIA H200", 141 << 30, 132, 60 << 20, "0000:18:00.0")
    plan = gpu_memory.Settings(("copy",), None, 3, 128)
    small = gpu_memory._result([g], "float64", (16 << 20) // 8, "copy", [1e-3], "checked", plan, 128)
    assert any(n.startswith("caution: the kernel's arrays (32 MiB per GPU) are within 4x the L2 cache (60 MiB)")
               for n in small.notes)
    n = gpu_memory.elements(g, 8, None)  # the default size: no caution
    assert not gpu_memory._result([g], "float64", n, "copy", [1e-3], "checked", plan, 128).notes
