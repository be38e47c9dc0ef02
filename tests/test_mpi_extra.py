"""`pip install 'nodemap[mpi]'` alone runs every MPI path: `bench mpi`,
the check's MPI step and the fleet's pair tests on host buffers need no
numpy (the extra does not install it; `[report]` pulled it in through
matplotlib, which hid the ModuleNotFoundError).

Fast: the dev venv's ranks with numpy and matplotlib made unimportable
(a sitecustomize on PYTHONPATH). Slow: a fresh venv with only `.[mpi]`."""

import json
import os
import random
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from fleet_docs import node_doc

pytest.importorskip("mpi4py")
ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
pytestmark = [pytest.mark.mpi, pytest.mark.skipif(not (BIN / "mpiexec").exists(),
                                                  reason="no mpiexec next to sys.executable (pip install mpich)")]
SMALL = ["--sizes", "1,64KiB,16MiB", "--iters-scale", "0.05", "--repeats", "2"]


@pytest.fixture
def no_numpy(tmp_path):
    """An environment whose Pythons cannot import numpy or matplotlib."""
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text("import sys\nfor m in ('numpy', 'matplotlib'):\n"
                                           "    sys.modules[m] = None\n")
    probe = subprocess.run([sys.executable, "-c", "import numpy"], env=dict(os.environ, PYTHONPATH=str(shim)),
                           capture_output=True, text=True)
    assert probe.returncode != 0  # the shim works: what passes below passes without numpy
    return dict(os.environ, PYTHONPATH=str(shim), CUDA_VISIBLE_DEVICES="")


def _results(path):
    rs = json.loads(Path(path).read_text())
    assert rs["results"] and all(r["verified"] for r in rs["results"]), rs.get("failures")
    return rs


def _fleet(bin_dir, tmp_path, env):
    """Two ranks as two nodes from a saved node document: the pair tests are real MPI."""
    doc = tmp_path / "doc.json"
    doc.write_text(json.dumps(node_doc("template", random.Random(7), gpus=0, noise=0.0)))
    out = tmp_path / "fleet"
    p = subprocess.run([str(bin_dir / "mpiexec"), "-n", "2", "-env", "NODEMAP_FLEET_NODE", "n{rank}",
                        str(bin_dir / "nodemap"), "check", "--fleet", "-o", str(out), "--pair-size", "64KiB", "-q"],
                       capture_output=True, text=True, timeout=180, env=dict(env, NODEMAP_FLEET_NODE_DOC=str(doc)))
    assert p.returncode in (0, 1), p.stdout + p.stderr
    pairs = [json.loads(x) for x in (out / "pairs.jsonl").read_text().splitlines()]
    assert {r["key"] for r in pairs} >= {"mpi latency host", "mpi bw host"} and all(r["value"] > 0 for r in pairs)


def test_bench_mpi_and_the_fleets_pairs_need_no_numpy(tmp_path, no_numpy):
    out = tmp_path / "mpi.json"
    p = subprocess.run([str(BIN / "mpiexec"), "-n", "2", str(BIN / "nodemap"), "bench", "mpi", *SMALL,
                        "-q", "-o", str(out)], capture_output=True, text=True, timeout=120, env=no_numpy)
    assert p.returncode == 0, p.stderr
    assert {r["params"]["size"] for r in _results(out)["results"]} == {1, 64 << 10, 16 << 20}
    _fleet(BIN, tmp_path, no_numpy)


@pytest.mark.slow
def test_the_mpi_extra_alone_runs_bench_mpi_the_checks_mpi_step_and_the_fleet(tmp_path):
    """A fresh venv with `pip install '.[mpi]'` and nothing else (about a minute: it builds nodemap)."""
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    vbin = env_dir / "bin"
    build = tmp_path / "build"  # the checkout's own build folder is the dev venv's
    p = subprocess.run([str(vbin / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                        "--config-settings", f"build-dir={build}", f"{ROOT}[mpi]"],
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout + p.stderr
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(CUDA_VISIBLE_DEVICES="", PATH=f"{vbin}{os.pathsep}{env.get('PATH', '')}")
    has = subprocess.run([str(vbin / "python"), "-c", "import numpy"], capture_output=True, env=env)
    assert has.returncode != 0, "the [mpi] extra installs numpy now: this test proves nothing"
    # the docs' command, as printed (every size, 1 B - 64 MiB)
    out = tmp_path / "mpi.json"
    p = subprocess.run(["mpiexec", "-n", "2", "nodemap", "bench", "mpi", "-q", "-o", str(out)],
                       capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert max(r["params"]["size"] for r in _results(out)["results"]) == 64 << 20
    # the check's MPI step runs (tiny host steps keep the rest short) and judges what it measured
    chk = tmp_path / "check"
    p = subprocess.run(["nodemap", "check", "--level", "quick", "-o", str(chk), "-q"], capture_output=True,
                       text=True, timeout=300, env=dict(env, NODEMAP_CHECK_TINY="1"), cwd=tmp_path)
    assert p.returncode in (0, 1, 2), p.stderr
    doc = json.loads((chk / "check.json").read_text())
    assert {"mpi/HH/latency", "mpi/HH/bw"} <= {f["key"] for f in doc["figures"]}, doc["skipped"]
    assert not [s for s in doc["skipped"] if s["what"].startswith("MPI")], doc["skipped"]
    _fleet(vbin, tmp_path, env)
