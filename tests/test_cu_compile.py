"""Every .cu kernel file compiles (device code only) where nvcc exists, so a
syntax error never waits for a GPU session. NVRTC compiles the same source
at run time with -std=c++17."""

from __future__ import annotations

import shutil
import subprocess
from importlib import resources

import pytest

KERNELS = resources.files("nodemap") / "kernels"
CU_FILES = sorted(p.name for p in KERNELS.iterdir() if p.name.endswith(".cu"))


def test_kernel_files_are_package_data():
    assert {"stream.cu", "copies.cu"} <= set(CU_FILES)


@pytest.mark.parametrize("name", CU_FILES)
def test_compiles(name, tmp_path):
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc not on PATH")
    src = KERNELS / name
    r = subprocess.run([nvcc, "-std=c++17", "-arch=sm_80", "-cubin", f"-I{KERNELS}", "-o",
                        str(tmp_path / "k.cubin"), str(src)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "warning" not in r.stderr.lower(), r.stderr
