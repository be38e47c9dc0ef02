"""Loads the project's C library (native/*.c, built by the package build).

ctypes releases the GIL around each call, so benchmark threads run truly in
parallel in C. Modules that own kernels declare their own prototypes with
`declare`.
"""

from __future__ import annotations

import ctypes
import os

from .errors import NodemapError

ABI_VERSION = 4
_LIB: ctypes.CDLL | None = None


def lib() -> ctypes.CDLL:
    global _LIB
    if _LIB is None:
        _LIB = _load()
    return _LIB


def _candidates() -> list[str]:
    # An editable install keeps the built library in site-packages and the
    # sources in src/: the package __path__ lists both. (os.path, not
    # pathlib: `nodemap run` loads this on every rank and pathlib costs ~8 ms.)
    import nodemap

    env = os.environ.get("NODEMAP_NATIVE_LIB")
    out = [env] if env else []
    out += [os.path.join(d, "libnodemap_native.so") for d in nodemap.__path__]
    return out


def _load() -> ctypes.CDLL:
    for path in _candidates():
        if os.path.exists(path):
            cdll = ctypes.CDLL(path, use_errno=True)
            got = cdll.nm_abi_version()
            if got != ABI_VERSION:
                raise NodemapError(
                    f"native library {path} has ABI {got}, this nodemap needs {ABI_VERSION}: "
                    "reinstall the package (pip install .)"
                )
            _declare_core(cdll)
            return cdll
    raise NodemapError(
        "nodemap's native library is missing (libnodemap_native.so): the package was not built; "
        "install it with 'pip install .' from the source tree (needs a C compiler and CMake)"
    )


def declare(cdll: ctypes.CDLL, name: str, restype, *argtypes) -> None:
    fn = getattr(cdll, name)
    fn.restype = restype
    fn.argtypes = list(argtypes)


def _declare_core(cdll: ctypes.CDLL) -> None:
    c = ctypes
    declare(cdll, "nm_current_cpu", c.c_int)
    declare(cdll, "nm_pin_self", c.c_int, c.c_int)
    declare(cdll, "nm_get_mempolicy", c.c_int, c.POINTER(c.c_int), c.POINTER(c.c_ulong), c.c_ulong)
    declare(cdll, "nm_set_mempolicy", c.c_int, c.c_int, c.POINTER(c.c_ulong), c.c_ulong)
    declare(cdll, "nm_stop", None, c.c_int)
    declare(cdll, "nm_stopping", c.c_int)


def current_cpu() -> int:
    """The CPU the calling thread runs on now (sched_getcpu)."""
    return lib().nm_current_cpu()


# Linux memory policy modes (linux/mempolicy.h)
MPOL_DEFAULT, MPOL_PREFERRED, MPOL_BIND, MPOL_INTERLEAVE, MPOL_LOCAL = 0, 1, 2, 3, 4
MPOL_NAMES = {0: "default", 1: "preferred", 2: "bind", 3: "interleave", 4: "local", 5: "preferred_many", 6: "weighted_interleave"}
_MAXNODE = 1024


def get_mempolicy() -> tuple[str, list[int]]:
    """(mode name, nodes) of the calling thread's memory policy."""
    words = _MAXNODE // (8 * ctypes.sizeof(ctypes.c_ulong))
    mask = (ctypes.c_ulong * words)()
    mode = ctypes.c_int(0)
    err = lib().nm_get_mempolicy(ctypes.byref(mode), mask, _MAXNODE)
    if err:
        raise OSError(err, os.strerror(err), "get_mempolicy")
    bits = 8 * ctypes.sizeof(ctypes.c_ulong)
    nodes = [w * bits + b for w in range(words) for b in range(bits) if mask[w] >> b & 1]
    mode_v = mode.value & 0xFF  # strip MPOL_F_* flags
    return MPOL_NAMES.get(mode_v, str(mode_v)), nodes


def set_mempolicy(mode: int, nodes: list[int]) -> None:
    bits = 8 * ctypes.sizeof(ctypes.c_ulong)
    words = _MAXNODE // bits
    mask = (ctypes.c_ulong * words)()
    for n in nodes:
        mask[n // bits] |= 1 << (n % bits)
    err = lib().nm_set_mempolicy(mode, mask if nodes else None, _MAXNODE if nodes else 0)
    if err:
        raise OSError(err, os.strerror(err), "set_mempolicy")
