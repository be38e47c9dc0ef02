"""The placement benchmark's pure parts, on the CPU: per-GPU rates and --gpus."""

from types import SimpleNamespace

import pytest

from nodemap.bench import driver, options
from nodemap.bench.app import placement as pb
from nodemap.errors import NodemapError


def test_per_gpu_rates_are_medians_of_each_gpus_own_time():
    # three repetitions, two GPUs: GPU 1 always twice as slow
    per_gpu = [[1.0, 2.0], [0.5, 1.0], [2.0, 4.0]]
    assert pb.per_gpu_rates(100, per_gpu) == [100.0, 50.0]


def _cp(n):
    return SimpleNamespace(cuda=SimpleNamespace(runtime=SimpleNamespace(getDeviceCount=lambda: n)))


@pytest.mark.parametrize("spec, words", [("0,0", "twice"), ("0,2", "0-1"), ("a,b", "ordinals")])
def test_bad_gpu_lists_are_named(spec, words):
    with pytest.raises(NodemapError, match=words):
        options.gpus(spec, _cp(2).cuda.runtime.getDeviceCount())


def test_gpu_lists():
    assert options.gpus(None, 3) == [0, 1, 2]
    assert options.gpus("2,0", 3) == [2, 0]


class _FakeBench:
    """A Bench whose data and placement are stand-ins (no GPU): two GPUs."""

    def __init__(self, fits=True):
        self.fits, self.cp = fits, SimpleNamespace(get_default_memory_pool=lambda: SimpleNamespace(
            free_all_blocks=lambda: None))

    def data(self, s):
        return [], ["k0", "k1"], [10, 11]

    def prepare(self, strat, keys, expected, analysis, costs):
        if not self.fits:
            raise NodemapError("full replication does not fit the per-GPU budget")
        return pb.Tables([1, 1], [], costs={"first_iteration_s": 0.5})

    def _timed(self, tables, keys, expected, per_gpu):
        per_gpu.append([1.0, 2.0])
        return 2.0


def test_a_strategy_that_does_not_fit_is_skipped_with_its_reason():
    from nodemap.bench import driver

    with pytest.raises(driver.Skipped, match=r"^s=1.0 replicate-all: skipped: full replication does not fit"):
        pb.Lookups(_FakeBench(fits=False), 1.0, "replicate-all").setup()


def test_a_repetition_is_the_slowest_gpu_and_keeps_each_gpus_seconds():
    case = pb.Lookups(_FakeBench(), 0.0, "round-robin")
    case.setup()
    assert case.run() == (2.0, [1.0, 2.0]) and case.figure(case.run()) == 2.0
    case.teardown()
    assert case.t is None


def _gpu_standins(got):
    """A Bench on stand-ins for CuPy and the kernels: two GPUs whose gathers give `got`."""
    from contextlib import nullcontext

    arr = SimpleNamespace(data=SimpleNamespace(ptr=1), get=lambda: [got.pop(0)])
    event = SimpleNamespace(record=lambda: None, synchronize=lambda: None)
    cp = SimpleNamespace(
        uint64=int, empty=lambda *a, **k: arr, zeros=lambda *a, **k: SimpleNamespace(get=arr.get),
        get_default_memory_pool=lambda: SimpleNamespace(free_all_blocks=lambda: None),
        cuda=SimpleNamespace(Device=lambda dev: nullcontext(), Event=lambda: event,
                             get_elapsed_time=lambda a, b: 1.0, malloc_managed=lambda n: SimpleNamespace(ptr=4096)))
    b = object.__new__(pb.Bench)
    b.cp, b.rows, b.words, b._counts = cp, 4, 2, None
    b.cfg = SimpleNamespace(devices=[0, 1], table=64, lookups=3, budget=48, chunks=[16])
    b._fill = lambda *a, **k: None
    b._launch = lambda *a, **k: None
    b.data = lambda s: (["p0", "p1"], ["k0", "k1"], [10, 11])
    return b


def test_a_checksum_mismatch_is_a_failed_verification_not_a_crash_or_a_skip():
    # setup's checked gather: GPU 1 gathers 12 where the row formula says 11
    with pytest.raises(pb.ChecksumMismatch, match=r"^verification failed: the gathered rows' checksums \[10, 12\] "
                                                  r"differ from the row formula's \[10, 11\]"):
        pb.Lookups(_gpu_standins([10, 12]), 0.0, "copies").setup()
    assert issubclass(pb.ChecksumMismatch, NodemapError)  # what check records as the kind's failure


def test_a_checksum_that_changes_between_repetitions_fails_verification():
    case = pb.Lookups(_gpu_standins([10, 11, 10, 13]), 0.0, "copies")
    case.setup()
    with pytest.raises(pb.ChecksumMismatch, match=r"GPU 1: .*changed between repetitions \(13 != 11\)"):
        case.run()


HINTS_OFF = "allocation 0 +0 (16 B): preferred -2, last prefetch -2, read-mostly 0; expected 0"


@pytest.fixture
def hints_off(monkeypatch):
    """The CUDA driver reads back other hints than the plan set (apply_plan's verify)."""
    from nodemap.placement import apply

    monkeypatch.setattr(apply, "apply_plan", lambda plan, allocs, devices, check_memory=True: apply.ApplyReport(
        0.01, plan.layout.n_chunks, False, problems=[HINTS_OFF]))


def _placement_run(monkeypatch, strat="round-robin"):
    """`bench placement` plans one case of `strat` on the GPU stand-ins."""
    from nodemap.bench.driver import Plan

    monkeypatch.setattr(pb, "plan", lambda opts: Plan("bench placement", [pb.Lookups(_gpu_standins([]), 0.0, strat)],
                                                       pb.text))


def test_hints_not_in_effect_fail_verification_not_a_crash_or_a_skip(hints_off):
    """They were a bare RuntimeError: `check` said "crashed", a nodemap bug."""
    with pytest.raises(driver.VerificationFailed, match=r"^verification failed: placement hints not in effect "
                                                       r"after applying the plan \(allocation 0 \+0 .*expected 0\)"):
        pb.Lookups(_gpu_standins([]), 0.0, "round-robin").setup()


def test_a_profile_that_lost_accesses_fails_verification(monkeypatch):
    """The analysis strategies' profile: 2 GPUs x 3 lookups, 5 counted (was a bare RuntimeError)."""
    import numpy as np

    from nodemap.placement import profiler

    counts = SimpleNamespace(counts=np.array([[2, 1], [0, 2]]))
    monkeypatch.setattr(profiler, "Profiler", lambda layout, devices: SimpleNamespace(
        chunk_shift=4, counts_ptr=lambda g: 0, collect=lambda: counts))
    case = pb.Lookups(_gpu_standins([10, 11]), 1.0, "analysis chunk=16B rep=0", (16, None))
    with pytest.raises(driver.VerificationFailed, match=r"profiler lost accesses: it counted 5 for 6 lookups"):
        case.setup()


def test_a_run_whose_hints_are_not_in_effect_fails_with_the_case_named(monkeypatch, capsys, tmp_path, hints_off):
    """The driver's run names the case and its reason on one line, exit 1
    (docs/benchmarks.md: a part failed), never a traceback."""
    from nodemap import cli

    from nodemap.bench import resultfile

    _placement_run(monkeypatch)
    saved = tmp_path / "placement.json"
    assert cli.main(["bench", "placement", "-o", str(saved)]) == 1
    err = capsys.readouterr().err
    why = "verification failed: s=0.0 round-robin: placement hints not in effect after applying the plan"
    assert err.startswith(f"nodemap bench placement: error: {why} ({HINTS_OFF})")
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    rs = resultfile.decode(str(saved), saved.read_bytes())  # the file says why the run ended
    assert not rs.complete and not rs.results and [m for m in rs.messages if m.startswith(why)]
    [f] = rs.failures  # typed, for the check that judges it (check/failed.py)
    assert (f.kind, f.part, f.got) == ("placement", "hints", "not in effect") and f.message.startswith(why)


def _checked(monkeypatch, case):
    """`nodemap check` over one step, `bench placement` planning `case`,
    through check's own step runner (suite.measure, the driver)."""
    from nodemap.bench.driver import Plan
    from nodemap.check import expectations, node, suite

    monkeypatch.setattr(pb, "plan", lambda opts: Plan("bench placement", [case], pb.text))
    step = suite.Step("placement", (), "GPU data placement", pb.Options())
    monkeypatch.setattr(node, "plan", lambda topo, level, in_job=None: ([step], []))
    from nodemap.check.busy import Sample

    idle = Sample()
    detector = SimpleNamespace(sample=lambda seconds=0: idle, begin=lambda: None, end=lambda utilisation=False: idle)
    doc = node.run_check("quick", expectations.shipped(), detector=detector)
    assert doc.complete and not doc.results
    return doc, [s for s in doc.skipped if s.what == "GPU data placement (bench placement)"]


def test_check_fails_the_job_environment_for_placement_hints_not_in_effect(monkeypatch, hints_off):
    """Not the node's hardware (another process moving the pages, a driver
    ignoring the advice): a configuration failure, the node left healthy;
    it was a skipped step, then (before) a crashed kind."""
    from nodemap.check.document import HEALTHY, exit_status

    doc, skipped = _checked(monkeypatch, pb.Lookups(_gpu_standins([]), 0.0, "round-robin"))
    [c] = [c for c in doc.checks if c.key == "verification/placement/hints"]
    assert (c.verdict, c.cause, c.area) == ("fail", "configuration", "GPU memory") and not skipped
    assert c.rule.startswith("verification failed: s=0.0 round-robin: placement hints not in effect")
    assert HINTS_OFF in c.rule and "cudaMemAdvise" in c.fix
    assert doc.environment_verdict() == "fail" and doc.node_verdict() != "fail"
    # its one step measured no figure but was measured: the node not shown unhealthy, the job's
    # environment failed (exit 0, as any configuration finding; 2 failed a Slurm prolog, draining the node)
    assert exit_status(doc) == HEALTHY
    assert doc.environment_reasons() == ["GPU data placement hints"]


def test_check_fails_the_node_for_a_placement_checksum_mismatch(monkeypatch):
    """Rows gathered wrong: the GPUs' memory or links (the node), exit 1."""
    from nodemap.check.document import UNHEALTHY, exit_status

    doc, skipped = _checked(monkeypatch, pb.Lookups(_gpu_standins([10, 12]), 0.0, "copies"))
    [c] = [c for c in doc.checks if c.key == "verification/placement/checksum"]
    assert (c.verdict, c.cause) == ("fail", "hardware") and "differ from the row formula's" in c.rule
    assert not skipped and exit_status(doc) == UNHEALTHY
    assert [f.cause for f in doc.findings if c.key in f.keys] == ["hardware"]


def test_check_skips_a_placement_step_whose_profile_lost_accesses(monkeypatch):
    """The profiler's count says nothing of the node: skipped with the kind's line, never failed."""
    import numpy as np

    from nodemap.placement import profiler

    counts = SimpleNamespace(counts=np.array([[2, 1], [0, 2]]))
    monkeypatch.setattr(profiler, "Profiler", lambda layout, devices: SimpleNamespace(
        chunk_shift=4, counts_ptr=lambda g: 0, collect=lambda: counts))
    doc, [s] = _checked(monkeypatch, pb.Lookups(_gpu_standins([10, 11]), 1.0, "analysis chunk=16B rep=0", (16, None)))
    assert s.reason.startswith("verification failed: s=1.0 analysis chunk=16B rep=0: the profiler lost accesses")
    assert not [c for c in doc.checks if c.key.startswith("verification/")] and doc.node_verdict() != "fail"
