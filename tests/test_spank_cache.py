"""The plugin's plan cache (slurm/cache.c, written by mapping/spankcache.py), through
slurm/nodemap_apply, which takes the plan as the plugin does: a later step with
the same command line, environment and node reads it without Python; anything a
plan depends on that changes misses; an entry that is not whole, not this key's,
not fresh or not safely ours is never trusted."""

import os
import shutil
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest

from test_spank_apply import NODEMAP, driver  # noqa: F401  (the fixture)

CACHED = "nodemap: the node's plan: from its plan cache"
PLANNED = "nodemap: the node's plan: made by `nodemap plan`"
# what a task reports: its OpenMP places and the PUs it may run on
PROBE = ["sh", "-c", 'echo "$OMP_PLACES $(grep Cpus_allowed_list /proc/self/status | cut -f2)"']


@pytest.fixture
def cache(tmp_path) -> Path:
    folder = tmp_path / "cache"
    folder.mkdir(mode=0o700)
    return folder


def run(driver, cache, *options, env=None, before=(), nodemap=NODEMAP, ntasks=1):  # noqa: F811
    """(how the plan was had, what each task reported)."""
    p = subprocess.run([*before, driver, f"--nodemap-path={nodemap}", "--nodemap=verbose", *options, str(ntasks), "--",
                        *PROBE], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "NODEMAP_CACHE_DIR": str(cache), **(env or {})})
    assert p.returncode == 0, p.stderr
    how = [line for line in p.stderr.splitlines() if line.startswith("nodemap: the node's plan: ")]
    assert len(how) == 1, p.stderr
    return how[0], sorted(p.stdout.splitlines())


def entry_of(cache: Path) -> Path:
    (entry,) = [p for p in cache.iterdir() if p.name.startswith("spank-") and ".tmp" not in p.name]
    return entry


def test_a_later_run_takes_the_plan_without_starting_python(driver, cache, tmp_path):  # noqa: F811
    """0.24 s a step went to starting `nodemap plan` every time (benchmarks/results/spank_overhead.md)."""
    calls = tmp_path / "calls"
    counting = tmp_path / "nodemap"
    counting.write_text(f"#!/bin/sh\necho called >> {calls}\nexec {NODEMAP} \"$@\"\n")
    counting.chmod(0o755)
    first = run(driver, cache, nodemap=counting, ntasks=2)
    again = run(driver, cache, nodemap=counting, ntasks=2)
    assert (first[0], again[0]) == (PLANNED, CACHED) and first[1] == again[1]
    assert calls.read_text().splitlines() == ["called"]
    # the plan taken is the plan `nodemap plan` makes now
    lines = subprocess.run([NODEMAP, "plan", "--tasks", "2", "--emit", "tasks", "--oversubscribe"], capture_output=True,
                           text=True, check=True, timeout=60).stdout.splitlines()
    assert sorted(line.split("\t")[4].split("=", 1)[1] for line in lines) == [r.split()[0] for r in again[1]]


def sysfs_saying(path: str, value: str, folder: Path) -> list[str]:
    """A command prefix: run under a private mount namespace in which sysfs file `path` reads
    `value` (bind-mounted over it: nothing outside the namespace sees it)."""
    stand_in = folder / "sysfs-value"
    stand_in.write_text(value + "\n")
    return ["unshare", "-m", "--propagation", "private", "sh", "-c", 'mount --bind "$0" "$1" && shift && exec "$@"',
            str(stand_in), os.path.realpath(path)]


def a_pci_nic_up() -> str | None:
    """The operstate file of a network interface of a device whose link is up."""
    for name in sorted(os.listdir("/sys/class/net")):
        state = f"/sys/class/net/{name}/operstate"
        if "/virtual/" not in os.readlink(f"/sys/class/net/{name}") and Path(state).read_text().strip() == "up":
            return state
    return None


CHANGES = {
    "another request": dict(options=("--nodemap=threads=1,verbose",)),
    "other step cores": dict(options=("--cores=1",)),
    "GPU visibility set": dict(env={"CUDA_VISIBLE_DEVICES": "0"}),
    "GPU visibility emptied": dict(env={"CUDA_VISIBLE_DEVICES": ""}),
    "AMD visibility": dict(env={"ROCR_VISIBLE_DEVICES": "0"}),
    "fewer allowed CPUs": dict(before=("taskset", "-c", "0")),
}


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 PUs")
@pytest.mark.parametrize("change", sorted(CHANGES))
def test_what_the_plan_depends_on_changed_misses(driver, cache, change):  # noqa: F811
    base = run(driver, cache)
    assert run(driver, cache) == (CACHED, base[1])
    c = CHANGES[change]
    options = c.get("options", ())
    changed = run(driver, cache, *options, env={k: v for k, v in c.get("env", {}).items()}, before=c.get("before", ()))
    assert changed[0] == PLANNED
    assert run(driver, cache, *options, env=c.get("env"), before=c.get("before", ()))[0] == CACHED
    assert run(driver, cache) == (CACHED, base[1])  # the first entry is still there


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare (a mount namespace)")
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 PUs")
def test_a_cpu_taken_offline_misses(driver, cache, tmp_path):  # noqa: F811
    """sysfs's online list says CPU 1 is gone: the cached plan, which runs a task on it, is not taken."""
    base = run(driver, cache)
    assert "1" in base[1][0]
    offline = run(driver, cache, before=sysfs_saying("/sys/devices/system/cpu/online", "0", tmp_path))
    assert offline[0] == PLANNED and offline[1][0].startswith("{0} "), offline


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare (a mount namespace)")
def test_a_nic_whose_link_went_down_misses(driver, cache, tmp_path):  # noqa: F811
    """The plan names the NIC a task uses (NODEMAP_NIC...): a link gone down takes it out of the plan."""
    state = a_pci_nic_up()
    if not state:
        pytest.skip("no network interface of a device with its link up")
    run(driver, cache)
    assert run(driver, cache)[0] == CACHED
    assert run(driver, cache, before=sysfs_saying(state, "down", tmp_path))[0] == PLANNED


def test_a_namespaces_rail_that_went_down_misses(driver, cache, rails_namespace):  # noqa: F811
    """Where a node has no PCI NIC (a test cluster's node in its namespace) its NICs are veths and
    the plan names them: the cache keys on their link states too (it read devices' NICs only)."""
    ns, ends = rails_namespace
    inside = ["ip", "netns", "exec", ns]
    assert run(driver, cache, before=inside, ntasks=2)[0] == PLANNED
    assert run(driver, cache, before=inside, ntasks=2)[0] == CACHED
    subprocess.run(["ip", "link", "set", ends[1], "down"], check=True, timeout=30)  # rail1 loses its carrier
    assert run(driver, cache, before=inside, ntasks=2)[0] == PLANNED


def test_a_changed_nodemap_module_misses(driver, cache):  # noqa: F811
    """An upgrade or an edit of nodemap: here only a module's change time moves (same bytes)."""
    from nodemap.mapping import spankcache

    base = run(driver, cache)
    assert f" {spankcache.__file__}\n".encode() in entry_of(cache).read_bytes()
    st = os.stat(spankcache.__file__)
    os.utime(spankcache.__file__, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert run(driver, cache) == (PLANNED, base[1])


def test_a_changed_executable_misses(driver, cache, tmp_path):  # noqa: F811
    stand_in = tmp_path / "nodemap"
    stand_in.write_text(f"#!/bin/sh\nexec {NODEMAP} \"$@\"\n")
    stand_in.chmod(0o755)
    run(driver, cache, nodemap=stand_in)
    stand_in.write_text(f"#!/bin/sh\nexec {NODEMAP} \"$@\" --threads 1\n")  # the same path, other code
    assert run(driver, cache, nodemap=stand_in)[0] == PLANNED


def test_a_wrapper_that_changes_the_plan_leaves_no_entry(driver, cache, tmp_path):  # noqa: F811
    """The planner caches what it printed; the plugin applies what it read: a wrapper in between
    made them differ, and the cached text is removed, never applied in a later step."""
    wrapper = tmp_path / "nodemap"
    wrapper.write_text(f"#!/bin/sh\n{NODEMAP} \"$@\" | sed 's/OMP_PLACES=[^\t]*/OMP_PLACES=wrapped/'\n")
    wrapper.chmod(0o755)
    for _ in range(2):
        how, rows = run(driver, cache, nodemap=wrapper)
        assert how == PLANNED and rows[0].startswith("wrapped "), rows
    assert not [p for p in cache.iterdir() if p.name.startswith("spank-")]


# --- entries that must not be trusted ----------------------------------------------------------

def parse(data: bytes) -> dict:
    """An entry's fields (the grammar of slurm/cache.c's reader)."""
    body = data[:data.rindex(b"crc ")]
    head, rest = body.split(b"\n", 1)
    made, rest = rest.split(b"\n", 1)
    klen, rest = rest.split(b"\n", 1)
    n = int(klen.split()[1])
    key, rest = rest[:n], rest[n + 1:]
    count, rest = rest.split(b"\n", 1)
    deps = []
    for _ in range(int(count.split()[1])):
        line, rest = rest.split(b"\n", 1)
        deps.append(line + b"\n")
    plen, rest = rest.split(b"\n", 1)
    return {"made": int(made.split()[1]), "key": key, "deps": deps, "plan": rest[:int(plen.split()[1])]}


FORGED_PLAN = b"0\t0\t\tOMP_PLACES=forged\n"


def forged(entry: Path, **change) -> bytes:
    """The entry holding another plan (a whole one: the reader cannot tell it from the planner's)."""
    from nodemap.mapping import spankcache

    f = {**parse(entry.read_bytes()), "plan": FORGED_PLAN, **change}
    return spankcache.entry(f["key"], f["plan"], f["deps"], f["made"])


def plant(cache: Path, how: str, tmp_path: Path) -> None:
    entry = entry_of(cache)
    now = int(time.time())
    if how == "made in the future":
        entry.write_bytes(forged(entry, made=now + 3600))
    elif how == "older than the TTL":
        entry.write_bytes(forged(entry, made=now - 700))
    elif how == "another key under its name":
        f = parse(entry.read_bytes())
        entry.write_bytes(forged(entry, key=f["key"].replace(b"--tasks", b"--taskz")))
    elif how == "a module line changed":
        f = parse(entry.read_bytes())
        entry.write_bytes(forged(entry, deps=[b"1 2 3 4 5 " + f["deps"][0].split(b" ", 5)[5]] + f["deps"][1:]))
    else:
        data = forged(entry)
        if how == "corrupt":
            data = data.replace(b"forged", b"forgeD", 1)  # its CRC no longer matches
        elif how == "truncated":
            data = data[:len(data) // 2]
        entry.write_bytes(data)
        if how == "another user's":
            os.chown(entry, 65534, 65534)
        elif how == "writable by its group":
            entry.chmod(0o620)
        elif how == "a symbolic link":
            target = tmp_path / "elsewhere"
            target.write_bytes(data)
            target.chmod(0o600)
            entry.unlink()
            entry.symlink_to(target)
        elif how == "a hard link":
            os.link(entry, tmp_path / "second-name")
        elif how == "folder writable by its group":
            cache.chmod(0o770)
        elif how == "folder of another user":
            os.chown(cache, 65534, 65534)


UNTRUSTED = ["corrupt", "truncated", "made in the future", "older than the TTL", "another key under its name",
             "a module line changed", "another user's", "writable by its group", "a symbolic link", "a hard link",
             "folder writable by its group", "folder of another user"]


@pytest.mark.parametrize("how", ["ours and whole (the control)", *UNTRUSTED])
def test_an_entry_not_trusted_is_not_read(driver, cache, tmp_path, how):  # noqa: F811
    if "another user" in how and os.geteuid() != 0:
        pytest.skip("needs root to give a file to another user")
    base = run(driver, cache)
    plant(cache, how, tmp_path)
    got = run(driver, cache)
    if how.startswith("ours"):  # a forged entry that is whole, fresh, this key's and safely ours is read
        assert got == (CACHED, ["forged 0"]), got  # its plan: PU 0
    else:
        assert got == (PLANNED, base[1]), got


@pytest.mark.parametrize("folder", ["a symbolic link", "absent"])
def test_a_cache_folder_not_safely_ours_is_not_used(driver, tmp_path, folder):  # noqa: F811
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "link"
    if folder == "a symbolic link":
        link.symlink_to(real)
    if folder == "absent":  # made (0700) by the planner and used from then on
        assert [run(driver, link)[0] for _ in range(2)] == [PLANNED, CACHED]
        assert link.stat().st_mode & 0o777 == 0o700
    else:  # never used: nothing read or written through the link
        assert [run(driver, link)[0] for _ in range(2)] == [PLANNED, PLANNED]
        assert not list(real.iterdir())


def test_the_docs_recipe_empties_the_cache(driver, cache):  # noqa: F811
    """docs/slurm.md's line that starts afresh, run verbatim."""
    docs = (Path(__file__).resolve().parent.parent / "docs" / "slurm.md").read_text()
    (recipe,) = [line for line in docs.splitlines() if line.startswith("rm -f ") and "spank-" in line]
    run(driver, cache)
    assert run(driver, cache)[0] == CACHED
    subprocess.run(["sh", "-c", recipe], check=True, timeout=30, env={**os.environ, "NODEMAP_CACHE_DIR": str(cache)})
    assert run(driver, cache)[0] == PLANNED
