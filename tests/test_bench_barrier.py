"""The barrier before each repetition (nodemap.bench.barrier): real rank
processes, started as `compare` starts them (its pipes) or by mpiexec (the
mpich wheel: an MPI barrier), start each repetition together although each
does a different amount of work before it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nodemap.bench import barrier

REPS = 5
BOUND = 0.15  # s: the latest rank's start of a repetition after the earliest's (2 loaded vCPUs)

# A rank: before each repetition it works (sleeps) longer the higher its rank,
# so without a barrier rank 2's repetition 5 starts ~1.2 s after rank 0's.
RANK = """
import json, os, sys, time
from nodemap.bench import barrier
rank, stop_after = int(sys.argv[1]), int(sys.argv[2])
starts = []
for i in range({reps}):
    if i == stop_after:
        sys.exit(0)
    time.sleep(0.02 + 0.06 * rank * (i + 1) / {reps})
    barrier.wait()
    starts.append(time.clock_gettime(time.CLOCK_MONOTONIC))  # one clock for every process of the machine
    if rank == 9:
        time.sleep(60)  # hangs: the others must not wait forever
print(json.dumps(starts))
"""


def script(tmp_path: Path) -> Path:
    p = tmp_path / "rank.py"
    p.write_text(RANK.format(reps=REPS))
    return p


def ranks(tmp_path, which, stop_after=None, seconds=30.0, with_barrier=True):
    """Start one process per rank in `which` as compare does; their outputs and exit codes."""
    path = script(tmp_path)
    c = barrier.Coordinator(len(which), seconds)
    procs = []
    for i, rank in enumerate(which):
        env = {k: v for k, v in os.environ.items() if k != barrier.ENV}
        env.update(c.env(i) if with_barrier else {})
        stop = (stop_after or {}).get(rank, REPS)
        procs.append(subprocess.Popen([sys.executable, str(path), str(rank), str(stop)], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      pass_fds=c.fds(i) if with_barrier else ()))
    if with_barrier:
        c.started()
    got = [p.communicate(timeout=90) + (p.returncode,) for p in procs]
    if with_barrier:
        c.close()
    return got, c


def lag(outs):
    """Per repetition: the latest rank's start minus the earliest's."""
    starts = [json.loads(o) for o, _, code in outs if code == 0 and o.strip()]
    return [max(s[i] for s in starts) - min(s[i] for s in starts) for i in range(min(map(len, starts)))]


def test_ranks_start_each_repetition_together(tmp_path):
    got, c = ranks(tmp_path, [0, 1, 2])
    assert all(code == 0 for _, _, code in got), got
    lags = lag(got)
    assert len(lags) == REPS and max(lags) < BOUND, lags
    assert len(c.releases) == REPS
    # the same ranks without it drift apart: the bound above is not met by chance
    free, _ = ranks(tmp_path, [0, 1, 2], with_barrier=False)
    assert max(lag(free)) > 2 * BOUND, lag(free)


def test_a_rank_that_ends_early_does_not_hold_the_others(tmp_path):
    got, c = ranks(tmp_path, [0, 1, 2], stop_after={1: 2})
    assert [code for *_, code in got] == [0, 0, 0]
    assert len(json.loads(got[0][0])) == REPS and len(json.loads(got[2][0])) == REPS
    assert max(lag([got[0], got[2]])) < BOUND


def test_a_hung_rank_ends_the_others_by_the_deadline(tmp_path):
    t0 = time.monotonic()
    path = script(tmp_path)
    c = barrier.Coordinator(2, 2.0)
    procs = [subprocess.Popen([sys.executable, str(path), str(r), str(REPS)], env=dict(os.environ, **c.env(i)),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, pass_fds=c.fds(i))
             for i, r in enumerate([0, 9])]
    c.started()
    out, err = procs[0].communicate(timeout=30)
    assert procs[0].returncode == 2 and time.monotonic() - t0 < 20
    assert "the other ranks did not reach repetition 2 within 2 s" in err and "Traceback" not in err
    procs[1].kill()
    procs[1].communicate()
    c.close()


def test_no_barrier_asked_is_no_wait(monkeypatch):
    monkeypatch.delenv(barrier.ENV, raising=False)
    monkeypatch.setattr(barrier, "_read", False)
    monkeypatch.setattr(barrier, "_pipes", None)
    t0 = time.monotonic()
    for _ in range(100):
        barrier.wait()
    assert not barrier.active() and time.monotonic() - t0 < 0.5


@pytest.mark.parametrize("text", ["zz", "3,4", "mpi,x", "a,b,c"])
def test_a_malformed_barrier_variable_is_one_line_not_a_traceback(monkeypatch, text):
    from nodemap.errors import NodemapError

    monkeypatch.setenv(barrier.ENV, text)
    monkeypatch.setattr(barrier, "_read", False)
    monkeypatch.setattr(barrier, "_pipes", None)
    with pytest.raises(NodemapError, match=f"{barrier.ENV}=.*unset {barrier.ENV}"):
        barrier.active()


def test_mpi_ranks_start_each_repetition_together(tmp_path):
    """Ranks that are MPI processes (mpiexec from the mpich wheel): ENV=mpi,S, an MPI barrier."""
    from test_mpi_run import _mpiexec  # the mpich wheel's mpiexec beside this Python

    mpiexec = _mpiexec()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMP_", "SLURM_", "OMPI_", "PMI_"))}
    env[barrier.ENV] = "mpi,30"
    # each rank's own index: mpich's PMI_RANK, read in the script via the launcher's variable
    path = tmp_path / "mpirank.py"
    out = tmp_path / "starts"
    path.write_text("import os, sys\nsys.argv = [sys.argv[0], os.environ['PMI_RANK'], '99']\n"
                    + RANK.format(reps=REPS).replace("print(json.dumps(starts))",
                                                     f"open('{out}' + str(rank), 'w').write(json.dumps(starts))"))
    r = subprocess.run([mpiexec, "-n", "3", sys.executable, str(path)], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    starts = [json.loads(Path(f"{out}{rank}").read_text()) for rank in range(3)]
    lags = [max(s[i] for s in starts) - min(s[i] for s in starts) for i in range(REPS)]
    assert max(lags) < BOUND, lags


def test_the_driver_waits_before_each_timed_repetition_and_runs_native_batches_one_by_one(monkeypatch):
    """With a barrier set (a rank of `compare`), the one timing loop waits
    before every timed repetition, not the warm-up; a native batch case
    (all repetitions in one call otherwise) is asked one at a time."""
    from nodemap.bench import driver
    from nodemap.bench.results import make_result

    log = []
    monkeypatch.setattr(barrier, "wait", lambda: log.append("wait"))
    monkeypatch.setattr(barrier, "active", lambda: True)

    class Plain(driver.Case):
        def run(self):
            log.append("run")
            return 1.0

        def results(self, samples):
            return [make_result("fake", "plain", "s", samples, verified=True)]

    driver.measure_case(Plain(), driver.Repeats(count=3, warmup=1))
    assert log == ["run"] + ["wait", "run"] * 3

    class Native(driver.Case):
        def runs(self, n):
            log.append(f"runs {n}")
            return [1.0] * n

        def results(self, samples):
            return [make_result("fake", "native", "s", samples, verified=True)]

    log.clear()
    assert driver.measure_case(Native(), driver.Repeats(count=4))[0].stats.n == 4
    assert log == ["wait", "runs 1"] * 4
    monkeypatch.setattr(barrier, "active", lambda: False)  # a plain `nodemap bench`: one native call
    log.clear()
    driver.measure_case(Native(), driver.Repeats(count=4))
    assert log == ["wait", "runs 4"]
