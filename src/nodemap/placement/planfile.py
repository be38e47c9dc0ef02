"""A placement plan's summary (`nodemap place show --json`) and the
description saved in its .npz (`meta`, schema nodemap.placement/1: the
summary, its schema and allocation sizes): one class each, what
PlacementPlan writes and what `load` decodes and checks in one step
(nodemap.records)."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from .. import records

SCHEMA = "nodemap.placement/1"
WHAT = "placement plan (write one with nodemap place plan -o)"


class Summary(msgspec.Struct, kw_only=True):
    chunks: int
    chunk_size: Annotated[int, msgspec.Meta(gt=0)]
    total_bytes: int
    gpus: int
    budgets: list[int]  # bytes, per GPU
    bytes_per_gpu: list[int]  # what the plan puts on each (its own chunks and the replicated ones)
    replicated_bytes: int
    replicated_chunks: int
    host_bytes: int  # spilled
    owned_chunks_per_gpu: list[int]
    predicted_local_fraction: float  # of the accesses, served from the reading GPU
    predicted_local_fraction_per_gpu: list[float]
    notes: list[str] = []


class PlanMeta(Summary, kw_only=True):
    """What the .npz holds beside the arrays (its fields after the summary's: plans written before this class
    held them first, and read the same)."""

    schema: Literal[SCHEMA]
    alloc_sizes: list[Annotated[int, msgspec.Meta(ge=0)]]


def decode(where: str, data: bytes) -> PlanMeta:
    return records.decode(where, data, PlanMeta, WHAT)
