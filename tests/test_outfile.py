"""The one output writer (nodemap.outfile): refuses what it must not replace,
before any work, and writes atomically with the user's umask."""

import os
import stat
import subprocess
import sys

import pytest

from nodemap.errors import NodemapError
from nodemap.outfile import check, write


def test_writes_regular_files_atomically_with_the_umask(tmp_path):
    f = tmp_path / "r.json"
    old = os.umask(0o027)
    try:
        write(str(f), "one")
    finally:
        os.umask(old)
    assert f.read_text() == "one" and stat.S_IMODE(f.stat().st_mode) == 0o640
    f.chmod(0o604)
    write(str(f), b"two")
    assert f.read_text() == "two" and stat.S_IMODE(f.stat().st_mode) == 0o604
    write(str(f), lambda fh: fh.write(b"three"))
    assert f.read_text() == "three"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]  # no temporary left


def test_dash_is_stdout(capfd):
    write("-", "to stdout\n")
    assert capfd.readouterr().out == "to stdout\n"


def _targets(tmp_path):
    real = tmp_path / "real.json"
    real.write_text("keep")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    link = tmp_path / "link.json"
    link.symlink_to(real)
    return {"fifo": fifo, "symlink": link, "missing folder": tmp_path / "nope" / "x.json", "folder": tmp_path,
            "device": "/dev/null"}, real


@pytest.mark.parametrize("kind", ["fifo", "symlink", "missing folder", "folder", "device"])
def test_refuses_what_it_must_not_replace(tmp_path, kind):
    targets, real = _targets(tmp_path)
    path = str(targets[kind])
    for fn in (lambda: check(path, "--export"), lambda: write(path, "x", "--export")):
        with pytest.raises(NodemapError, match="^--export ") as e:
            fn()
        assert "\n" not in str(e.value)
    assert real.read_text() == "keep" and os.path.islink(targets["symlink"])
    assert stat.S_ISFIFO(os.lstat(targets["fifo"]).st_mode) and stat.S_ISCHR(os.stat("/dev/null").st_mode)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_refuses_an_unwritable_folder(tmp_path):
    d = tmp_path / "ro"
    d.mkdir(mode=0o500)
    with pytest.raises(NodemapError, match="not writable"):
        check(str(d / "x.json"))


@pytest.mark.parametrize("argv", [["topo", "--export", "{}"],
                                  ["place", "plan", "--counts", "missing.npz", "--budget", "1G", "-o", "{}"]])
@pytest.mark.parametrize("kind", ["fifo", "symlink", "missing folder"])
def test_commands_refuse_before_working(tmp_path, argv, kind):
    targets, real = _targets(tmp_path)
    cmd = [a.replace("{}", str(targets[kind])) for a in argv]
    r = subprocess.run([sys.executable, "-m", "nodemap", *cmd], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert str(targets[kind]) in r.stderr and "missing.npz" not in r.stderr  # the output is checked first
    assert real.read_text() == "keep" and os.path.islink(targets["symlink"])
