"""The node's shared plan: published once, read by the other ranks, trusted
only from a private folder, keyed on what was read, never fresh forever."""

import os
import subprocess
import sys
import textwrap
import time

import pytest

from nodemap.errors import NodemapError
from nodemap.mapping import plancache


@pytest.fixture
def folder(tmp_path, monkeypatch):
    d = tmp_path / "c"
    monkeypatch.setenv("NODEMAP_CACHE_DIR", str(d))
    return d


def test_round_trip_key_and_expiry(folder):
    fd = plancache.open_folder()
    try:
        key = plancache.fingerprint(("req",), None, {})
        assert plancache.load(fd, key, 100.0) is None
        plancache.save(fd, key, {"tasks": [1]}, 100.0)
        assert plancache.load(fd, key, 100.0)["tasks"] == [1]
        assert plancache.load(fd, key + "x", 100.0) is None  # another key never reads it
        assert plancache.load(fd, key, 100.0 + plancache.TTL + 1) is None  # too old
        assert plancache.load(fd, key, 99.0) is None  # made in the future: stale, not fresh forever
        assert plancache.fingerprint(("req",), None, {"CUDA_VISIBLE_DEVICES": "1"}) != key
    finally:
        os.close(fd)
    assert oct(os.stat(folder).st_mode & 0o777) == "0o700"


def test_future_mtime_does_not_keep_an_entry_alive(folder):
    fd = plancache.open_folder()
    try:
        key = "k"
        plancache.save(fd, key, {"tasks": []}, 1000.0)
        entry = folder / (plancache.entry_name(key) + ".bin")
        os.utime(entry, (4e9, 4e9))  # a modification time far in the future
        assert plancache.load(fd, key, 1000.0 + plancache.TTL + 1) is None
    finally:
        os.close(fd)


def test_planted_symlink_is_refused(tmp_path, monkeypatch):
    target = tmp_path / "victims-folder"
    target.mkdir(mode=0o700)
    link = tmp_path / "nodemap-link"
    link.symlink_to(target)
    monkeypatch.setenv("NODEMAP_CACHE_DIR", str(link))
    with pytest.raises(plancache.Refused, match="symbolic link"):
        plancache.open_folder()
    assert not list(target.iterdir())  # nothing written where the link points


def test_a_file_in_its_place_is_refused(tmp_path, monkeypatch):
    f = tmp_path / "notadir"
    f.write_text("")
    monkeypatch.setenv("NODEMAP_CACHE_DIR", str(f))
    with pytest.raises(plancache.Refused, match="not a folder"):
        plancache.open_folder()


def test_open_folder_makes_own_folder_private(folder):
    folder.mkdir(mode=0o755)
    os.chmod(folder, 0o777)
    os.close(plancache.open_folder())
    assert os.stat(folder).st_mode & 0o777 == 0o700


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to give the folder to another user")
def test_someone_elses_folder_is_refused(folder):
    folder.mkdir(mode=0o700)
    os.chown(folder, 12345, 12345)
    with pytest.raises(plancache.Refused, match="belongs to uid 12345"):
        plancache.open_folder()


def test_key_covers_files_inside_a_snapshot_folder(tmp_path):
    snap = tmp_path / "snap"
    (snap / "sys/devices/system/cpu").mkdir(parents=True)
    online = snap / "sys/devices/system/cpu/online"
    online.write_text("0-3\n")
    before = plancache.fingerprint(("r",), str(snap), {})
    st = os.stat(online)
    online.write_text("0-1\n")  # CPUs taken offline ...
    os.utime(online, ns=(st.st_atime_ns, st.st_mtime_ns))  # ... keeping the file's mtime
    os.utime(snap, ns=(os.stat(snap).st_atime_ns, os.stat(snap).st_mtime_ns))
    assert plancache.fingerprint(("r",), str(snap), {}) != before


def test_errors_are_published_to_the_other_ranks(folder):
    calls = []

    def bad():
        calls.append(1)
        raise NodemapError("9 tasks need 9 PUs")

    for _ in range(3):
        with pytest.raises(NodemapError, match="9 tasks need"):
            plancache.shared_plan("k", bad)
    assert len(calls) == 1


RANK = textwrap.dedent("""
    import os, sys, time
    from nodemap.mapping import plancache
    def make():
        with open(os.path.join(sys.argv[1], f"planned-{os.getpid()}"), "w"):
            pass
        time.sleep(0.3)  # a slow planner: the others must wait, not plan
        return {"tasks": [os.getpid()]}
    data, cached = plancache.shared_plan("key", make)
    print(data["tasks"][0], cached)
""")


def test_one_rank_plans_the_others_read(folder, tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    env = {**os.environ, "NODEMAP_CACHE_DIR": str(folder)}
    procs = [subprocess.Popen([sys.executable, "-c", RANK, str(marks)], env=env, stdout=subprocess.PIPE, text=True)
             for _ in range(8)]
    outs = [p.communicate(timeout=60)[0].split() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert len(list(marks.iterdir())) == 1  # planned once for the node
    assert len({o[0] for o in outs}) == 1  # every rank got that one plan
    assert sorted(o[1] for o in outs) == ["False"] + ["True"] * 7


def test_when_the_planning_rank_dies_unpublished_one_waiter_plans(folder, tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    env = {**os.environ, "NODEMAP_CACHE_DIR": str(folder)}
    fd = plancache.open_folder(str(folder))
    holder = plancache.NodeLock(fd, "key")  # a planning rank that will vanish without publishing
    assert holder.take()
    try:
        procs = [subprocess.Popen([sys.executable, "-c", RANK, str(marks)], env=env, stdout=subprocess.PIPE,
                                  text=True) for _ in range(4)]
        time.sleep(0.5)
        assert not list(marks.iterdir())  # they wait on the lock, not plan
    finally:
        holder.close()
        os.close(fd)
    outs = [p.communicate(timeout=60)[0].split() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert len(list(marks.iterdir())) == 1 and len({o[0] for o in outs}) == 1


def test_run_with_a_planted_link_says_so_in_one_line_and_runs(tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir()
    link = tmp_path / "link"
    link.symlink_to(target)
    env = {**os.environ, "NODEMAP_CACHE_DIR": str(link)}
    r = subprocess.run([sys.executable, "-m", "nodemap.cli", "run", "--local-rank", "0", "--local-size", "1", "--",
                        "true"], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "symbolic link" in lines[0] and "NODEMAP_CACHE_DIR" in lines[0]
    assert not list(target.iterdir())


def test_publishing_prunes_what_is_long_expired(folder):
    fd = plancache.open_folder()
    try:
        plancache.save(fd, "old", {"tasks": []}, 1000.0)
        plancache.NodeLock(fd, "old").close()
        for n in os.listdir(folder):
            os.utime(folder / n, (1000.0, 1000.0))
        plancache.save(fd, "new", {"tasks": []}, 1000.0 + 7 * plancache.TTL)
        names = os.listdir(folder)
        assert names == [plancache.entry_name("new") + ".bin"]
    finally:
        os.close(fd)


def test_a_namespaces_rail_going_down_changes_the_key(rails_namespace):
    """In a network namespace the NICs the planner counts are its veths: a rail that lost its carrier
    is another key (the key read RDMA ports only, so a test cluster's node, whose cache folder the
    other nodes share, planned with a rail that was down: its rank failed MPI_Init, 2026-12-02)."""
    ns, ends = rails_namespace
    code = "from nodemap.mapping import plancache; print(repr(plancache.fingerprint(('r',), None, {})))"

    def key() -> str:
        return subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", code], capture_output=True,
                              text=True, check=True, timeout=60).stdout

    up = key()
    assert "rail1:up" in up and key() == up
    subprocess.run(["ip", "link", "set", ends[1], "down"], check=True, timeout=30)
    assert key() != up
