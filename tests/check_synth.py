"""Synthetic Results for check tests: the records the bench kinds make,
with chosen values, over a fixture topology (tests/nodes.py)."""

from __future__ import annotations

from nodemap.bench.results import ResultSet, make_result

A100 = (1555.0, "A100 40GB datasheet HBM2 1.555 TB/s")
GEN5 = (63.0, "PCIe Gen5 x16 (3.938 GB/s per lane per direction)")
GEN4 = (31.5, "PCIe Gen4 x16 (1.969 GB/s per lane per direction)")
NV12 = (300.0, "NV12 NVLink, 300 GB/s per direction")


def _r(bench, metric, unit, value, **kw):
    # a little spread so statistics are real; best = value
    return make_result(bench, metric, unit, [value, value * 0.99, value * 0.995] if unit.startswith("GB/s")
                       else [value, value * 1.01, value * 1.005], verified=True, **kw)


def hbm(values: dict[int, float], peak=A100) -> ResultSet:
    rs = ResultSet("bench gpu")
    for g, v in values.items():
        rs.add(_r("gpu", "triad", "GB/s", v, params={"dtype": "float64", "gpus": [f"GPU{g}"], "mode": "single"},
                  path=f"GPU{g} HBM", path_class="HBM", peak=peak[0], peak_source=peak[1]))
    return rs


def copies(h2d: dict[tuple[int, int], float], gpu_numa: dict[int, int], d2d: dict[tuple[int, int], float] = {},
           link=GEN4, pair=NV12) -> ResultSet:
    """h2d[(numa, gpu)] GB/s; d2d[(a, b)] GB/s."""
    rs = ResultSet("bench copies")
    for (n, g), v in h2d.items():
        rs.add(_r("copies", "h2d_ce", "GB/s", v, params={"src": f"NUMA{n}", "dst": f"GPU{g}", "host_node": n},
                  path=f"NUMA{n} memory -> GPU{g}", path_class="NODE" if gpu_numa[g] == n else "SYS",
                  peak=link[0], peak_source=link[1]))
    for (a, b), v in d2d.items():
        rs.add(_r("copies", "d2d_write_ce", "GB/s", v, params={"src": f"GPU{a}", "dst": f"GPU{b}"},
                  path=f"GPU{a} -> GPU{b} NV12", path_class="NV12", peak=pair[0], peak_source=pair[1]))
    return rs


def stream(by_order: dict[str, tuple[int, float]]) -> ResultSet:
    rs = ResultSet("bench memory")
    for name, (threads, v) in by_order.items():
        rs.add(_r("memory", "triad", "GB/s", v, params={"thread_order": name, "threads": threads,
                                                        "cpu_order": list(range(threads))},
                  path="NUMA0 cores -> NUMA0 memory", path_class="local"))
    return rs


def numa(bw: dict[tuple[int, int], float]) -> ResultSet:
    rs = ResultSet("bench numa")
    for (i, j), v in bw.items():
        rs.add(_r("numa", "triad", "GB/s", v, params={"cpu_node": i, "mem_node": j},
                  path=f"NUMA{i} cores -> NUMA{j} memory", path_class="local" if i == j else "remote"))
    return rs


def latency(levels: dict[str, tuple[int, float]]) -> ResultSet:
    rs = ResultSet("bench latency")
    for level, (ws, ns) in levels.items():
        rs.add(_r("latency", "load latency", "ns", ns, params={"working_set": ws, "level": level, "cpu": 0}))
    return rs


def gpu_latency(load_ns: dict[tuple[int, int], float], copy_us: dict[tuple[int, int], float] = {},
                pair=NV12) -> ResultSet:
    """`copies --latency` records: load_ns[(a, b)] GPU a loading from GPU b's memory; copy_us 8-byte copies."""
    rs = ResultSet("bench copies")
    for (a, b), v in load_ns.items():
        rs.add(_r("copies", "load_latency", "ns", v, params={"src": f"GPU{a}", "dst": f"GPU{b}"},
                  path=f"GPU{a} -> GPU{b} memory", path_class="NV12"))
    for (a, b), v in copy_us.items():
        rs.add(_r("copies", "d2d_copy_latency", "us", v, params={"src": f"GPU{a}", "dst": f"GPU{b}"},
                  path=f"GPU{a} -> GPU{b}"))
    return rs


def nccl_all_reduce(busbw: float, ranks: int, size: int = 1 << 30) -> ResultSet:
    rs = ResultSet("bench nccl")
    rs.add(_r("nccl", "all_reduce", "GB/s busbw", busbw, params={"ranks": ranks, "size": size, "inplace": False},
              path=f"all_reduce over {ranks} GPUs"))
    return rs
