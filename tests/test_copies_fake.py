"""`nodemap bench copies`' host cases on the NumPy stand-in for CuPy
(tests/fake_cupy.py) over a node of 8 NUMA nodes (tests/nodes.py's
Karolina): a row per NUMA node by default, one row placed by the process's
own memory policy with --host-memory own (what `compare`'s h2d probe asks
for, so its ranks' kept rows run in the same repetitions), a barrier wait
before every timed repetition of either, and every copied word checked."""

from __future__ import annotations

import json

import pytest

import fake_cupy
import nodes
from nodemap import cli

REPEATS = 2
HOST_CASES = ("h2d_ce", "d2h_ce", "h2d+d2h_ce")


@pytest.fixture
def fake(monkeypatch):
    """bench copies on the stand-in over Karolina's topology: the NUMA nodes
    host memory was bound to (this machine has not Karolina's, so mbind is
    recorded, not made) and the barrier waits, in order."""
    from nodemap.bench import barrier
    from nodemap.bench.gpu import devices, host_buffer, kernels

    topo = nodes.karolina()
    monkeypatch.setattr(devices, "import_cupy", lambda: fake_cupy)
    monkeypatch.setattr(devices, "load_topology", lambda path=None: (topo, ""))
    monkeypatch.setattr(kernels, "_MODULES", {})  # no stand-in module left for a later test
    monkeypatch.setattr(fake_cupy.cuda.runtime, "devices", 1)
    log: dict[str, list] = {"bound": [], "waits": []}
    monkeypatch.setattr(host_buffer, "_bind", lambda ptr, n, node: log["bound"].append(node) or "")
    monkeypatch.setattr(barrier, "wait", lambda: log["waits"].append(len(log["waits"])))
    return log


def copies(capsys, *args):
    code = cli.main(["bench", "copies", "--cases", "host", "--engine", "ce", "--gpus", "0", "--size", "64KiB",
                     "--iters", "2", "--repeats", str(REPEATS), *args, "--json", "-q"])
    out = capsys.readouterr().out
    assert code == 0, out
    return json.loads(out)["results"]


def test_each_numa_node_has_its_row_by_default(fake, capsys):
    got = copies(capsys)
    h2d = [r for r in got if r["metric"] == "h2d_ce"]
    assert [r["params"]["host_node"] for r in h2d] == list(range(8))
    assert sorted(set(fake["bound"])) == list(range(8))
    assert len(fake["waits"]) == len(HOST_CASES) * 8 * REPEATS  # every node's rows, one after another


def test_own_host_memory_is_one_row_in_every_repetition_behind_the_barrier(fake, capsys):
    got = copies(capsys, "--host-memory", "own")
    assert sorted(r["metric"] for r in got) == sorted(HOST_CASES)  # one placement: one row of each case
    assert {r["params"]["host_node"] for r in got} == {-1} and {r["params"]["src"] for r in got} >= {"host"}
    assert fake["bound"] == []  # no mbind: the pages go where the process's policy (or first touch) puts them
    assert all(r["verified"] and len(r["samples"]) == REPEATS for r in got)
    assert len(fake["waits"]) == len(HOST_CASES) * REPEATS  # a barrier before each timed repetition


def test_a_copy_that_loses_words_fails_the_row(fake, capsys, monkeypatch):
    """The stand-in checks what was copied: a copy that drops its last 16 bytes is caught, so the tests
    above pass on copied data, not on an empty check."""
    real = fake_cupy.cuda.runtime.memcpyAsync
    monkeypatch.setattr(fake_cupy.cuda.runtime, "memcpyAsync",
                        lambda dst, src, n, kind, stream: real(dst, src, n - 16, kind, stream))
    code = cli.main(["bench", "copies", "--cases", "host", "--engine", "ce", "--gpus", "0", "--size", "64KiB",
                     "--iters", "1", "--repeats", "1", "--host-memory", "own", "--json", "-q"])
    out = capsys.readouterr()
    assert code != 0 and "4 words differ from the source" in out.out + out.err, out


@pytest.mark.parametrize("pages, cls", [({3: 1.0}, "NODE"), ({1: 0.75, 3: 0.25}, "SYS")])
def test_own_memory_is_classed_by_the_node_its_pages_landed_on(fake, capsys, monkeypatch, pages, cls):
    """Karolina's GPU0 is on NUMA 3: memory the process's policy put on NUMA 1 is a SYS path, not NODE
    (the class node -1 had), and the row says where the pages are."""
    from nodemap.bench.gpu import host_buffer

    props = fake_cupy.cuda.runtime.getDeviceProperties
    monkeypatch.setattr(fake_cupy.cuda.runtime, "getDeviceProperties", lambda d: props(d) | {"pciBusID": 0x10})
    monkeypatch.setattr(host_buffer, "page_nodes", lambda ptr, n: dict(pages))
    (h2d,) = [r for r in copies(capsys, "--host-memory", "own") if r["metric"] == "h2d_ce"]
    assert (h2d["params"]["dst"], h2d["path_class"]) == ("GPU0", cls)
    assert h2d["params"]["host_pages"] == ", ".join(f"NUMA{k}: {v:.0%}" for k, v in sorted(pages.items()))


def test_h2d_alone_is_one_case_of_the_three(fake, capsys):
    """compare keeps only h2d, but --cases host measured d2h and h2d+d2h too: 3x its time."""
    got = copies(capsys, "--cases", "h2d", "--host-memory", "own")
    assert [r["metric"] for r in got] == ["h2d_ce"] and got[0]["verified"] and got[0]["params"]["host_node"] == -1
    assert len(fake["waits"]) == REPEATS  # one case's repetitions behind the barrier, not 3 cases'


@pytest.mark.parametrize("cases, metrics", [("d2h", ["d2h_ce"]), ("h2d+d2h", ["h2d+d2h_ce"]),
                                            ("h2d+d2h,h2d", ["h2d_ce", "h2d+d2h_ce"]),
                                            ("h2d,d2h,h2d+d2h", list(HOST_CASES)), ("host,h2d", list(HOST_CASES))])
def test_each_host_direction_is_a_case_in_the_order_host_runs_them(fake, capsys, cases, metrics):
    per_node = [r["metric"] for r in copies(capsys, "--cases", cases) if r["params"]["host_node"] == 0]
    assert per_node == metrics


def test_host_is_still_the_three_and_the_default_every_case():
    from nodemap.bench.gpu import copies_options

    assert copies_options.Options().cases == "host,d2d,bidir,local,all,staged"
    assert copies_options.HOST_CASES == tuple(m.removesuffix("_ce") for m in HOST_CASES)


def test_an_unknown_case_names_the_vocabulary(fake, capsys):
    code = cli.main(["bench", "copies", "--cases", "h2x", "--gpus", "0", "--json", "-q"])
    out = capsys.readouterr()
    assert code == 2 and "--cases 'h2x': choose from host,d2d,bidir,local,all,staged,h2d,d2h,h2d+d2h" in out.err, out
