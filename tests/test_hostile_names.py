"""Names from outside never write an environment, a config line or a command
(issue 36). A NIC named "mlx5_0<TAB>LD_PRELOAD=/tmp/evil.so" set LD_PRELOAD
in a task through the Slurm plugin's own apply code; a GPU render node named
"renderD128<NEWLINE>NodeName=evil ..." printed gres.conf lines of its own.

Every emitted form is fed arbitrary names (hypothesis) and read back with
its consumer's own grammar: the plugin's task lines by the real C reader
(slurm/nodemap_apply, `make -C slurm driver`), the wrapper by sh and bash,
the native options by shlex and the rankfile syntax, `plan --env` line by
line, gres.conf and slurm.conf as key=value words, Prometheus labels by
prometheus_client's parser, drain reasons by nodemap's own `scontrol show
node` reader. Each finds exactly the planned entries, nothing more, or the
name is refused with one NodemapError that names it; a refusal happens only
for a name outside the grammar machines give (the SPEC below, written here
apart from the code).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, example, given, settings, strategies as st

import nodes
from hostile import nodemap, refused
from nodemap.errors import InputError, NodemapError
from nodemap.mapping import emit
from nodemap.mapping.plan import plan
from nodemap.mapping.request import Request
from nodemap.topology.model import replace

ROOT = Path(__file__).resolve().parent.parent

# The names machines give their devices (IB devices, netdevs, DRM nodes) and ids (UUIDs, MIG, bus ids)
DEVICE_SPEC = re.compile(r"[A-Za-z0-9_.-]{1,64}")
ID_SPEC = re.compile(r"[A-Za-z0-9_.:/-]{1,64}")
HOSTILE = ["mlx5_0\tLD_PRELOAD=/tmp/evil.so", "mlx5_0\n1\t0\t0\tLD_PRELOAD=/x", "mlx5_0,mlx5_9", "a b", "$(reboot)",
           "`id`", "*", "a'b\"c\\", "é", "\x1b[31m", "\x00", "a" * 65, "x=y", "-x", "\u202e", "#c"]
# Mostly arbitrary text, some names a machine gives, and the hostile classics
names = st.one_of(st.text(min_size=1, max_size=24), st.from_regex(r"[A-Za-z0-9_.-]{1,12}", fullmatch=True),
                  st.sampled_from(HOSTILE))
ids = st.one_of(st.text(min_size=1, max_size=24), st.from_regex(r"GPU-[0-9a-f:/.-]{1,20}", fullmatch=True),
                st.sampled_from(HOSTILE))
FEW = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def node(nic: str = "mlx5_0", uuid: str = "GPU-0", model: str = "A100-SXM4-40GB"):
    """2 PUs (0 and 1: every machine has them, so the C apply code can bind), a GPU and an RDMA NIC."""
    t = nodes.build(nodes.Spec(1, 1, 1, 2, gpus=[nodes.Dev(0)], nics=[nodes.Dev(0, name=nic)]))
    return replace(t, gpus=(replace(t.gpus[0], uuid=uuid, model=model),))


def planned(topo, gpu_ids: str = "uuid"):
    return plan(topo, Request(tasks=2, gpu_ids=gpu_ids))


def fair_refusal(e: NodemapError, *named: str) -> None:
    """A refusal is one line naming the name, and only for a name outside the SPEC."""
    text = str(e)
    assert "\n" not in text and len(text) < 600, text
    assert any(ascii(n[:40])[1:-1] in text for n in named), (text, named)
    assert not all((DEVICE_SPEC if i == 0 else ID_SPEC).fullmatch(n) for i, n in enumerate(named)), text


# --- where names enter: a topology file ------------------------------------------------------------


@FEW
@given(names)
@example("mlx5_0\tLD_PRELOAD=/tmp/evil.so")
def test_a_topology_file_with_a_name_no_machine_gives_is_refused_naming_it(tmp_path_factory, nic):
    from nodemap.topology.discover import discover

    path = tmp_path_factory.mktemp("n") / "node.json"
    path.write_text(node(nic).to_json())
    if DEVICE_SPEC.fullmatch(nic):
        assert discover(str(path)).nics[0].name == nic
        return
    with pytest.raises(InputError) as e:
        discover(str(path))
    assert str(e.value).startswith(f"{path}: nics[0].name {ascii(nic[:40])}"), str(e.value)


def test_an_hwloc_xml_device_name_holding_a_newline_is_refused(tmp_path):
    xml = (Path(os.environ.get("NODEMAP_FIXTURES", ROOT.parent / "shared" / "fixtures"))
           / "hwloc-xml" / "32em64t-2n8c2t-pci-normalio.xml")
    if not xml.exists():
        pytest.skip("needs ../shared/fixtures")
    bad = tmp_path / "node.xml"
    bad.write_text(xml.read_text().replace('name="mlx5_0"', 'name="mlx5_0&#10;NodeName=evil"'))
    refused(nodemap("slurm", "gres", "--input", str(bad)), str(bad), "mlx5_0\\nNodeName=evil")


def test_the_issues_gres_and_task_injections_are_one_line_each(tmp_path):
    k = nodes.karolina()
    evil = replace(k, gpus=(replace(k.gpus[0], vendor="AMD", os_names=(
        "renderD128\nNodeName=evil Name=gpu File=/dev/sda",)), *k.gpus[1:]))
    (tmp_path / "gres.json").write_text(evil.to_json())
    r = nodemap("slurm", "gres", "--input", str(tmp_path / "gres.json"))
    refused(r, "gpus[0].os_names[0]", "renderD128\\nNodeName=evil")
    assert "NodeName=evil" not in r.stdout
    tab = replace(k, nics=(replace(k.nics[0], name="mlx5_0\tLD_PRELOAD=/tmp/evil.so"), *k.nics[1:]))
    (tmp_path / "tab.json").write_text(tab.to_json())
    r = nodemap("plan", "--input", str(tmp_path / "tab.json"), "--emit", "tasks")
    refused(r, "nics[0].name", "mlx5_0\\tLD_PRELOAD")
    assert "LD_PRELOAD" not in r.stdout


def test_a_saved_check_documents_node_is_checked_as_a_file_is(tmp_path):
    import check_synth as syn
    from nodemap.check import expectations
    from nodemap.check.document import CheckDoc

    k = nodes.karolina()
    evil = replace(k, nics=(replace(k.nics[0], name="mlx5_0\x1b]0;owned\x07"), *k.nics[1:]))
    doc = CheckDoc(level="quick", topology=evil, expectations=expectations.shipped(), results=[syn.hbm({0: 1400.0})])
    doc.rejudge()
    (tmp_path / "check.json").write_text(doc.to_json())
    refused(nodemap("report", str(tmp_path / "check.json")), "topology", "nics[0].name", "\\x1b]0;owned")


# --- the plugin's task lines, read by the real C reader ------------------------------------------


@pytest.fixture(scope="module")
def driver(tmp_path_factory) -> str:
    """slurm/nodemap_apply (`make -C slurm driver`): the plugin's reader and apply code without Slurm."""
    if not (shutil.which("cc") or shutil.which("gcc")):
        pytest.skip("needs a C compiler")
    out = tmp_path_factory.mktemp("driver")
    subprocess.run(["make", "-C", str(ROOT / "slurm"), "driver", f"BUILD_DIR={out}"], check=True, capture_output=True,
                   timeout=120)
    return str(out / "nodemap_apply")


def applied(driver: str, lines: str, folder: Path) -> list[dict[str, str]]:
    """Each task's environment after nodemap_apply read `lines` as `nodemap plan --emit tasks` printed them."""
    (folder / "lines").write_text(lines)
    fake = folder / "nodemap"  # a `nodemap` that prints the lines: the C side reads them as the plan
    fake.write_text(f"#!/bin/sh\nexec cat {shlex.quote(str(folder / 'lines'))}\n")
    fake.chmod(0o755)
    env = {"PATH": os.environ["PATH"]}
    cmd = ["sh", "-c", 'exec env -0 > "$0/task$NODEMAP_APPLY_TASK"', str(folder)]
    p = subprocess.run([driver, f"--nodemap-path={fake}", "--nodemap=strict", "2", "--", *cmd], env=env,
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    return [dict(kv.split("=", 1) for kv in (folder / f"task{k}").read_text().split("\0") if kv) for k in range(2)]


@FEW
@given(names, ids)
@example("mlx5_0\tLD_PRELOAD=/tmp/evil.so", "GPU-0")
@example("mlx5_0", "GPU-0\n1\t0\t0\tLD_PRELOAD=/tmp/evil.so")
def test_task_lines_read_by_the_plugins_c_reader_set_exactly_the_planned_variables(driver, tmp_path_factory, nic,
                                                                                      uuid):
    topo = node(nic, uuid)
    p = planned(topo)
    try:
        lines = emit.task_lines(topo, p)
    except NodemapError as e:
        fair_refusal(e, nic, uuid)
        return
    event("task lines applied")
    folder = tmp_path_factory.mktemp("apply")
    base = applied(driver, "".join(f"{t.task}\t{t.cpus.format()}\t{t.mems.format()}\n" for t in p.tasks), folder)
    got = applied(driver, lines, folder)
    for t, before, after in zip(p.tasks, base, got):
        assert {k: v for k, v in after.items() if before.get(k) != v} == dict(emit.task_env(topo, p, t))


def test_the_task_lines_last_check_refuses_what_the_c_reader_would_split():
    with pytest.raises(NodemapError, match="one NAME=VALUE field"):
        emit._check_task_env(0, [("NODEMAP_NIC", "a\tLD_PRELOAD=/x")])
    with pytest.raises(NodemapError, match="one NAME=VALUE field"):
        emit._check_task_env(0, [("LD_PRELOAD\t", "x")])
    emit._check_task_env(0, [(f"V{i}", "1") for i in range(300)])  # the C reader keeps every variable
    header = (ROOT / "slurm" / "apply.h").read_text()
    assert f"#define NM_MAX_PLAN ({emit.TASK_TEXT >> 20} << 20)" in header  # the limit is the C reader's own


# --- the sh wrapper: quoted for sh and bash -------------------------------------------------------


def exported(shell: str, line: str, var: str, rank: str) -> dict[str, str]:
    env = {"PATH": os.environ["PATH"], var: rank}
    p = subprocess.run([shell, "-c", line, "sh", "env", "-0"], env=env, capture_output=True, timeout=30)
    assert p.returncode == 0, p.stderr
    return dict(kv.split("=", 1) for kv in p.stdout.decode("utf-8", "surrogateescape").split("\0") if kv)


@settings(max_examples=120, deadline=None)
@given(st.text(max_size=30))
@example('"; rm -rf ~; echo "')
@example("$(id)`id`\\$HOME\n\t'")
@example("\x00x")
def test_the_wrapper_exports_exactly_each_value(value):
    env = [("NODEMAP_NIC", value), ("OMP_PROC_BIND", "close")]
    try:
        line = emit.wrapper("SLURM_LOCALID", [env, []])
    except NodemapError as e:
        assert not value.isprintable() and "cannot be exported" in str(e)
        return
    assert value.isprintable()
    for shell in ("sh", "bash"):
        base = exported(shell, 'exec "$@"', "SLURM_LOCALID", "0")
        got = exported(shell, line, "SLURM_LOCALID", "0")
        assert {k: v for k, v in got.items() if base.get(k) != v} == dict(env)
        assert exported(shell, line, "SLURM_LOCALID", "1") == exported(shell, 'exec "$@"', "SLURM_LOCALID", "1")


# --- launcher-native options: words shlex and the shell's splitting keep whole -----------------------


RANK_LINE = re.compile(r"rank (\d+)=\+n(\d+) slot=([0-9,-]+)")


@FEW
@given(names, ids, st.integers(1, 3))
@example("mlx5_0 -x LD_PRELOAD=/tmp/evil.so", "GPU-0", 1)
def test_native_options_and_the_rankfile_parse_back_to_the_plan(nic, uuid, nodes_):
    topo = node(nic, uuid)
    p = planned(topo, "index")
    for launcher in emit.NATIVE_LAUNCHERS:
        try:
            out = emit.native(topo, p, launcher, rankfile="nodemap.rankfile", nodes=nodes_)
        except NodemapError as e:
            fair_refusal(e, nic)
            return
        event(f"{launcher} options read back")
        printed = " ".join(out["args"])
        assert shlex.split(printed) == printed.split() == out["args"]  # shlex, and $(...)'s field splitting
        assert not any(set(w) & set("*?[") for w in out["args"])  # nothing for the shell to glob
        if launcher == "srun":
            assert [w.split("=")[0] for w in out["args"]] == ["--ntasks-per-node", "--cpu-bind", "--mem-bind",
                                                                "--gpu-bind"]
        if launcher == "mpirun":
            words = out["args"]
            xs = [words[i + 1] for i, w in enumerate(words) if w == "-x"]
            assert len(words) == 4 + 2 * len(xs)
            shared = [kv for kv in emit.task_env(topo, p, p.tasks[0]) if all(
                kv in emit.task_env(topo, p, t) for t in p.tasks)]
            assert [tuple(x.split("=", 1)) for x in xs] == shared
            rows = [RANK_LINE.fullmatch(r) for r in out["rankfile"].splitlines()]
            assert all(rows) and len(rows) == len(p.tasks) * nodes_
            assert [(int(r[1]), int(r[2])) for r in rows] == [(k * 2 + t, k) for k in range(nodes_) for t in range(2)]


def test_a_word_the_shell_would_split_or_glob_is_refused():
    for word in ("a b", "a\tb", "*", "x?", "[a]", "'", '"', "\\", "\x1b", ""):
        with pytest.raises(NodemapError, match="one word"):
            emit.check_word(word)
    emit.check_word("OMP_PLACES={0,64},{1,65}")  # braces and commas stay one word in $(...)


# --- plan --env: one NAME=VALUE a line ------------------------------------------------------------


@FEW
@given(names, ids)
def test_plan_env_lines_read_back_to_the_planned_variables(nic, uuid):
    from nodemap.commands.plan import _env_text

    topo = node(nic, uuid)
    try:
        p = emit.with_env(topo, planned(topo))
    except NodemapError as e:
        fair_refusal(e, nic, uuid)
        return
    tasks, current = {}, None
    for line in _env_text(p).splitlines():
        if line.startswith("task "):
            current = tasks.setdefault(int(line[5:-1]), [])
        else:
            assert line.startswith("  ") and "=" in line
            current.append(tuple(line[2:].split("=", 1)))
    assert tasks == {t.task: list(t.env) for t in p.tasks}


# --- gres.conf and slurm.conf: key=value words ---------------------------------------------------


GRES_KEYS = {"NodeName", "Name", "Type", "File", "Count", "Cores", "Links"}


def words(line: str) -> dict[str, str]:
    """A gres.conf/slurm.conf line as Slurm reads it: whitespace-separated key=value, '#' starts a comment."""
    assert "#" not in line
    pairs = [w.split("=", 1) for w in line.split()]
    assert all(len(kv) == 2 for kv in pairs), line
    keys = [k for k, _ in pairs]
    assert len(set(keys)) == len(keys), line
    return dict(pairs)


@FEW
@given(st.text(max_size=80), names, names)
@example("A100\nNodeName=evil Name=gpu File=/dev/sda", "renderD128\nNodeName=evil", "mlx5_0 Count=9")
def test_gres_and_features_lines_hold_exactly_the_planned_devices(model, render, nic):
    from nodemap.slurm import config

    t = node(nic, model=model)
    amd = replace(t.gpus[0], index=1, vendor="AMD", os_names=(render,), pci_bus_id="0000:99:00.0")
    topo = replace(t, gpus=(t.gpus[0], amd))
    try:
        items = config.gres(topo)
    except NodemapError as e:
        assert render.startswith("renderD") and not re.fullmatch(r"renderD[0-9]{1,6}", render), str(e)
        assert "\n" not in str(e) and ascii(render[:40])[1:-1] in str(e)
        return
    event("gres lines read back")
    lines = [words(f"NodeName=n1 {g.line()}") for g in items]
    assert all(set(f) <= GRES_KEYS for f in lines)
    assert [f["Name"] for f in lines] == ["gpu", "gpu", "nic"]
    assert lines[0]["File"] == "/dev/nvidia0"
    assert lines[1].get("File", "") == (f"/dev/dri/{render}" if render.startswith("renderD") else "")
    assert re.fullmatch(r"[a-z0-9._-]+", lines[0]["Type"]) and re.fullmatch(r"[A-Za-z0-9._-]+", lines[2]["Type"])
    # slurm.conf's words for the node's existing line (f7d7d3d: printed to merge, not as a NodeName line)
    node_line = words(f"NodeName=n1 Gres={config.gres_counts(items)} {config.features_line(topo)}")
    assert set(node_line) == {"NodeName", "Gres", "Features"}
    assert node_line["Features"].split(",") == config.features(topo)
    assert all(re.fullmatch(r"[a-z0-9._-]+", f) for f in config.features(topo))


def test_a_gres_value_that_is_not_one_word_is_refused():
    from nodemap.slurm import config

    for value in ("a b", "a#b", "a=b", "a\nb", "\"x\""):
        with pytest.raises(NodemapError, match="one word"):
            config.Gres("gpu", "a100", value).line()


# --- Prometheus labels, read by prometheus_client ------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(st.text(st.characters(blacklist_categories=()), max_size=200))
@example("n1\"} 1\nnodemap_check_status{node=\"evil\"} 0\n#")
@example("\ud800")
def test_prometheus_labels_parse_back_to_the_planned_series(host):
    parser = pytest.importorskip("prometheus_client.parser")
    import check_synth as syn
    from nodemap.check import expectations
    from nodemap.report import prom
    from nodemap.check.document import CheckDoc

    doc = CheckDoc(level="quick", topology=nodes.karolina(), expectations=expectations.shipped(),
                   results=[syn.hbm({0: 1400.0})])
    doc.rejudge()
    doc.host = "plain"
    plain = [(f.name, s.name, dict(s.labels)) for f in parser.text_string_to_metric_families(prom.render(doc, 0))
             for s in f.samples]
    doc.host = host
    text = prom.render(doc, 0)
    text.encode("utf-8")  # a lone surrogate would end the write in UnicodeEncodeError
    got = [(f.name, s.name, dict(s.labels)) for f in parser.text_string_to_metric_families(text) for s in f.samples]
    shown = host if len(host) <= prom.MAX_LABEL else host[:prom.MAX_LABEL - 3] + "..."
    shown = "".join(c if c.isprintable() or c == "\n" else ascii(c)[1:-1] for c in shown)
    assert got == [(f, n, {**labels, "node": shown}) for f, n, labels in plain]


# --- drain reasons, read back as `scontrol show node` prints them ----------------------------------


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40), st.text(max_size=60), st.text(max_size=20), st.text(max_size=20))
@example("inventory", "GPU0 \x1b[31mA100", "x8 State=DOWN", "[root@2026-12-02T00:00:00]")
@example("inventory", "NICs", "3 [root@2026-12-02T00:00:00]", "")
def test_a_drain_reason_reads_back_whole_from_scontrol_show_node(area, figure, measured, limit):
    from unittest import mock

    from nodemap.slurm import drain

    why = drain.reason(area, figure, measured, limit)
    assert why.startswith(drain.PREFIX) and why.isprintable() and len(why) <= drain.MAX_REASON and "=" not in why
    line = f"NodeName=n2 Arch=x86_64 State=IDLE+DRAIN ThreadsPerCore=1 Reason={why} [root@2026-12-02T00:00:00] " \
           "Comment=(null)\n"
    with mock.patch.object(drain, "scontrol", lambda args, timeout=None: line):
        got = drain.show("n2")
    assert (got.state, got.reason, got.ours) == ("IDLE+DRAIN", why, True)
    assert drain.drain_command("n2", why)[4] == f"Reason={why}"  # one argv word: scontrol splits nothing


# --- bounds ---------------------------------------------------------------------------------------


def test_a_billion_nodes_of_rankfile_is_one_line_at_once(tmp_path):
    r = nodemap("plan", "--launcher", "mpirun", "--emit", "native", "--rankfile", str(tmp_path / "rf"),
                "--nodes", "1000000000")
    refused(r, "--nodes", "1000000000", str(emit.MAX_NODES))
    assert r.seconds < 8 and not (tmp_path / "rf").exists()


def test_a_rankfile_over_its_size_is_refused_before_it_is_built(tmp_path):
    topo = nodes.huge_node()  # 16,384 PUs
    p = plan(topo, Request(tasks=8192))
    with pytest.raises(InputError, match="over nodemap's 64 MiB"):
        emit.native(topo, p, "mpirun", rankfile="rf", nodes=emit.MAX_NODES)


def test_a_node_of_thousands_of_gpus_is_refused_and_a_thousand_is_read_in_linear_time(tmp_path):
    import time

    from nodemap.slurm import config
    from nodemap.topology.discover import MAX_GPUS

    def many(n: int) -> Path:
        path = tmp_path / f"gpus{n}.json"
        path.write_text(nodes.build(nodes.Spec(2, 1, 1, 4, gpus=[nodes.Dev(k % 2) for k in range(n)])).to_json())
        return path

    refused(nodemap("slurm", "gres", "--input", str(many(MAX_GPUS + 1))), f"{MAX_GPUS + 1} GPUs", str(MAX_GPUS))
    from nodemap.topology.discover import discover

    topo = discover(str(many(1000)))
    t0 = time.monotonic()
    config.gres(topo), config.features(topo)
    assert time.monotonic() - t0 < 5  # 21.5 s and 31.8 s for 2,000 GPUs pair by pair; ~0.1 s now
