"""Issue 26, poor list: work that grew with the input past any need."""

from __future__ import annotations

import os

from hostile import env, nodemap
from nodemap.mapping import plancache


def test_the_cache_key_of_an_input_folder_is_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(plancache, "MAX_IDENTITY", 50)
    small = tmp_path / "small"
    small.mkdir()
    for i in range(10):
        (small / f"f{i}").write_text("x")
    assert len(plancache.input_identity(str(small))) == 10
    for i in range(60):
        (small / f"g{i}").write_text("x")
    one, = plancache.input_identity(str(small))  # not cached: a key of its own, every time
    assert "over 50 entries" in one and one != plancache.input_identity(str(small))[0]


def test_run_input_root_does_not_walk_the_file_tree(tmp_path):
    """`--input /` (the live machine read through its root) once walked
    every file for the plan cache's key: 22 s on the 2-vCPU CI VM."""
    r = nodemap("run", "--local-rank", "0", "--local-size", "1", "--input", "/", "--dry-run", "--", "true",
                env_=env(tmp_path))
    assert r.returncode == 0, r.stderr
    assert r.seconds < 8


def test_a_core_far_up_a_big_node_costs_its_bits_not_the_whole_range():
    """`topo` of 100,000 PUs parsed each core's "i,j" into a byte array of
    the whole range and formatted each set through a text of every bit:
    quadratic (84.5 s, now 9.7 s on the 2-vCPU CI VM, the same output).
    At the top of the range: 1000 sets took 8 s, now well under 1."""
    import time

    from nodemap.topology.cpuset import MAX_INDEX, CpuSet

    t0 = time.perf_counter()
    for i in range(1000):
        assert CpuSet.parse(f"{i},{MAX_INDEX - i}").ranges() == [(i, i), (MAX_INDEX - i, MAX_INDEX - i)]
    assert time.perf_counter() - t0 < 3.0
    assert CpuSet.parse("5,7,8,9,1000000").ranges() == [(5, 5), (7, 9), (1000000, 1000000)]
    assert CpuSet.parse("4096-4099,5000:2").ranges() == [(4096, 4099), (5000, 5000)]


def _timelines(n: int):
    from nodemap.watch import timeline

    out = []
    for r in range(n):
        header = timeline.Header("nodemap.watch/1", host=f"n{r // 4}", job="7", rank=r, pid=1000 + r, start=1.0,
                                 mem_total=1 << 36, planned_gpus=[r % 4])
        tl = timeline.Timeline(f"n{r // 4}.r{r}.watch", header)
        tl.gpus = [timeline.Gpu(r % 4, name="H100", total=80 << 30)]
        for t in range(8):
            for column, v in zip((tl.t, tl.rss, tl.avail, tl.own, tl.used, tl.others),
                                 (float(t), 1 << 30, 1 << 35, [1 << 30], [2 << 30], [0])):
                column.append(v)
        out.append(tl)
    return out


def test_report_of_3000_timelines_is_not_quadratic():
    """Each rank's peers were found by a scan of every timeline (twice):
    `report` of 3,000 timelines took 40.3 s (10.8 s CPU), now 3.1 s (1.5 s)
    on the 2-vCPU CI VM, the same output."""
    import time

    from nodemap.check import expectations
    from nodemap.watch import analysis

    tls = _timelines(3000)
    t0 = time.process_time()
    a = analysis.analyse(tls, expectations.shipped().table(expectations.WatchRules))
    assert time.process_time() - t0 < 1.5  # was 5 s of CPU
    assert len(a.ranks) == 3000 and len(a.gpus) == 3000 and not a.findings


def test_a_stuck_plan_lock_holder_is_said_not_waited_on_in_silence(tmp_path, monkeypatch):
    """A rank that holds the node's planning lock and never publishes cost
    every other rank 60 s of silence: the wait is said after LOCK_NOTICE,
    and so is planning here after LOCK_WAIT."""
    monkeypatch.setenv("NODEMAP_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(plancache, "LOCK_WAIT", 0.6)
    monkeypatch.setattr(plancache, "LOCK_NOTICE", 0.2)
    fd = plancache.open_folder()
    holder = plancache.NodeLock(fd, "key")
    assert holder.take()
    said: list[str] = []
    try:
        import threading

        threading.Timer(2.0, holder.close).start()  # the stuck holder ends at last
        data, cached = plancache.shared_plan("key", lambda: {"plan": 1}, say=said.append)
    finally:
        os.close(fd)
    assert data == {"plan": 1} and not cached
    assert len(said) == 2 and "waiting for the node's plan" in said[0] and "up to 0.6 s" in said[0]
    assert str(tmp_path / "cache") in said[0] and "did not publish a plan in 0.6 s" in said[1]
