"""GPU commands without a GPU: one line naming the cause and the fix, exit 2."""

from __future__ import annotations

import os
import subprocess
import sys
import types

import pytest

from nodemap import cli
from nodemap.bench.gpu import common as gpu_common

COMMANDS = [["bench", "gpu"], ["bench", "copies", "--matrix"], ["bench", "copies", "--latency", "--json"]]


@pytest.mark.parametrize("argv", COMMANDS)
def test_end_to_end_without_a_visible_gpu(argv):
    # CUDA_VISIBLE_DEVICES="" hides every GPU even where CuPy is installed.
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    r = subprocess.run([sys.executable, "-m", "nodemap.cli", *argv], capture_output=True, text=True,
                       env=env, timeout=60)
    assert r.returncode == 2
    assert r.stdout == ""
    err = r.stderr.strip()
    assert "\n" not in err and "Traceback" not in err
    assert gpu_common.NO_GPU in err or gpu_common.CUDA_MISSING in err


@pytest.mark.parametrize("argv", COMMANDS)
def test_cupy_missing(argv, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy -> ImportError
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "[cuda] extra missing" in err and "pip install 'nodemap[cuda]'" in err


def _fake_cupy(count):
    class CUDARuntimeError(RuntimeError):
        pass

    def get_count():
        if isinstance(count, Exception):
            raise count
        return count

    runtime = types.SimpleNamespace(getDeviceCount=get_count, CUDARuntimeError=CUDARuntimeError)
    return types.SimpleNamespace(cuda=types.SimpleNamespace(runtime=runtime), __version__="0-fake")


@pytest.mark.parametrize("count", [0, RuntimeError("cudaErrorNoDevice: no CUDA-capable device is detected")])
@pytest.mark.parametrize("argv", COMMANDS)
def test_no_gpu_visible(argv, count, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy(count))
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "no CUDA GPU visible" in err and "CUDA_VISIBLE_DEVICES" in err


@pytest.mark.parametrize("argv, words", [
    (["bench", "gpu", "--dtype", "float16"], "--dtype"),
    (["bench", "gpu", "--kernels", "copy,scale"], "--kernels"),
    (["bench", "gpu", "--block", "100"], "--block"),
    (["bench", "copies", "--engine", "dma"], "--engine"),
    (["bench", "copies", "--cases", "h2x"], "--cases"),  # (h2d is a case: the host case's first direction)
    (["bench", "copies", "--size", "lots"], "size"),
])
def test_bad_arguments_are_named(argv, words, monkeypatch, capsys):
    # Arguments are checked before CuPy is touched: the error is about them.
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy(1))
    assert cli.main(argv) == 2
    assert words in capsys.readouterr().err


def test_help_lists_gpu_benches(capsys):
    with pytest.raises(SystemExit):
        cli.main(["bench", "--help"])
    out = capsys.readouterr().out
    assert "gpu" in out and "copies" in out
