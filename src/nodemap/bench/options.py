"""A kind's options, declared once: each is a field of its `Options`
dataclass made by `option` or a shared constructor here (`repeat_count`,
`topology_file`, `time_limit`, `adaptive_width`, `case_budget`,
`gpu_list`, `dtype_list`, `launch_mode`) that carries its command line
(help, metavar, parser); commands/bench.py builds the kind's parser from
the dataclass (argparse stays in the command line), so the typed record
check and compare fill and the flags a user types cannot drift. Read back here too: --gpus, --dtype and comma lists of
choices (--kernels, --cases, --tests...), so flags, spellings and messages
are the same in every kind: `--dtype fp64` and `--dtype float64` name one
dtype wherever a kind takes --dtype.

Light on purpose, as every kind's options module (bench/kinds.py): `nodemap
bench KIND --help` and a usage error build the parser from these alone,
without the driver, the results' records, the topology model or NVML."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..errors import NodemapError

TYPE_CHECKING = False  # typing costs ~3 ms of every `bench KIND --help`
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

# Every spelling of a dtype -> its one name (numpy's)
DTYPE_NAMES = {"float64": "float64", "fp64": "float64", "double": "float64",
               "float32": "float32", "fp32": "float32", "float": "float32"}


# --- declaring options ------------------------------------------------------------


def option(default: Any = None, help: str = "", *, metavar: str | None = None,
           parse: Callable[[str], Any] | None = None, choices: Sequence[Any] | None = None,
           aliases: Sequence[str] = (), old: Sequence[str] = (), group: str | None = None,
           spelled: bool = False, hidden: bool = False, shared: bool = False, minimum: int | None = None,
           what: str = "", positive: bool = False) -> Any:
    """A field of a kind's Options and its option --NAME (the field's name,
    _ as -): `help`, `metavar`, `choices`, `parse` (argparse's type; else
    from the annotation: int, float, str; a bool is a switch, a tuple a
    repeatable option); `aliases`: other spellings, shown; `old`: former
    spellings, taken but not shown; options of one `group` exclude each
    other; `spelled`: the spelling typed is kept (`_NAME_option`: an error
    names the option as written); `hidden`: not in --help (tests' switches);
    `shared`: one of Common's, listed after the kind's own; its bounds, checked before the kind plans
    (`check_bounds`): `minimum` of a count (`what` one of them is: "thread"), `positive` a factor above 0."""
    cli = {"help": help, "metavar": metavar, "parse": parse, "choices": choices, "aliases": tuple(aliases),
           "old": tuple(old), "group": group, "spelled": spelled, "hidden": hidden, "shared": shared,
           "minimum": minimum, "what": what, "positive": positive}
    return dataclasses.field(default=default, metadata={"cli": cli})


def repeat_count(n: int, old: Sequence[str] = ()) -> Any:
    return option(n, f"timed repetitions per case, after a warm-up (default {n})", metavar="N", old=old,
                  shared=True)


def topology_file() -> Any:
    return option(None, "read the node's topology (caches, NUMA, paths, labels) from this file instead of this "
                        "machine (nodemap topo --export; hwloc XML; sysfs snapshot)",
                  metavar="FILE", aliases=("--input",), spelled=True, shared=True)


def time_limit(seconds: float | None = None) -> Any:
    from ..units import seconds as parse_seconds

    return option(seconds, "seconds one case may take before the run ends with exit 2"
                  + (f" (default {seconds:g})" if seconds else " (default: no limit)"),
                  metavar="S", parse=parse_seconds, shared=True)


def adaptive_width() -> Any:
    from ..units import fraction

    return option(None, "repeat each case until the 95%% interval of its median is at most this fraction of the "
                        "median wide (e.g. 0.02), at least 6 and at most --repeats times",
                  metavar="FRACTION", parse=fraction, shared=True)


def case_budget() -> Any:
    from ..units import seconds

    return option(None, "seconds of repetitions per case: stop after 3 once spent (default: no limit)",
                  metavar="S", parse=seconds, shared=True)


def gpu_list(what: str = "") -> Any:
    """--gpus LIST: CUDA ordinals; `what` says what the order or a repeat means to this kind."""
    return option(None, f"CUDA ordinals, e.g. 0,1 (default: all visible){'; ' + what if what else ''}",
                  metavar="LIST")


def dtype_list(default: str, names: Sequence[str]) -> Any:
    """--dtype LIST over the kind's `names` (its own spelling); every spelling of each is taken."""
    others = sorted({s for s, n in DTYPE_NAMES.items() if any(DTYPE_NAMES.get(k) == n for k in names)} - set(names))
    return option(default, f"{', '.join(names)} or a comma list of them (default {default}; "
                           f"{', '.join(others)} are taken too)", metavar="LIST")


def launch_mode(help: str) -> Any:
    """--mode: one process per GPU under MPI, one process for all, or by launcher (auto)."""
    return option("auto", help, choices=("auto", "mpi", "single"))


MPI_TIMEOUT_S = 120.0  # default --timeout of a kind whose processes are MPI ranks (MPI's start, each phase)


@dataclass(frozen=True, kw_only=True)
class Common:
    """The options every kind takes; a kind's Options adds its own on it,
    each declared once with its command line (`option`)."""

    repeats: int = repeat_count(10)  # timed repetitions per case; adaptive: the most
    topology: str | None = topology_file()  # a --topology file instead of this machine
    timeout: float | None = time_limit()  # seconds one case may take
    # adaptive repetitions: stop once the median's 95% interval is at most
    # `adaptive` of the median, or `budget` seconds are spent on a case
    adaptive: float | None = adaptive_width()
    budget: float | None = case_budget()
    # class attributes, not fields (no annotation: a string ClassVar is a field while typing is not imported):
    # the kind's processes are MPI ranks: rank 0 prints and saves (--json, -o say so)
    ranks = False
    # shared options a kind does not take (mpi: no adaptive stop, its ranks stop only where they agree)
    not_offered = ()


@dataclass(frozen=True, kw_only=True)
class Ranked(Common):
    """The options of a kind whose processes are MPI ranks (nccl, mpi, ring, jacobi): rank 0 prints and
    saves, 5 repetitions, --timeout long enough for MPI's start and each phase."""

    repeats: int = repeat_count(5)
    timeout: float | None = time_limit(MPI_TIMEOUT_S)
    ranks = True


# --- bounds -------------------------------------------------------------------------


def check_count(option: str, value: int, minimum: int = 1, what: str = "", maximum: int | None = None) -> None:
    """A count option (--repeats, --iters, --window...) below `minimum` (or
    above `maximum`): one error naming that option alone."""
    if value < minimum:
        raise NodemapError(f"{option} {value}: need at least {minimum}" + (f" {what}" if what else ""))
    if maximum is not None and value > maximum:
        raise NodemapError(f"{option} {value}: at most {maximum}" + (f" {what}s" if what else "")
                           + " (nodemap's limit)")


def check_positive(option: str, value: float) -> None:
    """A factor or share that must be above zero (--iters-scale...)."""
    if not value > 0:
        raise NodemapError(f"{option} {value:g}: give a number above 0")


def check_bounds(opts: Any) -> None:
    """The bounds a kind declares with its options (`option(minimum=..., positive=...)`), before it
    plans: before MPI, a GPU or a measurement starts; an option not given (None) has none."""
    for f in dataclasses.fields(opts):
        cli, value = f.metadata.get("cli", {}), getattr(opts, f.name)
        if value is not None and cli.get("minimum") is not None:
            check_count(flag(f), value, cli["minimum"], cli["what"])
        if value is not None and cli.get("positive"):
            check_positive(flag(f), value)


# --- the command line of an Options ------------------------------------------------


def flag(f: dataclasses.Field) -> str:
    return "--" + f.name.replace("_", "-")


def gpus(spec: str | None, count: int, *, repeats: bool = False) -> list[int]:
    """The CUDA ordinals --gpus names, in its order ("all" or none: every
    visible one). `repeats`: a GPU may be named more than once (Jacobi puts
    a slab on each naming)."""
    from ..text import is_decimal

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
