"""The expectations table: shipped data with a source per row, site files
that override it, and broken site files named by file, line and key."""

import subprocess
import sys

import pytest

from nodemap.check import expectations as ex


def test_shipped_table_has_a_source_for_every_row():
    e = ex.shipped()
    assert set(e.thresholds) == set(ex.THRESHOLDS)
    assert e.limits and all(lim.source and lim.origin == "nodemap" for lim in e.limits)
    assert e.limit_for("hbm", "H200 datasheet HBM3e 4.8 TB/s").warn == 0.85
    assert e.limit_for("h2d", "PCIe Gen5 x16 (3.938 GB/s per lane)").fail_below == 48.0
    assert e.limit_for("d2d", "NV18").warn == 0.82
    assert e.limit_for("nothing", "x") is None


def test_site_rows_come_first_and_thresholds_merge(tmp_path):
    p = tmp_path / "site.toml"
    p.write_text('schema = "nodemap.expectations/1"\n[thresholds]\nrelative_warn = 0.97\n\n'
                 '[[limit]]\nkind = "hbm"\nmatch = "H200"\nwarn = 0.9\nfail = 0.88\nsource = "site acceptance"\n')
    e = ex.load(str(p))
    assert e.thresholds["relative_warn"] == 0.97 and e.thresholds["relative_fail"] == 0.90
    lim = e.limit_for("hbm", "H200 datasheet")
    assert (lim.warn, lim.origin) == (0.9, str(p))
    assert e.limit_for("hbm", "H100 SXM datasheet").origin == "nodemap"
    assert e.sources == ("nodemap", str(p))


@pytest.mark.parametrize("text, line, key", [
    ('[thresholds]\nrelative_warn = 0.9\nrelativ_fail = 0.8\n', 3, "relativ_fail"),
    ('[thresholds]\nrelative_warn = "high"\n', 2, "relative_warn"),
    ('\n[[limit]]\nkind = "hbm"\nsource = "x"\nwarn = 0.9\n\n[[limit]]\nkind = "d2d"\nsource = "y"\nwran = 0.8\n',
     10, "wran"),
    ('[[limit]]\nkind = "hbm"\nsource = "x"\n', 1, "limit"),
    ('[[limit]]\nkind = "hbm"\nmatch = "(("\nwarn = 0.9\nsource = "x"\n', 3, "match"),
    ('colour = 3\n', 1, "colour"),
])
def test_broken_site_file_names_file_line_and_key(tmp_path, text, line, key):
    p = tmp_path / "site.toml"
    p.write_text(text)
    with pytest.raises(ex.ExpectError) as e:
        ex.load(str(p))
    msg = str(e.value)
    assert msg.startswith(f"{p}, line {line}:") and key in msg and "\n" not in msg


def test_toml_syntax_error_names_line(tmp_path):
    p = tmp_path / "site.toml"
    p.write_text('[thresholds]\nrelative_warn = \n')
    with pytest.raises(ex.ExpectError, match=r"site.toml, line 2, column \d+: not valid TOML: "):
        ex.load(str(p))


def test_toml_syntax_error_at_end_of_file_says_so(tmp_path):
    p = tmp_path / "site.toml"
    p.write_text('a = [\n')
    with pytest.raises(ex.ExpectError) as e:
        ex.load(str(p))
    msg = str(e.value)
    assert msg.startswith(f"{p}, at end of file: not valid TOML") and "never closed" in msg
    assert "\n" not in msg and "end of document" not in msg


@pytest.mark.parametrize("text, line, key, fix", [
    ('[thresholds]\nrelative_warn = 95\n', 2, "relative_warn", "write 0.95 for 95%"),
    ('[thresholds]\n\ncompare_fail = 90\n', 3, "compare_fail", "write 0.9 for 90%"),
    ('[thresholds]\nlatency_warn = 0.5\n', 2, "latency_warn", "at least 1"),
    ('[thresholds]\nrelative_warn = 0.8\nrelative_fail = 0.9\n', 2, "relative_warn", "warn comes before fail"),
    ('[thresholds]\nrelative_fail = 0.97\n', 2, "relative_fail", "change 'thresholds.relative_fail'"),
    ('[thresholds]\nlatency_warn = 3\n', 2, "latency_warn", "warn comes before fail"),
    ('[[limit]]\nkind = "hbm"\nsource = "x"\nwarn = 85\n', 4, "limit.warn", "write 0.85 for 85%"),
    ('[[limit]]\nkind = "hbm"\nsource = "x"\nwarn = 0.8\nfail = 0.85\n', 4, "limit.warn", "swap"),
    ('[[limit]]\nkind = "h2d"\nsource = "x"\nwarn_below = 40\nfail_below = 48\n', 4, "warn_below", "swap"),
    ('[[limit]]\nkind = "x"\nsource = "x"\nwarn_above = 9\nfail_above = 3\n', 4, "warn_above", "swap"),
])
def test_thresholds_out_of_range_or_order_are_refused(tmp_path, text, line, key, fix):
    """95 for 95% (everything would warn) or warn beyond fail: one line naming file, line, key and fix."""
    p = tmp_path / "site.toml"
    p.write_text(text)
    with pytest.raises(ex.ExpectError) as e:
        ex.load(str(p))
    msg = str(e.value)
    assert msg.startswith(f"{p}, line {line}:") and key in msg and fix in msg and "\n" not in msg


def test_valid_site_thresholds_within_range_load(tmp_path):
    p = tmp_path / "site.toml"
    p.write_text('[thresholds]\nrelative_warn = 1\nrelative_fail = 0.9\nlatency_warn = 1\n')
    assert ex.load(str(p)).thresholds["relative_warn"] == 1.0


def test_cli_broken_expect_exits_2_with_one_line(tmp_path):
    p = tmp_path / "site.toml"
    p.write_text('[thresholds]\nrelative_wam = 0.9\n')
    r = subprocess.run([sys.executable, "-m", "nodemap", "check", "--expect", str(p), "-o", str(tmp_path / "out")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "line 2" in r.stderr and "relative_wam" in r.stderr
    assert not (tmp_path / "out").exists()  # nothing measured, nothing written
    r = subprocess.run([sys.executable, "-m", "nodemap", "check", "--expect", str(tmp_path / "missing.toml")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "missing.toml" in r.stderr and "Traceback" not in r.stderr


def test_a_site_dram_peak_given_to_report_answers_what_the_check_skipped_for_want_of_one(tmp_path):
    """`nodemap report check.json --expect site.toml` with the DRAM peak judged host/stream/best and
    still listed it as skipped, 'DRAM peak unknown: ... give it to the check in a site file'."""
    import check_synth as syn
    from nodemap.check import document, node
    from nodemap.check.inventory import Skipped

    rs = syn.stream({"1/core": (4, 20.0)})
    rs.messages.append("DRAM peak unknown: SMBIOS memory records are not readable here; give it with --peak GB/s")
    [unknown] = node.unjudged(rs, ex.shipped())
    doc = document.CheckDoc(level="quick", topology=None, expectations=ex.shipped(), results=[rs],
                            skipped=[unknown, Skipped("NUMA matrices", "one NUMA node")], complete=True)
    doc.rejudge()
    data = doc.to_json().encode()
    site = tmp_path / "site.toml"
    site.write_text('[[limit]]\nkind = "stream"\nmatch = "."\npeak = 25\nwarn = 0.72\nfail = 0.60\nsource = "our DIMMs"\n')
    again = document.decode("c.json", data, ex.load(str(site)))
    assert "host/stream/best" in {j.figure.key for j in again.judged}
    assert [s.what for s in again.skipped] == ["NUMA matrices"]
    kept = document.decode("c.json", data)  # judged as saved: as saved
    assert [s.what for s in kept.skipped] == [unknown.what, "NUMA matrices"]
