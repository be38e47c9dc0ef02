"""This machine read through hwloc: lstopo's XML, or pyhwloc's, via hwloc_xml.

`lstopo-no-graphics --of xml -` (or `lstopo`) keeps hwloc's "important" I/O
by default (GPUs, NICs, storage and the bridges above them), which is what
the model holds; `--whole-io` would add every PCI function and is not
needed. The library's own default drops I/O, so the pyhwloc path asks for
the important I/O explicitly. HWLOC_XMLFILE and the other HWLOC_* variables
are honoured as hwloc honours them.
"""

from __future__ import annotations

import shutil
import subprocess

from ..errors import NodemapError
from . import hwloc_xml
from .model import Topology, replace

__all__ = ["available", "read", "LSTOPO"]

LSTOPO = ("lstopo-no-graphics", "lstopo")
TIMEOUT_S = 60.0  # hwloc probes every PCI device; a big node takes seconds

_INSTALL = "install hwloc (apt-get install hwloc, dnf install hwloc, spack install hwloc) or pip install pyhwloc"


def available() -> bool:
    return _lstopo() is not None or _pyhwloc() is not None


def read(timeout: float = TIMEOUT_S) -> Topology:
    exe = _lstopo()
    if exe is not None:
        return _via_lstopo(exe, timeout)
    mod = _pyhwloc()
    if mod is not None:
        return _via_pyhwloc(mod)
    raise NodemapError(f"hwloc is missing: neither {' nor '.join(LSTOPO)} is on PATH and pyhwloc is not "
                       f"importable; {_INSTALL}")


def _lstopo() -> str | None:
    return next((p for p in map(shutil.which, LSTOPO) if p), None)


def _pyhwloc():
    try:
        import pyhwloc
    except ImportError:
        return None
    return pyhwloc


def _via_lstopo(exe: str, timeout: float) -> Topology:
    out = _run([exe, "--of", "xml", "-"], timeout)
    version = _run([exe, "--version"], timeout).decode(errors="replace").strip()
    topo = hwloc_xml.parse(out, f"{exe} --of xml")
    return replace(topo, source=f"hwloc:{version or exe}")


def _run(argv: list[str], timeout: float) -> bytes:
    from ..proc import run_group  # its own process group: a stuck lstopo ends with what it started

    try:
        code, out, err = run_group(argv, None, timeout, text=False)
    except subprocess.TimeoutExpired:
        raise NodemapError(f"{' '.join(argv)} did not finish within {timeout:g} s: hwloc is stuck probing "
                           "devices; retry, or use --source sysfs") from None
    except OSError as e:
        raise NodemapError(f"cannot run {argv[0]}: {e.strerror or e}; {_INSTALL}") from None
    if code != 0:
        lines = err.decode(errors="replace").strip().splitlines()
        raise NodemapError(f"{' '.join(argv)} failed (exit {code}): {lines[-1] if lines else 'no message'}; "
                           "use --source sysfs")
    return out


def _via_pyhwloc(mod) -> Topology:
    try:
        xml = _pyhwloc_xml(mod)
    except Exception as e:  # a binding without the library, or an API it lacks
        raise NodemapError(f"pyhwloc could not read this machine ({type(e).__name__}: {e}); {_INSTALL}") from None
    data = xml.encode() if isinstance(xml, str) else bytes(xml)
    topo = hwloc_xml.parse(data, "pyhwloc")
    return replace(topo, source=f"hwloc:pyhwloc {getattr(mod, '__version__', '')}".rstrip())


def _pyhwloc_xml(mod) -> str:
    import importlib

    api = importlib.import_module(f"{mod.__name__}.topology")
    topo = api.Topology.from_this_system(load=False)
    topo = topo.set_io_types_filter(api.TypeFilter.HWLOC_TYPE_FILTER_KEEP_IMPORTANT).load()
    try:
        return topo.export_xml_buffer(0)
    finally:
        topo.destroy()
