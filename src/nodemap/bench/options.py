"""Options the kinds share, defined and parsed once: --gpus, --dtype and
comma lists of choices (--kernels, --cases, --tests, --variants...).

A kind adds the option here and reads it back here, so flags, spellings and
messages are the same in every kind: `--dtype fp64` and `--dtype float64`
name one dtype wherever a kind takes --dtype.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from ..errors import NodemapError
from ..text import is_decimal

# Every spelling of a dtype -> its one name (numpy's)
DTYPE_NAMES = {"float64": "float64", "fp64": "float64", "double": "float64",
               "float32": "float32", "fp32": "float32", "float": "float32"}


def add_gpus(p: argparse.ArgumentParser, what: str = "") -> None:
    """--gpus LIST: CUDA ordinals; `what` says what the order or a repeat means to this kind."""
    p.add_argument("--gpus", metavar="LIST",
                   help=f"CUDA ordinals, e.g. 0,1 (default: all visible){'; ' + what if what else ''}")


def gpus(spec: str | None, count: int, *, repeats: bool = False) -> list[int]:
    """The CUDA ordinals --gpus names, in its order ("all" or none: every
    visible one). `repeats`: a GPU may be named more than once (Jacobi puts
    a slab on each naming)."""
    if not spec or spec.strip() == "all":
        return list(range(count))
    items = [x.strip() for x in spec.split(",") if x.strip()]
    if not items or not all(is_decimal(x, 6) for x in items):
        raise NodemapError(f"--gpus {spec!r}: give CUDA ordinals like 0,1 (or 'all')")
    out = [int(x) for x in items]
    if any(d >= count for d in out):
        raise NodemapError(f"--gpus {spec!r}: this process sees CUDA devices 0-{count - 1} "
                           "(CUDA_VISIBLE_DEVICES renumbers them)")
    if not repeats and len(set(out)) != len(out):
        raise NodemapError(f"--gpus {spec!r}: a GPU is named twice; name each once")
    return out


def add_dtype(p: argparse.ArgumentParser, default: str, names: Sequence[str]) -> None:
    """--dtype LIST over the kind's `names` (its own spelling); every spelling of each is taken."""
    others = sorted({s for s, n in DTYPE_NAMES.items() if any(DTYPE_NAMES.get(k) == n for k in names)} - set(names))
    p.add_argument("--dtype", default=default, metavar="LIST",
                   help=f"{', '.join(names)} or a comma list of them (default {default}; "
                        f"{', '.join(others)} are taken too)")


def dtypes(spec: str, names: Sequence[str]) -> list[str]:
    """The dtypes --dtype lists, in the kind's spelling `names` (fp64 and float64 are one)."""
    by_dtype = {DTYPE_NAMES[n]: n for n in names}
    items = [x.strip().lower() for x in spec.split(",") if x.strip()]
    got = [by_dtype.get(DTYPE_NAMES.get(x, "")) for x in items]
    if not items or None in got:
        raise NodemapError(f"--dtype {spec!r}: choose from {', '.join(names)}")
    return list(dict.fromkeys(got))


def choices(spec: str, allowed: Sequence[str], flag: str) -> list[str]:
    """The items of a comma list, each one of `allowed`, in their order, each once."""
    got = [s.strip() for s in spec.split(",") if s.strip()]
    if not got or set(got) - set(allowed):
        raise NodemapError(f"{flag} {spec!r}: choose from {','.join(allowed)}")
    return list(dict.fromkeys(got))
