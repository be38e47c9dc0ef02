"""The description saved in a placement plan (`meta` of the .npz, schema
nodemap.placement/1), decoded and checked in one step by nodemap.records:
what `PlacementPlan.load` needs, typed; the summary's other fields are kept
in the file for people and left unread."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from .. import records

SCHEMA = "nodemap.placement/1"
WHAT = "placement plan (write one with nodemap place plan -o)"


class PlanMeta(msgspec.Struct):
    schema: Literal[SCHEMA]
    alloc_sizes: list[Annotated[int, msgspec.Meta(ge=0)]]
    chunk_size: Annotated[int, msgspec.Meta(gt=0)]
    predicted_local_fraction: float
    notes: list[str] = []


def decode(where: str, data: bytes) -> PlanMeta:
    return records.decode(where, data, PlanMeta, WHAT)
