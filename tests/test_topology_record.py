"""The records are frozen plain classes (topology/record.py) whose saved form
refuses unknown fields, and `nodemap topo` stays off the modules it does not need."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from nodemap.errors import InputError
from nodemap.mapping import devices, request
from nodemap.topology import allowed, model, paths, record
from nodemap.topology.cpuset import CpuSet

RECORDS = [getattr(model, n) for n in ("Machine", "Package", "NumaNode", "Group", "Cache", "Core", "PU", "PciDevice",
                                       "GPU", "Port", "NIC", "Link", "Topology")] + [allowed.Allowed, paths.Path]
RECORDS += [request.Request, request.TaskBinding, request.Plan, devices.GpuInfo]  # the mapping's records


@pytest.mark.parametrize("cls", RECORDS, ids=lambda c: c.__name__)
def test_record_is_frozen_and_equal_by_value(cls):
    assert issubclass(cls, record.Record) and record.fields(cls)
    required = [n for n in record.fields(cls) if n not in record.defaults(cls)]
    one = cls(*[0] * len(required))
    with pytest.raises(AttributeError):
        setattr(one, required[0] if required else next(iter(record.fields(cls))), 1)
    assert one == cls(*[0] * len(required)) and hash(one) == hash(cls(*[0] * len(required)))
    assert repr(one).startswith(f"{cls.__name__}(") and all(f"{n}=" in repr(one) for n in record.fields(cls))


def test_construction_by_position_and_keyword_with_defaults():
    pu = model.PU(3, allowed=False)
    assert (pu.os_index, pu.online, pu.allowed) == (3, True, False)
    assert pu != model.PU(3) and pu != model.Core(3, 0, CpuSet()) and model.PU(3) != (3, True, True)
    assert repr(pu) == "PU(os_index=3, online=True, allowed=False)"
    for bad in (lambda: model.PU(), lambda: model.PU(1, 2, 3, 4), lambda: model.PU(1, os_index=2),
                lambda: model.PU(1, colour="red")):
        with pytest.raises(TypeError):
            bad()
    with pytest.raises(TypeError):
        record.replace(pu, colour="red")
    with pytest.raises(TypeError, match="follows one with a default"):
        type("Bad", (record.Record,), {"__annotations__": {"a": int, "b": int}, "a": 0})


def test_the_models_field_types_are_objects_not_strings():
    # names.check reads them on every --input: strings cost 1 ms evaluating them (model.py's imports)
    assert not [n for cls in RECORDS[:13] for n, tp in record.fields(cls).items() if isinstance(tp, str)]


def test_defaults_are_immutable_values():
    # one value shared by every record that takes it: a CpuSet, a tuple, another (frozen) record
    assert model.PciDevice("0000:00:00.0", 1).cpuset == CpuSet()
    assert model.Topology().machine == model.Machine() and model.Topology().allowed_mems == CpuSet()
    with pytest.raises(AttributeError):
        model.PU(0).online = False  # type: ignore[misc]
    assert model.replace(model.PU(0), online=False) == model.PU(0, online=False)
    assert {model.PU(0), model.PU(0, online=True)} == {model.PU(0)}


def test_a_saved_record_refuses_a_field_it_does_not_declare():
    doc = model.Topology(pus=(model.PU(0),)).to_dict()
    doc["pus"][0]["colour"] = "red"
    with pytest.raises(InputError, match=r"field pus\[0\]\.colour is not one nodemap writes"):
        model.Topology.from_json(json.dumps(doc))
    doc["pus"][0].pop("colour")
    assert model.Topology.from_json(json.dumps(doc)) == model.Topology(pus=(model.PU(0),))


# --- what `nodemap topo` imports ---------------------------------------------------

# (argparse brings locale; msgspec brings typing, datetime, decimal, uuid: ~20 ms of ~57, gone with the records
# as plain classes, benchmarks/results/topo_vs_lstopo_20261202c.md; only reading a saved file needs msgspec). shutil (bz2, lzma: 7M instructions, 3.8%) came with
# argparse's help formatter, made for every option added: commands.formatter reads the width without it.
# argparse (with gettext and locale: ~15%) is not needed for a line of topo's own options (cli.plain_args).
# re (with enum, ~4 ms): text, units and env read names and sizes without it.
SLOW = {"json", "socket", "ctypes", "dataclasses", "shutil", "argparse", "gettext", "locale", "msgspec", "typing", "re",
        "enum"}


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
