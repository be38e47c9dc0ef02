"""Issue 16, item 7: odd values end in one line and exit 2, never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from hostile import _cap, env, hwloc_xml, nodemap, refused

RUN = ["run", "--local-rank", "0", "--local-size", "1"]


@pytest.mark.parametrize("digit", ["²", "٣", "1²"])
def test_unicode_digits_in_cpus(digit):
    refused(nodemap("plan", "--tasks", "1", "--cpus", digit), "--cpus", "not a number")


@pytest.mark.parametrize("var", ["SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK"])
def test_unicode_digits_in_launcher_variables(tmp_path, var):
    e = env(tmp_path, SLURM_JOB_ID="1", **{var: "²"})
    refused(nodemap("run", "--dry-run", "--", "true", env_=e), var, "--local-rank")


def test_unicode_digits_in_cuda_visible_devices(tmp_path):
    r = nodemap("plan", "--tasks", "1", env_=env(tmp_path, CUDA_VISIBLE_DEVICES="²"))
    assert r.returncode in (0, 2) and "Traceback" not in r.stderr, r.stderr


@pytest.mark.parametrize("field, value, words", [
    (("packages", 0, "os_index"), "x", ["packages[0].os_index", "an integer"]),
    (("numa_nodes", 0, "cpuset"), 5, ["numa_nodes[0].cpuset", "not text"]),
    (("numa_nodes", 0, "memory"), None, ["numa_nodes[0].memory", "null"]),
    (("pus",), {"a": 1}, ["field pus", "a list"]),
    (("machine", "hostname"), ["x"], ["machine.hostname", "not text"]),
])
def test_wrong_json_field_types(tmp_path, field, value, words):
    xml = tmp_path / "n.xml"
    xml.write_text(hwloc_xml())
    d = json.loads(nodemap("topo", "--input", str(xml), "--json").stdout)
    target = d
    for k in field[:-1]:
        target = target[k]
    target[field[-1]] = value
    (tmp_path / "n.json").write_text(json.dumps(d))
    refused(nodemap("topo", "--input", str(tmp_path / "n.json")), "n.json", *words)


def test_empty_application_name(tmp_path):
    refused(nodemap(*RUN, "--", "", env_=env(tmp_path)), "application name", "after --")


def test_missing_input_with_the_cache_on(tmp_path):
    refused(nodemap(*RUN, "--input", str(tmp_path / "missing.xml"), "--", "true", env_=env(tmp_path)),
            "missing.xml")


@pytest.mark.parametrize("budget", ["inf", "nan", "-1GiB", "1e400GiB"])
def test_absurd_budgets(tmp_path, budget):
    np = pytest.importorskip("numpy")
    from nodemap.placement.counts import AccessCounts
    from nodemap.placement.planner import Layout

    AccessCounts(Layout((4 << 20,), 2 << 20), np.ones((2, 2), dtype=np.int64)).save(tmp_path / "c.npz")
    refused(nodemap("place", "plan", "--counts", str(tmp_path / "c.npz"), f"--budget={budget}"), "--budget")


@pytest.mark.parametrize("args", [["plan", "--tasks", str(10**20)], ["run", "--tasks", str(10**20), "--local-rank",
                                                                       "0", "--dry-run", "--", "true"]])
def test_huge_task_counts(tmp_path, args):
    refused(nodemap(*args, env_=env(tmp_path)), "--tasks", "limit")


def test_place_without_numpy_names_the_extra(tmp_path):
    (tmp_path / "numpy.py").write_text("raise ImportError('No module named numpy')\n")  # the base install
    e = env(tmp_path, PYTHONPATH=str(tmp_path))
    refused(nodemap("place", "plan", "--counts", "c.npz", "--budget", "1GiB", env_=e), "numpy", "nodemap[place]")


def test_a_full_disk(tmp_path):
    with open("/dev/full", "w") as full:
        r = subprocess.run([sys.executable, "-m", "nodemap", "plan", "--tasks", "1"], stdout=full,
                           stderr=subprocess.PIPE, text=True, timeout=10, env=env(tmp_path), preexec_fn=_cap)
    refused(r, "standard output", "No space left")


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "1e999"])
def test_timeouts_that_no_timer_takes(value):
    r = nodemap("bench", "memory", f"--timeout={value}", "--size=1M", "--repeats=1", "-q")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith("nodemap bench memory: error: argument --timeout:")


# --- damaged .npz files for `place plan --counts` and `place show` ----------------------------

def _good_counts(np) -> dict:
    return {"counts": np.ones((2, 2), dtype=np.int64), "alloc_sizes": np.array([4 << 20], dtype=np.int64),
            "chunk_size": np.int64(2 << 20)}


def _spoiled(np):
    """Ways to spoil an array: pickled objects, a wrong shape, a wrong type."""
    return [np.array([1, "x"], dtype=object), np.ones((2, 2, 2), dtype=np.int64), np.array(["a", "b"])]


@pytest.mark.parametrize("name", ["counts", "alloc_sizes", "chunk_size", "sample_every"])
@pytest.mark.parametrize("spoil", [0, 1, 2])
def test_damaged_counts_arrays(tmp_path, name, spoil):
    np = pytest.importorskip("numpy")
    arrays = _good_counts(np)
    arrays[name] = _spoiled(np)[spoil]
    np.savez(tmp_path / "c.npz", **arrays)  # object arrays are pickled: allow_pickle=False must refuse them
    refused(nodemap("place", "plan", "--counts", str(tmp_path / "c.npz"), "--budget", "1GiB"), "c.npz", repr(name))


@pytest.mark.parametrize("name", ["decision", "budgets", "counts_total", "local_per_gpu", "meta"])
@pytest.mark.parametrize("spoil", [0, 1, 2])
def test_damaged_plan_arrays(tmp_path, name, spoil):
    np = pytest.importorskip("numpy")
    from nodemap.placement.counts import AccessCounts
    from nodemap.placement.planner import Layout, plan_placement

    ac = AccessCounts(Layout((4 << 20,), 2 << 20), np.ones((2, 2), dtype=np.int64))
    plan_placement(ac.layout, ac.counts, [1 << 30] * 2).save(tmp_path / "p.npz")
    with np.load(tmp_path / "p.npz") as z:
        arrays = dict(z)
    arrays[name] = _spoiled(np)[spoil]
    np.savez(tmp_path / "p.npz", **arrays)
    refused(nodemap("place", "show", str(tmp_path / "p.npz")), "p.npz")


@pytest.mark.parametrize("meta", [b"\xff\xfe", b"[1]", b'{"schema": "nodemap.placement/1"}',
                                  b'{"schema": "nodemap.placement/1", "alloc_sizes": ["x"], "chunk_size": 1}',
                                  b"[" * 100_000 + b"]" * 100_000])  # nesting past the JSON parser's recursion
def test_damaged_plan_description(tmp_path, meta):
    np = pytest.importorskip("numpy")
    np.savez(tmp_path / "p.npz", decision=np.zeros(1, dtype=np.int32), budgets=np.zeros(1, dtype=np.int64),
             meta=np.frombuffer(meta, dtype=np.uint8))
    refused(nodemap("place", "show", str(tmp_path / "p.npz")), "p.npz", "plan")


def test_a_zip_in_name_only(tmp_path):
    pytest.importorskip("numpy")
    (tmp_path / "c.npz").write_bytes(b"PK\x03\x04" + bytes(100))
    refused(nodemap("place", "plan", "--counts", str(tmp_path / "c.npz"), "--budget", "1GiB"), "c.npz", "cannot read")


def test_an_input_that_cannot_be_read_is_not_blamed_on_the_temporary_copy(tmp_path):
    """--input <(...) is copied to a temporary file first: a failure to read
    the input itself said "cannot copy it into a temporary file ($TMPDIR)"."""
    import os

    from nodemap.topology import discover

    fd = os.open(tmp_path / "copy", os.O_WRONLY | os.O_CREAT)
    with pytest.raises(discover.InputError, match="cannot read it") as e:
        discover._pipe_copy(str(tmp_path / "gone"), fd)
    assert "TMPDIR" not in str(e.value)
