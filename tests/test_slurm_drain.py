"""`nodemap check --slurm-drain` against a stand-in `scontrol` on PATH that
records its argv and answers `show node` from a state file: a hardware
failure drains with nodemap's reason, a later pass resumes only what
nodemap drained, a configuration failure never drains; scontrol missing,
failing or slow is one line and exit 2; odd node names, long reasons and
two checks racing on one node (a flock: a killed check leaves no stale lock)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

import nodes
from nodemap.cli import main
from nodemap.errors import NodemapError
from nodemap.launcher import node_name
from nodemap.slurm import drain, verdict
from nodemap.topology.model import NIC, replace

STANDIN = """#!/bin/sh
# records argv, one line per call; answers show node from $STATE, which $STATE.next replaces after that (another
# check acted meanwhile); with $STATEFUL an update changes $STATE as Slurm would
printf '%s\\n' "$*" >> "$LOG"
[ -n "$SLEEP" ] && sleep "$SLEEP"
[ -n "$FAIL" ] && { echo "slurm_load_node error: Unable to contact slurm controller" >&2; exit 1; }
node='NodeName=n2 Arch=x86_64 CoresPerSocket=1'
case "$1" in
  show) cat "$STATE"; if [ -f "$STATE.next" ]; then mv "$STATE.next" "$STATE"; fi;;
  update) if [ -n "$STATEFUL" ]; then
      case "$3" in
        State=DRAIN) echo "$node State=IDLE+DRAIN ThreadsPerCore=1 ${4} [root@2026-11-27T10:00:00] Comment=(null)";;
        State=RESUME) echo "$node State=IDLE ThreadsPerCore=1 Comment=(null)";;
      esac > "$STATE.new"
      mv "$STATE.new" "$STATE"
    fi;;
esac
"""


@pytest.fixture
def slurm(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "scontrol"
    exe.write_text(STANDIN)
    exe.chmod(0o755)
    log, state = tmp_path / "argv.log", tmp_path / "state"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("LOG", str(log))
    monkeypatch.setenv("STATE", str(state))
    monkeypatch.setenv("SLURMD_NODENAME", "n2")
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("NODEMAP_RUNTIME_DIR", str(runtime))

    class S:
        def node(self, state="IDLE", reason="", then=False):
            """The node's state now, or (then) after the next `show node`."""
            r = f" Reason={reason} [root@2026-11-27T10:00:00]" if reason else ""
            state_file = f"NodeName=n2 Arch=x86_64 CoresPerSocket=1 State={state} ThreadsPerCore=1{r} Comment=(null)"
            (tmp_path / ("state.next" if then else "state")).write_text(state_file + "\n")

        def calls(self):
            return log.read_text().splitlines() if log.exists() else []

    s = S()
    s.node()
    s.runtime = runtime
    return s


def node_files(tmp_path, nics_expected=4):
    topo = nodes.two_socket_four_nics()
    have, want = tmp_path / "node.json", tmp_path / "class.json"
    have.write_text(topo.to_json())
    more = tuple(NIC(f"mlx5_{k}", "InfiniBand") for k in range(4, nics_expected))
    want.write_text(replace(topo, nics=topo.nics + more).to_json())
    return str(have), str(want)


def health(*extra):
    return main(["check", "--level", "health", "-q", *extra])


def test_hardware_failure_drains_with_nodemaps_reason(slurm, tmp_path, capsys):
    have, want = node_files(tmp_path, nics_expected=5)
    assert health("--input", have, "--expect-topology", want, "--slurm-drain") == 1
    assert slurm.calls() == ["show node -o n2",
                             "update NodeName=n2 State=DRAIN Reason=nodemap: inventory: NICs 4 (limit 5)"]
    assert "n2: drained: nodemap: inventory: NICs 4 (limit 5)" in capsys.readouterr().err


def test_a_pass_resumes_only_what_nodemap_drained(slurm, tmp_path, capsys):
    have, want = node_files(tmp_path)
    slurm.node("IDLE+DRAIN", "nodemap: inventory: NICs 4 (limit 5)")
    assert health("--input", have, "--expect-topology", want, "--slurm-drain") == 0
    assert slurm.calls()[-1] == "update NodeName=n2 State=RESUME"
    slurm.node("IDLE+DRAIN", "bad DIMM, ticket 4711")
    assert health("--input", have, "--expect-topology", want, "--slurm-drain") == 0
    assert slurm.calls()[-1] == "show node -o n2"  # not ours: left drained
    assert "left drained (not nodemap's reason: bad DIMM, ticket 4711)" in capsys.readouterr().err


def test_someone_elses_drain_reason_is_kept(slurm, tmp_path):
    have, want = node_files(tmp_path, nics_expected=5)
    slurm.node("DRAIN", "maintenance")
    assert health("--input", have, "--expect-topology", want, "--slurm-drain") == 1
    assert not any(c.startswith("update") for c in slurm.calls())


def test_dry_run_prints_the_command_and_runs_no_update(slurm, tmp_path, capsys):
    have, want = node_files(tmp_path, nics_expected=5)
    assert health("--input", have, "--expect-topology", want, "--dry-run") == 1
    assert slurm.calls() == ["show node -o n2"]
    err = capsys.readouterr().err
    assert "scontrol update NodeName=n2 State=DRAIN 'Reason=nodemap: inventory: NICs 4 (limit 5)'" in err


def test_a_configuration_failure_never_drains(slurm, tmp_path, monkeypatch):
    have, _ = node_files(tmp_path)
    topo = nodes.two_socket_four_nics()
    off = replace(topo, pus=tuple(replace(p, online=p.os_index < 8) for p in topo.pus))
    path = tmp_path / "off.json"
    path.write_text(off.to_json())
    # a configuration failure fails the environment, not the node: exit 0 (docs/check.md), never drained
    assert health("--input", str(path), "--expect-topology", have, "--slurm-drain") == 0
    assert slurm.calls() == ["show node -o n2"]  # read, as for any healthy node: nothing to resume here


@pytest.mark.parametrize("fault,message", [("missing", "scontrol is not on PATH"), ("fail", "exited 1"),
                                           ("slow", "did not answer within")])
def test_scontrol_missing_failing_or_slow_is_one_line_and_exit_2(slurm, tmp_path, monkeypatch, capsys, fault,
                                                                  message):
    have, want = node_files(tmp_path, nics_expected=5)
    if fault == "missing":
        monkeypatch.setenv("PATH", "/nonexistent")
    elif fault == "fail":
        monkeypatch.setenv("FAIL", "1")
    else:
        monkeypatch.setenv("SLEEP", "30")
    t0 = time.monotonic()
    assert health("--input", have, "--expect-topology", want, "--slurm-drain", "--slurm-timeout", "0.5") == 2
    assert time.monotonic() - t0 < 8
    err = capsys.readouterr().err.strip().splitlines()
    assert message in err[-1] and "Traceback" not in "\n".join(err)
    assert "nothing was drained" in err[-1]  # what it did, beside why
    assert not any(c.startswith("update") for c in slurm.calls())


def test_the_prom_file_is_written_even_when_scontrol_fails(slurm, tmp_path, monkeypatch, capsys):
    # node_exporter would go on exporting the previous check's metrics (healthy) for a failed node
    have, want = node_files(tmp_path, nics_expected=5)
    monkeypatch.setenv("FAIL", "1")
    out = tmp_path / "nodemap.prom"
    assert health("--input", have, "--expect-topology", want, "--slurm-drain", "--prom", str(out)) == 2
    assert 'nodemap_check_status{node="n2",level="health"} 1' in out.read_text()


def test_a_fleet_check_refuses_one_node_name_for_every_node(slurm, capsys):
    # each node's leader would have drained (or resumed) that one node for every node's verdict
    assert main(["check", "--fleet", "--slurm-drain", "--node-name", "n2"]) == 2
    assert "--node-name: names one node" in capsys.readouterr().err
    assert slurm.calls() == []


def test_a_check_that_could_not_judge_says_why_it_left_the_node_alone():
    said = drain.act("n2", None, "the node was busy: its figures are inconclusive", verdict.Scope("quick", ()))
    assert said == "n2: left as it is, neither drained nor resumed: the node was busy: its figures are inconclusive"


def test_odd_node_names_are_refused(slurm, tmp_path, monkeypatch, capsys):
    have, want = node_files(tmp_path, nics_expected=5)
    monkeypatch.setenv("SLURMD_NODENAME", "n2 State=DOWN")
    assert health("--input", have, "--expect-topology", want, "--slurm-drain") == 2
    assert "characters a Slurm node name cannot have" in capsys.readouterr().err
    assert slurm.calls() == []
    for bad in ("../n1", "n1;reboot", "-n1", "", "x" * 65):
        with pytest.raises(NodemapError, match="characters a Slurm node name cannot have"):
            node_name({}, bad or "\n", for_slurm=True)


def test_a_name_mpiexec_forwarded_from_the_batch_node_is_not_drained(slurm, tmp_path, monkeypatch, capsys):
    """Hydra forwards mpiexec's whole environment: every rank carries the
    batch node's SLURMD_NODENAME ("n2" here). The check of another node
    must act on its own name (the short hostname), never drain n2."""
    import socket

    have, want = node_files(tmp_path, nics_expected=5)
    monkeypatch.setenv("MPI_LOCALRANKID", "0")
    monkeypatch.setenv("MPI_LOCALNRANKS", "1")
    health("--input", have, "--expect-topology", want, "--slurm-drain")
    assert slurm.calls() == [f"show node -o {socket.gethostname().split('.')[0]}"]  # the stand-in knows only n2
    assert not any(c.startswith("update") for c in slurm.calls())


def test_a_long_reason_is_cut_on_one_line():
    r = drain.reason("inventory", "GPU3 PCIe link " + "very long words " * 20, "Gen4\nx8", "Gen5 x16")
    assert len(r) <= drain.MAX_REASON and r.startswith("nodemap: inventory: GPU3") and r.endswith("(limit Gen5 x16)")
    assert "\n" not in r and "..." in r
    assert "=" not in drain.reason("a", "b=c", "1", "2")  # scontrol would read key=value pairs
    long_limit = drain.reason("inventory", "NICs", "3", "mlx5_" * 40)
    assert long_limit.startswith("nodemap: inventory: NICs 3 (limit mlx5_") and long_limit.endswith("...")
    assert len(long_limit) <= drain.MAX_REASON  # not "NICs 3..." as if the measured value were cut


def test_a_reason_holds_only_printable_characters():
    # names read from the node (a GPU model from NVML, a NIC from sysfs) may hold anything
    r = drain.reason("inventory", "GPU0 \x1b[31mA100\x00", "PCIe x8\x7f", "x16\u2028")
    assert r == "nodemap: inventory: GPU0 [31mA100 PCIe x8 (limit x16)" and r.isprintable()


def test_show_node_parses_state_and_reason(slurm):
    slurm.node("IDLE+DRAIN", "nodemap: inventory: NICs 4 (limit 5)")
    n = drain.show("n2")
    assert (n.state, n.reason, n.drained, n.ours) == ("IDLE+DRAIN", "nodemap: inventory: NICs 4 (limit 5)", True, True)
    slurm.node("IDLE")
    assert drain.show("n2").reason == "" and not drain.show("n2").drained


def test_a_reason_that_is_not_utf8_is_read_with_replacement(slurm, tmp_path, capsys):
    """A reason written in another encoding (Latin-1 here) ended in a traceback and exit 1, the
    status that means drain: its bytes are replaced and the node judged as for any reason not nodemap's."""
    have, want = node_files(tmp_path, nics_expected=5)
    (tmp_path / "state").write_bytes(b"NodeName=n2 Arch=x86_64 State=IDLE+DRAIN ThreadsPerCore=1 "
                                     b"Reason=RAM d\xe9fectueuse [root@2026-11-27T10:00:00] Comment=(null)\n")
    assert health("--input", have, "--expect-topology", want, "--slurm-drain") == 1  # the NIC is missing
    err = capsys.readouterr().err
    assert "n2: already drained by someone else (RAM d\ufffdfectueuse), reason kept" in err and "Traceback" not in err
    assert not any(c.startswith("update") for c in slurm.calls())
    have, want = node_files(tmp_path)
    assert health("--input", have, "--expect-topology", want, "--slurm-drain") == 0
    assert "left drained (not nodemap's reason: RAM d\ufffdfectueuse)" in capsys.readouterr().err


def test_a_failing_scontrols_message_that_is_not_utf8_is_one_line(slurm, tmp_path, monkeypatch, capsys):
    bad = tmp_path / "bin" / "scontrol"
    bad.write_bytes(b"#!/bin/sh\nprintf 'slurm_load_node: \\377\\033[2J erreur\\n' >&2\nexit 1\n")
    have, want = node_files(tmp_path, nics_expected=5)
    assert health("--input", have, "--expect-topology", want, "--slurm-drain") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "exited 1: slurm_load_node: \ufffd [2J erreur; nothing was drained" in err[0], err


def test_a_runaway_scontrol_output_is_refused_within_the_timeout_in_bounded_memory(slurm, tmp_path):
    """100 MB of reason (the issue's 300 MB took 903 MB and 26 s, past --slurm-timeout): refused
    in one line, exit 2, nothing drained, read no further than drain.MAX_OUTPUT."""
    (tmp_path / "bin" / "scontrol").write_text(
        "#!/bin/sh\nprintf '%s\\n' \"$*\" >> \"$LOG\"\nprintf 'NodeName=n2 State=IDLE Reason='\n"
        "head -c 100000000 /dev/zero | tr '\\0' x\n")
    have, want = node_files(tmp_path, nics_expected=5)
    t0 = time.monotonic()
    # the peak is read by a small parent: a child's ru_maxrss starts at its forking parent's (pytest's, ~400 MB
    # after the hypothesis tests), so wait4 from here measured pytest, not nodemap
    peak = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL); "
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(r.returncode)")
    p = subprocess.run([sys.executable, "-c", peak, sys.executable, "-m", "nodemap", "check", "--level", "health",
                        "-q", "--input", have, "--expect-topology", want, "--slurm-drain", "--slurm-timeout", "20"],
                       capture_output=True, text=True)
    err, maxrss = p.stderr, int(p.stdout)
    took = time.monotonic() - t0
    assert p.returncode == 2, err
    assert err.strip().splitlines()[-1] == ("nodemap check: error: scontrol show node printed more than 1 MiB on "
                                            "stdout (a node's line is a few KB; a runaway reason or comment?): "
                                            "nothing was drained")
    print(f"refused in {took:.2f} s, peak RSS {maxrss / 1024:.0f} MiB")
    assert took < 20, took  # a loaded 2-vCPU VM: a second or two
    assert maxrss < 200 * 1024, maxrss  # KiB: the interpreter and nodemap, not the 100 MB
    assert slurm.calls() == ["show node -o n2"]


def test_a_bounded_run_keeps_what_fits_and_kills_the_group_past_it(tmp_path):
    from nodemap.proc import TooMuchOutput, run_group
    from test_check_mpi import _gone

    assert run_group(["sh", "-c", "printf abc; printf e >&2"], None, 10, text=False, limit=3) == (0, b"abc", b"e")
    pid = tmp_path / "pid"
    t0 = time.monotonic()
    with pytest.raises(TooMuchOutput) as e:  # a child that started another writer: both end
        run_group(["sh", "-c", f"sleep 60 & echo $! > {pid}; yes >&2"], None, 30, text=False, limit=1 << 16)
    assert e.value.stream == "stderr" and time.monotonic() - t0 < 10
    assert _gone(int(pid.read_text()))
    with pytest.raises(subprocess.TimeoutExpired):
        run_group(["sh", "-c", "exec >&- 2>&-; sleep 60"], None, 0.5, text=False, limit=10)


HOLD = ("from nodemap.slurm.drain import NodeLock; l = NodeLock({folder!r}, 'n2', shared={shared}, level={level!r})"
        ".__enter__(); print(flush=True); import time; time.sleep(60)")


@pytest.fixture
def holder(slurm):
    """Start a process that holds n2's lock (shared or exclusive) until killed."""
    procs = []

    def hold(shared: bool, level: str) -> subprocess.Popen:
        p = subprocess.Popen([sys.executable, "-c", HOLD.format(folder=str(slurm.runtime), shared=shared,
                                                                 level=level)], stdout=subprocess.PIPE)
        procs.append(p)
        p.stdout.readline()  # it holds the lock
        return p

    yield hold
    for p in procs:
        p.kill()
        p.wait()


def test_a_measuring_check_holds_the_lock_alone_and_a_health_check_steps_aside(slurm, tmp_path, capsys, holder):
    have, want = node_files(tmp_path)
    quick = holder(shared=False, level="quick")
    t0 = time.monotonic()
    assert health("--input", have, "--expect-topology", want, "--slurm-drain", "--lock-wait", "1") == 2
    took = time.monotonic() - t0
    err = capsys.readouterr().err
    assert f"another nodemap check (pid {quick.pid}, --level quick) of this node holds" in err
    assert "waited 1 s" in err and "run it again once the other one has ended" in err  # by hand: no interval
    assert 1.0 <= took < 1.0 + 8, took  # waited its second, then stepped aside (tolerant of a loaded VM)
    assert slurm.calls() == []  # neither read nor acted on the node
    # killed (as by Slurm's timeout): its lock file is left, the kernel dropped the hold
    quick.kill()
    quick.wait()
    assert (slurm.runtime / "check-n2.lock").exists()
    assert health("--input", have, "--expect-topology", want, "--slurm-drain") == 0


def test_health_checks_share_the_lock_and_a_measuring_one_waits_for_them(slurm, tmp_path, holder):
    # HealthCheckProgram, prolog and epilog at once on one node: before, the second one exited 2 and slurmd
    # drained the node "Prolog error"/"Epilog error" (issue 35: 3 of 3 nodes by job 28 of 60)
    have, want = node_files(tmp_path)
    holder(shared=True, level="health")
    assert health("--input", have, "--expect-topology", want, "--slurm-drain", "--lock-wait", "0.1") == 0
    with pytest.raises(drain.LockBusy, match=r"--level health\) of this node holds .* \(waited 0.3 s"):
        with drain.NodeLock(str(slurm.runtime), "n2", wait=0.3, level="quick"):
            pass
    with drain.NodeLock(str(slurm.runtime), "n2", shared=True, level="health"):  # shared with the holder
        pass


def test_a_lock_file_naming_a_live_process_that_holds_nothing_is_taken(slurm, tmp_path):
    # a check killed before a reboot left its lock with a pid that a live process has after it (pids restart
    # low): taken over, not "held" until that process ends
    have, want = node_files(tmp_path)
    (slurm.runtime / "check-n2.lock").write_text(f"{os.getppid()} quick\n")
    assert health("--input", have, "--expect-topology", want, "--slurm-drain") == 0
    with drain.NodeLock(str(slurm.runtime), "n2", level="quick"):
        pass


def test_a_lock_that_is_a_link_is_never_followed(slurm, tmp_path):
    target = tmp_path / "elsewhere"
    os.symlink(target, slurm.runtime / "check-n2.lock")
    with pytest.raises(drain.SlurmError):
        with drain.NodeLock(str(slurm.runtime), "n2"):
            pass
    assert not target.exists()


def test_a_shared_runtime_folder_is_refused(tmp_path):
    d = tmp_path / "open"
    d.mkdir(mode=0o777)
    d.chmod(0o777)
    with pytest.raises(drain.SlurmError, match="not a private folder"):
        drain.runtime_dir({"NODEMAP_RUNTIME_DIR": str(d)})


def test_the_check_document_says_json(slurm, tmp_path, capsys):
    have, want = node_files(tmp_path, nics_expected=5)
    assert main(["check", "--level", "health", "--input", have, "--expect-topology", want, "--json",
                 "--slurm-drain=dry-run"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["level"] == "health" and doc["results"] == []


def _failing_doc():
    from nodemap.check import expectations
    from nodemap.check.document import CheckDoc
    from nodemap.check.expected import compare

    want = nodes.two_socket_four_nics()
    doc = CheckDoc("quick", want, expectations.shipped(),
                   checks=compare(want, replace(want, nics=want.nics[:3]), 0.9))
    doc.rejudge()
    return doc


def test_a_fleet_leader_drains_its_own_node(slurm, capsys):
    from nodemap.fleet import command

    command._drain(_failing_doc(), False, 5.0, None)
    assert slurm.calls()[-1] == "update NodeName=n2 State=DRAIN Reason=nodemap: inventory: NICs 3 (limit 4)"
    assert "nodemap check --fleet: slurm: n2: drained" in capsys.readouterr().err


def test_a_fleet_leader_without_scontrol_keeps_its_document(slurm, monkeypatch, capsys):
    from nodemap.fleet import command

    monkeypatch.setenv("PATH", "/nonexistent")
    command._drain(_failing_doc(), False, 5.0, None)  # no exception: the fleet still gets the node
    assert "slurm: not acted on: scontrol is not on PATH" in capsys.readouterr().err


def test_fleet_from_saved_documents_refuses_to_drain(capsys, tmp_path):
    assert main(["check", "--from", str(tmp_path), "--slurm-drain"]) == 2
    assert "--from: --slurm-drain acts on the node" in capsys.readouterr().err


# --- the context that runs the check: slurmd drains a node on any non-zero Prolog/Epilog exit ------------------


def test_a_prolog_that_could_not_judge_exits_0(slurm, tmp_path, capsys, holder, monkeypatch):
    # before: exit 2, and slurmd drained the node "Prolog error" (a reason nodemap never resumes)
    have, want = node_files(tmp_path)
    monkeypatch.setenv("SLURM_SCRIPT_CONTEXT", "prolog_slurmd")  # what slurmd 22.05 sets for a Prolog
    holder(shared=False, level="quick")
    assert health("--input", have, "--expect-topology", want, "--slurm-drain", "--lock-wait", "0.2") == 0
    err = capsys.readouterr().err.splitlines()
    assert "this prolog's check steps aside without judging; the job starts, nothing drained" in err[0]
    assert err[1].startswith("nodemap check: prolog: could not judge (status 2): exit 0, nothing drained")
    assert slurm.calls() == []
    monkeypatch.setenv("SLURM_SCRIPT_CONTEXT", "epilog_slurmd")
    assert health("--input", have, "--expect-topology", want, "--slurm-drain", "--lock-wait", "0.2") == 0
    assert "this epilog's check steps aside" in capsys.readouterr().err


def test_a_health_check_that_could_not_judge_keeps_exit_2_for_slurmds_log(slurm, tmp_path, capsys, holder):
    # slurmd only logs a HealthCheckProgram's non-zero exit, with its output ("error: health_check failed: rc:2
    # output:..."), and leaves the node as it is: the status says why in its log
    have, want = node_files(tmp_path)
    holder(shared=False, level="full")
    assert health("--input", have, "--expect-topology", want, "--slurm-drain", "--lock-wait", "0.2",
                  "--slurm-context", "health") == 2
    assert "it runs again at the next HealthCheckInterval" in capsys.readouterr().err


def test_a_prolog_exits_1_only_for_a_hardware_fault(slurm, tmp_path, capsys, monkeypatch):
    have, want = node_files(tmp_path, nics_expected=5)
    monkeypatch.setenv("SLURM_SCRIPT_CONTEXT", "prolog_slurmd")
    monkeypatch.setenv("STATEFUL", "1")
    assert health("--input", have, "--expect-topology", want, "--slurm-drain") == 1
    assert slurm.calls()[-2:] == ["update NodeName=n2 State=DRAIN Reason=nodemap: inventory: NICs 4 (limit 5)",
                                  "show node -o n2"]  # read again as it ends: still drained, by nodemap
    # a hardware fault with a failing scontrol: still 1, so that slurmd drains it and the job does not start there
    monkeypatch.setenv("FAIL", "1")
    capsys.readouterr()
    assert health("--input", have, "--expect-topology", want, "--slurm-drain") == 1
    assert "exit 1: slurmd drains it ('Prolog error')" in capsys.readouterr().err
    # a healthy node with a failing scontrol: could not act, exit 0 (by hand: 2)
    have, want = node_files(tmp_path)
    assert health("--input", have, "--expect-topology", want, "--slurm-drain") == 0
    assert "prolog: could not judge (status 2): exit 0" in capsys.readouterr().err
    monkeypatch.delenv("SLURM_SCRIPT_CONTEXT")
    assert health("--input", have, "--expect-topology", want, "--slurm-drain") == 2


def test_a_prolog_check_whose_node_was_resumed_meanwhile_exits_0(slurm, tmp_path, capsys, monkeypatch):
    # the soak (benchmarks/soak.py, 2026-12-02): a node class fixed 4.5 s after its drain; an epilog's check that
    # had read the old class ran 7 s on the loaded VM, kept the drain and exited 1 after a newer check had
    # resumed the node: slurmd drained it 'Epilog error', a reason nodemap never resumes (a healthy node drained)
    have, want = node_files(tmp_path, nics_expected=5)
    monkeypatch.setenv("SLURM_SCRIPT_CONTEXT", "epilog_slurmd")
    slurm.node("IDLE+DRAIN", "nodemap: inventory: NICs 4 (limit 5)")
    slurm.node("IDLE", then=True)  # the newer check's resume, while this one ran
    assert health("--input", have, "--expect-topology", want, "--slurm-drain") == 0
    assert slurm.calls() == ["show node -o n2", "show node -o n2"]
    err = capsys.readouterr().err
    assert "n2: resumed while this epilog's check ran" in err and "exit 0" in err
    # still drained as it ends: exit 1 (the job does not start there; slurmd keeps nodemap's reason)
    monkeypatch.setenv("SLURM_SCRIPT_CONTEXT", "prolog_slurmd")
    slurm.node("IDLE+DRAIN", "nodemap: inventory: NICs 4 (limit 5)")
    assert health("--input", have, "--expect-topology", want, "--slurm-drain") == 1
    # by hand, and for HealthCheckProgram, the status is the check's: nothing is read again
    monkeypatch.delenv("SLURM_SCRIPT_CONTEXT")
    slurm.node("IDLE", then=True)
    calls = len(slurm.calls())
    assert health("--input", have, "--expect-topology", want, "--slurm-drain") == 1
    assert len(slurm.calls()) == calls + 1


@pytest.mark.parametrize("full", ["stderr", "stdout"])
def test_a_prolog_whose_log_is_on_a_full_disk_exits_as_its_check_says(slurm, tmp_path, monkeypatch, full):
    # the soak: a node's /var full, the prolog's `2>>prolog.log` failed to write: exit 1 (a line on stderr) or
    # 120 (Python's flush at exit), and slurmd drained the node 'Prolog error'
    monkeypatch.setenv("SLURM_SCRIPT_CONTEXT", "prolog_slurmd")
    monkeypatch.setenv("STATEFUL", "1")
    healthy, _ = node_files(tmp_path)
    have, want = node_files(tmp_path, nics_expected=5)

    def prolog(*extra: str) -> int:
        with open("/dev/full", "w") as dev_full:
            return subprocess.run([sys.executable, "-m", "nodemap", "check", "--level", "health", *extra],
                                  stdin=subprocess.DEVNULL, timeout=120,
                                  **{full: dev_full, "stderr" if full == "stdout" else "stdout": subprocess.DEVNULL}
                                  ).returncode

    assert prolog("--input", healthy, "--expect-topology", healthy, "--slurm-drain") == 0
    assert prolog("--input", have, "--expect-topology", str(tmp_path / "nope.json"), "--slurm-drain") == 0
    assert prolog("--input", have, "--expect-topology", want, "--slurm-drain", "--prom", str(tmp_path / "p.prom")) == 1
    assert "nodemap_check_status" in (tmp_path / "p.prom").read_text()  # written all the same
    assert "update NodeName=n2 State=DRAIN Reason=nodemap: inventory: NICs 4 (limit 5)" in slurm.calls()


def test_a_prologs_own_mistake_drains_nothing(slurm, tmp_path, capsys):
    # a class file that is not there (a typo, a file system not mounted yet) on every node of a centre: before,
    # exit 2 and every node drained "Prolog error" at its next job
    assert health("--expect-topology", str(tmp_path / "nope.json"), "--slurm-drain", "--slurm-context", "prolog") == 0
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("nodemap check: error: --expect-topology") and "nope.json" in err[0]
    assert "exit 0, nothing drained" in err[1]
    assert slurm.calls() == []


def test_a_hung_health_check_in_an_epilog_ends_with_exit_0(tmp_path):
    (tmp_path / "pynvml.py").write_text("import time\n\ndef nvmlInit():\n    time.sleep(60)\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path), PATH="/nonexistent", NODEMAP_RUNTIME_DIR=str(tmp_path / "run"),
               SLURM_SCRIPT_CONTEXT="epilog_slurmd", SLURMD_NODENAME="n2")
    p = subprocess.run([sys.executable, "-m", "nodemap", "check", "--level", "health", "--health-timeout", "2",
                        "--slurm-drain"], capture_output=True, text=True, timeout=30, env=env)
    assert p.returncode == 0, p.stderr
    assert "not done within 2 s" in p.stderr and "could not judge, nothing drained (exit 0)" in p.stderr


def test_a_budgeted_prolog_on_a_busy_node_lets_the_job_start(slurm, tmp_path):
    # issue 35 defect 2: the docs' measuring prolog exec'd `check --level quick --budget 30`, whose exit 2 (busy,
    # could not judge) slurmd turned into a "Prolog error" drain. Two processes spin on this node's CPUs.
    spin = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 2)]
    try:
        env = dict(os.environ, SLURM_SCRIPT_CONTEXT="prolog_slurmd", NODEMAP_CHECK_TINY="1")
        p = subprocess.run([sys.executable, "-m", "nodemap", "check", "--level", "quick", "--budget", "4", "-q",
                            "--slurm-drain", "-o", str(tmp_path / "r"), "--prom", str(tmp_path / "p.prom")],
                           capture_output=True, text=True, timeout=120, env=env)
    finally:
        for s in spin:
            s.kill()
            s.wait()
    doc = json.loads((tmp_path / "r" / "check.json").read_text())
    assert doc["busy"]["busy"], doc["busy"]
    assert p.returncode == 0, p.stderr
    assert "nodemap_check_status{node=\"n2\",level=\"quick\"} 2" in (tmp_path / "p.prom").read_text()  # the metrics say the truth
    assert not any(c.startswith("update") for c in slurm.calls())
