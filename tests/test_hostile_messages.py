"""Issue 16, item 8: messages that name the right thing, and input text that
cannot drive the terminal."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time

import pytest

from hostile import CPU, env, hwloc_xml, nodemap, refused, snapshot

RUN = ["run", "--local-rank", "0", "--local-size", "1"]


def test_a_script_whose_interpreter_is_missing(tmp_path):
    script = tmp_path / "job.sh"
    script.write_text("#!/no/such/shell\necho hi\n")
    script.chmod(0o755)
    r = nodemap(*RUN, "--", str(script), env_=env(tmp_path))
    assert r.returncode == 127
    assert "/no/such/shell" in r.stderr and "#!" in r.stderr and r.stderr.count("\n") == 1, r.stderr


def test_a_symlink_loop_names_the_link(tmp_path):
    snapshot(tmp_path)
    core = tmp_path / CPU / "cpu0/topology/core_id"
    core.unlink()
    os.symlink("again", core)
    os.symlink("core_id", core.parent / "again")
    refused(nodemap("topo", "--input", str(tmp_path)), "cpu0/topology/core_id", "symbolic links")


def test_a_symlink_loop_given_as_input(tmp_path):
    os.symlink("b", tmp_path / "a")
    os.symlink("a", tmp_path / "b")
    refused(nodemap("topo", "--input", str(tmp_path / "a")), "/a:", "symbolic links")


def _export(tmp_path) -> dict:
    (tmp_path / "n.xml").write_text(hwloc_xml())
    return json.loads(nodemap("topo", "--input", str(tmp_path / "n.xml"), "--json").stdout)


def test_negative_memory_and_repeated_pus_are_refused(tmp_path):
    d = _export(tmp_path)
    d["numa_nodes"][0]["memory"] = -5
    (tmp_path / "neg.json").write_text(json.dumps(d))
    refused(nodemap("topo", "--input", str(tmp_path / "neg.json")), "neg.json", "negative")
    (tmp_path / "dup.xml").write_text(hwloc_xml(pu1="0"))
    refused(nodemap("topo", "--input", str(tmp_path / "dup.xml")), "dup.xml", "PU number 0 appears twice")


def test_nan_in_json_is_refused(tmp_path):
    d = _export(tmp_path)
    (tmp_path / "nan.json").write_text(json.dumps(d).replace('"memory": 1024000', '"memory": NaN', 1))
    refused(nodemap("topo", "--input", str(tmp_path / "nan.json")), "nan.json", "memory")


def _on_a_terminal(args) -> bytes:
    """stdout and stderr of `nodemap ARGS` run on a pseudo-terminal."""
    main, sub = pty.openpty()
    p = subprocess.Popen([sys.executable, "-m", "nodemap", *args], stdout=sub, stderr=sub, env=env())
    os.close(sub)
    out = b""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if select.select([main], [], [], 0.2)[0]:
            try:
                chunk = os.read(main, 65536)
            except OSError:  # EIO: the other side closed
                break
            if not chunk:
                break
            out += chunk
        elif p.poll() is not None:
            break
    p.wait(timeout=10)
    os.close(main)
    return out


def test_escape_sequences_from_input_never_reach_the_terminal(tmp_path):
    d = _export(tmp_path)
    d["packages"][0]["cpu_model"] = "\x1b]0;PWNED\x07\x1b[2J\x9b6n"
    (tmp_path / "esc.json").write_text(json.dumps(d))
    out = _on_a_terminal(["topo", "--input", str(tmp_path / "esc.json")])
    assert b"PWNED" in out and b"\x1b" not in out and b"\x07" not in out and "\x9b".encode() not in out
    assert b"\\x1b]0;PWNED\\x07" in out
    # and in an error line, even off a terminal: one line, no control characters
    (tmp_path / "esc\x1b[2J.xml").write_text("<topology><bad")
    r = nodemap("topo", "--input", str(tmp_path / "esc\x1b[2J.xml"))
    line = refused(r, "not well-formed")
    assert "\x1b" not in line


def test_absurd_numbers_in_any_source_are_named():
    import nodes
    from nodemap.topology.discover import absurd
    from nodemap.topology.model import replace

    topo = nodes.perlmutter()
    assert absurd(topo) == ""
    from nodemap.topology.model import Link

    link = Link("0000:01:00.0", "0000:02:00.0", bandwidth=float("nan"))
    assert "bandwidth is not a finite number" in absurd(replace(topo, links=(link,)))
    gpu = topo.gpus[0]
    assert "GPU 0 memory is negative" in absurd(replace(topo, gpus=(replace(gpu, memory=-1),) + topo.gpus[1:]))
    assert "GPU number 1 appears twice" in absurd(replace(topo, gpus=topo.gpus + topo.gpus[1:2]))


@pytest.mark.parametrize("option", ["--cpus", "--mems"])
def test_a_huge_cpu_set_in_a_message_is_shown_cut(tmp_path, option):
    """2^19 single PUs once made a 7.3 MB error line."""
    (tmp_path / "node.xml").write_text(hwloc_xml())
    line = refused(nodemap("plan", "--input", str(tmp_path / "node.xml"), option, "0-1048575:2"),
                   option, "0,2,4,6,8,10,...", "(524288 in all, up to 1048574)")
    assert len(line) < 300, line


def test_any_error_line_is_cut_keeping_cause_and_fix():
    from nodemap.cli import MAX_LINE, one_line

    line = one_line("cause: " + "x\x1b" * 10**6 + " fix it")
    assert len(line) <= MAX_LINE and line.startswith("cause: ") and line.endswith(" fix it")
    assert "characters cut" in line and "\x1b" not in line
