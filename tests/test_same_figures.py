"""benchmarks/same_figures.py: a kind at an earlier revision against this
tree. Run for real (latency, tiny) with the base at HEAD, and its
comparison of definitions on documents that differ."""

from __future__ import annotations

import copy
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import same_figures as sf  # noqa: E402


def test_head_against_itself_has_the_same_definitions(tmp_path, capsys):
    out = tmp_path / "same.json"
    rc = sf.main(["--base", "HEAD", "--rounds", "1", "--out", str(out), "--",
                  "latency", "--max-size", "8K", "--repeats", "2", "--loads", "1024"])
    text = capsys.readouterr().out
    assert rc == 0 and "definitions: the same apart from the timings (1 rounds, 2 results each)" in text
    assert out.exists() and "load latency 4096" in text


def test_a_changed_parameter_or_count_is_a_different_definition():
    r = {"metric": "triad", "unit": "GB/s", "params": {"elements": 10, "write_allocate_best_gbps": 1.0},
         "stats": {"best": 5.0}, "samples": [5.0], "notes": ["caution: spread 20%", "avx2 kernels"]}
    timing_only = copy.deepcopy(r)
    timing_only["stats"]["best"], timing_only["params"]["write_allocate_best_gbps"] = 9.0, 2.0
    timing_only["notes"][0] = "caution: spread 50%"
    assert sf.definition({"results": [r]}) == sf.definition({"results": [timing_only]})
    other = copy.deepcopy(r)
    other["params"]["elements"] = 11
    assert sf.definition({"results": [r]}) != sf.definition({"results": [other]})


def test_a_folder_base_is_its_src(tmp_path):
    (tmp_path / "src" / "nodemap").mkdir(parents=True)
    assert sf.export(str(tmp_path), tmp_path / "unused") == (tmp_path / "src").resolve()


def test_the_old_side_keeps_dependency_paths_but_no_second_nodemap(tmp_path, monkeypatch):
    (tmp_path / "deps" / "msgspec").mkdir(parents=True)
    (tmp_path / "tree" / "nodemap").mkdir(parents=True)
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path / 'deps'}:{tmp_path / 'tree'}")
    assert sf.dependency_paths() == [str(tmp_path / "deps")]


def test_both_sides_start_alike_but_for_their_source(tmp_path):
    base = sf.side_of(["mpiexec", "-n", "2"], ["nodemap", "bench", "ring"], tmp_path / "old" / "src", "/lib.so")
    this = sf.side_of(["mpiexec", "-n", "2"], ["nodemap", "bench", "ring"], tmp_path / "new" / "src", "/lib.so")
    assert base[0] == this[0] and "-S" in this[0]
    assert base[1]["PYTHONPATH"].split(os.pathsep)[1:] == this[1]["PYTHONPATH"].split(os.pathsep)[1:]
    assert this[1]["PYTHONPATH"].startswith(str(tmp_path / "new" / "src")) and this[1]["NODEMAP_NATIVE_LIB"] == "/lib.so"
