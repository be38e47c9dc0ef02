"""Pinned host memory on a chosen NUMA node, mapped for every GPU
(the host side of copies and staged transfers), and where its pages are."""

from __future__ import annotations

import ctypes
import os
from typing import Any

from ...errors import NodemapError
from ...units import format_size

_REGISTER_PORTABLE_MAPPED = 0x01 | 0x02  # cudaHostRegisterPortable | cudaHostRegisterMapped
_ATTR_HOST_PTR_FOR_REGISTERED = 91  # cudaDevAttrCanUseHostPointerForRegisteredMem


class HostBuffer:
    """Page-aligned host memory bound to NUMA `node` (mbind before the pages
    exist), then pinned and mapped for every GPU (cudaHostRegister). With
    UVA its address is also its device address. `node` -1 leaves the
    process's policy in charge. `placed` says where the pages really are."""

    def __init__(self, cp: Any, nbytes: int, node: int = -1) -> None:
        self.cp, self.nbytes, self.node = cp, nbytes, node
        self.ptr = _mmap(nbytes)
        self.registered = False
        self.note = ""
        try:
            if node >= 0:
                self.note = _bind(self.ptr, nbytes, node)
            ctypes.memset(self.ptr, 0, nbytes)  # fault every page in under the policy
            cp.cuda.runtime.hostRegister(self.ptr, nbytes, _REGISTER_PORTABLE_MAPPED)
            self.registered = True
            for d in range(cp.cuda.runtime.getDeviceCount()):
                if not cp.cuda.runtime.deviceGetAttribute(_ATTR_HOST_PTR_FOR_REGISTERED, d):
                    raise NodemapError(f"CUDA device {d} cannot address registered host memory directly "
                                       "(no UVA host pointers): host copies are not supported here")
            self.placed = page_nodes(self.ptr, nbytes)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self.registered:
            self.cp.cuda.runtime.hostUnregister(self.ptr)
            self.registered = False
        if self.ptr:
            _libc().munmap(ctypes.c_void_p(self.ptr), ctypes.c_size_t(self.nbytes))
            self.ptr = 0

    def __enter__(self) -> "HostBuffer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    return libc


def _mmap(nbytes: int) -> int:
    import mmap

    p = _libc().mmap(None, nbytes, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
    if p in (None, ctypes.c_void_p(-1).value):
        raise NodemapError(f"cannot map {format_size(nbytes)} of host memory ({os.strerror(ctypes.get_errno())}): "
                           "use a smaller --size")
    return p


def _native() -> Any:
    """The native library with the host-buffer helpers, or None (and why)."""
    from ... import native

    try:
        lib = native.lib()
        native.declare(lib, "nm_mbind_node", ctypes.c_int, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_int)
        native.declare(lib, "nm_page_nodes", ctypes.c_int, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong,
                       ctypes.POINTER(ctypes.c_int))
        return lib
    except (NodemapError, AttributeError):
        return None


def _bind(ptr: int, nbytes: int, node: int) -> str:
    lib = _native()
    if lib is None:
        return "native library without nm_mbind_node (rebuild: pip install .): host memory not bound"
    err = lib.nm_mbind_node(ptr, nbytes, node)
    if err:
        raise NodemapError(f"cannot bind host memory to NUMA node {node} ({os.strerror(err)}): "
                           "the node may be outside this process's cpuset.mems")
    return ""


def page_nodes(ptr: int, nbytes: int, samples: int = 256) -> dict[int, float]:
    """Fraction of (sampled) pages on each NUMA node; {} when unknown."""
    lib = _native()
    page = os.sysconf("SC_PAGE_SIZE")
    npages = nbytes // page
    if lib is None or npages == 0:
        return {}
    step = max(1, npages // samples)
    count = -(-npages // step)
    out = (ctypes.c_int * count)()
    if lib.nm_page_nodes(ptr, count, step * page, out):
        return {}
    found: dict[int, float] = {}
    for v in out:
        found[v] = found.get(v, 0.0) + 1 / count
    return found
