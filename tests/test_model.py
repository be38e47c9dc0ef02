"""Topology JSON is lossless: hypothesis-built topologies survive the round trip."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings, strategies as st
from test_paths import sample_node

from nodemap.errors import InputError
from nodemap.topology import model as m
from nodemap.topology.cpuset import CpuSet

cpus = st.frozensets(st.integers(0, 300), max_size=20).map(CpuSet)
text = st.text(max_size=12)
small = st.integers(-1, 1 << 12)
big = st.integers(0, 1 << 50)
reals = st.floats(allow_nan=False, allow_infinity=False, width=64)


def tup(s, n=4):
    return st.lists(s, max_size=n).map(tuple)


ports = st.builds(m.Port, small, text, text, reals)
topologies = st.builds(
    m.Topology,
    machine=st.builds(m.Machine, text, text, big, mem_total=big, info=tup(st.tuples(text, text))),
    packages=tup(st.builds(m.Package, small, cpus, text)),
    numa_nodes=tup(st.builds(m.NumaNode, small, cpus, big, text)),
    distances=tup(tup(small)),
    groups=tup(st.builds(m.Group, text, small, cpus)),
    caches=tup(st.builds(m.Cache, small, text, big, cpus, small, small)),
    cores=tup(st.builds(m.Core, small, small, cpus)),
    pus=tup(st.builds(m.PU, small, st.booleans(), st.booleans())),
    pci_devices=tup(st.builds(m.PciDevice, text, small, small, small, text, small, cpus, tup(text), small, small, reals)),
    gpus=tup(st.builds(m.GPU, small, text, text, big, text, text, small, cpus, small, small, tup(text), st.booleans())),
    nics=tup(st.builds(m.NIC, text, text, text, small, cpus, tup(ports), tup(text))),
    links=tup(st.builds(m.Link, text, text, text, small, reals, small)),
    allowed_mems=cpus,
    source=text,
    notes=tup(text),
)


@settings(max_examples=25, deadline=None)
@given(topologies)
def test_json_round_trip_is_lossless(t):
    back = m.Topology.from_json(t.to_json())
    assert back == t
    assert back.to_json() == t.to_json()


def test_compact_json_and_schema_tag():
    t = sample_node()
    d = json.loads(t.to_json(indent=None))
    assert d["schema"] == m.SCHEMA
    assert d["gpus"][0]["cpuset"] == "0-23,48-71"
    assert m.Topology.from_json(json.dumps(d)) == t


def test_float_fields_accept_json_integers():
    d = sample_node().to_dict()
    d["nics"][0]["ports"][0]["rate_gbps"] = 400
    port = m.Topology.from_json(json.dumps(d)).nics[0].ports[0]
    assert isinstance(port.rate_gbps, float) and port.rate_gbps == 400.0


def test_wrong_schema_and_unknown_fields_are_refused():
    d = sample_node().to_dict()
    with pytest.raises(InputError, match="t.json: not a nodemap topology export .schema 'nodemap.results/1'"):
        m.Topology.from_json(json.dumps({**d, "schema": "nodemap.results/1"}), "t.json")
    d["gpus"][0]["colour"] = "green"
    with pytest.raises(InputError, match=r"t.json: field gpus\[0\].colour is not one nodemap writes"):
        m.Topology.from_json(json.dumps(d), "t.json")


@pytest.mark.parametrize("raw,norm", [
    ("00000000:3B:00.0", "0000:3b:00.0"),
    ("3b:00.0", "0000:3b:00.0"),
    ("0001:C1:00.1", "0001:c1:00.1"),
    ("FFFFFFFF:FF:FF.0", m.HIDDEN_BUS_ID),
])
def test_norm_bus_id(raw, norm):
    assert m.norm_bus_id(raw) == norm


def test_lookups_and_derived_sets():
    t = sample_node()
    assert t.cpuset == CpuSet.parse("0-95") and t.nodeset == CpuSet.parse("0-1")
    assert t.distance(0, 1) == 21 and t.distance(0, 7) is None
    assert t.numa_of(CpuSet([30])) == CpuSet([1])
    assert t.pci("00000000:18:00.0").class_id == 0x0302
    assert t.nic("mlx5_2").kind == "Ethernet"
    assert [c.size for c in t.last_level_caches()] == [36 << 20] * 2
    with pytest.raises(KeyError):
        t.gpu(9)
