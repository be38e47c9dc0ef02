"""What a passing check may clear (issue 35): a nodemap drain is resumed
only by a check whose own document judged what the drain's reason names.
The health level never resumes a drain a measuring check made for a
figure; a budgeted check that left a step out does not resume that step's
drain; a drain not starting with `nodemap:` is never touched; every
nodemap drain can be resumed by a check of the level that made it."""

from __future__ import annotations

import pytest

import check_synth as syn
import nodes
from nodemap.check import expectations
from nodemap.check.document import CheckDoc, Spent
from nodemap.check.expected import compare
from nodemap.check.inventory import Skipped
from nodemap.slurm import drain, verdict
from nodemap.topology.model import replace

HBM = "nodemap: GPU memory: gpu/5/hbm_triad 900 GB/s (limit 1120 GB/s)"
NICS = "nodemap: inventory: NICs 3 (limit 4)"


def hbm(bad: bool = False):
    vals = {g: 1400.0 for g in range(8)}
    if bad:
        vals[5] = 900.0
    return syn.hbm(vals)


def doc(level: str, *sets, nics: int = 4, budget: Spent | None = None, skipped=()) -> CheckDoc:
    topo = nodes.karolina()
    have = replace(topo, nics=topo.nics[:nics])
    d = CheckDoc(level, have, expectations.shipped(), results=list(sets), checks=compare(topo, have, 0.9),
                 budget=budget, skipped=list(skipped))
    d.rejudge()
    return d


def decide(d: CheckDoc, state: str = "IDLE", why: str = ""):
    healthy, reason = verdict.health(d)
    return drain.decide(drain.Node("n1", state, why), healthy, reason, verdict.scope(d))


def test_every_drain_is_resumed_by_a_pass_of_the_level_that_made_it():
    cmd, said = decide(doc("quick", hbm(bad=True)))
    assert cmd == drain.drain_command("n1", HBM), said
    assert decide(doc("quick", hbm()), "IDLE+DRAIN", HBM)[0] == drain.resume_command("n1")
    cmd, _ = decide(doc("health", nics=3))
    assert cmd == drain.drain_command("n1", NICS)
    assert decide(doc("health"), "IDLE+DRAIN", NICS)[0] == drain.resume_command("n1")
    assert decide(doc("quick", hbm()), "IDLE+DRAIN", NICS)[0] == drain.resume_command("n1")  # quick judges NICs too


def test_the_health_level_never_resumes_a_drain_for_a_measured_figure():
    # before: any passing check resumed every "nodemap:" drain, the health level a bandwidth drain it never measured
    cmd, said = decide(doc("health"), "IDLE+DRAIN", HBM)
    assert cmd is None
    assert said == ("n1: healthy as far as --level health judged it, left drained: this check did not judge what "
                    f"nodemap drained it for ({HBM}); a check that does resumes it")


def test_a_budget_that_left_a_step_out_does_not_resume_its_drain():
    left = Skipped("GPU memory bandwidth (bench gpu)", "not measured: 0.2 s of the 3 s budget left, needs ~3.0 s")
    budgeted = doc("quick", budget=Spent(seconds=3, left_out=(left.what,)), skipped=[left])
    assert verdict.health(budgeted) == (True, "")
    assert decide(budgeted, "IDLE+DRAIN", HBM)[0] is None
    assert decide(budgeted, "IDLE+DRAIN", NICS)[0] == drain.resume_command("n1")  # what it did judge


def test_a_drain_that_is_not_nodemaps_is_never_touched():
    for d in (doc("quick", hbm()), doc("health"), doc("quick", hbm(bad=True)), doc("health", nics=3)):
        cmd, said = decide(d, "IDLE+DRAIN", "nodemap maintenance, ticket 4711 (not: nodemap:)")
        assert cmd is None, said


def test_a_failure_keeps_a_nodemap_drain_it_did_not_judge():
    # a health check that finds a NIC gone on a node drained for its HBM: the HBM reason stays (replacing it,
    # the next passing health check would have resumed a node whose HBM nobody measured again)
    cmd, said = decide(doc("health", nics=3), "IDLE+DRAIN", HBM)
    assert cmd is None and said == (f"n1: already drained by nodemap for what this check did not judge ({HBM}), "
                                    f"reason kept; it also fails: {NICS}")
    assert decide(doc("quick", hbm(), nics=3), "IDLE+DRAIN", HBM)[0] == drain.drain_command("n1", NICS)


def test_a_measured_figure_is_named_before_an_inventory_item():
    # both failed: the reason a health check cannot judge again, so that only a measuring check resumes it
    assert verdict.health(doc("quick", hbm(bad=True), nics=3)) == (False, HBM)


def test_a_reason_that_names_no_item_names_the_level():
    d = doc("full", hbm())
    assert verdict._fallback(d) == "nodemap: node: full check failed"
    assert verdict.scope(d).covers("nodemap: node: full check failed")
    assert not verdict.scope(doc("health")).covers("nodemap: node: full check failed")


@pytest.mark.parametrize("area,item", [("GPU memory", "gpu/5/hbm_triad"), ("inventory", "x" * 120),
                                       ("host<->GPU", "h2d/numa3->gpu0 " + "y" * 90)])
def test_a_reason_cut_at_its_length_limit_is_still_recognised(area, item):
    why = drain.reason(area, item, "12.5 GB/s", "40 GB/s")
    assert len(why) <= drain.MAX_REASON
    assert verdict.Scope("quick", (drain.head(area, item),)).covers(why)
    assert not verdict.Scope("quick", (drain.head(area, "other"),)).covers(why)
