import json
import os

import pytest

from nodemap import cli
from nodemap.bench.host import kernels as hk
from nodemap.bench.host import latency as lat
from nodemap.bench.host.chase import cpu_caches
from nodemap.errors import NodemapError
from nodemap.topology.cpuset import CpuSet
from nodemap.topology.model import Cache, Topology

CPU = min(os.sched_getaffinity(0))


@pytest.mark.parametrize("size", [4096, 64 << 10, 1 << 20])
def test_chase_is_one_cycle_through_every_node(size):
    run = hk.chase(size, CPU, reps=2, min_loads=1 << 14)
    assert run.nodes == size // 64 and run.steps_to_return == run.nodes and run.verified
    assert len(run.ns_per_load) == 2 and all(0 < v < 10_000 for v in run.ns_per_load)


def test_different_seeds_give_valid_cycles():
    for seed in (2, 3, 12345):
        assert hk.chase(8192, CPU, reps=1, min_loads=1024, seed=seed).verified


def test_bad_cpu_and_tiny_buffer_are_errors():
    with pytest.raises(NodemapError, match="pin"):
        hk.chase(4096, 100000, reps=1)
    with pytest.raises(NodemapError):
        hk.chase(64, CPU, reps=1)  # one node is no cycle


def test_levels_predicted_from_the_cpus_caches():
    t = Topology(caches=(
        Cache(1, "data", 48 << 10, CpuSet([0])), Cache(1, "instruction", 32 << 10, CpuSet([0])),
        Cache(2, "unified", 2 << 20, CpuSet([0])), Cache(3, "unified", 32 << 20, CpuSet([0, 1])),
        Cache(2, "unified", 1 << 20, CpuSet([1])),
    ))
    caches = cpu_caches(t, 0)
    assert caches == [("L1d", 48 << 10), ("L2", 2 << 20), ("L3", 32 << 20)]
    assert [lat.predicted_level(caches, s) for s in (4 << 10, 48 << 10, 64 << 10, 2 << 20, 8 << 20, 64 << 20)] == \
        ["L1d", "L1d", "L2", "L2", "L3", "DRAM"]


def test_a_cache_reading_dram_latency_is_flagged():
    # the lent Xeon VM of 2026-11-23: "L3 300 MiB", DRAM latency from 16 MiB
    rows = [(32 << 10, "L1d", 1.8), (4 << 20, "L3", 35.7), (8 << 20, "L3", 57.6), (16 << 20, "L3", 121.1),
            (256 << 20, "L3", 125.7), (1 << 30, "DRAM", 137.5), (1200 << 20, "DRAM", 147.6)]
    (note,) = lat.disagreements(rows)
    assert note.startswith("L3: from 16 MiB the latency is nearer DRAM's (121 ns; DRAM 148 ns, L3 36 ns)")
    healthy = [(32 << 10, "L1d", 1.8), (4 << 20, "L3", 30.0), (16 << 20, "L3", 45.0), (256 << 20, "DRAM", 110.0)]
    assert lat.disagreements(healthy) == []
    assert lat.disagreements([(32 << 10, "L1d", 1.8)]) == []  # no DRAM row: nothing to compare with


def test_sizes_double_from_4k_to_the_maximum():
    assert lat.sizes(64 << 10) == [4 << 10, 8 << 10, 16 << 10, 32 << 10, 64 << 10]
    assert lat.sizes(100 << 10)[-2:] == [64 << 10, 100 << 10]


def test_dram_top_only_skips_the_transition_but_keeps_the_dram_working_set():
    full, quick = lat.sizes(128 << 20), lat.sizes(128 << 20, skip_above=32 << 20)
    assert quick[-1] == full[-1] == 128 << 20  # the DRAM figure reads the same working set
    assert 64 << 20 in full and 64 << 20 not in quick
    assert quick[:-1] == [s for s in full if s <= 32 << 20]


def test_cli_json_one_result_per_size(capsys):
    rc = cli.main(["bench", "latency", "--max-size", "64K", "--repeats", "2", "--loads", "4096", "--json"])
    out, err = capsys.readouterr()
    assert rc == 0
    rs = json.loads(out)["results"]
    assert [r["params"]["working_set"] for r in rs] == lat.sizes(64 << 10)
    assert all(r["verified"] and r["unit"] == "ns" and r["stats"]["best"] > 0 for r in rs)
    assert err.count("[latency") == len(rs)  # progress on stderr, one line per size


def test_cli_bad_cpu_exit_2(capsys):
    assert cli.main(["bench", "latency", "--cpu", "100000"]) == 2
    assert "not allowed" in capsys.readouterr().err
