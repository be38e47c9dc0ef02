"""A finding: something nodemap judged wrong (or worth saying), in one
sentence with its evidence and fix. The check (check/findings.py), the
fleet (fleet/merge.py) and the watch report (watch/analysis.py) all give
this one record, and documents store it through `to_dict`.

Two things once shared the word "severity": the verdict level (the fleet's
and the watch's fail/warn/info) and how far a figure is off (the check's
ranking number). They are two fields here: `verdict`, the level, and
`shortfall`, the magnitude. What only one domain knows is a typed optional
field, at its default elsewhere; a document leaves out the fields at their
defaults, so each holds only what its findings say.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Literal

# The level of a finding (check/verdicts.RANK orders it among the other
# verdicts): info is recorded, not wrong (a GPU shared against the plan);
# warn needs a look; fail is a fault.
Verdict = Literal["info", "warn", "fail"]
# What has to change: the node's configuration (the job's environment, the
# site's) or its hardware; "" where the domain does not tell them apart.
CAUSES = ("configuration", "hardware")
Cause = Literal[("",) + CAUSES]


@dataclass(frozen=True)
class Finding:
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
    # figure or check (check/figures.AREAS).
    cause: Cause = ""
    area: str = ""
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

    def to_dict(self) -> dict[str, Any]:
        """Its fields, less those at their defaults (verdict and text have none)."""
        return {f.name: list(v) if f.name == "keys" else v for f in fields(self)
                if (v := getattr(self, f.name)) != f.default}
