"""The model's hand-written frozen records behave as the dataclasses they replace,
and `nodemap topo` stays off the modules that made it slow."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import os
import pickle
import subprocess
import sys

import pytest

from nodemap.mapping import devices, request
from nodemap.topology import allowed, model, paths
from nodemap.topology.cpuset import CpuSet

RECORDS = [getattr(model, n) for n in ("Machine", "Package", "NumaNode", "Group", "Cache", "Core", "PU", "PciDevice",
                                       "GPU", "Port", "NIC", "Link", "Topology")] + [allowed.Allowed, paths.Path]
RECORDS += [request.Request, request.TaskBinding, request.Plan, devices.GpuInfo]  # the mapping's records


def reference(cls: type) -> type:
    """A real frozen dataclass with the fields, types and defaults `cls` declares."""
    ns: dict = {"__annotations__": dict(cls.__annotations__), "__module__": cls.__module__}
    for p in inspect.signature(cls.__init__).parameters.values():
        if p.default is inspect.Parameter.empty or p.name == "self":
            continue
        factory = cls.__init__.__globals__.get(cls.__annotations__[p.name])  # CpuSet, Machine
        ns[p.name] = dataclasses.field(default_factory=factory) if p.default is model._NEW else p.default
    return dataclasses.dataclass(frozen=True)(type(cls.__name__, (), ns))


def sample_args(cls: type) -> dict:
    """A value for every field, different from its default."""
    values = {"str": "x", "int": 7, "float": 2.5, "bool": False, "CpuSet": CpuSet([1, 3]), "Machine": model.Machine("h"),
              "CpuSet | None": CpuSet([2])}
    out = {}
    for name, ann in cls.__annotations__.items():
        out[name] = values.get(ann, (("a", "b"),) if ann.startswith("tuple") else None)
    return out


@pytest.mark.parametrize("cls", RECORDS, ids=lambda c: c.__name__)
def test_record_is_the_dataclass_it_replaces(cls):
    ref = reference(cls)
    assert [(f.name, f.type) for f in dataclasses.fields(cls)] == [(f.name, f.type) for f in dataclasses.fields(ref)]
    assert dataclasses.is_dataclass(cls) and cls.__match_args__ == ref.__match_args__
    params = [(p.name, p.kind, p.default) for p in inspect.signature(cls.__init__).parameters.values()]
    ref_params = [(p.name, p.kind, p.default) for p in inspect.signature(ref.__init__).parameters.values()]
    assert [p[:2] for p in params] == [p[:2] for p in ref_params]
    for (_, _, d), (_, _, rd) in zip(params, ref_params):
        assert d is model._NEW if rd is dataclasses._HAS_DEFAULT_FACTORY else d == rd

    for kwargs in ({k: v for k, v in sample_args(cls).items()},
                   {f.name: v for f, v in zip(dataclasses.fields(ref), sample_args(cls).values())
                    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}):
        a, r = cls(**kwargs), ref(**kwargs)
        assert repr(a) == repr(r)
        assert hash(a) == hash(r)
        assert dataclasses.asdict(a) == dataclasses.asdict(r)
        assert dataclasses.astuple(a) == dataclasses.astuple(r)
        assert a == cls(**kwargs) and a != r and not (a == r)
        assert pickle.loads(pickle.dumps(a)) == a and copy.deepcopy(a) == a
        name = next(iter(kwargs or sample_args(cls)))
        kwargs = kwargs or {name: sample_args(cls)[name]}
        a = cls(**kwargs)
        with pytest.raises(dataclasses.FrozenInstanceError, match=f"cannot assign to field '{name}'"):
            setattr(a, name, 1)
        with pytest.raises(dataclasses.FrozenInstanceError, match=f"cannot delete field '{name}'"):
            delattr(a, name)
        changed = dataclasses.replace(a, **{name: kwargs[name]})
        assert changed == a and model.replace(a, **{name: kwargs[name]}) == a
    with pytest.raises(TypeError, match="unexpected keyword argument 'colour'"):
        model.replace(a, colour=1)


def test_factory_defaults_are_fresh_values():
    assert model.PciDevice("0000:00:00.0", 1).cpuset == CpuSet()
    assert model.Topology().machine == model.Machine() and model.Topology().allowed_mems == CpuSet()
    assert model.GPU(0, "NVIDIA").cpuset is not model.GPU(1, "NVIDIA").cpuset


def test_a_record_whose_init_disagrees_with_its_fields_is_refused():
    with pytest.raises(TypeError, match="does not take the fields"):
        class Bad(model._Record):
            a: int
            b: int

            def __init__(self, b: int, a: int) -> None:
                self.__dict__.update(a=a, b=b)


def test_decode_reads_the_annotations_as_typing_does():
    import typing

    for cls in RECORDS[:13]:
        assert model._hints(cls) == typing.get_type_hints(cls)


# --- what `nodemap topo` imports ---------------------------------------------------

SLOW = {"argparse", "dataclasses", "typing", "inspect", "re", "json", "socket", "ctypes", "shutil", "locale"}


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
