"""What the fleet's ranks say to each other (driver.py), one record each;
wire.py carries them, pickled by mpi4py. Rank 0's commands are a
`PairTest`, a `Remeasure` or `Done`; a rank answers a `PairReport`, or
key -> the figure its check judged again or why there is none."""

from __future__ import annotations

from dataclasses import dataclass, field

from .pairtest import Figure, Seat


@dataclass(frozen=True)
class Hello:
    """A rank's first word to rank 0: who it is and where it runs."""

    rank: int
    node: str  # nodecheck.node_name
    host: str  # its hostname: nodes on one host contend for its CPUs
    cpus: list[int]  # the CPUs it may run on
    visibility: tuple[tuple[str, str], ...]  # its device visibility variables (world.visibility)
    nic: str  # the NICs its plan gave it (NODEMAP_NIC)
    netns: str  # its network namespace (driver._netns)


@dataclass(frozen=True)
class Role:
    """Rank 0's answer to a hello: the rank's part on its node."""

    seat: Seat
    leader: bool = False  # it runs the node's check
    partner: int | None = None  # the leader's MPI step partner: the node's second rank (None: it has one)
    partner_cpus: list[int] = field(default_factory=list)
    lead: int | None = None  # the node's second rank's leader


@dataclass(frozen=True)
class PairTest:
    """One side of rail `rail` of a node pair's test in round `round`, with `peer`."""

    round: int
    pair: tuple[str, str]  # the nodes
    rail: int
    peer: int
    sends: bool
    seat: Seat
    nap: bool  # ranks of several nodes share this host's CPUs (pairtest.run)


@dataclass(frozen=True)
class Remeasure:
    """Measure these figures of the node again (driver.remeasure)."""

    keys: list[str]


@dataclass(frozen=True)
class Done:
    """Nothing more to do: say goodbye."""


@dataclass
class PairReport:
    """One side's answer to a PairTest: the sender's figures, or the error that stopped it."""

    round: int
    pair: tuple[str, str]
    rail: int
    rank: int
    figures: list[Figure] = field(default_factory=list)
    error: str = ""
    gone: bool = False  # the peer died (a dead rank, not a failed rail): the pair is not measured
