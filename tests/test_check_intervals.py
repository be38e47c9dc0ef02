"""Intervals from a figure's own repetitions and the verdict rules that use
them, on synthetic samples: a figure fails only when its whole interval is
beyond the fail limit, straddling is inconclusive, one sample never fails."""

import random
import statistics

import pytest

from nodemap.bench.results import make_result
from nodemap.bench import intervals
from nodemap.check.expectations import Limit, shipped
from nodemap.bench.figures import figure
from nodemap.check.verdicts import RANK, absolute, judge


def fig(samples, unit="GB/s", key="host/stream/best", group="", kind="stream", peak=None):
    r = make_result("memory", "triad", unit, samples, verified=True, path="p", peak=peak, peak_source="the peak")
    return figure(r, key, "host memory", key, kind=kind, group=group, part="DRAM")


FLOOR = Limit("stream", ".", "test", warn_below=80.0, fail_below=60.0)
CEILING = Limit("latency_DRAM", ".", "test", warn_above=150.0, fail_above=200.0)


# --- the interval ---------------------------------------------------------------


@pytest.mark.parametrize("n,k,cov", [(2, 1, 0.5), (3, 1, 0.75), (5, 1, 0.9375), (6, 1, 0.96875), (10, 2, 0.9785),
                                     (20, 6, 0.9586)])
def test_order_statistic_interval_is_the_widest_95_percent_one(n, k, cov):
    x = list(range(1, n + 1))
    random.Random(n).shuffle(x)
    iv = intervals.median_interval(x)
    assert (iv.low, iv.high, iv.n) == (k, n + 1 - k, n)
    assert iv.coverage == pytest.approx(cov, abs=5e-4)
    assert iv.median == statistics.median(x)
    assert ("order statistics" in iv.method) == (n >= 6)


def test_one_sample_has_no_interval():
    assert intervals.median_interval([3.0]) is None and intervals.median_interval([]) is None


def test_the_interval_holds_the_median_as_often_as_it_says():
    rng = random.Random(29)
    for n in (3, 10):
        hits = sum(iv.low <= 1.0 <= iv.high for iv in
                   (intervals.median_interval(rng.lognormvariate(0, 0.5) for _ in range(n)) for _ in range(3000)))
        assert hits / 3000 == pytest.approx(intervals.coverage(n, 1 if n < 6 else 2), abs=0.03)


def test_where_against_floor_and_ceiling():
    assert intervals.where(1, 2, 3, above=False) == "beyond"
    assert intervals.where(1, 4, 3, above=False) == "straddles"
    assert intervals.where(4, 5, 3, above=False) == "within"
    assert intervals.where(4, 5, 3, above=True) == "beyond"
    assert intervals.where(2, 5, 3, above=True) == "straddles"
    assert intervals.ratio_interval((9, 11), (10, 20)) == (9 / 20, 11 / 10)


# --- absolute rule ----------------------------------------------------------------


def test_clearly_beyond_fails():
    v = absolute(fig([50, 52, 51, 49, 50, 51]), FLOOR)
    assert v.verdict == "fail" and not v.noisy and "below the 60.0 GB/s limit" in v.rule and "[49.0, 52.0]" in v.rule


def test_clearly_inside_passes():
    v = absolute(fig([95, 97, 96]), FLOOR)
    assert v.verdict == "pass" and "median 96.0 GB/s [95.0, 97.0]" in v.rule


def test_straddling_the_fail_limit_is_inconclusive_and_says_so():
    v = absolute(fig([55, 85, 58]), FLOOR)
    assert v.verdict == "inconclusive" and v.noisy
    assert v.rule.startswith("noisy: spread 52%, interval [55.0, 85.0] GB/s straddles the fail limit 60.0 GB/s")


def test_straddling_fail_while_wholly_below_warn_is_warn_not_fail():
    v = absolute(fig([55, 75, 58]), FLOOR)
    assert v.verdict == "warn" and v.noisy and "straddles the fail limit" in v.rule


def test_straddling_the_warn_limit_is_inconclusive():
    v = absolute(fig([75, 85, 79]), FLOOR)
    assert v.verdict == "inconclusive" and "straddles the warn limit 80.0 GB/s" in v.rule


def test_one_sample_beyond_the_fail_limit_never_fails():
    v = absolute(fig([10]), FLOOR)
    assert v.verdict == "inconclusive" and "one sample" in v.rule and v.noisy
    assert absolute(fig([70]), FLOOR).verdict == "warn"  # one sample may warn and pass
    assert absolute(fig([90]), FLOOR).verdict == "pass"


def test_two_samples_fail_only_when_both_are_beyond():
    assert absolute(fig([50, 55]), FLOOR).verdict == "fail"
    assert absolute(fig([50, 65]), FLOOR).verdict == "warn"  # straddles the fail limit, wholly below warn
    assert absolute(fig([50, 85]), FLOOR).verdict == "inconclusive"


def test_latency_ceiling_uses_the_interval_too():
    assert absolute(fig([250, 260, 255], unit="ns", kind="latency_DRAM"), CEILING).verdict == "fail"
    v = absolute(fig([120, 260, 130], unit="ns", kind="latency_DRAM"), CEILING)
    assert v.verdict == "inconclusive" and "straddles the fail limit 200 ns" in v.rule


def test_fraction_of_peak_rule_straddling():
    lim = Limit("stream", ".", "test", warn=0.8, fail=0.6)
    v = absolute(fig([55, 85, 58], peak=100.0), lim)
    assert v.verdict == "inconclusive" and "interval [55%, 85%] of 100 GB/s straddles the fail limit 60%" in v.rule
    assert absolute(fig([50, 55, 52], peak=100.0), lim).verdict == "fail"


# --- relative rule ------------------------------------------------------------------


def peers(samples_of):
    return [fig(s, key=f"numa/bw/numa{i}->numa{i}", group="g", kind="") for i, s in enumerate(samples_of)]


def test_relative_rule_compares_intervals():
    steady = [100, 101, 99]
    fs = peers([steady, steady, steady, [80, 82, 81]])  # wholly below 90% of the peers
    j = {x.figure.key: x for x in judge(fs, shipped())}
    assert j["numa/bw/numa3->numa3"].verdict == "fail"
    assert {j[f"numa/bw/numa{i}->numa{i}"].verdict for i in range(3)} == {"pass"}
    noisy = judge(peers([steady, steady, steady, [80, 99, 85]]), shipped())[3]
    assert noisy.verdict == "inconclusive" and noisy.noisy
    assert noisy.rule.startswith("relative to its peers: noisy: spread")
    assert "straddles the fail limit 90% of the peers' median" in noisy.rule


def test_relative_latency_one_sample_never_fails():
    fs = [fig(s, unit="ns", key=f"d2d_latency/{i}", group="lat", kind="") for i, s in
          enumerate([[10, 10.1], [10, 10.2], [30]])]
    js = judge(fs, shipped())
    assert js[2].verdict == "inconclusive" and "one sample" in js[2].rule


def test_inconclusive_ranks_between_pass_and_warn():
    assert RANK["pass"] < RANK["inconclusive"] < RANK["warn"] < RANK["fail"]


def test_placement_compares_medians_with_the_best_placements_and_is_its_own_peak():
    from nodemap.bench.figures import Given
    from nodemap.bench.host import memory

    def sweep(core, spread):
        out = []
        for name, threads, vals in (("1/core", 2, core), ("spread 1", 1, spread)):
            out.append(make_result("memory", "triad", "GB/s", vals, verified=True, path="p",
                                   params={"thread_order": name, "threads": threads, "cpu_order": [0]}))
        return out

    def verdict(core, spread):
        f = next(f for f in memory.figures(sweep(core, spread), Given()) if f.key == "host/stream/triad")
        return judge([f], shipped())[0]

    # the 1/core placement is the sweep's best: 100% of itself however noisy (it was inconclusive against its max)
    assert verdict([10, 30, 20], [5, 6, 7]).verdict == "pass"
    assert verdict([20, 21, 22], [20, 28, 24]).verdict == "inconclusive"  # medians' intervals overlap 90%
    j = verdict([17, 17.2, 17.5], [20, 21, 22])  # [77%, 88%] of the best placement: below 90%, above 75%
    assert j.verdict == "warn" and "of the median 21.0 GB/s" in j.rule
