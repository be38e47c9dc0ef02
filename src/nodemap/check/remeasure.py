"""Measure again what its interval left undecided.

A figure whose interval straddles a limit (Judged.noisy) is measured again:
its step runs once more with the same arguments and the new repetitions
are pooled with the old ones (more samples, a narrower interval), then
everything is judged again. Bounded three ways: at most ROUNDS
measurements of a step, a per-step budget and a total budget for the
level (seconds of re-measurement), a step being run again only when its
first measurement fits what is left. What was done is recorded in the
document's `remeasured` and each pooled figure's `rounds`.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace
from typing import Any, Callable

from ..bench.results import HIGHER_IS_BETTER, Result, ResultSet, Stats
from .document import CheckDoc, Remeasured
from ..bench.figures import ROUNDS as ROUNDS_KEY
from .figures import extract
from .suite import Step

ROUNDS = 3  # measurements of a step at most, the first included
BUDGET = {"quick": 20.0, "full": 90.0}  # s of re-measurement per check (quick's whole check is about 60 s)
PER_STEP = {"quick": 10.0, "full": 45.0}  # s one step's re-runs may take


@dataclass
class Measured:
    """A step that ran, where its ResultSet is in the document and what it cost."""

    step: Step
    index: int  # in doc.results
    seconds: float  # its first measurement
    spent: float = 0.0  # on re-runs
    rounds: int = 1
    figures: tuple[str, ...] = ()  # the noisy figures it was run again for
    note: str = ""  # why it was not run again (budget)


def again(doc: CheckDoc, done: list[Measured], level: str, run: Callable[[Step], ResultSet | None],
          progress: Callable[[str], None] = lambda s: None, on_update: Callable[[CheckDoc], None] = lambda d: None,
          budget: float | None = None) -> None:
    """Re-run the steps of noisy figures, pool, re-judge, until every figure
    is decided or the rounds or budgets are spent. `run` measures a step
    (None when it failed); `budget` replaces the level's total (0: none)."""
    left = BUDGET.get(level, 0.0) if budget is None else budget
    per = min(PER_STEP.get(level, 0.0), left)
    while not doc.is_busy():  # a busy node is checked again later, not measured again now
        noisy = {j.figure.key for j in doc.judged if j.noisy}
        todo = [m for m in done if m.rounds < ROUNDS and not m.note and noisy & _keys(doc, m)]
        if not todo:
            break
        for m in todo:
            if m.seconds > left or m.spent + m.seconds > per:
                m.note = (f"not measured again: one run takes {m.seconds:.1f} s, {min(left, per - m.spent):.1f} s "
                          "of the re-measurement budget left")
                continue
            m.figures = tuple(sorted(set(m.figures) | (noisy & _keys(doc, m))))
            progress(f"[check again {m.rounds + 1}/{ROUNDS}] {m.step.what}: {', '.join(m.figures)} undecided")
            t = time.monotonic()
            rs = run(m.step)
            dt = time.monotonic() - t
            left, m.spent, m.rounds = left - dt, m.spent + dt, m.rounds + 1
            if rs is None:
                m.note = "measuring again failed"
                continue
            doc.results[m.index] = pool(doc.results[m.index], rs)
            doc.rejudge()
            on_update(doc)
    doc.remeasured = [record(doc, m) for m in done if m.figures or m.note and _noisy(doc, m)]


def record(doc: CheckDoc, m: Measured) -> Remeasured:
    return Remeasured(step=m.step.what, kind=m.step.kind, rounds=m.rounds, seconds=round(m.spent, 2),
                      figures=list(m.figures), still_noisy=sorted(_noisy(doc, m)), note=m.note)


def _keys(doc: CheckDoc, m: Measured) -> set[str]:
    return {f.key for f in extract([doc.results[m.index]], doc.topology)}


def _noisy(doc: CheckDoc, m: Measured) -> set[str]:
    return {j.figure.key for j in doc.judged if j.noisy} & _keys(doc, m)


def identity(r: Result) -> str:
    """What makes two Results the same measurement: benchmark, metric, unit,
    path and the parameters that are settings (whole numbers, strings,
    lists), not measured values (floats, e.g. a write-allocate bandwidth)."""
    params = {k: v for k, v in r.params.items() if k != ROUNDS_KEY and not isinstance(v, float)}
    return json.dumps([r.benchmark, r.metric, r.unit, r.path, params], sort_keys=True, default=str)


def pool(old: ResultSet, new: ResultSet) -> ResultSet:
    """`old` with the samples of the same measurements in `new` appended,
    their statistics recomputed and their rounds counted; a Result `new`
    lacks is kept as it was."""
    fresh = {identity(r): r for r in new.results}
    out = []
    for r in old.results:
        n = fresh.get(identity(r))
        if n is None or not n.samples:
            out.append(r)
            continue
        samples = tuple(r.samples) + tuple(n.samples)
        out.append(replace(r, samples=samples, stats=Stats.of(samples, HIGHER_IS_BETTER.get(r.unit, True)),
                           params={**r.params, ROUNDS_KEY: int(r.params.get(ROUNDS_KEY, 1)) + 1}))
    busy = new.environment.get("busy")  # its busy.Sample (check/node.py): a busy re-run says so
    env = {**old.environment, "busy": busy} if busy is not None and busy.busy else old.environment
    return replace(old, results=out, environment=env, messages=list(old.messages), on_add=None)
