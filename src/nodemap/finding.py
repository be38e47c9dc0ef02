"""A finding: something nodemap judged wrong (or worth saying), in one
sentence with its evidence and fix. The check (check/findings.py), the
fleet (fleet/merge.py) and the watch report (watch/analysis.py) all give
this one record, and documents store it as it is (msgspec), its fields at
their defaults left out.

Two things once shared the word "severity": the verdict level (the fleet's
and the watch's fail/warn/info) and how far a figure is off (the check's
ranking number). They are two fields here: `verdict`, the level, and
`shortfall`, the magnitude. What only one domain knows is a typed optional
field, at its default elsewhere; a document leaves out the fields at their
defaults, so each holds only what its findings say.
"""

from __future__ import annotations

from typing import Literal

import msgspec

# The level of a finding (check/verdicts.RANK orders it among the other
# verdicts): info is recorded, not wrong (a GPU shared against the plan);
# warn needs a look; fail is a fault.
Verdict = Literal["info", "warn", "fail"]
# What has to change: the node's configuration (the job's environment, the
# site's) or its hardware; "" where the domain does not tell them apart.
CAUSES = ("configuration", "hardware")
Cause = Literal[("",) + CAUSES]
# The parts of a node a figure, check or finding is about, in the order the report lists them
AREAS = ("inventory", "host memory", "NUMA", "latency", "GPU memory", "host<->GPU", "GPU<->GPU", "NCCL", "MPI")


class Finding(msgspec.Struct, frozen=True, omit_defaults=True):
    verdict: Verdict  # the level: info | warn | fail
    text: str  # the sentence
    evidence: str = ""  # the numbers and the rule behind it
    fix: str = ""
    keys: tuple[str, ...] = ()  # the figures and checks it rests on
    # The magnitude: how far the figure is worse than its reference, a
    # fraction of it (0.25: a quarter below it, or above it for a latency);
    # 0 at the threshold or without a reference. It ranks findings of one verdict.
    shortfall: float = 0.0
    # The check's (one node's document): the cause, and the area of the
    # figure or check (AREAS).
    cause: Cause = ""
    area: Literal[("",) + AREAS] = ""
    # The fleet's and the watch's (documents of many nodes): the node it is
    # about (the watch's host), and its kind. Fleet: figure, check, absent,
    # topology, link, missing, incomplete, busy, contention. Watch: growth,
    # ipc-growth, gpu-growth, host-growth, imbalance, near-capacity,
    # host-near-capacity, foreign, shared-gpu.
    node: str = ""
    kind: str = ""
    # The fleet's: the figure's ratio to the fleet median (a link's, to the
    # best pair; below 1 is worse, latency inverted) and its robust z,
    # (ratio - 1) / sigma (fleet/noise.py).
    ratio: float | None = None
    z: float | None = None
    # The watch's: the MPI rank whose memory it is about (None: a GPU's or the host's).
    rank: int | None = None

    @property
    def key(self) -> str:
        """The first key it rests on ("" when none)."""
        return self.keys[0] if self.keys else ""
