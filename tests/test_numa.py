import json

from nodemap import cli
from nodemap.bench.host import numa
from nodemap.bench.host import thread_orders as pl
from nodemap.bench.results import make_result
from nodemap.topology.cpuset import CpuSet
from nodemap.topology.model import Core, NumaNode, Topology, PU


def three_nodes():
    """Node 2 is memory only (HBM/CXL style), node 1 has CPUs but no memory."""
    nodes = (NumaNode(0, CpuSet([0, 1]), 1 << 30), NumaNode(1, CpuSet([2, 3]), 0), NumaNode(2, CpuSet(), 1 << 30))
    cores = tuple(Core(i, 0, CpuSet([i])) for i in range(4))
    return Topology(numa_nodes=nodes, cores=cores, pus=tuple(PU(i) for i in range(4)),
                    distances=((10, 20, 30), (20, 10, 30), (30, 30, 10)))


def test_rows_are_nodes_with_cpus_columns_nodes_with_memory():
    t = three_nodes()
    assert numa.cpu_nodes(t, CpuSet([0, 1, 2, 3])) == [(0, (0, 1)), (1, (2, 3))]
    assert numa.cpu_nodes(t, CpuSet([0])) == [(0, (0,))]
    assert numa.mem_nodes(t) == [0, 2]


def test_matrices_place_each_result_in_its_cell_beside_slit():
    t = three_nodes()
    rs = [make_result("numa", "triad", "GB/s", [10.0 * (i + 1) + j], verified=True,
                      params={"cpu_node": i, "mem_node": j}) for i in (0, 1) for j in (0, 2)]
    text = numa.matrix_text("bw", rs, [0, 1], [0, 2], lambda r: f"{r.stats.best:.1f}" if r else "")
    lines = text.splitlines()
    assert lines[1].split() == ["cpu\\mem", "NUMA0", "NUMA2"]
    assert lines[3].split() == ["NUMA0", "10.0", "12.0"] and lines[4].split() == ["NUMA1", "20.0", "22.0"]
    assert numa.slit_text(t, [0, 1], [0, 2]).splitlines()[3].split() == ["NUMA0", "10", "30"]


def test_cli_on_this_machine(capsys):
    rc = cli.main(["bench", "numa", "--size", "256K", "--latency-size", "64K", "--repeats", "2", "--json"])
    out, _ = capsys.readouterr()
    assert rc == 0
    d = json.loads(out)
    t = pl.load_topology()
    rows = numa.cpu_nodes(t, pl.usable_cpus(t))
    cols = numa.mem_nodes(t)
    units = [r["unit"] for r in d["results"]]
    assert units.count("GB/s") == units.count("ns") == len(rows) * len(cols)
    assert all(r["verified"] and r["params"]["mem_node"] in cols for r in d["results"])
    if len(t.numa_nodes) == 1:
        assert any("1x1" in m for m in d["messages"])


def test_cli_kernel_must_be_one(capsys):
    assert cli.main(["bench", "numa", "--kernel", "copy,add"]) == 2
    assert "one kernel" in capsys.readouterr().err
