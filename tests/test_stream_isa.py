"""STREAM kernels per instruction set (native/stream_isa.c) and
NODEMAP_STREAM_ISA forcing."""
import os
import platform

import pytest

from nodemap import cli
from nodemap.bench.host import stream
from nodemap.bench.host import kernels as hk
from nodemap.bench.host import thread_orders as pl
from nodemap.errors import NodemapError
from nodemap.topology.cpuset import CpuSet
from test_host_memory import NT

CPUS = sorted(os.sched_getaffinity(0))[:2]
SUPPORTED = [i for i in hk.ISAS if hk.isa_supported(i)]
# Sizes whose per-thread share is a multiple of 8 plus a remainder (the old
# slicing lost it), shorter than one vector per thread, or odd and long.
SIZES = (1, 5, 17, 49, 65, 8 * 5 + 3, 4099)
THREADS = (1, 2, 3, 5)


@pytest.fixture(autouse=True)
def no_forced_isa(monkeypatch):
    monkeypatch.delenv(hk.ISA_ENV, raising=False)


def cpus_for(threads):
    return [CPUS[i % len(CPUS)] for i in range(threads)]  # threads may share a CPU


def test_scalar_and_baseline_run_everywhere_and_the_best_is_the_default():
    assert "scalar" in SUPPORTED
    if platform.machine() == "x86_64":
        assert "sse2" in SUPPORTED
    assert hk.stream_isa() == SUPPORTED[-1]


@pytest.mark.parametrize("isa", hk.ISAS)
@pytest.mark.parametrize("nt", NT)
def test_every_supported_isa_verifies_odd_sizes_and_thread_counts(monkeypatch, isa, nt):
    if isa not in SUPPORTED:
        pytest.skip(f"this CPU does not run {isa}")
    monkeypatch.setenv(hk.ISA_ENV, isa)
    for threads in THREADS:
        for n in SIZES:
            run = hk.stream(cpus_for(threads), n, hk.KERNELS, 2, nt_stores=nt)
            assert run.isa == isa
            assert run.verified, f"{isa} n={n} threads={threads}: {run.failure()}"


@pytest.mark.parametrize("isa", hk.ISAS)
def test_a_skipped_element_fails_every_isa(monkeypatch, isa):
    if isa not in SUPPORTED:
        pytest.skip(f"this CPU does not run {isa}")
    monkeypatch.setenv(hk.ISA_ENV, isa)
    for skip in (0, 16, 31, 4098):  # slice start, vector start, mid vector, tail
        for nt in (False, True)[:1 + (platform.machine() == "x86_64")]:
            assert not hk.stream(CPUS, 4099, hk.KERNELS, 1, nt_stores=nt, skip=skip).verified


def test_results_say_which_kernels_ran(monkeypatch):
    monkeypatch.setenv(hk.ISA_ENV, "scalar")
    rs = stream.measure(pl.flat_topology(CpuSet(CPUS)), CPUS, 1001, ["copy", "triad"], 1, benchmark="memory")
    assert all(r.params["isa"] == "scalar" and "scalar kernels (forced" in r.notes[0] for r in rs)
    monkeypatch.delenv(hk.ISA_ENV)
    rs = stream.measure(pl.flat_topology(CpuSet(CPUS)), CPUS, 1001, ["copy"], 1, benchmark="memory")
    assert rs[0].params["isa"] == SUPPORTED[-1] and "best this CPU runs" in rs[0].notes[0]


@pytest.mark.skipif(platform.machine() == "x86_64", reason="every x86-64 ISA has NT stores")
def test_nt_stores_without_them_are_a_clear_error():
    with pytest.raises(NodemapError, match="no non-temporal stores"):
        hk.stream(CPUS, 100, ["copy"], 1, nt_stores=True)


def test_unknown_isa_is_a_clear_error(monkeypatch):
    monkeypatch.setenv(hk.ISA_ENV, "avx9000")
    with pytest.raises(NodemapError, match="NODEMAP_STREAM_ISA=avx9000: unknown instruction set; use one of"):
        hk.stream(CPUS, 100, ["copy"], 1)


def test_unsupported_isa_is_a_clear_error(monkeypatch):
    missing = [i for i in hk.ISAS if i not in SUPPORTED]
    if not missing:
        pytest.skip("this CPU runs every ISA")
    monkeypatch.setenv(hk.ISA_ENV, missing[-1])
    with pytest.raises(NodemapError, match=f"cannot run {missing[-1]} kernels; use one of {', '.join(SUPPORTED)}"):
        hk.stream(CPUS, 100, ["copy"], 1)


@pytest.mark.parametrize("value", ["avx9000", "AVX2", *[i for i in hk.ISAS if i not in SUPPORTED]])
def test_cli_bad_isa_is_one_line_exit_2(monkeypatch, capsys, value):
    monkeypatch.setenv(hk.ISA_ENV, value)
    rc = cli.main(["bench", "memory", "--size", "64K", "--repeats", "1"])
    out, err = capsys.readouterr()
    assert rc == 2 and not out and err.count("\n") == 1 and f"NODEMAP_STREAM_ISA={value}" in err


def test_cli_forced_isa_is_in_the_output(monkeypatch, capsys):
    monkeypatch.setenv(hk.ISA_ENV, "sse2" if "sse2" in SUPPORTED else "scalar")
    assert cli.main(["bench", "memory", "--size", "64K", "--repeats", "1", "--kernels", "triad"]) == 0
    assert f"{os.environ[hk.ISA_ENV]} kernels (forced by NODEMAP_STREAM_ISA)" in capsys.readouterr().out
