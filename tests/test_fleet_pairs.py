"""Pair scheduling: a ring, rounds without a node twice, and the re-test
rounds that isolate a bad node or link among 16 simulated nodes in fewer
pair tests than all pairs."""

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodemap.fleet import pairs

ALL_PAIRS_16 = 16 * 15 // 2


def simulated(n, bad_node=None, bad_link=None, noise=0.01, seed=0, dead=()):
    """measure(round) on n simulated nodes: 25 GB/s, a bad node's NIC at
    70%, a bad link at 60%; counts the tests and checks each round is disjoint."""
    rng = random.Random(seed)
    log = []

    def measure(rnd):
        nodes = [x for p in rnd for x in p]
        assert len(nodes) == len(set(nodes)), rnd
        log.append(list(rnd))
        out = {}
        for p in rnd:
            if set(p) & set(dead):
                continue
            v = 25.0 * rng.gauss(1, noise)
            if bad_node in p:
                v *= 0.7
            if p == bad_link:
                v *= 0.6
            out[p] = v
        return out

    return measure, log


@pytest.mark.parametrize("bad", range(16))
def test_a_bad_node_is_isolated_in_fewer_tests_than_all_pairs(bad):
    measure, log = simulated(16, bad_node=bad, seed=bad)
    iso = pairs.isolate(16, measure)
    assert iso.bad_nodes == {bad} and not iso.bad_links
    assert len(iso.tests) == sum(len(r) for r in log) < ALL_PAIRS_16
    assert len(iso.tests) <= 32 + 6  # the ring (2 shifts) + a few re-tests


@pytest.mark.parametrize("link", [(0, 1), (5, 6), (3, 5), (0, 15), (1, 15)])
def test_a_bad_link_is_isolated_and_both_its_nodes_cleared(link):
    measure, log = simulated(16, bad_link=link, seed=sum(link))
    iso = pairs.isolate(16, measure)
    assert iso.bad_links == {link} and not iso.bad_nodes
    assert len(iso.tests) < ALL_PAIRS_16
    print(f"bad link {link}: {len(iso.tests)} pair tests of {ALL_PAIRS_16}, {iso.rounds} rounds")


@pytest.mark.parametrize("n", [3, 4, 5])
def test_a_bad_node_of_a_small_fleet_is_isolated_by_the_ring(n):
    """Three to five nodes: the ring meets every node with every other (no good partner is left for a
    re-test), so the ring decides: the node whose pairs all fail against partners that pass with
    others is bad, its partners spared (before: every node unsettled, none drained)."""
    for bad in range(n):
        measure, log = simulated(n, bad_node=bad, seed=bad)
        iso = pairs.isolate(n, measure)
        assert (iso.bad_nodes, iso.unsettled, iso.bad_links) == ({bad}, set(), set()), (n, bad)
    measure, log = simulated(n, seed=1)
    iso = pairs.isolate(n, measure)
    assert not iso.bad_nodes and not iso.unsettled
    # nodes sharing one network stack (ranks acting as nodes): their pairs cross no link, and the ring's
    # pattern is the host's contention: no drain without a re-test, every suspect unsettled
    measure, log = simulated(n, bad_node=0, seed=0)
    iso = pairs.isolate(n, measure, by_ring=False)
    assert not iso.bad_nodes and iso.unsettled == set(range(n))


def test_a_healthy_fleet_costs_the_ring_only():
    measure, log = simulated(16, seed=9)
    iso = pairs.isolate(16, measure)
    assert not iso.bad_nodes and not iso.bad_links and len(iso.tests) == 32


def test_latency_rule_and_a_dead_node_is_not_a_partner():
    def measure(rnd):
        return {p: (5.0 if 2 in p else 1.0) for p in rnd if 7 not in p}

    iso = pairs.isolate(10, measure, higher_is_better=False)
    assert iso.bad_nodes == {2}
    assert not any(7 in p for p in iso.tests[20:])  # never re-tested with the dead node


@given(st.integers(2, 64), st.sets(st.integers(1, 5), min_size=1, max_size=3))
def test_ring_rounds_cover_each_pair_once_with_disjoint_rounds(n, shifts):
    ps = pairs.ring_pairs(n, shifts)
    assert len(ps) == len(set(ps)) and all(a < b for a, b in ps)
    rs = pairs.rounds(ps)
    assert sorted(p for r in rs for p in r) == sorted(ps)
    for r in rs:
        nodes = [x for p in r for x in p]
        assert len(nodes) == len(set(nodes))
    if any(s % n for s in shifts):  # a shift that is not a whole turn meets every node
        assert all(any(i in p for p in ps) for i in range(n))


def test_bad_pairs_rule():
    v = {(0, 1): 100.0, (1, 2): 93.5, (2, 3): 92.9}
    assert pairs.bad_pairs(v, True) == {(2, 3)}
    assert pairs.bad_pairs({(0, 1): 1.0, (1, 2): 2.0, (2, 3): 2.2}, False) == {(2, 3)}


def busy_host_rails(n, seed, delayed=None, extra_us=2000.0, spread=8.0):
    """measure(round) on n nodes of one busy host, two rails a pair, as the fleet's driver gives
    them (each rail's latency and its sibling ratios from 5 repetitions): a pair's latency is the
    host's scheduling, 200 us to `spread` x that (8: the healthy spread measured at load 20),
    shared by both rails of the pair (they run at the same moment), each repetition of each rail
    +-30% of it; `delayed`'s rail 1 adds `extra_us` to every repetition (a forwarder's delay)."""
    rng = random.Random(seed)

    def measure(rnd):
        out = {}
        for p in rnd:
            host = 200.0 * rng.uniform(1, spread)
            reps = {k: [host * rng.uniform(0.7, 1.3) + (extra_us if k == 1 and delayed in p else 0.0)
                        for _ in range(5)] for k in (0, 1)}
            figs = {f"mpi latency host rail{k}": sorted(v)[2] for k, v in reps.items()}
            for (k, j), ratio in pairs.against_siblings(reps, False).items():
                figs[pairs.sibling_key("mpi latency host", k, j)] = ratio
            out[p] = figs
        return out

    return measure


LATENCY = {"mpi latency host rail0": False, "mpi latency host rail1": False,
           "mpi latency host rail0 vs rail1": False, "mpi latency host rail1 vs rail0": False}


def test_a_rail_against_its_sibling_takes_the_repetitions_at_their_closest():
    """Bandwidth: the rail's best repetition over its sibling's worst; latency: its lowest over
    the sibling's highest. One noisy repetition on either side makes no fault."""
    assert pairs.sibling_ratio([10, 11, 12], [20, 21, 22], True) == pytest.approx(12 / 20)
    assert pairs.sibling_ratio([2400, 2500, 2600], [300, 400, 1300], False) == pytest.approx(2400 / 1300)
    both = pairs.against_siblings({0: [300, 320, 310], 1: [2300, 2400, 2350], 2: []}, False)
    assert both == {(0, 1): pytest.approx(300 / 2400), (1, 0): pytest.approx(2300 / 320)}  # rail 2 measured nothing
    assert pairs.sibling_key("mpi bw host", 1, 0) == "mpi bw host rail1 vs rail0"
    assert pairs.is_sibling("mpi bw host rail1 vs rail0") and not pairs.is_sibling("mpi bw host rail1")
    assert pairs.sibling_bad(0.4, True) and not pairs.sibling_bad(0.6, True)
    assert pairs.sibling_bad(2.5, False) and not pairs.sibling_bad(1.9, False)


# --- a rail's slowest round trips against its sibling's (lost packets) ------------------------------------

LOST_MS = (100.0, 230.0)  # a half round trip that waited for TCP's retransmit timeout (measured 103-228 ms)
FLOOR_MS = pairs.TAIL_FLOOR / 1000


def stalls(rng, worst_ms):
    """Each rail's 5 repetitions' slowest half round trips (us) in one pair test on a busy host: 0.3-12 ms
    (as measured at load 7-11), but in 1 pair test of 7 the host has a bad moment in which half the
    repetitions of either rail stall, each up to `worst_ms` (53-302 ms on both rails of one pair test of 21,
    at load 9.5)."""
    bad = rng.random() < 1 / 7
    return {k: [1000 * (rng.uniform(worst_ms / 6, worst_ms) if bad and rng.random() < 0.5 else rng.uniform(0.3, 12.0))
                for _ in range(5)] for k in (0, 1)}


@given(st.lists(st.floats(300, FLOOR_MS * 3000), min_size=5, max_size=5),
       st.lists(st.floats(300, 400_000), min_size=5, max_size=5),
       st.lists(st.floats(300, 400_000), min_size=2, max_size=2))
def test_a_rail_whose_stalls_are_not_in_most_repetitions_is_never_bad(quick, other, stalled):
    """At most 2 of 5 repetitions stalled, however long (a moment of the host), beside any sibling: the
    rail's median repetition is at most rail_tail x TAIL_FLOOR, so never above rail_tail (3)."""
    mine = quick[:3] + stalled
    assert pairs.tail_ratio(mine, other) <= pairs.RAILS[2]
    assert not pairs.sibling_bad(pairs.tail_ratio(mine, other), False, pairs.RAILS, tail=True)


@given(st.lists(st.floats(*(1000 * x for x in LOST_MS)), min_size=3, max_size=5),
       st.lists(st.floats(300, 25_000), min_size=4, max_size=4), st.floats(300, 1e6))
def test_a_rail_waiting_for_retransmits_in_most_repetitions_is_bad_beside_a_sibling_stalled_once(lost, quiet, once):
    """Retransmit waits in 3 or more of 5 repetitions, the sibling quick but for one repetition stalled
    however long: bad (the sibling's slowest repetition is forgiven, its second slowest is the host's)."""
    mine = lost + [500.0] * (5 - len(lost))
    ratio = pairs.tail_ratio(mine, quiet + [once])
    assert ratio >= LOST_MS[0] / FLOOR_MS > pairs.RAILS[2]
    assert pairs.sibling_bad(ratio, False, pairs.RAILS, tail=True)
    assert not pairs.sibling_bad(ratio, False, (0.5, 2.0, ratio * 1.01), tail=True)  # the site's rail_tail decides


def test_tail_keys_and_their_rule():
    assert pairs.is_tail(pairs.sibling_key("mpi tail host", 1, 0)) and not pairs.is_tail("mpi latency host rail1 vs rail0")
    assert pairs.tail_ratio([100_000.0] * 5, [1000.0, 2000.0, 90_000.0]) == pytest.approx(100 / 25)  # 90 forgiven
    assert pairs.tail_ratio([100_000.0] * 5, [1000.0, 50_000.0, 90_000.0]) == pytest.approx(2.0)  # 50: the host's
    assert pairs.sibling_bad(3.5, False, (0.5, 2.0, 3.0), tail=True) and not pairs.sibling_bad(2.5, False, (0.5, 2.0, 3.0), tail=True)


def busy_host_tails(n, seed, lossy=None, worst_ms=300.0, loss=0.01, trips=200):
    """measure(round) as the driver gives it on n nodes of one busy host, two rails a pair, each rail's
    slowest round trip of 5 repetitions (`stalls`) and its sibling ratio (`tail_ratio`); `lossy`'s rail 1
    loses `loss` of its messages: a repetition of `trips` round trips (2 messages each) with a loss waits for
    a retransmit (LOST_MS)."""
    rng = random.Random(seed)

    def measure(rnd):
        out = {}
        for p in rnd:
            reps = stalls(rng, worst_ms)
            if lossy in p:
                reps[1] = [max(c, 1000 * rng.uniform(*LOST_MS)) if rng.random() > (1 - loss) ** (2 * trips) else c
                           for c in reps[1]]
            out[p] = {pairs.sibling_key("mpi tail host", k, j): r
                      for (k, j), r in pairs.against_siblings(reps, False, pairs.tail_ratio).items()}
        return out

    return measure


TAILS = {"mpi tail host rail0 vs rail1": False, "mpi tail host rail1 vs rail0": False}


# Each rail fault against the same pair's other rail (busy_host_rails: a delay, judged by floors;
# busy_host_tails: a loss, judged by the slowest round trips): measure(n, seed, faulty node or None, quiet)
FAULTS = {
    "delay": (lambda n, seed, bad, quiet: busy_host_rails(n, seed, delayed=bad, spread=4 if quiet else 8), LATENCY),
    "loss": (lambda n, seed, bad, quiet: busy_host_tails(n, seed, lossy=bad, worst_ms=40 if quiet else 300), TAILS),
}


@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("seed", range(40))
def test_a_rail_fault_is_found_against_its_sibling_and_a_busy_host_drains_none(seed, fault):
    """3-5 nodes of one busy host, two rails a pair (no rule against the lowest pair can judge latency
    there, link_latency 1e6). delay: healthy pairs 1-4x apart (200-800 us, as measured at load 4), each
    rail against its sibling by floors, every repetition against every one, finds the node whose rail 1 is
    2 ms late; 1-8x apart, never a healthy node (a 2 ms delay on a 1.6 ms host may go unsettled). loss:
    healthy rails stalled 7-40 ms now and then, each rail's slowest round trips against its sibling's find
    the node whose rail 1 loses 1% (every other figure of a lossy rail is its sibling's:
    network_faults_20261202_loss_siblings.md); with stalls up to 300 ms (measured at load 9.5), never a
    healthy node. Without a fault no node is bad, no link (nor, for the delay, unsettled)."""
    make, directions = FAULTS[fault]
    n, bad = 3 + seed % 3, seed % 3
    iso = pairs.isolate(n, make(n, seed, bad, True), directions=directions, latency_factor=1e6)
    assert iso.bad_nodes == {bad} and not iso.bad_links, (iso.bad_nodes, iso.bad_links, iso.unsettled)
    noisier = pairs.isolate(n, make(n, seed, bad, False), directions=directions, latency_factor=1e6)
    assert noisier.bad_nodes <= {bad} and not noisier.bad_links
    clean = pairs.isolate(n, make(n, seed, None, False), directions=directions, latency_factor=1e6)
    assert not (clean.bad_nodes or clean.bad_links or (fault == "delay" and clean.unsettled)), clean
