"""What a kind declares beyond its cases (bench/driver.py): its story, read
through the registry (bench/kinds.py `story`) by the result reader, `check`
and `compare`, so none of them holds a table per kind or names one
(tests/test_import_graph.py). BabelStream's rule: adding a kind never
touches the driver, nor anything that reads what it measured.

A kind's module sets `STORY = Story(...)`; every field has a default, so a
kind declares only what it has (a kind `check` does not run has no steps).
"""

from __future__ import annotations

from dataclasses import dataclass

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


@dataclass(frozen=True)
class Story:
    # the result parameters readers index (report, check's figures): a msgspec Struct; a saved file that
    # lacks one, or holds text where a number belongs, is refused with the field's path (bench/resultfile.py).
    # Only those readers rely on are declared; every other parameter is kept as it was saved.
    params: Any = None
    # the figures check judges, drawn from its Results: (results, bench.figures.Given) -> [Figure]
    figures: Any = None
    # its figures judged against the other kinds' (a remote copy against the local one), once every kind
    # drew its own: (every figure, Topology | None) -> every figure
    related: Any = None


NOTHING = Story()  # what a name the registry does not hold declares (a file from another version)
