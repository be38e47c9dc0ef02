"""Sizes and bandwidths: the one parser and the one formatter of nodemap.

Sizes on input (every option of every command that takes bytes):
  K, M, G, T and KiB, MiB, GiB, TiB   powers of 1024 (as nccl-tests and STREAM users write them)
  KB, MB, GB, TB (written with B)     powers of 1000
  a plain number                      bytes
Case does not matter ("512m" = "512M"); a fraction is fine when the bytes
come out whole ("1.5K" = 1536). Sizes print in IEC units (KiB..TiB).
Bandwidth is GB/s with GB = 1e9 bytes, the convention of STREAM,
nvbandwidth and nccl-tests.
"""

from __future__ import annotations

from .errors import NodemapError

GB = 10**9  # bandwidths: GB/s = 1e9 bytes per second
KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
MAX_BYTES = 1 << 60  # 1 EiB: beyond any machine; refuses "1e30" before it costs anything
MAX_SIZES = 4096  # entries of one size list or range

_MULT = {"": 1, "b": 1}
for _i, _p in enumerate("kmgt", start=1):
    _MULT[_p] = _MULT[_p + "ib"] = 1024**_i
    _MULT[_p + "b"] = 1000**_i
UNITS_HELP = "K, M, G, T or KiB..TiB = 1024^n; KB, MB, GB, TB = 1000^n; a plain number is bytes"
# (compiled where a size is read: `re` is not on topo's path)
_SIZE = r"(\d+(?:\.\d*)?|\.\d+)(?:e(\d{1,2}))?\s*([a-z]*)"
_IEC = ((1 << 40, "TiB"), (1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB"))


def _show(text: str, limit: int = 40) -> str:
    """The user's text for a message: quoted, escapes visible, cut when long."""
    t = repr(str(text))
    return t if len(t) <= limit else t[: limit - 4] + "...'"


def parse_size(text: str, option: str = "size", *, minimum: int = 0) -> int:
    """'512M' -> 536870912, '2GB' -> 2000000000, '4096' -> 4096.

    Errors are one line naming `option` (as the user typed it) and the fix;
    the command line prefixes the (sub)command. `minimum` refuses smaller
    sizes (0 is allowed by default).
    """
    import re

    where = f"{option} {_show(text)}"
    t = str(text).strip().lower()
    m = re.fullmatch(_SIZE, t, re.ASCII) if len(t) <= 64 else None  # no size needs more; keeps Fraction() cheap
    if not m or m.group(3) not in _MULT:
        raise NodemapError(f"{where}: not a size; write bytes or a number with a unit ({UNITS_HELP}), "
                           "e.g. 512M, 2GiB, 4GB")
    from fractions import Fraction  # here: 13 ms of import (decimal) that `topo`, which prints sizes, never needs

    value = Fraction(m.group(1)) * 10 ** int(m.group(2) or 0) * _MULT[m.group(3)]
    if value.denominator != 1:
        raise NodemapError(f"{where}: not a whole number of bytes; give bytes or a larger unit")
    n = int(value)
    if n > MAX_BYTES:
        raise NodemapError(f"{where}: larger than {format_size(MAX_BYTES)}, beyond any machine; "
                           "give a smaller size")
    if n < minimum:
        raise NodemapError(f"{where}: too small, give at least {format_size(minimum)}")
    return n


def parse_sizes(spec: str, option: str = "--sizes", *, minimum: int = 1) -> list[int]:
    """A size list '8,1K,1M' (sorted, duplicates dropped) or a doubling
    range 'LO:HI' ('1:64MiB' -> 1, 2, 4, ..., 64 MiB)."""
    where = f"{option} {_show(spec)}"
    if ":" in spec:
        lo_s, _, hi_s = spec.partition(":")
        lo = parse_size(lo_s, option, minimum=max(1, minimum))
        hi = parse_size(hi_s, option, minimum=max(1, minimum))
        if lo > hi:
            raise NodemapError(f"{where}: LO must not exceed HI in LO:HI")
        out = []
        while lo <= hi:
            out.append(lo)
            lo *= 2
        return out
    parts = [s for s in spec.split(",") if s.strip()]
    if not parts:
        raise NodemapError(f"{where}: give a list like 8,1K,1M or a range LO:HI like 1:64M")
    if len(parts) > MAX_SIZES:
        raise NodemapError(f"{option}: {len(parts)} sizes, at most {MAX_SIZES}; give a range LO:HI")
    return sorted({parse_size(s, option, minimum=minimum) for s in parts})


def format_size(n: int | float) -> str:
    """Bytes in IEC units: 1536 -> '1.5 KiB', 1 << 30 -> '1 GiB', 100 -> '100 B'."""
    for mult, unit in _IEC:
        if abs(n) >= mult:
            v = n / mult
            return f"{v:.0f} {unit}" if v == int(v) or abs(v) >= 1000 else f"{v:.3g} {unit}"
    return f"{n:.0f} B" if n == int(n) else f"{n:.3g} B"


def gib(n: float, digits: int = 2, *, sign: bool = False) -> str:
    """Bytes as a number of GiB, for a column or a sentence that names the unit: 3 << 29 -> '1.50'
    (sign: '+1.50', as growth and rates print)."""
    return f"{n / GiB:{'+' if sign else ''}.{digits}f}"


def format_size_short(n: int) -> str:
    """Bytes in IEC units, one decimal below 10 units and none above (the topology tree: '141 GiB', '1.5 GiB')."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.1f} {unit}" if size < 10 and unit != "B" else f"{size:.0f} {unit}"
        size /= 1024
    return f"{n} B"


def gbps(nbytes: int, seconds: list[float]) -> list[float]:
    """Bytes per repetition and seconds -> GB/s (GB = 1e9 B, as STREAM)."""
    return [nbytes / s / GB for s in seconds]


MAX_SECONDS = 1e6  # 11 days: longer is a typo, and timers refuse infinity with a traceback


def fraction(text: str) -> float:
    """argparse type of a fraction strictly between 0 and 1."""
    return _number(text, lambda v: 0 < v < 1, f"{text!r}: give a fraction between 0 and 1, e.g. 0.02")


def seconds(text: str) -> float:
    """argparse type of a time limit: a positive, finite number of seconds."""
    return _number(text, lambda v: 0 < v <= MAX_SECONDS,
                   f"{_show(text)} is not a number of seconds above 0 and at most {MAX_SECONDS:g}")


def _number(text: str, fits, wrong: str) -> float:
    import argparse

    try:
        value = float(text)
    except ValueError:
        value = float("nan")  # fits nothing
    if not fits(value):
        raise argparse.ArgumentTypeError(wrong)
    return value
