"""Issue 26, causes 6 and 7: where nodemap writes. `compare -o PATH` is
checked before any probe runs; appends into a shared folder (the watch
timeline, the fleet's nodes.jsonl/pairs.jsonl and nodes/) never follow a
link another user planted there, tried as two unprivileged users where the
machine allows (root, setpriv)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

import pytest

from hostile import env, nodemap, refused
from nodemap import outfile
from nodemap.errors import NodemapError


@pytest.mark.parametrize("kind, words", [("folder", "is a folder"), ("fifo", "not a regular file"),
                                         ("missing", "does not exist")])
def test_compare_output_is_checked_before_the_probes(tmp_path, kind, words):
    out = tmp_path / "c.json"
    if kind == "folder":
        out.mkdir()
    elif kind == "fifo":
        os.mkfifo(out)
    else:
        out = tmp_path / "no" / "c.json"
    r = nodemap("compare", "--probes", "stream", "--size", "4M", "--tasks", "2", "-o", str(out), env_=env(tmp_path))
    line = refused(r, "--output", words)
    assert "[compare]" not in r.stderr, line  # no probe ran first
    assert r.seconds < 5


# --- the one helper, in this process --------------------------------------------------------


def test_append_never_follows_a_planted_link(tmp_path):
    victim = tmp_path / "private"
    victim.write_text("secret\n")
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "n.watch").symlink_to(victim)
    with pytest.raises(NodemapError, match="n.watch is a symbolic link"):
        outfile.open_append(str(shared), "n.watch", "--watch-dir")
    assert victim.read_text() == "secret\n"
    fd = outfile.open_append(str(shared), "m.watch", "--watch-dir")  # a new file: created, appended
    os.write(fd, b"x\n")
    os.close(fd)
    fd = outfile.open_append(str(shared), "m.watch", "--watch-dir")
    os.write(fd, b"y\n")
    os.close(fd)
    assert (shared / "m.watch").read_text() == "x\ny\n"


def test_a_folder_that_is_a_link_is_refused(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "out").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(NodemapError, match="symbolic link"):
        outfile.make_folder(str(tmp_path / "out" ), "--output")
    with pytest.raises(NodemapError, match="symbolic link"):
        outfile.open_append(str(tmp_path / "out"), "nodes.jsonl", "--output")
    assert not list((tmp_path / "elsewhere").iterdir())


def test_a_fifo_planted_as_the_file_is_refused_not_waited_on(tmp_path):
    os.mkfifo(tmp_path / "pairs.jsonl")
    with pytest.raises(NodemapError, match="pairs.jsonl cannot be opened for appending"):
        outfile.open_append(str(tmp_path), "pairs.jsonl", "--output")


# --- two users ------------------------------------------------------------------------------

ATTACKER, VICTIM = 50_711, 50_712


def _as(uid: int, code: str) -> subprocess.CompletedProcess:
    return subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", sys.executable, "-c",
                           code], capture_output=True, text=True, timeout=30, env=env())


@pytest.fixture
def shared():
    """A 0777 folder without the sticky bit (anyone may plant or rename
    there), outside pytest's 0700 temporary folders; a private file of the
    victim's beside it."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("two unprivileged users need root and setpriv (util-linux) to switch to them")
    probe = _as(VICTIM, "import nodemap.outfile")
    if probe.returncode != 0:
        pytest.skip(f"another user cannot import nodemap from here: {probe.stderr.strip()[-200:]}")
    base = tempfile.mkdtemp(prefix="nodemap-shared-")
    os.chmod(base, 0o755)
    d = os.path.join(base, "shared")
    os.mkdir(d)
    os.chmod(d, 0o777)
    private = os.path.join(base, "victim")
    os.mkdir(private, 0o700)
    os.chown(private, VICTIM, VICTIM)
    secret = os.path.join(private, "notes")
    with open(secret, "w") as f:
        f.write("secret\n")
    os.chown(secret, VICTIM, VICTIM)
    os.chmod(secret, 0o600)
    os.chown(base, 0, 0)
    try:
        yield d, private, secret
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _plant(link: str, target: str) -> None:
    r = _as(ATTACKER, f"import os; os.symlink({target!r}, {link!r})")
    assert r.returncode == 0, r.stderr


def test_watch_timeline_as_two_users(shared):
    d, _, secret = shared
    host = _as(VICTIM, "import socket; print(socket.gethostname())").stdout.strip()
    _plant(os.path.join(d, f"{host}.r0.4242.watch"), secret)  # the attacker guessed the pid
    r = _as(VICTIM, "import os\nfrom nodemap.watch import monitor as watch\nos.getpid = lambda: 4242\n"
                    f"watch.prepare({d!r}, 1.0, local_rank=0, local_size=1, task=None, argv=['true'], env={{}})")
    assert r.returncode != 0 and "symbolic link" in r.stderr.splitlines()[-1], r.stderr
    assert open(secret).read() == "secret\n"


def test_fleet_appends_as_two_users(shared):
    d, private, secret = shared
    out = os.path.join(d, "fleet")
    _as(ATTACKER, f"import os; os.mkdir({out!r}); os.chmod({out!r}, 0o777)")
    _plant(os.path.join(out, "pairs.jsonl"), secret)
    _plant(os.path.join(out, "nodes"), private)
    code = ("from nodemap.fleet.output import FleetOutput, NodeLine\nfrom nodemap.errors import NodemapError\n"
            f"o = FleetOutput({out!r})\n"
            "for call in (lambda: o.pair_line({'a': 1}), lambda: o.node_line(NodeLine('n1', '{}'))):\n"
            "    try:\n        call()\n    except NodemapError as e:\n        print('refused:', e)\n")
    r = _as(VICTIM, code)
    lines = r.stdout.splitlines()
    assert r.returncode == 0 and len(lines) == 2, r.stdout + r.stderr
    assert "pairs.jsonl is a symbolic link" in lines[0] and "nodes is a symbolic link" in lines[1], lines
    assert open(secret).read() == "secret\n" and sorted(os.listdir(private)) == ["notes"]


def test_another_users_private_cache_folder_is_named_for_what_it_is(shared):
    """It was "is not a directory": the open failed for permission."""
    d, _, _ = shared
    cache = os.path.join(d, "cache")
    os.mkdir(cache, 0o700)
    os.chown(cache, ATTACKER, ATTACKER)
    r = _as(VICTIM, f"from nodemap.mapping import plancache\nplancache.open_folder({cache!r})")
    last = r.stderr.splitlines()[-1]
    assert "not open to you" in last and f"uid {ATTACKER}" in last and "not a directory" not in last, r.stderr
