"""The records are frozen msgspec Structs that refuse unknown fields, and
`nodemap topo` stays off the modules it does not need."""

from __future__ import annotations

import os
import subprocess
import sys

import msgspec
import pytest

from nodemap.mapping import devices, request
from nodemap.topology import allowed, model, paths
from nodemap.topology.cpuset import CpuSet

RECORDS = [getattr(model, n) for n in ("Machine", "Package", "NumaNode", "Group", "Cache", "Core", "PU", "PciDevice",
                                       "GPU", "Port", "NIC", "Link", "Topology")] + [allowed.Allowed, paths.Path]
RECORDS += [request.Request, request.TaskBinding, request.Plan, devices.GpuInfo]  # the mapping's records


@pytest.mark.parametrize("cls", RECORDS, ids=lambda c: c.__name__)
def test_record_is_a_frozen_struct_refusing_unknown_fields(cls):
    config = cls.__struct_config__
    assert issubclass(cls, msgspec.Struct) and config.frozen and config.forbid_unknown_fields


def test_the_models_field_types_are_objects_not_strings():
    # names.check reads them on every --input: strings cost 1 ms evaluating them (model.py's imports)
    assert not [f.name for cls in RECORDS[:13] for f in msgspec.structs.fields(cls) if isinstance(cls.__annotations__.get(f.name), str)]


def test_factory_defaults_are_fresh_values():
    assert model.PciDevice("0000:00:00.0", 1).cpuset == CpuSet()
    assert model.Topology().machine == model.Machine() and model.Topology().allowed_mems == CpuSet()
    assert model.GPU(0, "NVIDIA").cpuset is not model.GPU(1, "NVIDIA").cpuset
    with pytest.raises(AttributeError):
        model.PU(0).online = False  # type: ignore[misc]
    assert model.replace(model.PU(0), online=False) == model.PU(0, online=False)


# --- what `nodemap topo` imports ---------------------------------------------------

# (argparse brings locale; msgspec brings typing: it and the Structs cost less than the dataclasses and their
# `inspect` did, benchmarks/results/topo_vs_lstopo.md). shutil (bz2, lzma: 7M instructions, 3.8%) came with
# argparse's help formatter, made for every option added: commands.formatter reads the width without it.
# argparse (with gettext and locale: ~15%) is not needed for a line of topo's own options (cli.plain_args).
SLOW = {"json", "socket", "ctypes", "dataclasses", "shutil", "argparse", "gettext", "locale"}


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
