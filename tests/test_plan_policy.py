"""The planner's policy on the cases of issue 18 and on generated nodes:
balanced splits, wide tasks, GPU borrowing, multi-rail by default.

Checks are computed from the topology (cores, caches, NUMA distances), not
from the planner's helpers."""

from collections import Counter

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import nodes
from nodemap.mapping import emit
from nodemap.mapping.plan import plan
from nodemap.mapping.request import Request
from nodemap.topology.cpuset import CpuSet

SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def P(topo, **kw):
    return plan(topo, Request(**kw))


def holds_and_is_reached(strategy, check, share):
    """Run `check` over `strategy`'s examples (hypothesis); `check` asserts the
    property and returns whether the example reached that assertion. At
    least `share` of the examples must: a property test whose examples all
    return early proves nothing."""
    seen = Counter()

    @SETTINGS
    @given(strategy)
    def prop(case):
        seen["examples"] += 1
        reached = check(case)
        event("reached the assertion" if reached else "returned early")
        seen["reached"] += bool(reached)

    prop()
    assert seen["reached"] >= share * seen["examples"], seen


def gpus_on_one_domain(draw, spec):
    """`spec` with 1-2 GPUs, all in one drawn NUMA node: the tasks gather there."""
    home = draw(st.integers(0, spec.packages * spec.numa_per_package - 1))
    spec.gpus = [nodes.Dev(home, switch=f"g{k}") for k in range(draw(st.integers(1, 2)))]
    return spec


def cores_of(topo, cpus):
    return sum(1 for c in topo.cores if not c.cpuset.isdisjoint(cpus))


def sizes_by_domain(topo, p):
    out = {}
    for t in p.tasks:
        out.setdefault(t.mems, []).append(cores_of(topo, t.cpus))
    return out


# --- balanced splits ----------------------------------------------------------------------


def test_epyc_7401_twelve_tasks_get_four_cores_each():
    # 2 x 24 cores, 8 CCX of 3 cores per socket, one NUMA node per socket: 6 tasks per socket
    topo = nodes.build(nodes.Spec(2, 1, 8, 3, smt=2))
    p = P(topo, tasks=12)
    assert [cores_of(topo, t.cpus) for t in p.tasks] == [4] * 12


def test_power9_eight_tasks_differ_by_one_core():
    # 2 x 22 cores, an L3 per pair of cores (11 per socket), SMT4
    topo = nodes.build(nodes.Spec(2, 1, 11, 2, smt=4, packed=True))
    p = P(topo, tasks=8)
    assert [cores_of(topo, t.cpus) for t in p.tasks] == [6, 6, 5, 5, 6, 6, 5, 5]


def test_two_tasks_on_eighteen_cores_get_nine_each():
    topo = nodes.build(nodes.Spec(1, 1, 9, 2))
    assert [cores_of(topo, t.cpus) for t in P(topo, tasks=2).tasks] == [9, 9]


def test_a_level_that_divides_evenly_is_used():
    # 4 tasks on 2 L3 of 9 cores: 2 tasks in each L3 (5+4), none straddles the L3s
    topo = nodes.build(nodes.Spec(1, 1, 2, 9))
    p = P(topo, tasks=4)
    l3 = [c.cpuset for c in topo.caches_at(3)]
    assert [cores_of(topo, t.cpus) for t in p.tasks] == [5, 4, 5, 4]
    assert all(sum(not c.isdisjoint(t.cpus) for c in l3) == 1 for t in p.tasks)


@st.composite
def split_case(draw):
    spec = nodes.random_spec(draw, st)
    spec.gpus = []
    topo = nodes.build(spec)
    ncores = sum(1 for c in topo.cores if not c.cpuset.isdisjoint(topo.allowed_cpus))
    return topo, draw(st.integers(1, ncores))


@SETTINGS
@given(split_case())
def test_task_sizes_within_a_domain_differ_by_at_most_one_core(case):
    topo, tasks = case
    p = P(topo, tasks=tasks)
    for sizes in sizes_by_domain(topo, p).values():
        assert max(sizes) - min(sizes) <= 1, sizes


# --- wide tasks -----------------------------------------------------------------------------


def test_a_task_wider_than_its_gpus_socket_extends_to_the_other_socket():
    # 2 x 18 cores SMT2, both GPUs on socket 0: 36 threads take 36 cores, one PU each
    topo = nodes.build(nodes.Spec(2, 1, 1, 18, smt=2, gpus=[nodes.Dev(0, "a"), nodes.Dev(0, "b")]))
    (t,) = P(topo, tasks=1, threads=36).tasks
    assert cores_of(topo, t.cpus) == 36 and len(t.cpus) == 36
    assert t.gpus == (0, 1) and t.mems == CpuSet([0, 1])


@st.composite
def wide_case(draw):
    """A node of 3+ NUMA domains, GPUs in one of them, and a lone task whose
    threads need more cores than that domain but fewer than the whole node."""
    spec = nodes.random_spec(draw, st)
    spec.numa_per_package = max(spec.numa_per_package, -(-3 // spec.packages))
    spec.offline, spec.disallowed = frozenset(), frozenset()
    topo = nodes.build(gpus_on_one_domain(draw, spec))
    per_numa = len(topo.cores) // len(topo.numa_nodes)
    return topo, draw(st.integers(per_numa + 1, len(topo.cores) - per_numa))


def check_wide_task(topo, p, threads):
    """Every task has a core per thread; when the GPUs' domain was extended,
    the tasks' domains together are the nearest to that home, and they hold
    only its GPUs. Returns whether the domain was extended (and so checked)."""
    (base,) = {g.numa_node for g in topo.gpus}
    assert all(cores_of(topo, t.cpus) >= threads for t in p.tasks)
    assert all(topo.gpu(g).numa_node == base for t in p.tasks for g in t.gpus)
    span = CpuSet.union_all(t.mems for t in p.tasks)
    if span == CpuSet([base]):
        return False
    inside = max(topo.distance(base, m) for m in span)
    outside = min((topo.distance(base, n.os_index) for n in topo.numa_nodes if n.os_index not in span),
                  default=inside)
    assert inside <= outside, (span, base)
    return any(" extend" in n for n in p.notes)


def test_a_wide_task_takes_the_nearest_domains_and_keeps_its_gpus():
    def check(case):
        topo, threads = case
        return check_wide_task(topo, P(topo, tasks=1, threads=threads), threads)

    holds_and_is_reached(wide_case(), check, 0.9)


def beside_gpus(topo, t):
    """Every GPU of the task in a NUMA node that holds some of its PUs, and its first place (the
    thread that drives the GPU) in one of them."""
    homes = {topo.gpu(g).numa_node for g in t.gpus}
    first = topo.numa_of(t.places[0])
    return bool(t.gpus) and homes <= set(topo.numa_of(t.cpus)) and not homes.isdisjoint(first)


def test_two_wide_tasks_of_one_gpu_socket_extend_to_the_idle_socket_keeping_a_half_beside_their_gpus():
    # 2 x 18 cores without SMT, both GPUs on socket 0: 2 tasks of 18 threads, each 9 cores of either
    # socket (a socket each put task 1 wholly away from its GPU), a GPU each
    topo = nodes.build(nodes.Spec(2, 1, 1, 18, gpus=[nodes.Dev(0, "a"), nodes.Dev(0, "b")]))
    p = P(topo, tasks=2, threads=18)
    assert [cores_of(topo, t.cpus) for t in p.tasks] == [18, 18] and all(len(t.cpus) == 18 for t in p.tasks)
    assert [t.mems for t in p.tasks] == [CpuSet([0, 1])] * 2 and [t.gpus for t in p.tasks] == [(0,), (1,)]
    assert all(len(t.cpus & topo.numa(0).cpuset) == 9 and beside_gpus(topo, t) for t in p.tasks)
    assert any("extend over NUMA node 1, each keeping cores beside its GPUs" in n for n in p.notes)


def test_two_tasks_whose_threads_fit_only_their_gpu_sockets_hyperthreads_take_the_idle_socket_too():
    # 2 x 18 cores SMT2, both GPUs on socket 0: 2 x 18 threads fit its 36 PUs, but only two to a core
    # while socket 1 idles (issue 36); each task takes 9 cores of either socket, one PU a core
    topo = nodes.build(nodes.Spec(2, 1, 1, 18, smt=2, gpus=[nodes.Dev(0, "a"), nodes.Dev(0, "b")]))
    p = P(topo, tasks=2, threads=18)
    assert [(cores_of(topo, t.cpus), len(t.cpus)) for t in p.tasks] == [(18, 18), (18, 18)]
    assert [t.gpus for t in p.tasks] == [(0,), (1,)] and all(beside_gpus(topo, t) for t in p.tasks)
    assert not any("share cores' hardware threads" in n for n in p.notes)
    # --smt 2 asks for both hardware threads: 9 cores each on the GPUs' socket, said in no note
    p = P(topo, tasks=2, threads=18, smt=2)
    assert [(cores_of(topo, t.cpus), len(t.cpus)) for t in p.tasks] == [(9, 18), (9, 18)]
    assert [t.mems for t in p.tasks] == [CpuSet([0])] * 2


def test_karolina_7_tasks_of_16_threads_get_16_cores_each_beside_their_gpus():
    """Held-out cases: issue 26 (tasks 0, 2, 4 had CPUs and memory on NUMA 0/2/4, their GPU on
    1/3/5) and issue 36 (six tasks ran 16 threads on 8 cores' hyperthreads while 64 cores idled)."""
    topo = nodes.karolina()
    p = P(topo, tasks=7, threads=16)
    assert all(cores_of(topo, t.cpus) == len(t.cpus) == 16 for t in p.tasks), [t.cpus for t in p.tasks]
    assert all(beside_gpus(topo, t) for t in p.tasks), [(t.cpus, t.gpus) for t in p.tasks]
    assert len(CpuSet.union_all(t.cpus for t in p.tasks)) == 7 * 16  # no PU shared
    assert not any("share cores" in n or "more threads" in n for n in p.notes), p.notes


def test_epyc_7_tasks_of_16_threads_leave_no_numa_node_idle_and_keep_gpus_beside_their_cores(fixtures):
    """Held-out cases: issue 26 (on a 4-GPU EPYC, 8 NUMA x 6 cores, six tasks got 3 cores for 16
    threads while NUMA nodes 0 and 3 idled) and issue 36 (tasks 0, 3, 4 then ran on NUMA 0, 3, 4 with
    their GPUs on NUMA 1, 2, 5). Now every node works, every task has 6 cores, 3+ beside its GPU."""
    from nodemap.topology import hwloc_xml

    topo = hwloc_xml.read(fixtures / "mpibind" / "topo-xml" / "epyc-corona.xml")
    p = P(topo, tasks=7, threads=16)
    assert CpuSet.union_all(t.mems for t in p.tasks) == topo.nodeset
    assert min(cores_of(topo, t.cpus) for t in p.tasks) == 6 and all(beside_gpus(topo, t) for t in p.tasks)
    for t in p.tasks:
        (home,) = {topo.gpu(g).numa_node for g in t.gpus}
        assert cores_of(topo, t.cpus & topo.numa(home).cpuset) >= 3, (t.task, t.cpus, home)


def tasks_on_one_gpu_domain(draw, smt: int):
    """A node of `smt` PUs a core, 2+ NUMA domains, GPUs in one of them, and
    k tasks there: (topology, k, cores each task gets at home)."""
    spec = nodes.random_spec(draw, st)
    spec.smt = smt
    spec.numa_per_package = max(spec.numa_per_package, -(-2 // spec.packages))
    spec.cores_per_l3 = max(spec.cores_per_l3, 2)
    spec.offline, spec.disallowed = frozenset(), frozenset()
    topo = nodes.build(gpus_on_one_domain(draw, spec))
    per_numa = len(topo.cores) // len(topo.numa_nodes)
    k = draw(st.integers(2, min(4, per_numa)))
    return topo, k, per_numa // k


@st.composite
def fits_pus_case(draw):
    """k tasks on the one GPU domain of an SMT node: more threads than the
    domain's cores give them, no more than its PUs do."""
    smt = draw(st.sampled_from([2, 4]))
    topo, k, each = tasks_on_one_gpu_domain(draw, smt)
    return topo, k, draw(st.integers(each + 1, each * smt))


@SETTINGS
@given(fits_pus_case())
def test_tasks_whose_threads_fit_only_their_domains_hyperthreads_take_idle_cores_beside_their_gpus(case):
    """Issue 36: hyperthreads of the GPU's domain are no reason to leave other domains' cores idle;
    the tasks extend, each keeping cores (and its first place) beside its GPUs, and take a core per
    thread as far as the node's cores go."""
    topo, k, threads = case
    (base,) = {g.numa_node for g in topo.gpus}
    p = P(topo, tasks=k, threads=threads)
    assert all(base in t.mems and beside_gpus(topo, t) for t in p.tasks)
    assert any(" extend" in n for n in p.notes)
    if k * threads <= len(topo.cores):
        assert all(cores_of(topo, t.cpus) >= threads for t in p.tasks)


def test_threads_beyond_the_cores_without_a_free_domain_are_noted():
    # both sockets hold GPUs, so both are used: 2 tasks x 12 threads per 18-core socket share hyperthreads
    topo = nodes.build(nodes.Spec(2, 1, 1, 18, smt=2, gpus=[nodes.Dev(0), nodes.Dev(1)]))
    p = P(topo, tasks=4, threads=12)
    assert any("more threads (12 each) than they have cores" in n for n in p.notes), p.notes
    assert not any("more threads" in n for n in P(topo, tasks=4, threads=9).notes)


@st.composite
def wide_tasks_case(draw):
    """k tasks on the one GPU domain of a node without SMT whose threads need
    more cores than that domain holds and at most the whole node's."""
    # no SMT: several tasks leave their domain only short of PUs (fits_pus_case: with SMT)
    topo, k, each = tasks_on_one_gpu_domain(draw, 1)
    return topo, k, draw(st.integers(each + 1, len(topo.cores) // k))


def test_wide_tasks_of_a_domain_take_the_nearest_domains_and_keep_their_gpus():
    def check(case):
        topo, k, threads = case
        return check_wide_task(topo, P(topo, tasks=k, threads=threads), threads)

    holds_and_is_reached(wide_tasks_case(), check, 0.9)


# --- GPU borrowing ----------------------------------------------------------------------------


def test_all_pus_with_one_gpu_each_spread_evenly_over_karolinas_gpus():
    p = P(nodes.karolina(), tasks=256, gpus_per_task=1)
    assert sorted(Counter(g for t in p.tasks for g in t.gpus).values()) == [32] * 8


def test_karolina_256_tasks_all_get_a_gpu_and_the_nics_share_them_evenly():
    """Held-out case (issue 26): by default the 128 tasks of NUMA 0,2,4,6 got no GPU and the NICs
    served 80/48/80/48 tasks; spilled off the GPUs' NUMA nodes, they take the nearest GPU."""
    p = P(nodes.karolina(), tasks=256)
    assert sorted(Counter(g for t in p.tasks for g in t.gpus).values()) == [32] * 8
    assert all(len(t.gpus) == 1 for t in p.tasks)
    assert sorted(Counter(n for t in p.tasks for n in t.nics).values()) == [64] * 4


def test_cpu_only_tasks_spread_evenly_over_equally_near_nics():
    """Issue 26: 256 CPU-only tasks on Karolina loaded the NICs 80/48/80/48: the tasks of NUMA 0 and 2
    (two NICs equally near, in the package) chose before those of NUMA 1 and 3 (one NIC each)."""
    for tasks in (256, 128, 64):
        p = P(nodes.karolina(), tasks=tasks, gpus_per_task=0)
        assert sorted(Counter(n for t in p.tasks for n in t.nics).values()) == [tasks // 4] * 4, tasks


def test_epyc_48_tasks_at_smt_2_get_a_core_each_over_every_numa_node(fixtures):
    """Held-out case (issue 26): --tasks 48 --smt 2 on a 4-GPU EPYC (48 cores, SMT2) packed every
    task on the GPUs' NUMA nodes at 1 PU each, ignoring --smt 2 silently."""
    from nodemap.topology import hwloc_xml

    topo = hwloc_xml.read(fixtures / "mpibind" / "topo-xml" / "epyc-corona.xml")
    p = P(topo, tasks=48, smt=2)
    assert all(len(t.cpus) == 2 and cores_of(topo, t.cpus) == 1 and t.gpus for t in p.tasks)
    assert sorted(Counter(t.mems.first() for t in p.tasks).values()) == [6] * 8
    assert any("do not fit the cores at --smt 2" in n for n in p.notes)
    p = P(topo, tasks=60, smt=2)  # more tasks than cores: --smt 2 cannot hold, and a note says so
    assert any("--smt 2: 60 tasks outnumber the 48 cores" in n for n in p.notes)


def test_gpu_less_domains_borrow_every_equally_near_gpu():
    # NUMA 0 and 2 hold no GPU; GPUs 0-3 (NUMA 3 and 1) are equally near both
    p = P(nodes.karolina(), tasks=16, gpus_per_task=1, restrict_mems=CpuSet([0, 2]))
    assert Counter(g for t in p.tasks for g in t.gpus) == {0: 4, 1: 4, 2: 4, 3: 4}


@st.composite
def borrow_case(draw):
    """A node of 2+ NUMA domains, one of them without GPUs (the borrower),
    GPUs of known locality elsewhere, tasks restricted to the borrower."""
    spec = nodes.random_spec(draw, st)
    spec.numa_per_package = max(spec.numa_per_package, -(-2 // spec.packages))
    spec.offline, spec.disallowed = frozenset(), frozenset()
    spec.cores_per_l3 = max(spec.cores_per_l3, 2)
    npp, nnuma = spec.numa_per_package, spec.packages * spec.numa_per_package
    bare = draw(st.integers(0, nnuma - 1))
    others = [n for n in range(nnuma) if n != bare]
    # one of the nearest domains (same package, when it has others) holds 2+ GPUs: a choice to spread over
    nearest = [n for n in others if n // npp == bare // npp] or others
    rich = draw(st.sampled_from(nearest))
    spec.gpus = [nodes.Dev(n, switch=f"g{n}.{k}") for n in others
                 for k in range(draw(st.integers(2 if n == rich else 0, 3)))]
    topo = nodes.build(spec)
    return topo, bare, draw(st.integers(2, len(topo.numa(bare).cpuset)))


def test_borrowers_spread_over_the_equally_near_gpus():
    def check(case):
        topo, numa, tasks = case
        p = P(topo, tasks=tasks, gpus_per_task=1, restrict_mems=CpuSet([numa]))
        dist = {g.index: topo.distance(numa, g.numa_node) for g in topo.gpus}
        near = {g for g, d in dist.items() if d == min(dist.values())}
        used = Counter(g for t in p.tasks for g in t.gpus)
        assert set(used) <= near
        counts = [used.get(g, 0) for g in near]
        assert max(counts) - min(counts) <= 1, (used, near)
        return tasks > 1 and len(near) > 1  # a choice among equally near GPUs was made

    holds_and_is_reached(borrow_case(), check, 0.9)


@st.composite
def gpu_node_case(draw):
    """A node with GPUs on some domains, tasks asking for 1-3 GPUs each
    (never more than the node has), greedy or not: tasks of domains with too
    few GPUs borrow."""
    spec = nodes.random_spec(draw, st)
    spec.numa_per_package = max(spec.numa_per_package, -(-2 // spec.packages))
    if len({d.numa for d in spec.gpus if d.numa >= 0}) < 2:  # two GPU domains, one short of GPUs
        spec.gpus = [d for d in spec.gpus if d.numa < 2] + [nodes.Dev(0, "x"), nodes.Dev(1, "y"), nodes.Dev(1, "y")]
    topo = nodes.build(spec)
    held = Counter(g.numa_node for g in topo.gpus if g.numa_node >= 0)
    fewest = min(held.values(), default=0)
    most = min(3, len(topo.gpus))  # more GPUs per task than some GPU domain holds, where the node allows
    gpt = draw(st.integers(min(fewest + 1, most), most))
    return topo, draw(st.integers(1, len(topo.allowed_cpus))), gpt, draw(st.booleans())


def test_no_task_gets_a_gpu_of_another_domain_while_its_own_is_free():
    def check(case):
        topo, tasks, gpt, greedy = case
        p = P(topo, tasks=tasks, gpus_per_task=gpt, greedy=greedy)
        used = {g for t in p.tasks for g in t.gpus}
        reached = False
        for t in p.tasks:
            if len(t.mems) != 1:
                continue
            (mine,) = t.mems
            own = {g.index for g in topo.gpus if g.numa_node == mine and g.visible}
            foreign = [g for g in t.gpus if topo.gpu(g).numa_node not in (mine, -1)]
            if foreign:
                assert own <= used, (t, own, used)
                reached = True
        return reached

    holds_and_is_reached(gpu_node_case(), check, 0.5)


# --- NICs: multi-rail by default, seed nodes ------------------------------------------------


def env_of(topo, p, task):
    return dict(emit.with_env(topo, p).tasks[task].env)


def test_karolina_two_tasks_each_on_its_sockets_two_nics_with_rails():
    topo = nodes.karolina()
    p = P(topo, tasks=2)
    assert [set(t.nics) for t in p.tasks] == [{"mlx5_0", "mlx5_1"}, {"mlx5_2", "mlx5_3"}]
    e = env_of(topo, p, 0)
    assert set(e["UCX_NET_DEVICES"].split(",")) == {"mlx5_0:1", "mlx5_1:1"}
    assert e["UCX_MAX_RNDV_RAILS"] == e["UCX_MAX_EAGER_RAILS"] == "2"
    assert set(e["NCCL_IB_HCA"].lstrip("=").split(",")) == {"mlx5_0:1", "mlx5_1:1"}
    # the opt-out: one NIC per task, no rails variables
    one = P(topo, tasks=2, nic_rails=1)
    assert all(len(t.nics) == 1 for t in one.tasks)
    assert "UCX_MAX_RNDV_RAILS" not in env_of(topo, one, 0)


def test_karolina_eight_tasks_one_nic_each_on_their_switch():
    topo = nodes.karolina()
    p = P(topo, tasks=8)
    for t in p.tasks:
        (nic,) = t.nics
        assert set(t.gpus) <= set(nodes.KAROLINA_NIC_GPUS[nic])
    assert "UCX_MAX_RNDV_RAILS" not in env_of(topo, p, 0)


def test_perlmutter_reversed_gpu_order_with_nic_beside_gpu():
    topo = nodes.perlmutter()
    p = P(topo, tasks=4)
    assert [t.gpus for t in p.tasks] == [(3,), (2,), (1,), (0,)]
    assert [t.nics for t in p.tasks] == [("cxi3",), ("cxi2",), ("cxi1",), ("cxi0",)]
    assert env_of(topo, p, 0)["MPICH_OFI_NIC_POLICY"] == "GPU"


def test_leonardo_one_nic_per_rank():
    topo = nodes.leonardo()
    p = P(topo, tasks=4)
    assert [t.gpus for t in p.tasks] == [(0,), (1,), (2,), (3,)]
    assert [t.nics for t in p.tasks] == [("mlx5_0",), ("mlx5_1",), ("mlx5_2",), ("mlx5_3",)]
    assert [env_of(topo, p, k)["UCX_NET_DEVICES"] for k in range(4)] == [f"mlx5_{k}:1" for k in range(4)]


def test_nics_equally_far_are_spread_one_per_rank():
    # Leonardo's complaint: 4 NICs equally distant, UCX picked the first two for every rank
    topo = nodes.build(nodes.Spec(1, 1, 4, 8, nics=[nodes.Dev(0, name=f"mlx5_{k}") for k in range(4)]))
    p = P(topo, tasks=4)
    assert sorted(n for t in p.tasks for n in t.nics) == [f"mlx5_{k}" for k in range(4)]


# --- knobs -------------------------------------------------------------------------------------


def test_reserve_cores_keeps_the_first_core_of_each_socket_free():
    topo = nodes.karolina()  # x86 numbering: core c has PUs c and c+128
    p = P(topo, tasks=8, reserve_cores=1)
    used = CpuSet.union_all(t.cpus for t in p.tasks)
    assert used.isdisjoint(CpuSet([0, 128, 64, 192]))
    assert any("--reserve-cores 1" in n for n in p.notes)


def test_not_greedy_and_gpu_match_off():
    topo = nodes.karolina()
    assert [len(t.mems) for t in P(topo, tasks=2, greedy=False).tasks] == [1, 1]
    # GPU matching off: tasks go by PUs (NUMA 0, 1, ...), not to the GPUs' domains
    p = P(topo, tasks=8, spread_by="pus")
    assert [t.mems for t in p.tasks] == [CpuSet([i]) for i in range(8)]
