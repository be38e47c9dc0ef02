"""What a kind declares beyond its cases (bench/driver.py): its story, read
through the registry (bench/kinds.py `story`) by the result reader, `check`
and `compare`, so none of them holds a table per kind or names one
(tests/test_import_graph.py). BabelStream's rule: adding a kind never
touches the driver, nor anything that reads what it measured.

A kind's module sets `STORY = Story(...)`; every field has a default, so a
kind declares only what it has (a kind `check` does not run has no steps).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

import msgspec

from ..finding import Finding
from ..text import number

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Mapping, Sequence

    from ..topology.model import Topology
    from .figures import Figure
    from .results import Failure

NO_PAIR = "one GPU: no pair to measure"  # why a kind of GPU pairs is skipped on a node of one GPU
Count = Annotated[int, msgspec.Meta(ge=0)]  # bounds of a result parameter: a size, an index
Positive = Annotated[int, msgspec.Meta(ge=1)]  # threads, a working set
Named = Annotated[list[str], msgspec.Meta(min_length=1)]  # at least one name: a result's GPUs


class ResultParams(msgspec.Struct):
    """A kind's result parameters its readers index (report, check's figures): a saved file that lacks
    one, or holds text where a number belongs, is refused with the field's path (bench/resultfile.py);
    every other parameter is kept as it was saved."""


@dataclass(frozen=True)
class Cost:
    """Seconds of one check step: base + per GPU + per GPU x NUMA node (host<->GPU
    cases) + per ordered GPU pair + per NUMA cell (n x n matrices)."""

    base: float = 0.0
    gpu: float = 0.0
    gpu_numa: float = 0.0
    pair: float = 0.0
    cell: float = 0.0

    def of(self, gpus: int, numa: int) -> float:
        return (self.base + self.gpu * gpus + self.gpu_numa * gpus * numa + self.pair * gpus * (gpus - 1)
                + self.cell * numa * numa)


@dataclass(frozen=True)
class Node:
    """What a kind's check steps are chosen from: the level and this node."""

    level: str  # "quick" | "full"
    topology: Topology
    gpus: int = 0  # the NVIDIA GPUs CuPy measures here (0 without CuPy)
    tiny: bool = False  # tests' tiny host arrays (check/suite.py TINY_ENV), not a user option


@dataclass(frozen=True)
class Step:
    """One kind run by `check`: a kind declares `what` and `options`; check names the kind and its
    command line (shown beside the step, and what a launched kind's ranks are given)."""

    kind: str = ""
    argv: tuple[str, ...] = ()
    what: str = ""  # for progress and the report
    options: Any = None  # its typed Options (bench/driver.py runs them); None: a job's own ranks measure it


@dataclass(frozen=True)
class Skipped:
    """What was not measured or judged, and why."""

    what: str
    reason: str


@dataclass(frozen=True)
class Probe:
    """A figure per rank that `nodemap compare` measures under each binding (compare/probes.py): every
    rank runs the kind in its own process, bound, at once; the binding's figure combines the ranks'."""

    name: str  # --probes NAME
    unit: str  # lower is better where the results' table says so (bench/results.py HIGHER_IS_BETTER)
    options: Any  # (the rank's threads, --size or None) -> the kind's Options
    kept: Any  # (a rank's ResultSet, the NUMA node its memory lands on) -> the Result its figure is, or None
    gpu: bool = False  # needs a GPU: not run on a node without one
    time_sliced: bool = False  # ranks sharing a GPU run by turns (each saw the whole GPU): not summed


@dataclass(frozen=True)
class Story:
    params: type[ResultParams] | None = None
    # the figures check judges, drawn from its Results: (results, bench.figures.Given) -> [Figure]
    figures: Any = None
    # its figures judged against the other kinds' (a remote copy against the local one), once every kind
    # drew its own: (every figure, Topology | None) -> every figure
    related: Any = None
    # the node's areas its figures and failed parts are about (bench/figures.py AREAS), the first its failures'
    areas: tuple[str, ...] = ()
    # check's steps on a node: (Node) -> [Step | Skipped]; None: check does not run it
    steps: Any = None
    gpu: bool = False  # its steps need NVIDIA GPUs CuPy drives: without, check skips its areas saying why
    launched: bool = False  # its ranks start under mpiexec (check/mpi.py), or are a job's own (check --fleet)
    # seconds of its step at each level ("quick", "full"; "tiny": the tests' tiny arrays) for --budget
    cost: Mapping[str, Cost] = field(default_factory=dict)
    priority: int = 100  # check runs the lowest first: what a check cut short keeps (check/budget.py)
    # whose fault a failed part is (check/failed.py): (Failure, NCCL variables the job forces) -> (cause, fix);
    # None: by what carried the data (`by_transport`)
    cause: Any = None
    probes: tuple[Probe, ...] = ()  # what `nodemap compare` may measure with it
    # what a warned or failed figure of its areas tells (check/findings.py): (Seen) -> Finding, or None where
    # the figure is not one it explains (another kind's of the same area, the node's latency rule's)
    finding: Any = None

    def __post_init__(self) -> None:
        if self.steps is not None and not {"quick", "full"} <= set(self.cost):
            raise ValueError("a kind with check steps declares their cost at quick and full (check --budget)")


@dataclass(frozen=True)
class Seen:
    """A warned or failed figure as a kind's `finding` reads it: the figure,
    its value and standing as a sentence says them, what is already in
    effect on the node, the inventory checks a finding may rest on."""

    figure: Figure
    verdict: str
    rule: str
    shortfall: float  # how far it is off its reference (Finding.shortfall)
    relative: str  # ", 61% of the median of its peers on this node", or ""
    state: Any  # check/findings.NodeState: huge pages, the job's variables, CUDA-aware MPI, a VM
    links: Mapping[str, Any]  # the inventory's PCIe link checks by the GPU's endpoint key ("gpu0")
    aware_key: str  # the key of the inventory check that says whether MPI is CUDA-aware

    @property
    def value(self) -> str:
        return f"{number(self.figure.value)} {self.figure.unit}"

    def say(self, cause: str, text: str, fix: str, keys: tuple[str, ...] = ()) -> Finding:
        return Finding(self.verdict, text, self.rule, fix, keys or (self.figure.key,), self.shortfall,
                       cause=cause, area=self.figure.area)


GPU_FIX = ("test the GPUs and their links (nvidia-smi nvlink -e for NVLink error counters, nvidia-smi -q -d "
           "ECC,ROW_REMAPPER, dcgmi diag -r 3), then run nodemap bench {kind} again")
MPI_FIX = ("check the MPI library and its transport settings (UCX_TLS, UCX_MEMTYPE_CACHE=n; the check's "
           "inventory/mpi/cuda_aware says whether MPI is CUDA-aware): the peer and nccl transports over the same "
           "GPUs tell whether the links are at fault")
FORCED_FIX = "unset {names} and run again: wrong data that persists without it is the node's"


def by_transport(f: Failure, forced: Sequence[str]) -> tuple[str, str]:
    """Whose fault wrong data is: NCCL's collectives, and halos carried by
    CUDA peer copies or NCCL, are the GPUs and their links (the node),
    unless the job forced NCCL's algorithm or protocol (configuration);
    halos MPI carried are the MPI library's or its settings first (a
    CUDA-aware path that is not, UCX's memory-type cache): configuration."""
    if f.transport.startswith("mpi"):
        return "configuration", MPI_FIX
    if forced and f.transport.startswith("nccl"):
        return "configuration", FORCED_FIX.format(names="/".join(forced))
    return "hardware", GPU_FIX.format(kind=f.kind)


NOTHING = Story()  # what a name the registry does not hold declares (a file from another version)


def joined(skipped: list[Skipped]) -> list[Skipped]:
    """Skipped items of one reason as one, in the order they came: 'GPU memory, host<->GPU and NCCL'."""
    whats: dict[str, list[str]] = {}
    for s in skipped:
        whats.setdefault(s.reason, []).append(s.what)
    return [Skipped(", ".join(w[:-1]) + " and " + w[-1] if len(w) > 1 else w[0], why) for why, w in whats.items()]
