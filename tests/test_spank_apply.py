"""The SPANK plugin's binding without Slurm: slurm/nodemap_apply (apply.c, the
plugin's own planning and per-task code) built with the C compiler, its
tasks checked from inside by benchmarks/spank_apply_gpu.py against `nodemap
plan`: PUs, memory policy and pages, variables here; CUDA's devices too
where CuPy sees a GPU (the device command in docs/slurm.md)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import spank_apply_gpu as check  # noqa: E402

NODEMAP = str(Path(sys.executable).parent / "nodemap") if (Path(sys.executable).parent / "nodemap").exists() \
    else shutil.which("nodemap")


@pytest.fixture(scope="module")
def driver(tmp_path_factory) -> str:
    """nodemap_apply built from the checkout by `make -C slurm driver` (no spank.h needed)."""
    if not (shutil.which("cc") or shutil.which("gcc")) or not NODEMAP:
        pytest.skip("needs a C compiler and the nodemap command")
    out = tmp_path_factory.mktemp("driver")
    subprocess.run(["make", "-C", str(ROOT / "slurm"), "driver", f"BUILD_DIR={out}"], check=True, capture_output=True,
                   timeout=120)
    return str(out / "nodemap_apply")


def test_an_OUT_variable_in_the_environment_does_not_move_the_build(tmp_path):
    # The GPU machines export OUT (their result folder): `make OUT ?= .` built the driver there
    if not (shutil.which("cc") or shutil.which("gcc")):
        pytest.skip("needs a C compiler")
    (tmp_path / "out").mkdir()
    (tmp_path / "build").mkdir()
    subprocess.run(["make", "-C", str(ROOT / "slurm"), "driver", f"BUILD_DIR={tmp_path / 'build'}"], check=True,
                   capture_output=True, timeout=120, env={**os.environ, "OUT": str(tmp_path / "out")})
    assert (tmp_path / "build" / "nodemap_apply").exists()
    assert not (tmp_path / "out" / "nodemap_apply").exists()


def probe(driver: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    code = "import json, os; print(json.dumps({k: v for k, v in os.environ.items() if k.startswith('OMP_')}))"
    return subprocess.run([driver, f"--nodemap-path={NODEMAP}", *args, "--", sys.executable, "-c", code],
                          capture_output=True, text=True, timeout=60, env={**os.environ, **(env or {})})


@pytest.mark.parametrize("ntasks,options,request_args", [
    (2, "", ()), (1, "", ()), (1, "threads=1,verbose", ("--threads", "1"))])
def test_every_task_holds_its_plan(driver, ntasks, options, request_args):
    result = check.check(driver, NODEMAP, ntasks, options, request_args)
    assert result["ok"], [r["verdict"] for r in result["tasks"]]
    assert [r["task"] for r in result["tasks"]] == list(range(ntasks))
    for r in result["tasks"]:
        assert r["got"]["mode"] == "bind" and r["got"]["env"]["OMP_PLACES"] == r["planned"]["env"]["OMP_PLACES"]
        assert r["verdict"].startswith(f"task {r['task']}: PASS  PUs {r['planned']['cpus']}")
    assert ("nodemap: task 0: PUs" in result["driver_stderr"]) == ("verbose" in options)


def test_the_check_fails_a_task_bound_otherwise(driver):
    """Task 1's probe judged against task 0's plan: its PUs and OpenMP places differ (2 PUs here)."""
    tasks = check.plan(NODEMAP, 2, [])
    rows, _ = check.run_tasks(driver, NODEMAP, tasks, "", gpu=False)
    bad = check.problems(rows[1], tasks[0], gpu=False)
    assert any(b.startswith("PUs ") for b in bad) and any(b.startswith("OMP_PLACES=") for b in bad), bad
    assert check.verdict(rows[1], tasks[0], bad, False).startswith("task 0: FAIL  PUs ")


def test_the_jobs_own_values_win_but_visibility_narrows(driver):
    p = probe(driver, "1", env={"OMP_NUM_THREADS": "7", "OMP_PROC_BIND": "spread"})
    got = json.loads(p.stdout)
    assert (got["OMP_NUM_THREADS"], got["OMP_PROC_BIND"]) == ("7", "spread") and "OMP_PLACES" in got, p.stderr


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 PUs")
def test_cores_narrow_the_plan_as_a_steps_cores_do(driver):
    """--cores=LIST goes to `nodemap plan --slurm-cores` as the plugin passes Slurm's step cores."""
    def places(*args):
        return dict(check.plan(NODEMAP, 1, list(args))[0]["env"])["OMP_PLACES"]

    got = json.loads(probe(driver, "--cores=1", "1").stdout)
    assert got["OMP_PLACES"] == places("--slurm-cores", "1") != places()


def test_a_broken_nodemap_costs_one_line_unless_strict(driver, tmp_path):
    bad = tmp_path / "nodemap"
    bad.write_text("#!/bin/sh\necho 'nodemap: broken install (test)' >&2\nexit 3\n")
    bad.chmod(0o755)
    ran = "import os; os.write(1, b'ran\\n')"  # one write: the two tasks print at once
    p = subprocess.run([driver, f"--nodemap-path={bad}", "2", "--", sys.executable, "-c", ran],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.split() == ["ran", "ran"], p.stderr
    assert p.stderr.splitlines() == ["nodemap: `nodemap plan` failed: nodemap: broken install (test); "
                                     "the tasks run unbound"]
    strict = subprocess.run([driver, f"--nodemap-path={bad}", "--nodemap=strict", "2", "echo", "ran"],
                            capture_output=True, text=True, timeout=60)
    assert (strict.returncode, strict.stdout) == (1, "") and "strict: no task starts" in strict.stderr


@pytest.mark.parametrize("args,message", [
    (["--nodemap=threads=x;y", "1", "true"], "--nodemap=threads=x;y: threads=x;y: T must be a whole number from 1 to "
                                             "1048576"),
    (["--nodemap=thread=2", "1", "true"], "--nodemap=thread=2: 'thread=2' is not an option (use off, strict"),
    # accepted before, and every task then ran unbound with the first usage line of `nodemap plan`
    (["--nodemap=threads=abc", "1", "true"], "threads=abc: T must be a whole number from 1 to 1048576"),
    (["--nodemap=threads=0", "1", "true"], "threads=0: T must be a whole number from 1 to 1048576"),
    (["--nodemap=threads=", "1", "true"], "threads=: T must be a whole number from 1 to 1048576"),
    (["--nodemap=nic-rails=1234567", "1", "true"], "nic-rails=1234567: R must be a count (0 to 999999), all or auto"),
    # over-long: was "'' is not an option"
    (["--nodemap=" + "threads=1," * 60, "1", "true"], "--nodemap=threads=1,threads=1,threads=1,threads=1,...: too long "
                                                      "(600 characters, at most 511; use off, strict"),
    (["0", "true"], "NTASKS: a count of tasks"), (["2"], "no command to run")])
def test_wrong_usage_is_refused(driver, args, message):
    p = subprocess.run([driver, *args], capture_output=True, text=True, timeout=10)
    assert p.returncode == 2 and message in p.stderr and "usage: nodemap_apply" in p.stderr, p.stderr


@pytest.mark.gpu
def test_cuda_sees_each_tasks_planned_gpu(driver):
    ngpu, why = check.gpu_count()
    if not ngpu:
        pytest.skip(why)
    result = check.check(driver, NODEMAP, ngpu, gpu=True)
    assert result["ok"], [r["verdict"] for r in result["tasks"]]
    assert all(r["got"]["cuda"]["count"] == len(r["planned"]["gpus"]) for r in result["tasks"])


# CuPy's calls the check makes, answered from FAKE_CUDA_PCI (bus ids, comma-separated)
FAKE_CUPY = """
import os
_PCI = [b for b in os.environ.get("FAKE_CUDA_PCI", "").split(",") if b]
class cuda:
    class runtime:
        getDeviceCount = staticmethod(lambda: len(_PCI))
    class Device:
        def __init__(self, i):
            self.pci_bus_id = _PCI[i]
"""


@pytest.mark.parametrize("pci,code,said", [
    ("", 0, "spank_apply_gpu: skipped: CUDA shows no device"),
    # no GPU planned here, yet CUDA shows one: the check must say so
    ("0000:3B:00.0", 1, "task 0: FAIL  CUDA shows ['0000:3b:00.0'] != plan's GPUs []")])
def test_the_device_command_with_a_stand_in_cupy(driver, tmp_path, pci, code, said):
    (tmp_path / "cupy").mkdir()
    (tmp_path / "cupy" / "__init__.py").write_text(FAKE_CUPY)
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "FAKE_CUDA_PCI": pci,
           "PATH": f"{Path(NODEMAP).parent}:{os.environ['PATH']}"}
    out = tmp_path / "spank_apply.json"
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "spank_apply_gpu.py"), "--driver", driver,
                        "--tasks", "1", "--out", str(out)], capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == code and p.stdout.startswith(said), p.stdout + p.stderr
    if code:
        result = json.loads(out.read_text())
        assert result["gpus"] == 1 and result["tasks"][0]["got"]["cuda"]["pci"] == [pci]


def test_a_task_without_a_numa_node_is_read(driver, fixtures, tmp_path):
    """A task planned on PUs of no NUMA node has an empty memory field ("3\\t0-1\\t\\tOMP_..."): the
    plugin's reader split on runs of tabs, shifted the fields and refused the whole plan."""
    xml = fixtures / "hwloc-xml" / "16amd64-8n2c-cpusets.xml"
    plan = subprocess.run([NODEMAP, "plan", "--input", str(xml), "--tasks", "4", "--emit", "tasks"],
                          capture_output=True, text=True, check=True, timeout=60).stdout
    assert "\t\t" in plan  # the fixture's last task has no NUMA node
    # the fixture's plan, each task's PUs moved to PU 0 (which this machine has)
    stand_in = tmp_path / "nodemap"
    stand_in.write_text(f"#!/bin/sh\n{NODEMAP} \"$@\" --input {xml} | awk -F'\\t' -v OFS='\\t' '{{$2 = \"0\"; print}}'\n")
    stand_in.chmod(0o755)
    code = "import os, sys; os.write(1, (os.environ['OMP_PLACES'] + '\\n').encode())"
    p = subprocess.run([driver, f"--nodemap-path={stand_in}", "4", "--", sys.executable, "-c", code],
                       capture_output=True, text=True, timeout=60)
    assert "cannot read" not in p.stderr and p.returncode == 0, p.stderr
    assert sorted(p.stdout.split()) == sorted(line.split("\t")[4].split("=", 1)[1] for line in plan.splitlines())


def test_a_plan_whose_end_is_unknown_is_not_taken(driver, tmp_path):
    """With SIGCHLD ignored (inherited), `nodemap plan` is reaped unseen and waitpid fails with
    ECHILD: its status was read as 0, a plan that exited 3 after printing was applied."""
    import signal

    bad = tmp_path / "nodemap"
    bad.write_text("#!/bin/sh\nprintf '0\\t0\\t\\tOMP_NUM_THREADS=1\\n'\nexit 3\n")
    bad.chmod(0o755)
    ran = "import os; os.write(1, os.environ.get('OMP_NUM_THREADS', 'unset').encode())"
    p = subprocess.run([driver, f"--nodemap-path={bad}", "1", "--", sys.executable, "-c", ran], capture_output=True,
                       text=True, timeout=60, preexec_fn=lambda: signal.signal(signal.SIGCHLD, signal.SIG_IGN))
    assert p.stdout == "unset" and "cannot tell how `nodemap plan` ended (waitpid: " in p.stderr, (p.stdout, p.stderr)


HARNESS = r"""
#include "apply.h"
#include <fcntl.h>
#include <stdio.h>
#include <sys/resource.h>
int main(void)
{
	struct rlimit r = {5, 5};  /* stdin, stdout, stderr and one pipe: the second pipe2 fails */
	char *argv[] = {"/bin/true", NULL}, *env[] = {NULL}, *out = NULL, err[200];
	setrlimit(RLIMIT_NOFILE, &r);
	int rc = nm_run(argv, env, &out, err, sizeof(err));
	printf("%d %d %d %s\n", rc, fcntl(3, F_GETFD) >= 0, fcntl(4, F_GETFD) >= 0, err);
	return 0;
}
"""


def harness(folder: Path, source: str) -> str:
    """A C program calling the plugin's code (apply.c, cache.c) directly, built in `folder`."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("needs a C compiler")
    (folder / "harness.c").write_text(source)
    subprocess.run([cc, "-std=gnu11", f"-I{ROOT / 'slurm'}", "-o", str(folder / "harness"), str(folder / "harness.c"),
                    *(str(ROOT / "slurm" / f) for f in ("apply.c", "cache.c"))], check=True, capture_output=True,
                   timeout=60)
    return str(folder / "harness")


def test_a_failed_second_pipe_leaks_no_descriptor(tmp_path):
    """slurmstepd lives on after the plan: the first pipe's two ends were left open."""
    out = subprocess.run([harness(tmp_path, HARNESS)], capture_output=True, text=True, timeout=20).stdout
    assert out.startswith("-1 0 0 cannot make a pipe ("), out


# --- options: checked in C with `nodemap plan`'s own limits --------------------------------------

OPTIONS_HARNESS = r"""
#include "apply.h"
#include <stdio.h>
#include <string.h>
int main(void)
{
	char line[4096], why[768];
	setvbuf(stdout, NULL, _IOLBF, 0);
	while (fgets(line, sizeof(line), stdin)) {
		struct nm_options o = {.enabled = -1};
		line[strcspn(line, "\n")] = '\0';
		if (nm_parse_options(line, &o, why, sizeof(why)) == 0)
			printf("ok %s\n", o.request);
		else
			printf("refused %s\n", why);
	}
	return 0;
}
"""


@pytest.fixture(scope="module")
def options_harness(tmp_path_factory):
    p = subprocess.Popen([harness(tmp_path_factory.mktemp("options"), OPTIONS_HARNESS)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE)  # bytes: text mode would split a line at a carriage return
    yield p
    p.stdin.close()
    p.wait(timeout=10)


def parsed_in_c(harness_process, option: str) -> tuple[bool, str]:
    harness_process.stdin.write(option.encode() + b"\n")
    harness_process.stdin.flush()
    verdict, _, rest = harness_process.stdout.readline().decode().rstrip("\n").partition(" ")
    return verdict == "ok", rest


def planner_accepts(flag: str, value: str) -> bool:
    """Whether `nodemap plan FLAG=VALUE` gets past its option checks (in-process, as cli.py)."""
    import argparse
    import contextlib
    import io

    from nodemap.errors import NodemapError
    from nodemap.commands import requestargs

    p = argparse.ArgumentParser()
    requestargs.add_request_arguments(p)
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            args = p.parse_args([f"{flag}={value}"])
        requestargs.request_from_args(args, 1)
    except (SystemExit, NodemapError):
        return False
    return True


KEYS = {"threads": "--threads", "smt": "--smt", "gpus-per-task": "--gpus-per-task", "nic-rails": "--nic-rails"}


@settings(max_examples=300, deadline=None)
@given(key=st.sampled_from(sorted(KEYS)),
       value=st.one_of(st.text(alphabet="0123456789", max_size=8), st.sampled_from(["all", "auto", "ALL", "-1", "+1",
                                                                                   " 1", "1 ", "1_0", "0x1", "1e3"]),
                       st.text(alphabet=st.characters(blacklist_characters=",\n\0", blacklist_categories=("Cs",)),
                               max_size=8)))
def test_a_value_srun_passes_is_one_nodemap_plan_takes(options_harness, key, value):
    """Values are checked in C when srun reads the option (threads=abc, 0 and '' passed srun, and each
    task then ran unbound): what C passes, `nodemap plan` takes; a plain count or word C and the
    planner judge alike (C is stricter only on forms int() also reads: '+1', ' 1', '1_0')."""
    ok, request = parsed_in_c(options_harness, f"{key}={value}")
    if ok:
        flag, canonical = request.split()
        assert flag == KEYS[key] and planner_accepts(flag, canonical), (value, request)
    plain = value.isascii() and (value.isdigit() or value in ("all", "auto"))
    if plain:
        assert ok == planner_accepts(KEYS[key], value), (value, request)


def test_a_key_given_twice_takes_its_last_value_once(options_harness):
    """As `nodemap plan` reads a repeated option; and no command line outgrows its argv (40 repeats
    filled argv's 64 entries, and the last words, the ones that count, were dropped)."""
    assert parsed_in_c(options_harness, ",".join(["threads=1"] * 40 + ["threads=2", "smt=1", "verbose"])) == (
        True, "--threads 2 --smt 1 ")


# --- the planner's failure is said by its own error line; a plan over 8 MiB is refused ------------

def test_a_failed_plan_says_its_error_line_not_its_usage(driver, tmp_path):
    """argparse prints usage lines, then the error: the first line was kept (`usage: nodemap plan
    [-h] [--tasks N] ...`), so the reason never reached the user."""
    stand_in = tmp_path / "nodemap"
    stand_in.write_text(f"#!/bin/sh\nexec {NODEMAP} \"$@\" --no-such-option\n")  # an older nodemap, say
    stand_in.chmod(0o755)
    p = subprocess.run([driver, f"--nodemap-path={stand_in}", "1", "--", "true"], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0 and p.stderr.splitlines() == [
        "nodemap: `nodemap plan` failed: nodemap plan: error: unrecognized arguments: --no-such-option; the tasks "
        "run unbound"], p.stderr


def test_a_plan_over_8_MiB_is_refused_not_cut(driver, tmp_path):
    """The first 8 MiB of a larger plan were kept and applied (here: task 0's line cut in its
    padding, OMP_NUM_THREADS set), though the comment said such a plan is refused."""
    stand_in = tmp_path / "nodemap"
    stand_in.write_text("#!/bin/sh\nprintf '0\\t0\\t\\tOMP_NUM_THREADS=1\\tPAD='\n"
                        "head -c 9437184 /dev/zero | tr '\\0' x\nprintf '\\n'\n")
    stand_in.chmod(0o755)
    probe_code = "import os; os.write(1, os.environ.get('OMP_NUM_THREADS', 'unset').encode())"
    p = subprocess.run([driver, f"--nodemap-path={stand_in}", "1", "--", sys.executable, "-c", probe_code],
                       capture_output=True, text=True, timeout=60)
    assert (p.returncode, p.stdout) == (0, "unset"), p.stderr
    assert p.stderr.splitlines() == ["nodemap: `nodemap plan` failed: its plan is over 8 MiB: refused (not cut: a part "
                                     "of a plan binds wrongly); the tasks run unbound"]
    strict = subprocess.run([driver, f"--nodemap-path={stand_in}", "--nodemap=strict", "1", "--", "echo", "ran"],
                            capture_output=True, text=True, timeout=60)
    assert (strict.returncode, strict.stdout) == (1, "") and "over 8 MiB: refused" in strict.stderr


# --- the planner runs as the job's user only --------------------------------------------------------

SETUID_HARNESS = r"""
#include "apply.h"
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
/* as slurmstepd calls a plugin's user_init: the effective ids the job's user's, real and saved root;
 * argv: PATH UID GID (the first runnable nodemap in PATH is run) */
int main(int argc, char **argv)
{
	char exe[4096] = "", *args[] = {exe, NULL}, *env[] = {NULL}, *out = NULL, err[400];
	(void)argc;
	if (setegid(atoi(argv[3])) < 0 || seteuid(atoi(argv[2])) < 0)
		return 3;
	if (nm_find_nodemap(NULL, argv[1], exe, sizeof(exe)) < 0)
		return 4;
	int rc = nm_run(args, env, &out, err, sizeof(err));
	printf("%d %s|%s\n", rc, out ? out : "", err);
	return 0;
}
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: slurmstepd's ids are root's and the job user's")
def test_the_planner_cannot_take_root_back(tmp_path):
    """slurmstepd runs user_init with only its effective ids set to the job's user; exec kept the
    real (and saved) uid 0, so a `nodemap` first in the job's PATH called setuid(0) and was root.
    And the PATH lookup asked access(2), which answers for the real uid: a nodemap only root may run
    was picked, and the job's user then could not run it."""
    import pwd
    import tempfile

    nobody = pwd.getpwnam("nobody")
    python = "/usr/bin/python3"  # one the job's user may run (this checkout's may sit in a private folder)
    if not os.access(python, os.X_OK):
        pytest.skip(f"needs {python}")
    shared = Path(tempfile.mkdtemp(prefix="nm-setuid-"))  # the job's user must reach the stand-in
    try:
        shared.chmod(0o755)
        roots_only = shared / "root-only"  # first in PATH, runnable by root alone: the job's user must not pick it
        roots_only.mkdir(mode=0o755)
        (roots_only / "nodemap").write_text("#!/bin/sh\necho picked root's >&2\nexit 3\n")
        (roots_only / "nodemap").chmod(0o700)
        stand_in = shared / "nodemap"
        stand_in.write_text(f"#!{python} -I\nimport os\nprint(os.getresuid(), os.getresgid())\n"
                            "try:\n    os.setuid(0)\n    print('root again')\nexcept OSError:\n    print('no root')\n")
        stand_in.chmod(0o755)
        out = subprocess.run([harness(tmp_path, SETUID_HARNESS), f"{roots_only}:{shared}", str(nobody.pw_uid),
                              str(nobody.pw_gid)], capture_output=True, text=True, timeout=60).stdout
    finally:
        shutil.rmtree(shared)
    u, g = nobody.pw_uid, nobody.pw_gid
    assert out.startswith(f"0 ({u}, {u}, {u}) ({g}, {g}, {g})\nno root\n"), out


def test_the_plugin_passes_every_gpu_variable_the_planner_reads():
    """The job's values of nodemap's visibility and order variables reach `nodemap plan` (HIP_VISIBLE_DEVICES
    and the order variables did not: slurmstepd's own were used), so the plan cache's key holds them too."""
    import re

    from nodemap.env import GPU_ORDER_VARS, GPU_VISIBILITY_VARS

    source = (ROOT / "slurm" / "nodemap_spank.c").read_text()
    from_job = re.search(r"from_job\[\] = \{(.*?)\};", source, re.S).group(1)
    names = set(re.findall(r'"([A-Z_]+)"', from_job))
    assert set(GPU_VISIBILITY_VARS) | set(GPU_ORDER_VARS) <= names, names
