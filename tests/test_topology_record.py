"""The records are plain frozen dataclasses, and `nodemap topo` stays off the
modules it does not need."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import typing

import pytest

from nodemap.mapping import devices, request
from nodemap.topology import allowed, model, paths
from nodemap.topology.cpuset import CpuSet

RECORDS = [getattr(model, n) for n in ("Machine", "Package", "NumaNode", "Group", "Cache", "Core", "PU", "PciDevice",
                                       "GPU", "Port", "NIC", "Link", "Topology")] + [allowed.Allowed, paths.Path]
RECORDS += [request.Request, request.TaskBinding, request.Plan, devices.GpuInfo]  # the mapping's records


@pytest.mark.parametrize("cls", RECORDS, ids=lambda c: c.__name__)
def test_record_is_a_frozen_dataclass_with_its_fields_in_order(cls):
    assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen
    assert cls._fields == tuple(f.name for f in dataclasses.fields(cls))


def test_factory_defaults_are_fresh_values():
    assert model.PciDevice("0000:00:00.0", 1).cpuset == CpuSet()
    assert model.Topology().machine == model.Machine() and model.Topology().allowed_mems == CpuSet()
    assert model.GPU(0, "NVIDIA").cpuset is not model.GPU(1, "NVIDIA").cpuset
    with pytest.raises(dataclasses.FrozenInstanceError):
        model.PU(0).online = False  # type: ignore[misc]


def test_decode_reads_the_annotations_as_typing_does():
    for cls in RECORDS[:13]:
        assert model._hints(cls) == typing.get_type_hints(cls)


# --- what `nodemap topo` imports ---------------------------------------------------

SLOW = {"typing", "json", "socket", "ctypes"}  # (argparse brings shutil and locale; dataclasses brings inspect)


def _modules(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys; print(' '.join(sys.modules))"],
                         capture_output=True, text=True, timeout=60, check=True)
    return set(out.stdout.split())


@pytest.mark.skipif(not os.path.isdir("/sys/devices/system/cpu"), reason="needs Linux sysfs")
def test_topo_imports_none_of_the_slow_modules():
    base = _modules("pass")
    used = _modules("import io, contextlib\nfrom nodemap.cli import main\n"
                    "with contextlib.redirect_stdout(io.StringIO()): assert main(['topo', '--source', 'sysfs']) == 0")
    used -= _modules("import io, contextlib")  # the test's own
    assert (used - base) & SLOW == set()
