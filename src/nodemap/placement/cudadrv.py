"""Unified-memory hints through the CUDA driver's location-based entry points.

cuMemAdvise_v2 / cuMemPrefetchAsync_v2 take a CUmemLocation (CUDA >= 12.2)
and are what CUDA 13 calls cuMemAdvise / cuMemPrefetchAsync: calling the _v2
symbols of libcuda directly gives one code path for CUDA 12 and 13, whatever
the CuPy build. The runtime (CuPy) has already made the device's primary
context current on this thread before these are called.
"""

from __future__ import annotations

import ctypes

from ..errors import NodemapError

# CUmem_advise
SET_READ_MOSTLY, UNSET_READ_MOSTLY = 1, 2
SET_PREFERRED_LOCATION, UNSET_PREFERRED_LOCATION = 3, 4
SET_ACCESSED_BY, UNSET_ACCESSED_BY = 5, 6
# CUmemLocationType
LOC_DEVICE, LOC_HOST = 1, 2
# CUmem_range_attribute
RANGE_READ_MOSTLY, RANGE_PREFERRED_LOCATION, RANGE_ACCESSED_BY, RANGE_LAST_PREFETCH_LOCATION = 1, 2, 3, 4
CPU_DEVICE_ID = -1  # what range attributes report for the host


class CUmemLocation(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


_lib = None


def _cuda():
    global _lib
    if _lib is None:
        try:
            lib = ctypes.CDLL("libcuda.so.1")
        except OSError as e:
            raise NodemapError(f"the CUDA driver (libcuda.so.1) cannot be loaded: {e}; is an NVIDIA driver installed?") from None
        for name in ("cuMemAdvise_v2", "cuMemPrefetchAsync_v2"):
            if not hasattr(lib, name):
                raise NodemapError(f"the CUDA driver lacks {name}: placement needs a driver for CUDA 12.2 or newer")
        c = ctypes
        lib.cuMemAdvise_v2.argtypes = [c.c_uint64, c.c_size_t, c.c_int, CUmemLocation]
        lib.cuMemPrefetchAsync_v2.argtypes = [c.c_uint64, c.c_size_t, CUmemLocation, c.c_uint, c.c_void_p]
        lib.cuMemRangeGetAttribute.argtypes = [c.c_void_p, c.c_size_t, c.c_int, c.c_uint64, c.c_size_t]
        lib.cuGetErrorString.argtypes = [c.c_int, c.POINTER(c.c_char_p)]
        _lib = lib
    return _lib


def _check(rc: int, what: str) -> None:
    if rc:
        msg = ctypes.c_char_p()
        _cuda().cuGetErrorString(rc, ctypes.byref(msg))
        raise NodemapError(f"{what} failed: CUDA error {rc} ({(msg.value or b'?').decode()})")


def _loc(device: int | None) -> CUmemLocation:
    return CUmemLocation(LOC_HOST, 0) if device is None else CUmemLocation(LOC_DEVICE, device)


def advise(ptr: int, nbytes: int, advice: int, device: int | None) -> None:
    """device None = the host."""
    _check(_cuda().cuMemAdvise_v2(ptr, nbytes, advice, _loc(device)), f"cuMemAdvise({advice})")


def prefetch(ptr: int, nbytes: int, device: int | None, stream: int = 0) -> None:
    _check(_cuda().cuMemPrefetchAsync_v2(ptr, nbytes, _loc(device), 0, ctypes.c_void_p(stream)), "cuMemPrefetchAsync")


def range_int(ptr: int, nbytes: int, attribute: int) -> int:
    """READ_MOSTLY (0/1), PREFERRED_LOCATION or LAST_PREFETCH_LOCATION (device id,
    -1 host, -2 none or mixed) of a managed range."""
    v = ctypes.c_int(0)
    _check(_cuda().cuMemRangeGetAttribute(ctypes.byref(v), 4, attribute, ptr, nbytes), "cuMemRangeGetAttribute")
    return v.value


def accessed_by(ptr: int, nbytes: int, max_devices: int = 64) -> list[int]:
    arr = (ctypes.c_int * max_devices)()
    _check(_cuda().cuMemRangeGetAttribute(arr, 4 * max_devices, RANGE_ACCESSED_BY, ptr, nbytes), "cuMemRangeGetAttribute")
    return [d for d in arr if d >= 0 and d != -2][: max_devices]
