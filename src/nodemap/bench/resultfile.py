"""The saved form of a ResultSet (nodemap.results/1): decoded and checked in
one step (nodemap.records), each result's parameters against its kind's
(the Params its STORY declares: bench/story.py).

Readers index the parameters of a kind (`params["threads"]` of a memory
result, `params["gpus"][0]` of a gpu one): a file that lacks one, or holds
text where a number belongs, is refused here with the field's path instead
of crashing the report later.
"""

from __future__ import annotations

from typing import Any

from .. import records
from .kinds import story
from .results import Result, ResultFile, ResultSet, _renamed_params

WHAT = "bench result file (nodemap bench KIND -o FILE)"


def decode(where: str, data: bytes) -> ResultSet:
    """A result file's bytes as a ResultSet."""
    return result_set(where, records.decode(where, data, ResultFile, WHAT), "", WHAT)


def convert(where: str, obj: Any, at: str = "", what: str = WHAT) -> ResultSet:
    """A result set already parsed (a check document's `results[i]`: `at`
    says where, `what` the document holding it)."""
    return result_set(where, records.convert(where, obj, ResultFile, what, at), at, what)


def result_set(where: str, f: ResultFile, at: str = "", what: str = WHAT) -> ResultSet:
    """A decoded ResultFile as a ResultSet, each result's parameters checked
    against its kind's (`at`: where the set sits in its document)."""
    results = []
    for i, r in enumerate(f.results):
        params = _renamed_params(r.benchmark, r.params)
        kind = story(r.benchmark).params  # a kind that declares none keeps any
        if kind is not None:
            records.convert(where, params, kind, what, f"{at + '.' if at else ''}results[{i}].params")
        results.append(r if params is r.params else _replace(r, params))
    return ResultSet(command=f.command, results=results, host=f.host, started=f.started, complete=f.complete,
                     environment=f.environment, messages=f.messages, failures=f.failures)


def _replace(r: Result, params: dict[str, Any]) -> Result:
    import dataclasses

    return dataclasses.replace(r, params=params)
