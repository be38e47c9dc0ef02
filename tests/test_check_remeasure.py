"""Measuring again what its interval left undecided: the step runs again,
the repetitions are pooled, the figure judged again; bounded by rounds
and budgets, and said in the document."""

import json

import nodes
from nodemap.bench.results import ResultSet, make_result
from nodemap.check import busy, document, expectations, remeasure
from nodemap.check.document import CheckDoc
from nodemap.check.suite import Step

STEP = Step("memory", ("--sweep",), "STREAM placement sweep")


def stream_set(samples, measured=39.9):
    rs = ResultSet("bench memory")
    rs.add(make_result("memory", "triad", "GB/s", samples, verified=True, path="NUMA0 cores -> NUMA0 memory",
                       params={"thread_order": "1/core", "threads": 2, "cpu_order": [0, 1],
                               "write_allocate_best_gbps": measured},  # a measured value: not the identity
                       peak=100.0, peak_source="DRAM peak"))
    return rs


def doc_of(samples):
    doc = CheckDoc(level="quick", topology=nodes.build(nodes.Spec(1, 1, 1, 2)), expectations=expectations.shipped(),
                   results=[stream_set(samples)])
    doc.rejudge()
    return doc


def best(doc):
    return next(j for j in doc.judged if j.figure.key == "host/stream/best")


def runner(*rounds):
    """A fake step: each call returns the next round's samples (with another measured float in its params)."""
    calls = []

    def run(step):
        calls.append(step)
        return stream_set(rounds[len(calls) - 1], measured=40.0 + len(calls))
    return run, calls


def test_a_straddling_figure_is_measured_again_until_decided():
    doc = doc_of([55, 85, 58])  # 55-85% of the peak straddles the 60% fail floor
    assert best(doc).verdict == "inconclusive" and best(doc).noisy
    run, calls = runner([56, 57, 55], [55, 56, 57])
    remeasure.again(doc, [remeasure.Measured(STEP, 0, 1.0)], "quick", run)
    j = best(doc)
    assert len(calls) == 2 and j.verdict == "fail" and not j.noisy  # 9 samples: [2nd, 8th] = [55, 58] < 60
    assert j.figure.n == 9 and j.figure.rounds == 3
    assert doc.remeasured == [document.Remeasured(step="STREAM placement sweep", kind="memory", rounds=3,
                                                  seconds=doc.remeasured[0].seconds, figures=["host/stream/best"])]  # the 1/core triad is the best placement: 100% of itself


def test_rounds_are_bounded():
    doc = doc_of([55, 85, 58])
    run, calls = runner([55, 85, 58], [55, 85, 58], [55, 85, 58])
    remeasure.again(doc, [remeasure.Measured(STEP, 0, 0.1)], "quick", run)
    assert len(calls) == remeasure.ROUNDS - 1 and best(doc).verdict == "inconclusive"
    assert "host/stream/best" in doc.remeasured[0].still_noisy and doc.remeasured[0].rounds == 3


def test_a_step_longer_than_the_budget_is_not_run_again():
    doc = doc_of([55, 85, 58])
    run, calls = runner([56, 57, 55])
    remeasure.again(doc, [remeasure.Measured(STEP, 0, 30.0)], "quick", run)
    assert calls == [] and best(doc).verdict == "inconclusive"
    assert doc.remeasured[0].note.startswith("not measured again: one run takes 30.0 s")
    remeasure.again(doc_of([55, 85, 58]), [remeasure.Measured(STEP, 0, 0.1)], "quick", run, budget=0)
    assert calls == []


def test_decided_figures_are_not_measured_again():
    doc = doc_of([90, 91, 92])
    run, calls = runner([90, 91, 92])
    remeasure.again(doc, [remeasure.Measured(STEP, 0, 0.1)], "quick", run)
    assert calls == [] and doc.remeasured == []


def test_pool_keeps_unmatched_results_and_counts_rounds():
    old, new = stream_set([1, 2, 3]), stream_set([4, 5], measured=1.5)
    other = make_result("memory", "triad", "GB/s", [9], verified=True, path="elsewhere")
    old.add(other)
    got = remeasure.pool(old, new)
    assert got.results[0].samples == (1, 2, 3, 4, 5) and got.results[0].stats.n == 5
    assert got.results[0].params["rounds"] == 2 and got.results[1] == other
    assert remeasure.pool(got, new).results[0].params["rounds"] == 3


class Idle:
    """A busy detector that always finds the node idle."""

    def sample(self, seconds=0):
        return busy.Sample()

    def begin(self):
        pass

    def end(self, utilisation=False):
        return busy.Sample()


def test_run_check_measures_a_noisy_step_again(monkeypatch):
    from nodemap.check import node

    rounds = iter([[55, 85, 58], [56, 57, 55], [55, 56, 57]])
    monkeypatch.setattr(node, "plan", lambda topo, level, in_job=None: ([STEP], []))
    monkeypatch.setattr(node, "measure", lambda kind, argv, *rest: stream_set(next(rounds)))
    doc = node.run_check("quick", expectations.shipped(), detector=Idle())
    assert doc.complete and best(doc).verdict == "fail" and best(doc).figure.rounds == 3
    assert doc.remeasured[0].rounds == 3 and document.from_dict(json.loads(doc.to_json())).remeasured == doc.remeasured
    rounds = iter([[55, 85, 58]])
    again = node.run_check("quick", expectations.shipped(), detector=Idle(), remeasure_budget=0)
    assert again.remeasured and "not measured again" in again.remeasured[0].note
