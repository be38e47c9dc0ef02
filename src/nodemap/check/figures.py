"""Figures: the numbers `check` judges, drawn from ResultSets and a Topology.

Each kind draws its own (its STORY's `figures`, bench/story.py; the Figure
record and its keys: bench/figures.py), then relates them to the others'
(`related`: a remote copy judged against the local one, NCCL against the
slowest GPU<->GPU link). Only the registry is read here: no kind is named.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Iterable

from ..bench.endpoints import renamed
from ..bench.figures import Figure, Given
from ..bench.gpu.devices import ordinal_gpus
from ..bench.kinds import story
from ..bench.results import Result, ResultSet
from ..topology.model import Topology


def extract(sets: Iterable[ResultSet], topo: Topology | None = None, dram_peak: float | None = None) -> list[Figure]:
    """Every judged figure of the ResultSets, in a stable order (`dram_peak`:
    the site's, for STREAM where the node does not say its own)."""
    out: list[Figure] = []
    related = {}  # each kind's once, in the order its sets came
    for rs in sets:
        results = _physical(rs, topo)
        told = story(results[0].benchmark) if results else None
        if told is not None and told.figures is not None:
            out += told.figures(results, Given(topo, dram_peak, tuple(rs.messages)))
            related.setdefault(results[0].benchmark, told.related)
    for relate in related.values():
        out = relate(out, topo) if relate is not None else out
    return out


def _physical(rs: ResultSet, topo: Topology | None) -> list[Result]:
    """The set's results with each CUDA ordinal its GPU kind could not name ("cuda0") renamed to the
    Topology's GPU by the bus id the set records (bench/gpu/devices.py); the rest stay ordinals."""
    names = ordinal_gpus(rs.environment, topo)
    return [replace(r, params=renamed(r.params, names)) for r in rs.results] if names else list(rs.results)
