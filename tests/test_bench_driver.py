"""The one driver of every bench kind (bench/driver.py), on a fake kind:
warm-up, fixed and adaptive repetitions, the per-case budget, interruption
that keeps what was measured, typed measure."""

from __future__ import annotations

import dataclasses
import json
import time
import types
from dataclasses import dataclass

import pytest

from nodemap.bench import driver, interrupt, options
from nodemap.commands import bench as bench_cli
from nodemap.bench.driver import Case, Common, Plan, Repeats
from nodemap.bench.harness import Stopped
from nodemap.bench.results import Failure
from nodemap.bench.kinds import BENCHES
from nodemap.errors import NodemapError
from nodemap.bench.results import make_result


class Fake(Case):
    """Returns the next of `values` per run; counts every call."""

    def __init__(self, values, label="fake", stop_after=None):
        self.values = list(values)
        self.label = label
        self.calls: list[str] = []
        self.stop_after = stop_after

    def setup(self):
        self.calls.append("setup")

    def run(self):
        self.calls.append("run")
        if self.stop_after is not None and self.calls.count("run") >= self.stop_after:
            interrupt.request()
        return self.values[(self.calls.count("run") - 1) % len(self.values)]

    def verify(self):
        self.calls.append("verify")

    def results(self, samples):
        return [make_result("fake", self.label, "s", samples, verified=True)]

    def teardown(self):
        self.calls.append("teardown")


@pytest.fixture(autouse=True)
def _clear_stop():
    interrupt.reset()
    yield
    interrupt.reset()


class HalfSetup(Fake):
    """Takes a resource, then fails; its teardown fails too when nothing was taken."""

    def __init__(self, take: bool):
        super().__init__([1.0])
        self.take = take
        self.held = False

    def setup(self):
        self.calls.append("setup")
        self.held = self.take
        raise NodemapError("setup failed: out of device memory")

    def teardown(self):
        self.calls.append("teardown")
        if not self.held:
            raise AttributeError("nothing to free")
        self.held = False


def test_a_setup_that_fails_half_way_is_torn_down_and_its_error_kept():
    c = HalfSetup(take=True)
    with pytest.raises(NodemapError, match="out of device memory"):
        driver.measure_case(c, Repeats(count=2, warmup=1))
    assert c.calls == ["setup", "teardown"] and not c.held
    early = HalfSetup(take=False)  # its teardown raises: the setup's error is still the one raised
    with pytest.raises(NodemapError, match="out of device memory"):
        driver.measure_case(early, Repeats(count=2, warmup=1))


def test_a_case_shows_its_first_best_unless_it_says_its_label_alone():
    # the cases whose first Result is one of many (GPU STREAM kernels, MPI sizes, placement) say the label alone
    from nodemap.bench.app.placement import Lookups
    from nodemap.bench.comm.mpi_p2p import MultirailCase, PairCase
    from nodemap.bench.gpu.memory import Stream

    r = make_result("memory", "triad", "GB/s", [12.5, 12.0], verified=True)
    case = Case()
    case.label = "triad"
    assert (case.progress([]), case.progress([r])) == ("triad", "triad: 12.5 GB/s")
    for cls in (Lookups, PairCase, MultirailCase, Stream):
        alone = cls.__new__(cls)
        alone.label = "triad"
        assert alone.progress([r]) == "triad", cls


def test_warmup_then_the_fixed_count_then_verify_once():
    c = Fake([1.0, 2.0, 3.0])
    got = driver.measure_case(c, Repeats(count=4, warmup=2))
    assert c.calls == ["setup"] + ["run"] * 6 + ["verify", "teardown"]
    # the two warm-up runs (1.0, 2.0) are not samples
    assert got[0].samples == (3.0, 1.0, 2.0, 3.0)


def test_adaptive_stops_once_the_median_interval_is_tight():
    tight = Fake([1.0, 1.001, 0.999])
    got = driver.measure_case(tight, Repeats(count=50, warmup=0, width=0.01, least=6))
    assert got[0].stats.n == 6  # the first count with a 95% order-statistic interval
    loose = Fake([1.0, 2.0, 0.5])
    got = driver.measure_case(loose, Repeats(count=20, warmup=0, width=0.01, least=6))
    assert got[0].stats.n == 20  # never tight: the most


def test_adaptive_from_common_options():
    p = driver.repeats_of(Common(repeats=30, adaptive=0.05))
    assert (p.count, p.least, p.width) == (30, 6, 0.05)
    assert driver.repeats_of(Common(repeats=5)).least == 5  # fixed: no early stop


def test_the_budget_ends_a_case_after_the_least():
    class Slow(Fake):
        def run(self):
            import time

            time.sleep(0.02)
            return super().run()

    c = Slow([1.0, 3.0])
    got = driver.measure_case(c, Repeats(count=100, warmup=0, least=3, budget_s=0.05))
    assert 3 <= got[0].stats.n < 10


def test_interruption_keeps_what_was_measured_and_says_so():
    c = Fake([1.0], stop_after=3)  # the 3rd run (1 warm-up + 2 timed) asks to stop
    got = driver.measure_case(c, Repeats(count=10, warmup=1))
    assert got[0].stats.n == 2
    assert "interrupted after 2 of 10 repetitions" in got[0].notes
    assert c.calls[-1] == "teardown"


def test_interrupted_in_the_warmup_measures_nothing_and_tears_down():
    c = Fake([1.0], stop_after=1)
    with pytest.raises(Stopped):
        driver.measure_case(c, Repeats(count=10, warmup=1))
    assert c.calls == ["setup", "run", "teardown"]


def test_a_batched_case_gets_its_count_in_one_native_call_or_rounds_when_adaptive():
    class Native(Case):
        label = "native"

        def __init__(self):
            self.asked = []

        def runs(self, n):
            self.asked.append(n)
            return [1.0] * n

        def results(self, samples):
            return [make_result("fake", "native", "s", samples, verified=True)]

    c = Native()
    assert driver.measure_case(c, Repeats(count=7))[0].stats.n == 7 and c.asked == [7]
    c = Native()
    assert driver.measure_case(c, Repeats(count=20, width=0.01, least=6))[0].stats.n == 6 and c.asked == [6]


def test_a_zero_time_is_refused():
    with pytest.raises(RuntimeError, match="timer returned"):
        driver.measure_case(Fake([0.0]), Repeats(count=2, warmup=0))


# --- a whole fake kind through main and measure ------------------------------------------


@dataclass(frozen=True, kw_only=True)
class FakeOptions(Common):
    repeats: int = 3
    values: tuple = (1.0, 2.0)


def _fake_kind():
    mod = types.ModuleType("fake_kind")
    mod.Options = FakeOptions

    def plan(opts):
        return Plan("bench fake", [Fake(opts.values, "a"), Fake(opts.values, "b")],
                    text=lambda rs: f"{len(rs.results)} results", messages=["hello"],
                    after=lambda rs: [f"after {len(rs.results)}"])

    mod.plan = plan
    return mod


def test_measure_takes_typed_options_not_argv():
    rs = driver.measure(_fake_kind(), FakeOptions(repeats=4, values=(2.0,)))
    assert [r.metric for r in rs.results] == ["a", "b"]
    assert all(r.stats.n == 4 for r in rs.results)
    assert rs.messages == ["hello", "after 2"] and rs.complete


def test_main_prints_and_saves_like_every_kind(tmp_path, capsys):
    args = types.SimpleNamespace(json=True, output=str(tmp_path / "r.json"), quiet=True, timeout=None,
                                 topology=None, repeats=2, values=(1.0,), unrelated=1)
    assert driver.main(_fake_kind(), args) == 0
    printed = json.loads(capsys.readouterr().out)
    saved = json.loads((tmp_path / "r.json").read_text())
    assert printed["results"] == saved["results"] and len(saved["results"]) == 2 and saved["complete"]


def test_options_reads_only_the_kinds_fields():
    args = types.SimpleNamespace(repeats=5, topology="t.json", timeout=None, values=(3.0,), json=True)
    assert driver.options(FakeOptions, args) == FakeOptions(repeats=5, topology="t.json", values=(3.0,))


def test_a_typed_steps_command_line_gives_back_the_same_options():
    """check shows (and compare passes to a child) argv_of(options): parsed
    by the kind's own parser it must be the same options."""
    import argparse

    from nodemap.bench.host import latency

    opts = latency.Options(dram_top_only=True, repeats=2, max_size="256K", adaptive=0.05, cpu=0)
    p = argparse.ArgumentParser()
    bench_cli.add_options(p, latency.Options)
    assert driver.options(latency.Options, p.parse_args(list(driver.argv_of(opts)))) == opts
    from nodemap.bench.comm import mpi_p2p

    opts = mpi_p2p.Options(pair=("0,1", "0,2"), multirail=True, iters_scale=0.3)  # a repeatable option
    p = argparse.ArgumentParser()
    bench_cli.add_options(p, mpi_p2p.Options)
    assert driver.options(mpi_p2p.Options, p.parse_args(list(driver.argv_of(opts)))) == opts


def test_argv_of_leaves_out_a_none_the_command_line_cannot_spell():
    """mpi's --timeout defaults to a value; None (what the kind reads as that
    default) gave `--timeout None`, which its parser refuses."""
    import argparse

    from nodemap.bench.comm import mpi_p2p

    argv = driver.argv_of(mpi_p2p.Options(timeout=None, multirail=True))
    assert argv == ("--multirail",)
    p = argparse.ArgumentParser()
    bench_cli.add_options(p, mpi_p2p.Options)
    assert driver.options(mpi_p2p.Options, p.parse_args(list(argv))) == mpi_p2p.Options(multirail=True)


def test_latency_measured_from_typed_options():
    from nodemap.bench.host import latency

    rs = driver.measure(latency, latency.Options(max_size="16K", repeats=2, loads=4096))
    assert [r.params["working_set"] for r in rs.results] == latency.sizes(16 << 10)
    assert all(r.stats.n == 2 and r.verified for r in rs.results)


def test_main_interrupted_keeps_the_finished_cases_saves_them_and_exits_130(tmp_path, capsys):
    mod = _fake_kind()
    mod.plan = lambda opts: Plan("bench fake", [Fake([1.0], "a"), Fake([1.0], "b", stop_after=2), Fake([1.0], "c")],
                                 text=lambda rs: "")
    args = types.SimpleNamespace(json=True, output=str(tmp_path / "r.json"), quiet=True, timeout=None,
                                 topology=None, repeats=3)
    assert driver.main(mod, args) == 130
    saved = json.loads((tmp_path / "r.json").read_text())
    # a: whole; b: its one timed repetition kept (stopped after warm-up + 1); c: never started
    assert [(r["metric"], r["stats"]["n"]) for r in saved["results"]] == [("a", 3), ("b", 1)]
    assert not saved["complete"] and any("interrupted" in m for m in saved["messages"])
    assert "interrupted after 1 of 3 repetitions" in saved["results"][1]["notes"]


def test_adaptive_and_budget_from_the_command_line(capsys):
    from nodemap import cli

    argv = ["bench", "latency", "--max-size", "4K", "--loads", "1024", "--repeats", "40", "--json", "-q"]
    assert cli.main(argv + ["--budget", "0.000001"]) == 0
    (r,) = json.loads(capsys.readouterr().out)["results"]
    assert r["stats"]["n"] == 3  # the budget is spent at once: the least, 3
    assert cli.main(argv[:-4] + ["--repeats", "200", "--json", "-q", "--adaptive", "0.999"]) == 0
    (r,) = json.loads(capsys.readouterr().out)["results"]
    # a 95% interval needs 6; the middle repetitions of a 4K chase lie within 99.9% of their median
    assert 6 <= r["stats"]["n"] < 200
    with pytest.raises(SystemExit) as e:
        cli.main(argv + ["--adaptive", "2"])
    assert e.value.code == 2 and "give a fraction between 0 and 1" in capsys.readouterr().err


@pytest.mark.parametrize("kind", list(BENCHES))
def test_every_kind_is_on_the_driver(kind):
    """commands/bench.py and driver.measure run a kind's plan(): the fallback for a kind's own run() is gone."""
    import importlib

    mod = importlib.import_module(BENCHES[kind][0])
    assert callable(getattr(mod, "plan", None)) and not hasattr(mod, "run"), kind


@pytest.mark.parametrize("kind", list(BENCHES))
def test_a_kinds_options_are_its_command_line_with_the_same_defaults(kind):
    """Every kind has typed Options (what check and compare build) whose
    fields are the options its parser offers (what a user types): each
    field's flag (options.flag) with the field's default and a help, and no
    other option but where the results go."""
    import argparse
    import importlib

    from nodemap.bench.kinds import BENCHES

    mod = importlib.import_module(BENCHES[kind][0])
    p = argparse.ArgumentParser()
    bench_cli.add_options(p, mod.Options)
    by_flag = {s: a for a in p._actions for s in a.option_strings}
    cli_only = {"help", "json", "output", "quiet"}
    offered = [f for f in dataclasses.fields(mod.Options) if f.name not in mod.Options.not_offered]
    for f in offered:
        a = by_flag[options.flag(f)]
        assert a.dest == f.name and a.help, f.name
        assert (tuple(a.default) if isinstance(a.default, list) else a.default) == f.default, f.name
    assert {a.dest for a in p._actions} - cli_only == {f.name for f in offered}
    # --adaptive/--budget are the driver's: not offered by a kind on run(), nor by mpi (each size's
    # repetitions are its own: --small-repeats; ranks stop only where they agree), nccl and ring (every
    # rank runs every repetition, which holds collectives: a rank's own clock must not end its case)
    ranks_repeat_together = kind in ("mpi", "nccl", "ring")
    assert ("adaptive" in mod.Options.not_offered) == (not hasattr(mod, "plan") or ranks_repeat_together)


def test_check_builds_typed_options_for_the_gpu_kinds_too():
    from nodemap.bench.comm import collectives
    from nodemap.bench.gpu import copies, memory
    from nodemap.bench.kinds import story
    from nodemap.bench.story import Node, Step

    def gpu_steps(level, gpus):
        node = Node(level, None, gpus)
        return {k: s for k in ("gpu", "copies", "nccl") for s in story(k).steps(node) if isinstance(s, Step)}

    steps = gpu_steps("quick", 2)
    assert steps["gpu"].options == memory.Options(dtype="float64", kernels="triad", no_aggregate=True, repeats=10)
    assert isinstance(steps["copies"].options, copies.Options)
    assert steps["nccl"].options.sizes == "256MiB:1GiB" and isinstance(steps["nccl"].options, collectives.Options)
    full = {k: s.options for k, s in gpu_steps("full", 1).items()}
    assert full == {"gpu": memory.Options(), "copies": copies.Options(latency=True)}


def test_a_case_that_cannot_run_here_is_skipped_with_its_reason():
    class Unfit(Fake):
        def setup(self):
            raise driver.Skipped("s=1 replicate-all: skipped: does not fit")

    mod = types.ModuleType("fake_kind")
    mod.Options = FakeOptions
    mod.plan = lambda opts: Plan("bench fake", [Unfit([1.0], "a"), Fake([1.0], "b")], text=str)
    rs = driver.measure(mod, FakeOptions())
    assert [r.metric for r in rs.results] == ["b"] and rs.messages == ["s=1 replicate-all: skipped: does not fit"]


def test_a_gpu_kind_measured_from_typed_options_without_a_gpu_says_so(monkeypatch):
    from nodemap.bench.gpu import memory
    from nodemap.errors import NodemapError

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(NodemapError):  # no GPU here: the kind's own one-line error
        driver.measure(memory, memory.Options(repeats=1))


@pytest.mark.parametrize("probe", ["stream", "h2d", "gpu", "jacobi"])
def test_compares_probes_are_typed_options_on_the_child_command_line(probe):
    """Each probe's command line, parsed by its kind's own parser, gives back its typed options."""
    import argparse
    import importlib

    from nodemap.bench.kinds import BENCHES
    from nodemap.compare import probes
    from nodemap.mapping.request import TaskBinding
    from nodemap.topology.cpuset import CpuSet

    t = TaskBinding(0, CpuSet([0, 1]), CpuSet(), gpus=(0,), threads=2)
    kind, opts = probes.options(probe, t, "64M")
    cmd = probes.argv(probe, t, "64M")
    mod = importlib.import_module(BENCHES[kind][0])
    p = argparse.ArgumentParser()
    bench_cli.add_options(p, mod.Options)
    assert cmd[0] == kind and driver.options(type(opts), p.parse_args(cmd[1:])) == opts


class Rank(Fake):
    """A case of ranks that run a plan together: `stop` is the case's own (its pair agreeing),
    `gather` collects into `sent` (as MPI ranks send their Results to rank 0)."""

    def __init__(self, values, label, sent, mine=True, stop_in_warmup=False):
        super().__init__(values, label)
        self.mine, self.sent, self.stop_in_warmup = mine, sent, stop_in_warmup

    def stop(self):
        return self.stop_in_warmup

    def gather(self, results):
        self.sent.append((self.label, len(results)))
        return results


def test_ranks_running_together_stop_a_case_alone_and_end_where_they_agree(tmp_path, capsys):
    """bench mpi's ranks: a pair that agreed to stop in its warm-up ends only its case (every rank
    still reaches the gather), a case of other ranks is not measured here, the agreed stop ends the
    run, and a rank other than the root neither prints nor saves."""
    sent: list = []
    agreed = {"stop": False}
    cases = [Rank([1.0], "a", sent, stop_in_warmup=True), Rank([1.0], "b", sent, mine=False),
             Rank([1.0], "c", sent), Rank([1.0], "d", sent)]
    cases[2].gather = lambda results: (sent.append(("c", len(results))), agreed.update(stop=True), results)[2]
    mod = _fake_kind()
    for root in (True, False):
        sent.clear()
        agreed["stop"] = False
        mod.plan = lambda opts: Plan("bench fake", cases, text=lambda rs: "", stop=lambda: agreed["stop"],
                                     root=root, together=True)
        args = types.SimpleNamespace(json=True, output=str(tmp_path / f"{root}.json"), quiet=False, timeout=None,
                                     topology=None, repeats=2)
        assert driver.main(mod, args) == 130
        assert sent == [("a", 0), ("b", 0), ("c", 1)]  # d: after the agreed stop
        assert cases[1].calls == []  # another rank's case: nothing measured here
        out = capsys.readouterr()
        assert bool(out.out) == root and (tmp_path / f"{root}.json").exists() == root


class Hangs(Fake):
    """Its second case's repetition never returns by itself (a hung kernel, a lost device)."""

    def run(self):
        self.calls.append("run")
        if self.label == "b":
            time.sleep(8)
        return 1.0


def test_timeout_ends_a_repetition_that_never_returns_and_keeps_the_finished_cases(tmp_path, capsys):
    # was: --timeout only raised the stop flag, which a repetition stuck in one call never reads: the
    # run went on as long as the call (here 8 s; a hung kernel: for ever)
    mod = _fake_kind()
    mod.plan = lambda opts: Plan("bench fake", [Hangs([1.0], "a"), Hangs([1.0], "b"), Hangs([1.0], "c")],
                                 text=lambda rs: "")
    args = types.SimpleNamespace(json=True, output=str(tmp_path / "r.json"), quiet=True, timeout=0.5,
                                 topology=None, repeats=2)
    t0 = time.monotonic()
    assert driver.main(mod, args) == 2
    assert time.monotonic() - t0 < 5
    saved = json.loads((tmp_path / "r.json").read_text())
    assert [r["metric"] for r in saved["results"]] == ["a"] and not saved["complete"]
    assert any("ran longer than --timeout 0.5 s" in m for m in saved["messages"])


class WrongHalo(Fake):
    def verify(self):
        self.calls.append("verify")
        raise driver.PartFailed(Failure("fake", self.label, f"fake {self.label} halos", "the single-GPU run's field",
                                        "differs", transport="peer", message=f"{self.label}: differs: the halo "
                                        "exchange is wrong; no time reported"))


@pytest.mark.parametrize("root", [True, False])
def test_a_part_with_wrong_output_is_left_out_and_the_run_goes_on_incomplete_exit_1(tmp_path, capsys, root):
    """bench jacobi's variant whose halo is wrong: its typed failure (check/failed.py judges it) and
    its message as the kind words it, no Result, the other cases still run; every rank exits 1 (mpiexec ORs the ranks'
    statuses: 1 from the root and 130 from the others was 131)."""
    mod = _fake_kind()
    cases = [WrongHalo([1.0], "a"), Fake([1.0], "b")]
    mod.plan = lambda opts: Plan("bench fake", cases, text=lambda rs: "", root=root, together=not root)
    args = types.SimpleNamespace(json=True, output=str(tmp_path / "r.json"), quiet=True, timeout=None,
                                 topology=None, repeats=2)
    assert driver.main(mod, args) == 1
    assert cases[0].calls[-1] == "teardown" and cases[1].calls.count("run") == 3
    if root:
        saved = json.loads((tmp_path / "r.json").read_text())
        assert [r["metric"] for r in saved["results"]] == ["b"] and not saved["complete"]
        assert saved["messages"] == ["a: differs: the halo exchange is wrong; no time reported"]
        assert [(f["kind"], f["part"], f["transport"]) for f in saved["failures"]] == [("fake", "a", "peer")]


class Slow(Fake):
    def run(self):
        time.sleep(0.3)
        return 1.0


def test_a_plan_whose_cases_bound_their_own_steps_has_no_timeout_watchdog(tmp_path, capsys):
    """bench jacobi bounds each case with its own deadline (one line, the process ended): the
    session's --timeout watchdog would race it with another ending and message."""
    mod = _fake_kind()
    for bounded, code in ((False, 2), (True, 0)):
        mod.plan = lambda opts: Plan("bench fake", [Slow([1.0], "a"), Slow([1.0], "b")], text=lambda rs: "",
                                     bounded=bounded)
        args = types.SimpleNamespace(json=True, output=None, quiet=True, timeout=0.5, topology=None, repeats=1)
        assert driver.main(mod, args) == code
        capsys.readouterr()


GIL_HELD_KIND = """
import ctypes, sys, types
from nodemap.bench import driver, harness
from nodemap.bench.driver import Case, Common, Plan
from nodemap.bench.results import make_result

harness.TIMEOUT_KILL = 1.0  # s past --timeout before the forked watchdog ends the process (10 s by default)

class Held(Case):
    label = "held"
    def run(self):
        ctypes.PyDLL(None).sleep(20)  # keeps the GIL: no thread of this process runs until it returns
        return 1.0
    def results(self, samples):
        return [make_result("held", "held", "s", samples, verified=True)]

mod = types.ModuleType("held_kind")
mod.Options = Common
mod.plan = lambda opts: Plan("bench held", [Held()], text=str)
args = types.SimpleNamespace(json=True, output=None, quiet=True, timeout=0.5, topology=None, repeats=1)
sys.exit(driver.main(mod, args))
"""


def test_timeout_ends_a_process_a_call_holding_the_gil_keeps_from_stopping():
    import subprocess
    import sys

    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-c", GIL_HELD_KIND], capture_output=True, text=True, timeout=60)
    took = time.monotonic() - t0
    assert took < 10, (took, p.stderr)  # 0.5 s + 1 s, not the call's 20 s
    assert p.returncode != 0 and "--timeout 0.5" in p.stderr and "Traceback" not in p.stderr, p.stderr


def test_a_failed_verification_names_its_case_and_fails_as_a_part(monkeypatch):
    """A case's VerificationFailed leaves the driver with the case's label
    (its class kept), after teardown; exit 1 ("a part failed"), not 2 (bad input)."""

    class Wrong(Fake):
        def verify(self):
            raise Checksum("the sums differ")

    class Checksum(driver.VerificationFailed):
        pass

    case = Wrong([1.0], label="s=1.0 copies")
    monkeypatch.setattr(case, "teardown", lambda: case.calls.append("teardown"))
    with pytest.raises(Checksum, match=r"^verification failed: s=1.0 copies: the sums differ$") as got:
        driver.measure_case(case, Repeats(count=2, warmup=0))
    assert got.value.exit_code == 1 and got.value.reason == "the sums differ" and case.calls[-1] == "teardown"
    assert isinstance(got.value, NodemapError)
