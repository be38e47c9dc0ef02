"""Typed documents (issue 31, DESIGN point 6): every saved document is
decoded into its record and checked field by field at load (nodemap.records,
msgspec); a malformed one is one line naming the file and the field path,
exit 2; what nodemap wrote reads back without loss; the per-rank launch path
never imports msgspec."""

from __future__ import annotations

import glob
import json
import math
import os
import subprocess
import sys

import msgspec
import pytest

import check_synth as syn
from hostile import env, nodemap, refused
from nodemap import records
from nodemap.bench import resultfile
from nodemap.bench.results import ResultSet
from nodemap.errors import InputError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAVED = os.path.join(ROOT, "benchmarks", "results")


def _write(tmp_path, d: dict, name: str = "r.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(d))
    return str(path)


def _stream() -> dict:
    return json.loads(syn.stream({"1/core": (4, 100.0), "spread": (8, 120.0)}).to_json())


# --- result files ------------------------------------------------------------------


def test_a_schema_valid_memory_result_without_threads_is_refused_by_report(tmp_path):
    """It crashed `nodemap report` with a KeyError in host_memory.recommend."""
    d = _stream()
    del d["results"][1]["params"]["threads"]
    refused(nodemap("report", _write(tmp_path, d), env_=env(tmp_path)), "r.json",
            "field results[1].params.threads is missing")


@pytest.mark.parametrize("change, words", [
    (lambda d: d["results"][0]["stats"].update(median="fast"), ["results[0].stats.median is str, not a number"]),
    (lambda d: d["results"][0]["stats"].update(n=2.5), ["results[0].stats.n is float, not an integer"]),
    (lambda d: d["results"][1].update(samples=[1.0, "x"]), ["results[1].samples[1] is str, not a number"]),
    (lambda d: d["results"][0].update(peak="high"), ["results[0].peak is str"]),
    (lambda d: d["results"][0].pop("metric"), ["field results[0].metric is missing"]),
    (lambda d: d["results"][0]["params"].update(threads="4"), ["results[0].params.threads is str, not an integer"]),
    (lambda d: d.update(results={"a": 1}), ["field results is object, not a list"]),
    (lambda d: d.update(schema="nodemap.results/9"), ["bench results (nodemap.results/9", "bench result files "
                                                      "(nodemap.results/1)"]),
    (lambda d: d.update(complete="yes"), ["field complete is str, not true or false"]),
])
def test_malformed_result_files_name_the_field(tmp_path, change, words):
    d = _stream()
    change(d)
    refused(nodemap("report", _write(tmp_path, d), env_=env(tmp_path)), "r.json", *words)


@pytest.mark.parametrize("rs, change, field", [
    (syn.hbm({0: 1400.0}), lambda p: p.update(gpus=[]), "params.gpus"),  # figures read gpus[0]
    (syn.latency({"L1": (1 << 14, 1.2)}), lambda p: p.pop("working_set"), "params.working_set is missing"),
    (syn.numa({(0, 1): 20.0}), lambda p: p.update(mem_node="1"), "params.mem_node is str"),
    (syn.nccl_all_reduce(100.0, 2), lambda p: p.pop("size"), "params.size is missing"),
    # bounds a kind's Params declare (its STORY, bench/story.py); were taken before
    (syn.numa({(0, 1): 20.0}), lambda p: p.update(cpu_node=-1), "params.cpu_node: expected `int` >= 0"),
    (syn.latency({"L1": (1 << 14, 1.2)}), lambda p: p.update(working_set=0), "params.working_set: expected `int` >= 1"),
])
def test_each_kind_has_the_parameters_its_readers_index(tmp_path, rs, change, field):
    d = json.loads(rs.to_json())
    change(d["results"][0]["params"])
    with pytest.raises(InputError, match=f"results\\[0\\].{field}"):
        resultfile.convert("r.json", d)


def test_a_result_file_reads_back_without_loss():
    rs = syn.copies({(0, 0): 20.0, (1, 0): 15.0}, {0: 0}, {(0, 1): 250.0})
    rs.environment = {"nodemap": "x", "cpu": {"model": "y"}}
    rs.messages = ["skipped: nothing"]
    back = resultfile.decode("r.json", rs.to_json().encode())
    assert back.results == rs.results and back.to_json() == rs.to_json()
    assert isinstance(back.results[0].samples, tuple) and isinstance(back.results[0].notes, tuple)


def test_nan_that_json_wrote_is_read_as_json_reads_it():
    rs = syn.nccl_all_reduce(100.0, 2)
    d = json.loads(rs.to_json())
    d["results"][0]["params"]["overlap"] = float("nan")
    back = resultfile.decode("r.json", json.dumps(d).encode())  # "NaN": not JSON, but what json.dumps writes
    assert math.isnan(back.results[0].params["overlap"])


def test_old_memory_results_name_the_thread_order_placement():
    d = _stream()
    for r in d["results"]:
        r["params"]["placement"] = r["params"].pop("thread_order")
    back = resultfile.convert("r.json", d)
    assert [r.params["thread_order"] for r in back.results] == ["1/core", "spread"]


def _saved_files(schema: str) -> list[str]:
    out = []
    for path in sorted(glob.glob(os.path.join(SAVED, "**", "*.json"), recursive=True)):
        with open(path, "rb") as f:
            if f'"schema": "{schema}"'.encode() in f.read(200):
                out.append(path)
    return out


def _saved(schema: str, at_least: int):
    """(path, bytes) of every saved document of `schema` in the tree (at least `at_least`)."""
    paths = _saved_files(schema)
    assert len(paths) >= at_least
    for path in paths:
        with open(path, "rb") as f:
            yield path, f.read()


def test_every_result_file_in_the_tree_decodes():
    for path, data in _saved("nodemap.results/1", 20):
        rs = resultfile.decode(path, data)
        again = json.loads(rs.to_json())["results"]
        assert again == [_known(r) for r in json.loads(data)["results"]], path


def _known(r: dict) -> dict:
    """A saved result as nodemap writes it again (old parameter names renamed; its efficiency, best / peak,
    is no longer saved: computed where it is shown)."""
    from nodemap.bench.results import _renamed_params

    return {**{k: v for k, v in r.items() if k != "efficiency"}, "params": _renamed_params(r["benchmark"], r["params"])}


# --- the one reader's messages -----------------------------------------------------


@pytest.mark.parametrize("data, words", [
    (b'{"schema": "nodemap.results/1", "command": 5}', "field command is int, not text"),
    (b'{"schema": "nodemap.results/1", "results": []}', "field command is missing"),
    (b'{"environment": {"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}}", "nested too deep"),
    (b"[" * 100_000 + b"]" * 100_000, "field the document is array, not an object"),
    (b'{"schema": "nodemap.results/1", "command": "c",', "not JSON"),
    (b'\xff', "not UTF-8"),
    (b'{"schema": "nodemap.results/1", "command": "caf\xe9"}', "byte 0xe9 is not UTF-8"),
])
def test_records_decode_gives_one_line(data, words):
    with pytest.raises(InputError) as e:
        records.decode("f.json", data, resultfile.ResultFile, "bench result file")
    assert words in str(e.value) and "\n" not in str(e.value) and str(e.value).startswith("f.json: ")


def test_schema_of():
    assert records.schema_of("f", b'{"a": [1, 2], "schema": "nodemap.check/1"}', "x") == "nodemap.check/1"
    assert records.schema_of("f", b'{"a": 1}', "x") == ""
    with pytest.raises(InputError, match="a JSON object is expected"):
        records.schema_of("f", b"[1]", "x")


# --- the per-rank launch path ------------------------------------------------------


def _imports(tmp_path, *args: str) -> str:
    out = subprocess.run([sys.executable, "-X", "importtime", "-m", "nodemap", *args], capture_output=True,
                         text=True, timeout=60, env=env(tmp_path))
    return out.stderr


def test_the_launch_path_never_imports_msgspec(tmp_path):
    # -X importtime lists every module imported before `run` execs the application. The node's
    # first rank plans and publishes (it reads the Topology, msgspec Structs: faster than the
    # dataclasses were, benchmarks/results/topo_vs_lstopo.md); every other rank reads the plan
    planner = _imports(tmp_path, "run", "--", "true")
    assert "nodemap.topology.model" in planner, planner[-2000:]
    got = _imports(tmp_path, "run", "--", "true")
    assert "nodemap.mapping.plancache" in got, got[-2000:]  # the listing is there
    assert "nodemap.topology.model" not in got  # the published plan was read, not made again
    assert "msgspec" not in got and "nodemap.records" not in got


# --- schema names ------------------------------------------------------------------


def test_report_compare_and_nodemap_compare_name_different_documents(tmp_path):
    a = _write(tmp_path, json.loads(syn.hbm({0: 1400.0}).to_json()), "a.json")
    b = _write(tmp_path, json.loads(syn.hbm({0: 1300.0}).to_json()), "b.json")
    r = nodemap("report", "--compare", a, b, "--json", env_=env(tmp_path))
    assert r.returncode in (0, 1), r.stderr
    assert json.loads(r.stdout)["schema"] == "nodemap.report.compare/1"
    from nodemap.compare import bindings

    assert bindings.SCHEMA == "nodemap.compare/1"  # `nodemap compare`'s own, as its saved files say


# --- check documents ---------------------------------------------------------------


def _samples():
    """A busy sample before the check and one around a step, with every part check/busy.py writes."""
    from nodemap.check import busy

    gpus = [busy.GpuUse(index=0, bus_id="0000:07:00.0", utilization=3),
            busy.GpuUse(index=1, bus_id="0000:0b:00.0", utilization=None,
                        others=[busy.GpuProcess(pid=4242, comm="train.py", memory=1 << 30)])]
    memory = busy.Memory(24 << 30, 20 << 30, 0.0)
    before = busy.Sample(seconds=0.5, cpus=4, other_cores=0.02, unseen_cores=0.0, load=[0.5, 0.4, 0.3],
                         top=[busy.Other(77, "sshd", 0.02, "root")], memory=memory, gpus=gpus)
    step = busy.Sample(seconds=8.1, cpus=4, other_cores=0.0, unseen_cores=0.0, load=[1.5, 0.6, 0.3],
                       memory=memory, gpus=gpus)
    return before, step


def _check_doc() -> dict:
    from nodemap.check import busy, expectations
    from nodemap.check.document import CheckDoc, Environment, Extra
    from nodemap.check.inventory import Check, Skipped

    before, step = _samples()
    hbm = syn.hbm({0: 1400.0, 1: 900.0})
    hbm.environment["busy"] = step
    d = CheckDoc(level="quick", topology=None, expectations=expectations.shipped(),
                 results=[hbm, syn.stream({"1/core": (4, 100.0)})], host="n1",
                 checks=[Check("inventory/x", "a check", "1", "1", "pass", "equal", cause="configuration")],
                 skipped=[Skipped("nccl", "no GPUs")], busy=busy.summary(before, [("GPU memory", step)]),
                 extra=Extra("0b5e", (1,)),
                 environment=Environment(nodemap="0.1.0", variables={"OMP_NUM_THREADS": "4"},
                                         transparent_hugepage="madvise", virtual_machine=False, numpy="2.4.6"))
    d.rejudge()
    assert d.findings and d.judged
    return json.loads(d.to_json())


def test_a_check_document_reads_back_without_loss():
    from nodemap.check import busy, document, verdicts

    d = _check_doc()
    doc = document.decode("check.json", json.dumps(d).encode())
    assert json.loads(doc.to_json()) == d
    assert document.SCHEMA in document.SCHEMAS
    # its busy samples and bounds are read into the records check built them with (check/busy.py, verdicts.py)
    before, step = _samples()
    assert doc.busy == busy.summary(before, [("GPU memory", step)]) and doc.results[0].environment["busy"] == step
    assert d["busy"]["steps"][0]["step"] == "GPU memory" and "step" not in d["busy"]["before"]
    assert all(isinstance(j.expectation, verdicts.Bounds) for j in doc.judged)
    assert doc.judged[0].expectation.limit_kind == "hbm" and doc.judged[0].expectation.peers == 2


def test_a_busy_section_saved_before_unseen_cores_reads():
    """A 2026-11-28 sample (benchmarks/results/verdicts_h200x2_20261128): no unseen_cores, whole-number cores."""
    from nodemap.check import document

    d = _check_doc()
    for sample in (d["busy"]["before"], *d["busy"]["steps"], d["results"][0]["environment"]["busy"]):
        del sample["unseen_cores"]
        sample["other_cores"] = 0
    d["schema"] = document.V1
    doc = document.decode("check.json", json.dumps(d).encode())
    assert doc.busy.before.other_cores == 0 and doc.busy.steps[0].step == "GPU memory"
    assert "unseen_cores" not in json.loads(doc.to_json())["busy"]["before"]  # not measured: not said to be 0


def test_the_environment_and_extra_are_written_as_read():
    """The check document's environment and extra were dicts; as typed records their JSON is the same, names
    and order, and a field an older document lacks stays absent (not written as its default)."""
    from nodemap.check import document, node
    from nodemap.outfile import json_text

    env = json.loads(json_text(node.environment()))
    assert list(env)[:7] == ["nodemap", "python", "kernel", "machine", "variables", "transparent_hugepage",
                             "virtual_machine"] and set(list(env)[7:]) <= {"cupy-cuda12x", "cupy-cuda13x",
                                                                             "nvidia-ml-py", "mpi4py", "numpy",
                                                                             "matplotlib"}
    older = {"nodemap": "0.1.0", "python": "3.10.12", "kernel": "5.14", "machine": "x86_64", "variables": {},
             "cupy-cuda13x": "13.6.0", "numpy": "2.2.6"}  # before the THP mode and the VM were recorded
    fleet = {"boot_id": "0b5e", "fleet_silent_ranks": [1]}
    for cls, d in ((document.Environment, older), (document.Environment, {**older, "fault_injected": "x=0.5"}),
                   (document.Extra, fleet), (document.Extra, {})):
        assert json_text(msgspec.convert(d, cls)) == json_text(d)


def test_every_check_document_in_the_tree_decodes():
    from nodemap.check import document

    for path, data in _saved("nodemap.check/1", 5):
        doc = document.decode(path, data)
        d = json.loads(data)
        again = json.loads(doc.to_json())
        d["findings"] = [_as_v2(f) for f in d["findings"]]
        for key in ("figures", "checks", "findings", "skipped", "environment", "summary", "busy"):
            assert _held(again.get(key), d.get(key)), (path, key)  # fields added since are written with defaults
        assert [len(rs["results"]) for rs in again["results"]] == [len(rs["results"]) for rs in d["results"]]
        assert all(_held(a["environment"], s["environment"]) for a, s in zip(again["results"], d["results"]))
    assert any(json.loads(data).get("busy") for _, data in _saved("nodemap.check/1", 5)), "a busy section is read"


def _as_v2(finding: dict) -> dict:
    """A nodemap.check/1 finding as /2 writes it: its severity is the
    shortfall, and fields at their defaults are left out."""
    f = {("shortfall" if k == "severity" else k): v for k, v in finding.items()}
    return {k: v for k, v in f.items() if k in ("verdict", "text") or v not in (0, "", [], None)}


def _held(again, saved) -> bool:
    """`again` holds everything `saved` does (and perhaps fields added since)."""
    if isinstance(saved, dict):
        return isinstance(again, dict) and all(k in again and _held(again[k], v) for k, v in saved.items())
    if isinstance(saved, list):
        return isinstance(again, list) and len(again) == len(saved) and all(map(_held, again, saved))
    return again == saved


@pytest.mark.parametrize("change, words", [
    (lambda d: d["expectations"]["limits"][0].update(warn="high"), "expectations.limits[0].warn is str, not a number"),
    (lambda d: d["checks"][0].update(cause="weather"), "checks[0].cause is 'weather', not one of"),
    (lambda d: d["findings"][0].update(keys="gpu/0"), "findings[0].keys is str, not a list"),
    (lambda d: d["figures"][1].update(noisy="no"), "figures[1].noisy is str, not true or false"),
    (lambda d: d.update(topology=[1]), "field topology is array, not an object or null"),
    (lambda d: d["results"][1]["results"][0]["params"].pop("threads"), "results[1].results[0].params.threads is missing"),
    (lambda d: d.update(busy="yes"), "field busy is str"),
    (lambda d: d["environment"].update(virtual_machine="yes"), "environment.virtual_machine is str, not bool | null"),
    (lambda d: d["environment"]["variables"].update(OMP_NUM_THREADS=4), "environment.variables[...] is int, not text"),
    (lambda d: d["extra"].update(fleet_silent_ranks=[True]), "extra.fleet_silent_ranks[0] is bool, not an integer"),
    (lambda d: d["busy"]["steps"][0]["gpus"][1].update(utilization="high"),
     "field busy.steps[0].gpus[1].utilization is str, not an integer or null"),
    (lambda d: d["busy"]["before"]["top"][0].pop("pid"), "field busy.before.top[0].pid is missing"),
    (lambda d: d["results"][0]["environment"]["busy"].update(cpus=[4]),
     "field results[0].environment.busy.cpus is array, not an integer"),
    (lambda d: d["figures"][0]["expectation"].update(peak="1555"), "field figures[0].expectation.peak is str, not a number"),
    # the header every check writes: without it `report` printed "--level  on , : INCOMPLETE" and exit 0
    (lambda d: d.pop("level"), "field level is missing"),
    (lambda d: d.pop("complete"), "field complete is missing"),
])
def test_malformed_check_documents_name_the_field(tmp_path, change, words):
    d = _check_doc()
    change(d)
    refused(nodemap("report", _write(tmp_path, d, "check.json"), env_=env(tmp_path)), "check.json", words)


def test_a_check_document_of_only_its_schema_is_refused(tmp_path):
    r = nodemap("report", _write(tmp_path, {"schema": "nodemap.check/1"}, "check.json"), env_=env(tmp_path))
    assert "INCOMPLETE" not in r.stdout
    refused(r, "check.json", "field host is missing")


@pytest.mark.parametrize("part, value, field", [
    ("budget", {"seconds": "30"}, "budget.seconds is str"),  # report printed it with :g
    ("budget", {"seconds": 30, "left_out": [1]}, r"budget.left_out\[0\] is int"),
    ("busy", {"busy": True, "reasons": 5}, "busy.reasons is int"),
    ("busy", {"busy": "yes"}, "busy.busy is str"),  # judged busy, exit 2
    ("remeasured", [{"key": "x"}], r"remeasured\[0\].step is missing"),
])
def test_a_check_header_the_reports_read_is_typed(part, value, field):
    """report printed these with a traceback (ValueError, TypeError, KeyError)."""
    from nodemap.check import document

    d = _check_doc()
    d[part] = value
    with pytest.raises(InputError, match=field):
        document.decode("check.json", json.dumps(d).encode())
    d[part] = {"budget": {"seconds": 30, "spent": 29.5, "left_out": ["MPI"], "cut": ""},
               "busy": {"busy": True, "reasons": ["load 9"], "before": {}},
               "remeasured": [{"step": "STREAM", "kind": "memory", "rounds": 6, "seconds": 4.2,
                               "figures": ["memory/triad"]}]}[part]
    document.decode("check.json", json.dumps(d).encode())


def test_the_speed_benchmark_times_todays_reader():
    out = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "records_speed.py"), "--runs", "1", "--json"],
                         capture_output=True, text=True, timeout=60, check=True)
    rows = json.loads(out.stdout)["rows"]
    assert [(r["schema"], r["reader"]) for r in rows] == [("nodemap.results/1", "records"), ("nodemap.check/1", "records")]
    assert all(r["ms"] > 0 for r in rows)


# --- placement plans ---------------------------------------------------------------


def test_a_placement_plan_reads_back_and_its_description_is_typed(tmp_path):
    np = pytest.importorskip("numpy")
    from nodemap.placement import planfile, planner
    from nodemap.placement.counts import AccessCounts

    assert planner.PLAN_SCHEMA == planfile.SCHEMA
    ac = AccessCounts(planner.Layout((4 << 20, 6 << 20), 2 << 20), np.arange(10, dtype=np.int64).reshape(5, 2))
    plan = planner.plan_placement(ac.layout, ac.counts, [6 << 20] * 2)
    plan.save(tmp_path / "p.npz")
    back = planner.PlacementPlan.load(tmp_path / "p.npz")
    assert back.summary() == plan.summary() and (back.decision == plan.decision).all()
    with np.load(tmp_path / "p.npz") as z:  # one class both ways: the saved description is the summary and more
        meta = planfile.decode("p.npz", bytes(z["meta"]))
    assert planfile.Summary(**{f: getattr(meta, f) for f in planfile.Summary.__struct_fields__}) == plan.summary()
    assert meta.alloc_sizes == [4 << 20, 6 << 20]
    with pytest.raises(InputError, match=r"field chunk_size: expected `int` >= 1"):
        planfile.decode("p.npz", b'{"schema": "nodemap.placement/1", "alloc_sizes": [1], "chunk_size": 0, '
                                 b'"predicted_local_fraction": 1.0}')
    with pytest.raises(InputError, match=r"field alloc_sizes\[1\] is str, not an integer"):
        planfile.decode("p.npz", b'{"schema": "nodemap.placement/1", "alloc_sizes": [1, "2"], "chunk_size": 1, '
                                 b'"predicted_local_fraction": 1.0}')


# --- fleet node documents ----------------------------------------------------------


def test_every_nodes_jsonl_in_the_tree_reads():
    from nodemap.fleet import output

    paths = sorted(glob.glob(os.path.join(SAVED, "**", "nodes.jsonl"), recursive=True))
    assert len(paths) >= 2
    for path in paths:
        nodes, _, _ = output.read_saved([path])
        with open(path) as f:
            assert len(nodes) == len({json.loads(line)["host"] for line in f if line.strip()}), path


@pytest.mark.parametrize("change, words", [
    (lambda d: d["figures"][0].update(verdict="<b>fail</b>"), "figures[0].verdict is '<b>fail</b>', not one of"),
    (lambda d: d["figures"][1].update(key=7), "figures[1].key is int, not text"),
    (lambda d: d.update(findings=[{"verdict": "fail", "keys": "gpu/0"}]), "findings[0]"),
    (lambda d: d.update(complete="no"), "field complete is str, not true or false"),
    (lambda d: d.pop("complete"), "complete is missing"),  # was taken as complete
    (lambda d: d.update(figures=[3]), "figures[0] is int, not an object"),
])
def test_malformed_node_documents_name_the_line_and_field(tmp_path, change, words):
    from nodemap.fleet import output

    d = _check_doc()
    d.pop("results")
    good = json.dumps(d)
    change(d)
    (tmp_path / "nodes.jsonl").write_text(good.replace('"n1"', '"n0"') + "\n" + json.dumps(d) + "\n")
    with pytest.raises(InputError) as e:
        output.read_saved([str(tmp_path)])
    assert str(e.value).startswith(f"{tmp_path / 'nodes.jsonl'}, line 2: field ") and words in str(e.value)


# --- typed endpoints ---------------------------------------------------------------


def test_one_gpu_has_one_endpoint_however_it_is_spelled():
    from nodemap.bench.endpoints import Endpoint

    assert {Endpoint.parse(s) for s in ("GPU3", "gpu3", " Gpu3 ")} == {Endpoint("gpu", 3)}
    assert Endpoint.parse("cuda3") == Endpoint("cuda", 3)  # a CUDA ordinal, not GPU3 (tests/test_gpu_identity.py)
    assert Endpoint.parse("NUMA10") == Endpoint("numa", 10) and Endpoint("numa", 10).label == "NUMA10"
    assert [Endpoint.parse(s) for s in ("host", "gpu", "GPUx", "", "3", "MIG-1")] == [None] * 6


def _figures(*sets):
    from nodemap.check import figures

    return {f.key: f for f in figures.extract(list(sets))}


def test_figures_carry_their_endpoints_and_their_keys_are_made_of_them():
    figs = _figures(syn.copies({(0, 0): 20.0, (1, 0): 15.0}, {0: 0}, {(0, 1): 250.0}),
                    syn.numa({(0, 1): 20.0, (1, 1): 30.0}), syn.hbm({2: 1400.0}))
    pairs = {k: (f.src, f.dst) for k, f in figs.items() if f.src or f.dst}
    assert pairs == {"h2d/numa0->gpu0": ("numa0", "gpu0"), "h2d/numa1->gpu0": ("numa1", "gpu0"),
                     "d2d/gpu0->gpu1": ("gpu0", "gpu1"), "numa/bw/numa0->numa1": ("numa0", "numa1"),
                     "numa/bw/numa1->numa1": ("numa1", "numa1"), "gpu/2/hbm_triad": ("gpu2", "gpu2")}
    # the remote copy's peak is the same GPU's local one; the remote NUMA pair's, its CPUs' local one
    assert figs["h2d/numa1->gpu0"].peak == figs["h2d/numa0->gpu0"].value


def test_matrices_of_a_document_saved_before_endpoints_are_the_same(tmp_path):
    from nodemap.check import document
    from nodemap.report import plots

    d = _check_doc()
    d["results"].append(json.loads(syn.copies({(0, 0): 20.0, (1, 1): 15.0}, {0: 0, 1: 1},
                                              {(0, 1): 250.0, (1, 0): 240.0}).to_json()))
    doc = document.from_dict(d, None, "check.json")
    doc.rejudge()
    new = json.loads(doc.to_json())
    old = json.loads(json.dumps(new))
    for f in old["figures"]:
        f.pop("src"), f.pop("dst")
    for prefix in ("d2d/", "h2d/"):
        a = plots._matrix(document.from_dict(new), prefix)
        b = plots._matrix(document.from_dict(old), prefix)
        assert a[1:] == b[1:] and a[0].keys() == b[0].keys() and a[0], prefix
    assert plots._matrix(document.from_dict(new), "d2d/")[1] == ["GPU0", "GPU1"]


def test_gpu_latency_of_a_gpu_spelled_in_lower_case_is_a_figure():
    """gpu3 (as topology keys lower-cased write it) was passed over: only GPU3 and cuda3 gave a figure.
    A CUDA ordinal stays one (cuda1 is not GPU1 under CUDA_VISIBLE_DEVICES) but is a GPU figure still."""
    rs = syn.gpu_latency({(0, 1): 800.0, (1, 0): 810.0})
    for r in rs.results:
        r.params.update(src=r.params["src"].lower(), dst=r.params["dst"].replace("GPU1", "cuda1"))
    keys = sorted(_figures(rs))
    assert keys == ["d2d_latency/gpu0->cuda1", "d2d_latency/gpu1->gpu0"], keys


def test_a_result_has_typed_endpoints_from_what_its_kind_recorded():
    from nodemap.bench.endpoints import Endpoint

    h2d = syn.copies({(1, 0): 20.0}, {0: 0}).results[0]
    assert h2d.endpoints == (Endpoint("numa", 1), Endpoint("gpu", 0))
    assert syn.numa({(0, 1): 20.0}).results[0].endpoints == (Endpoint("numa", 0), Endpoint("numa", 1))
    assert syn.hbm({3: 1.0}).results[0].endpoints == (Endpoint("gpu", 3), Endpoint("gpu", 3))
    assert syn.latency({"L1": (1 << 14, 1.2)}).results[0].endpoints == (None, None)
