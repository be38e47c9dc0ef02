"""The sysfs reader's string code gives what the regular expressions it
replaced gave (they kept `re` out of `nodemap topo`), on any text; and the
live reader, which lets the kernel follow symlinks, reads what a realpath
per file read."""

from __future__ import annotations

import os
import re

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from nodemap.errors import InputError
from nodemap.topology import allowed, sysfs

# Characters that matter to the expressions, their look-alikes (non-ASCII
# digits and whitespace, the Kelvin sign and dotted I that re.I folds) and
# some plain ones.
ODD = "0123456789abcdefABCDEFxpciKMGkmgiIbB.:_-/ \t\n\r\x0b\x0c\x1c\x85\xa0\u2028\u0660\u0966\u212a\u0130\u0131"
text = st.text(alphabet=ODD, max_size=24)
SETTINGS = settings(max_examples=300, deadline=None)


@SETTINGS
@given(text)
@example("0000:3b:00.0")
@example("00000000:3B:00.7")
@example("0000:3b:00.8")
@example("pci0000:00")
def test_bus_id_and_host_bridge(s):
    assert sysfs._is_bus_id(s) == bool(re.fullmatch(r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]", s))
    assert sysfs._is_host_bridge(s) == bool(re.fullmatch(r"pci[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}", s))
    if sysfs._is_bus_id(s):
        assert sysfs._bus_key(s) == tuple(int(x, 16) for x in re.split(r"[:.]", s))


@SETTINGS
@given(text)
@example("cpu12")
@example("cpu\u0660")
def test_cpu_and_node_names(s):
    assert (s[:3] == "cpu" and s[3:].isdecimal()) == bool(re.fullmatch(r"cpu\d+", s))
    assert (s[:4] == "node" and s[4:].isdecimal()) == bool(re.fullmatch(r"node\d+", s))


class _Text:
    """A Root holding one file."""

    def __init__(self, value: str | None) -> None:
        self.value = value

    def read(self, rel: str) -> str | None:
        return self.value

    def where(self, rel: str) -> str:
        return rel


def _old_size(s: str | None) -> int:
    if not s:
        return 0
    m = re.fullmatch(r"(\d+)\s*([KMG]?)i?B?", s, re.I)
    if not m:
        raise InputError(s, "unreadable")
    return int(m.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2).upper()]


def _outcome(fn, *args):
    try:
        return fn(*args)
    except InputError:
        return "InputError"
    except KeyError:
        return "KeyError"  # what the old code raised for a Kelvin sign


@SETTINGS
@given(text)
@example("32K")
@example("1024 KiB")
@example("2 gb")
@example("12\u212a")
def test_cache_size(s):
    assert _outcome(sysfs._size, _Text(s), "size") == _outcome(_old_size, s)


@SETTINGS
@given(st.lists(st.sampled_from(["MemTotal:", "Node 0 MemTotal:", " ", "\t", "\n", "123", "\u0660", "kB", "x"]),
                max_size=10).map("".join))
@example("Node 0 MemTotal:       7012345 kB\nNode 0 MemFree: 1 kB\n")
def test_meminfo_total(s):
    m = re.search(r"MemTotal:\s*(\d+)\s*kB", s)
    assert sysfs._meminfo_total(_Text(s), "meminfo") == (int(m.group(1)) * 1024 if m else 0)


@SETTINGS
@given(st.lists(st.sampled_from(["16.0", "2.5", "8", ".", "1.2.3", " ", "\t", "\xa0", "\u0660", "GT/s", " PCIe",
                                 "Unknown"]), max_size=6).map("".join) | st.none())
@example("16.0 GT/s PCIe")
@example("8.0GT/s")
def test_link_speed(s):
    def old(text):
        m = re.match(r"\s*([\d.]+)\s*GT/s", text or "")
        if not m:
            return 0.0, 0
        gts = float(m.group(1))
        return gts, sysfs._GENERATIONS.get(gts, 0)

    def outcome(fn):
        try:
            return fn(s)
        except ValueError as e:
            return str(e)

    assert outcome(sysfs._link_speed) == outcome(old)


@SETTINGS
@given(text)
@example("100 Gb/sec (4X EDR)")
@example(" 25\u0660")
def test_port_rate(s):
    m = re.match(r"\s*([\d.]+)", s)
    assert sysfs._leading_number(s) == (m.group(1) if m else "")


@SETTINGS
@given(text)
@example("mlx5_10")
@example("hfi1_0")
def test_natural_sort_key(s):
    # the old regex key where it worked (ASCII; "²" made it raise): nodemap.text's key agrees
    from nodemap.text import natural_key

    if s.isascii():
        assert natural_key(s) == tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", s))


@SETTINGS
@given(st.lists(st.sampled_from(["processor\t: 0", "model name\t: Xeon", "cpu model : R", "Processor: ARM",
                                 "", " ", "\t", "\r", "\x1c", "\xa0", "a:b"]), max_size=12).map("\n".join))
def test_cpuinfo_blocks(s):
    old = [b.splitlines() for b in re.split(r"\n\s*\n", s)]
    fields = [[ln.partition(":") for ln in b if ":" in ln] for b in old]
    new = [[ln.partition(":") for ln in b if ":" in ln] for b in sysfs._blocks(s)]
    assert [f for f in fields if f] == [f for f in new if f]


@SETTINGS
@given(st.lists(st.sampled_from(["Cpus_allowed_list:", "Mems_allowed_list:", "Name:", "\t", " ", "0-3", "1",
                                 "a b", "\r", "\xa0", "\n"]), max_size=10).map("".join))
@example("Name:\tx\nCpus_allowed_list:\t0-1\nMems_allowed_list:\t0\n")
@example("Cpus_allowed_list:\nMems_allowed_list:\t0")
def test_status_fields(s):
    for name in ("Cpus_allowed_list", "Mems_allowed_list"):
        m = re.search(rf"^{name}:\s*(\S*)\s*$", s, re.M)
        assert allowed._field(s, name) == (m.group(1) if m else None)


@pytest.mark.skipif(not os.path.isdir("/sys/devices/system/cpu"), reason="needs Linux sysfs")
def test_live_read_without_realpath_reads_what_realpath_read(monkeypatch):
    fast = sysfs.read("/")
    old_at, old_existing = sysfs.Root._at, sysfs.Root._existing

    def realpath(self, rel: str) -> str:
        return os.path.realpath("/" + rel) if self.live else old_at(self, rel)

    def existing(self, rel: str) -> str | None:
        return realpath(self, rel) if self.live else old_existing(self, rel)

    monkeypatch.setattr(sysfs.Root, "_at", realpath)
    monkeypatch.setattr(sysfs.Root, "_existing", existing)
    slow = sysfs.read("/")
    # the hostname, memory and the allowed set may move between the reads; the rest may not
    assert fast.cpuset == slow.cpuset and fast.cores == slow.cores and fast.caches == slow.caches
    assert fast.pci_devices == slow.pci_devices and fast.gpus == slow.gpus and fast.nics == slow.nics
    assert [n.cpuset for n in fast.numa_nodes] == [n.cpuset for n in slow.numa_nodes]
    assert fast.packages == slow.packages and fast.groups == slow.groups
