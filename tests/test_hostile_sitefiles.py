"""Issue 26, causes 1 and 2: a site file (`check --expect`, the fleet's
[fleet] table) is bounded before parsing and every number in it validated
at load, before anything is measured: one line naming the file and the
key, exit 2; capped at 1 GiB of address space and 10 s a case."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from hostile import env, nodemap, refused
from nodemap.check import sitefile
from nodemap.errors import NodemapError


def _site(tmp_path, text: str, name: str = "site.toml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


LIMIT = '[[limit]]\nkind = "placement"\nmatch = "."\nsource = "site"\n'


@pytest.mark.parametrize("text, words", [
    (LIMIT + "warn = 0.9\npeak = nan\n", ["line 6", "limit.peak", "finite number above 0", "nan"]),
    (LIMIT + "warn_below = nan\n", ["line 5", "limit.warn_below", "nan"]),
    (LIMIT + "warn = 0.9\npeak = 0\n", ["limit.peak = 0 must be"]),
    (LIMIT + "warn = 0.9\npeak = -20\n", ["limit.peak = -20 must be"]),
    (LIMIT + "fail_above = inf\n", ["limit.fail_above", "inf"]),
    ("[thresholds]\nlatency_fail = inf\n", ["line 2", "thresholds.latency_fail", "inf"]),
    ("[thresholds]\nrelative_warn = nan\n", ["thresholds.relative_warn", "nan"]),
])
def test_numbers_of_the_expectations_are_finite_and_in_range(tmp_path, text, words):
    """peak = nan once crashed the check with an IndexError after it had
    measured; this refusal comes before the first step (no output folder)."""
    site = _site(tmp_path, text)
    r = nodemap("check", "--expect", site, "-o", str(tmp_path / "out"), env_=env(tmp_path))
    refused(r, "site.toml", *words)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("text, words", [
    ("[fleet]\nlink_bad = nan\n", ["fleet.link_bad = nan", "fraction of the best pair"]),
    ("[fleet]\nmin_nodes = -3\n", ["fleet.min_nodes = -3", "count of nodes"]),
    ("[fleet]\nmin_nodes = 0\n", ["fleet.min_nodes = 0"]),
    ("[fleet]\nlink_latency = inf\n", ["fleet.link_latency = inf"]),
    ("[fleet]\nlink_latency = 0.5\n", ["fleet.link_latency = 0.5"]),
    ("[fleet]\nrail_tail = 0.5\n", ["fleet.rail_tail = 0.5", "other rail's slowest round trips"]),
    ("[fleet]\nmin_fresh = 0\n", ["fleet.min_fresh = 0", "count of re-measures"]),
    ("[fleet]\nz_drain = nan\n", ["fleet.z_drain = nan", "number of sigmas"]),
    ("[[fleet.rule]]\nkey = \"gpu/*\"\nwarn = nan\n", ["fleet.rule[0].warn = nan"]),
    ("fleet = 3\n", ["fleet must be a table"]),
    ("fleet.rule = [1]\n", ["fleet.rule must be an array of tables"]),
])
def test_numbers_of_the_fleet_table(tmp_path, text, words):
    site = _site(tmp_path, text)
    r = nodemap("check", "--fleet", "--from", str(tmp_path / "none"), "--expect", site, "-o", str(tmp_path / "f"),
                env_=env(tmp_path))
    refused(r, "site.toml", *words)


@pytest.mark.parametrize("command, text, words", [
    (("check",), "[busy]\nother_cores = nan\n", ["line 2", "busy.other_cores = nan", "cores of CPU time"]),
    (("check",), "[busy]\nmem_available = 5\n", ["busy.mem_available = 5 must be", "write 0.05 for 5%"]),
    (("check",), "[busy]\ngpu_util = true\n", ["busy.gpu_util = True must be a float"]),
    (("check",), "[busy]\nother_core = 1\n", ["unknown key busy.other_core", "other_cores"]),
    (("compare", "--dry-run"), "[compare]\nmin_noise = -0.1\n", ["compare.min_noise = -0.1", "below 1"]),
    (("compare", "--dry-run"), "[watch]\nwarmup = 0.9\n", ["watch.warmup = 0.9", "below 0.5"]),
    (("report", "w"), "[watch]\nforeign_min_mib = inf\n", ["watch.foreign_min_mib = inf", "in MiB"]),
    (("report", "w"), "watch = 1\n", ["watch must be a table, written [watch]"]),
])
def test_numbers_of_the_busy_watch_and_compare_tables(tmp_path, command, text, words):
    """[busy], [watch] and [compare] are read by the same validator as the other tables: one line naming the
    file, line and key, exit 2, before anything is measured or read."""
    site = _site(tmp_path, text)
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "n1.r0.1.watch").write_text("")  # a watch folder: `report` reads the site file first
    r = nodemap(*[str(tmp_path / "w") if a == "w" else a for a in command], "--expect", site, env_=env(tmp_path))
    refused(r, "site.toml", *words)


def _dotted(parts: int) -> str:
    return "a" + ".a" * (parts - 1) + " = 1\n"


@pytest.mark.parametrize("text, words", [
    (_dotted(20_000), ["line 1", "dotted key of more than 16 parts"]),  # 40 KB: 1.6 GB in tomllib
    ("\n" * 3 + _dotted(100_000), ["line 4", "dotted key"]),  # 200 KB: 32.8 s into a MemoryError
    ("[thresholds]\nrelative_warn = " + "9" * 400 + "\n", ["line 2", "400 characters"]),
    ("[thresholds]\nrelative_warn = " + "9" * 5000 + "\n", ["line 2", "5000 characters"]),
    ("a = " + "[" * 100_000 + "]" * 100_000 + "\n", ["line 1", "brackets open at once"]),
    ("a = " + "{b = " * 40_000 + "1" + "}" * 40_000 + "\n", ["brackets open at once"]),
    ("# padding\n" * 30_000, ["more than any site file", "256 KiB"]),
])
def test_pathological_toml_is_refused_before_parsing(tmp_path, text, words):
    site = _site(tmp_path, text)
    r = nodemap("check", "--expect", site, "-o", str(tmp_path / "out"), env_=env(tmp_path))
    refused(r, "site.toml", *words)
    assert r.seconds < 5


def test_strings_and_comments_are_not_structure(tmp_path):
    """Dots, brackets and long words inside strings and comments are text:
    a site file with long sources and URLs passes the scan."""
    text = ('# see https://example.org/a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q.r.s.t [[[[[[[[[[[[[[[[[[[[\n'
            '[[limit]]\nkind = "hbm"\nmatch = "H100|H200"\nwarn = 0.9\nfail = 0.8\n'
            f'source = "{"a.b." * 40}[[[[[[[[[[[[[[[[[[[[ {"x" * 300}"\n'
            f"peak = 3.35e12\n[thresholds]\nrelative_warn = 0.960_000_000_000_000_000_000_000_000_000_001\n")
    assert sitefile.scan(text) == ""
    from nodemap.check import expectations

    e = expectations.load(_site(tmp_path, text))
    assert e.limits[0].peak == 3.35e12 and e.thresholds["relative_warn"] == pytest.approx(0.96)


def test_the_scan_is_linear_on_the_largest_file(tmp_path):
    text = ('x = "a.b[c" # d.e.f [[[\n' * (sitefile.MAX_BYTES // 26))[:sitefile.MAX_BYTES]
    t0 = time.perf_counter()
    assert sitefile.scan(text) == ""
    assert time.perf_counter() - t0 < 1.0


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "folder"])
def test_a_site_file_that_is_not_a_file(tmp_path, kind):
    path = tmp_path / "site.toml"
    if kind == "fifo":
        os.mkfifo(path)  # once a hang: the reader blocked in open()
    elif kind == "dev-zero":
        os.symlink("/dev/zero", path)  # once read whole
    else:
        path.mkdir()
    r = nodemap("check", "--expect", str(path), env_=env(tmp_path))
    refused(r, "--expect", "site.toml", "site file (TOML)")


def test_not_utf8_names_the_line(tmp_path):
    path = tmp_path / "site.toml"
    path.write_bytes(b"[thresholds]\n# caf\xe9\n")
    refused(nodemap("check", "--expect", str(path), env_=env(tmp_path)), "site.toml", "line 2", "not UTF-8")


def test_every_parse_error_is_one_site_error(tmp_path, monkeypatch):
    """Past the scan, what tomllib raises besides TOMLDecodeError is one line too."""
    def boom(text):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(sitefile.tomllib, "loads", boom)
    with pytest.raises(NodemapError, match=r"^x.toml: cannot be read as TOML \(RecursionError"):
        sitefile.parse("a = 1\n", "x.toml")


def test_python_310_reads_site_files_through_tomli(tmp_path):
    """Without tomllib (Python 3.10) both readers take tomli, which the
    project depends on there (fleet/merge.py once imported tomllib bare)."""
    site = _site(tmp_path, "[fleet]\nlink_bad = 0.8\n[thresholds]\nrelative_warn = 0.97\n")
    prog = ("import sys, tomllib\n"
            "sys.modules['tomli'] = tomllib; sys.modules['tomllib'] = None  # as on 3.10 with tomli installed\n"
            "from nodemap.check import expectations\n"
            f"print(expectations.load({site!r}).fleet_rules().link_bad, expectations.load({site!r}).thresholds['relative_warn'])")
    r = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, timeout=20, env=env(tmp_path))
    assert r.returncode == 0 and r.stdout.split() == ["0.8", "0.97"], r.stderr
