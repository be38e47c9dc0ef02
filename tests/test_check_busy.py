"""The busy-node detector on a fake /proc and a fake NVML, and what a busy
step does to verdicts, the report and the exit status."""

from __future__ import annotations

import json
import os
import sys
import types

import msgspec

import check_synth as syn
import nodes
from nodemap.check import busy, expectations
from nodemap.check.document import CheckDoc, exit_status, from_dict

SHIPPED = expectations.shipped().table(expectations.BusyRules)

ME = 100


class FakeProc:
    """A /proc under tmp_path: processes with CPU times we set."""

    def __init__(self, root):
        self.root = root
        (root / "proc").mkdir()
        self.meminfo(24 << 20, 20 << 20)

    def stat(self, busy0, busy1, idle=0):
        """/proc/stat: per CPU busy ticks (user) and idle."""
        lines = [f"cpu{i} {b} 0 0 {idle} 0 0 0 0 0 0" for i, b in enumerate((busy0, busy1))]
        (self.root / "proc" / "stat").write_text("cpu 0 0 0 0 0 0 0 0 0 0\n" + "\n".join(lines) + "\n")

    def proc(self, pid, ppid, ticks, comm="spin", cpus="0-1", start=1000, kthread=False, uid=None, cticks=0):
        d = self.root / "proc" / str(pid)
        d.mkdir(exist_ok=True)
        flags = busy.PF_KTHREAD if kthread else 0
        # fields 3..22: state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime
        # cutime cstime priority nice threads itrealvalue starttime
        rest = (f"R {ppid} 1 1 0 -1 {flags} 0 0 0 0 {ticks // 2} {ticks - ticks // 2} {cticks} 0 20 0 1 0 {start} "
                "0 0")
        (d / "stat").write_text(f"{pid} ({comm}) {rest}\n")
        uid = os.getuid() if uid is None else uid
        (d / "status").write_text(f"Name:\t{comm}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nCpus_allowed_list:\t{cpus}\n")

    def meminfo(self, total_kib, avail_kib):
        (self.root / "proc" / "meminfo").write_text(f"MemTotal: {total_kib} kB\nMemAvailable: {avail_kib} kB\n")
        (self.root / "proc" / "loadavg").write_text("2.50 1.00 0.50 3/200 999\n")

    def pressure(self, avg10):
        (self.root / "proc" / "pressure").mkdir(exist_ok=True)
        (self.root / "proc" / "pressure" / "memory").write_text(
            f"some avg10={avg10:.2f} avg60=0.00 avg300=0.00 total=1\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def detector(fake, cpus=(0, 1), gpus=None, siblings=False, gpu_keys=None):
    clock = Clock()
    d = busy.Detector(str(fake.root), cpus=cpus, me=ME, siblings=siblings, gpus=gpus, gpu_keys=gpu_keys, clock=clock,
                      sleep=lambda s: None)
    return d, clock


def run_step(fake, d, clock, after, seconds=10.0):
    """begin, change the processes' times (`after`: callable on fake), end."""
    d.begin()
    after(fake)
    clock.t += seconds
    return d.end()


def test_one_other_spinning_process_on_two_cores_is_busy(tmp_path):
    fake = FakeProc(tmp_path)
    fake.proc(1, 0, 50, comm="init")
    fake.proc(ME, 1, 0, comm="nodemap")
    fake.proc(200, 1, 0, comm="spin")
    d, clock = detector(fake)
    hz = busy.HZ
    # the spinner gets 2/3 of a core while the check's two threads run: 6.7 s of 10
    s = run_step(fake, d, clock, lambda f: f.proc(200, 1, int(6.7 * hz), comm="spin"))
    assert s.busy and s.other_cores >= 0.6
    assert "spin (pid 200) 0.67" in s.reasons[0] and "of the 2 measured" in s.reasons[0]
    assert s.load == [2.5, 1.0, 0.5]  # recorded, not judged


def test_another_user_s_job_is_named_with_its_user(tmp_path):
    fake = FakeProc(tmp_path)
    fake.proc(ME, 1, 0, comm="nodemap")
    fake.proc(200, 1, 0, comm="lmp", uid=4242)
    d, clock = detector(fake)
    s = run_step(fake, d, clock, lambda f: f.proc(200, 1, 10 * busy.HZ, comm="lmp", uid=4242))
    assert s.busy and "lmp (pid 200, user " in s.reasons[0] and s.top[0].user


def test_the_checks_own_processes_and_ranks_are_not_others(tmp_path):
    fake = FakeProc(tmp_path)
    fake.proc(ME, 1, 0, comm="nodemap")
    fake.proc(300, ME, 0, comm="mpiexec")
    fake.proc(301, 300, 0, comm="python")  # a rank the check started
    d, clock = detector(fake)
    hz = busy.HZ

    def spin_ours(f):
        f.proc(ME, 1, 20 * hz, comm="nodemap")
        f.proc(301, 300, 10 * hz, comm="python")
        f.proc(302, 300, 10 * hz, comm="python", start=5000)  # the second rank, started during the step
        f.proc(7, 2, 5 * hz, comm="kworker/0:1", kthread=True)  # the kernel's work is not a job

    s = run_step(fake, d, clock, spin_ours)
    assert not s.busy and s.other_cores == 0.0 and s.reasons == []


def test_sibling_ranks_count_as_ours_only_in_a_job(tmp_path):
    fake = FakeProc(tmp_path)
    fake.proc(50, 1, 0, comm="hydra_pmi_proxy")
    fake.proc(ME, 50, 0, comm="nodemap")
    fake.proc(101, 50, 0, comm="nodemap")
    spin = lambda f: f.proc(101, 50, 10 * busy.HZ, comm="nodemap")  # noqa: E731
    d, clock = detector(fake, siblings=True)
    assert not run_step(fake, d, clock, spin).busy
    fake.proc(101, 50, 0, comm="nodemap")
    d, clock = detector(fake, siblings=False)  # `spin & nodemap check` in a script: a sibling that is not ours
    assert run_step(fake, d, clock, spin).busy


def test_a_process_on_other_cpus_does_not_count(tmp_path):
    fake = FakeProc(tmp_path)
    fake.proc(ME, 1, 0, comm="nodemap", cpus="0")
    fake.proc(200, 1, 0, comm="spin", cpus="1")
    d, clock = detector(fake, cpus=(0,))  # taskset -c 0 nodemap check
    s = run_step(fake, d, clock, lambda f: f.proc(200, 1, 10 * busy.HZ, comm="spin", cpus="1"))
    assert not s.busy
    d, clock = detector(fake, cpus=(0, 1))
    fake.proc(200, 1, 0, comm="spin", cpus="1")
    assert run_step(fake, d, clock, lambda f: f.proc(200, 1, 10 * busy.HZ, comm="spin", cpus="1")).busy


def test_a_process_allowed_on_more_cpus_counts_with_the_measured_share(tmp_path):
    """Under taskset -c 0 on 2 CPUs, a process using 0.8 cores anywhere is 0.4 on CPU 0 (its share): idle;
    pinned to CPU 0 it is all there: busy."""
    fake = FakeProc(tmp_path)
    fake.proc(ME, 1, 0, comm="nodemap", cpus="0")
    fake.proc(200, 1, 0, comm="make", cpus="0-1")
    d, clock = detector(fake, cpus=(0,))
    s = run_step(fake, d, clock, lambda f: f.proc(200, 1, 8 * busy.HZ, comm="make", cpus="0-1"))
    assert not s.busy and s.other_cores == 0.4
    fake.proc(200, 1, 0, comm="make", cpus="0")
    s = run_step(fake, d, clock, lambda f: f.proc(200, 1, 8 * busy.HZ, comm="make", cpus="0"))
    assert s.busy and s.other_cores == 0.8


def test_a_little_background_work_is_idle(tmp_path):
    fake = FakeProc(tmp_path)
    fake.proc(ME, 1, 0, comm="nodemap")
    fake.proc(200, 1, 0, comm="sshd")
    d, clock = detector(fake)
    s = run_step(fake, d, clock, lambda f: f.proc(200, 1, int(0.3 * busy.HZ), comm="sshd"))  # 0.03 cores
    assert not s.busy and 0 < s.other_cores < SHIPPED.other_cores


def test_a_site_files_busy_table_moves_the_line(tmp_path):
    """[busy] other_cores of a site file (check --expect) judges the sample: 0.03 cores of sshd are busy at 0.02."""
    fake = FakeProc(tmp_path)
    fake.proc(ME, 1, 0, comm="nodemap")
    fake.proc(200, 1, 0, comm="sshd")
    (tmp_path / "site.toml").write_text("[busy]\nother_cores = 0.02\n")
    limits = expectations.load(str(tmp_path / "site.toml")).table(expectations.BusyRules)
    d = busy.Detector(str(fake.root), cpus=(0, 1), me=ME, gpus=None, clock=(clock := Clock()), sleep=lambda s: None,
                      limits=limits)
    s = run_step(fake, d, clock, lambda f: f.proc(200, 1, int(0.3 * busy.HZ), comm="sshd"))
    assert s.busy and "(at least 0.02 is busy): sshd" in s.reasons[0]


def test_memory_pressure_and_low_available_memory_are_busy(tmp_path):
    fake = FakeProc(tmp_path)
    fake.proc(ME, 1, 0)
    d, clock = detector(fake)
    assert not run_step(fake, d, clock, lambda f: None).busy  # no PSI file: MemAvailable only
    fake.pressure(25.0)
    s = run_step(fake, d, clock, lambda f: None)
    assert s.busy and "stalled on memory 25%" in s.reasons[0] and s.memory.psi_some_avg10 == 25.0
    fake.pressure(0.0)
    fake.meminfo(24 << 20, 512 << 10)
    s = run_step(fake, d, clock, lambda f: None)
    assert s.busy and "0.5 GiB of 24.0 GiB available" in s.reasons[0]


def test_other_processes_on_a_gpu_and_idle_utilisation(tmp_path):
    fake = FakeProc(tmp_path)
    fake.proc(ME, 1, 0)
    seen = []

    def gpus(mine):
        seen.append(set(mine))
        return [{"index": 0, "bus_id": "0000:07:00.0", "utilization": 97,
                 "others": [{"pid": 4242, "comm": "train.py", "memory": 40 << 30}]},
                {"index": 1, "bus_id": "0000:0b:00.0", "utilization": 55, "others": []}]

    d, clock = detector(fake, gpus=gpus, gpu_keys={"0000:07:00.0": "GPU0", "0000:0b:00.0": "GPU1"})
    s = d.sample(0.5)  # before the check: utilisation without a process of ours counts
    assert s.busy and ME in seen[0]
    assert any("GPU0: 1 other process(es) on it: train.py (pid 4242)" in r for r in s.reasons)
    assert any(r.startswith("GPU1: 55% busy") for r in s.reasons)
    s = run_step(fake, d, clock, lambda f: None)  # during a step the utilisation is ours
    assert not any(r.startswith("GPU1") for r in s.reasons) and s.gpus[0].others[0].pid == 4242


class NVMLError(Exception):
    pass


def test_gpu_activity_through_nvml(monkeypatch):
    """The project's one NVML source reads utilisation and other processes."""
    from nodemap.topology import nvml

    m = types.ModuleType("pynvml")
    m.NVMLError = NVMLError
    m.nvmlInit = m.nvmlShutdown = lambda: None
    m.nvmlDeviceGetCount = lambda: 2
    m.nvmlDeviceGetHandleByIndex = lambda i: i
    m.nvmlDeviceGetPciInfo = lambda h: types.SimpleNamespace(busId=[b"00000000:07:00.0", b"00000000:0B:00.0"][h])
    m.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=[90, 0][h], memory=0)
    m.nvmlDeviceGetComputeRunningProcesses = lambda h: [types.SimpleNamespace(pid=ME, usedGpuMemory=1),
                                                        types.SimpleNamespace(pid=999999999, usedGpuMemory=2 << 30)
                                                        ][: 2 - h]

    def graphics(h):
        raise NVMLError("Not Supported")

    m.nvmlDeviceGetGraphicsRunningProcesses = graphics
    monkeypatch.setitem(sys.modules, "pynvml", m)
    got = msgspec.convert(nvml.gpu_activity({ME}), list[busy.GpuUse])  # as busy.Detector reads it
    assert [g.utilization for g in got] == [90, 0]
    assert got[0].others == [busy.GpuProcess(pid=999999999, comm="", memory=2 << 30)]
    assert got[1].others == []  # only our own process there
    # named as the topology names it: NVML's index counts only what a device cgroup shows (was "GPU0" here)
    assert busy.gpu_reasons(got, True, SHIPPED, keys={"0000:07:00.0": "GPU4"})[0].startswith(
        "GPU4: 1 other process(es)")
    assert busy.gpu_reasons(got, True, SHIPPED)[0].startswith("the GPU at 0000:07:00.0: 1 other process(es)")
    # during a step a process not visible here (a host PID seen from a container) may be the check itself
    assert busy.gpu_reasons(got, False, SHIPPED) == []

    def broken():
        raise NVMLError("Driver Not Loaded")

    m.nvmlInit = broken
    assert nvml.gpu_activity({ME}) is None


# --- what a busy step does ---------------------------------------------------------------


def _busy_doc(busy_latency: bool):
    """A node whose DRAM latency fails (a VM): measured busy or idle."""
    lat = syn.latency({"L1d": (32, 1.2), "DRAM": (1 << 20, 547.0)})
    sample = busy.Sample(busy=busy_latency, reasons=["other processes used 0.98 cores of the 2 measured: spin (pid 7) 0.98"]
                         if busy_latency else [])
    lat.environment["busy"] = sample
    doc = CheckDoc(level="quick", topology=nodes.build(nodes.Spec(1, 1, 1, 2)),
                   expectations=expectations.shipped(), results=[syn.stream({"1/core": (2, 20.0)}), lat])
    doc.busy = busy.summary(busy.Sample(), [("latency against working-set size", sample)])
    doc.rejudge()
    return doc


def test_a_figure_measured_busy_is_inconclusive_not_failed():
    idle = _busy_doc(False)
    dram = next(j for j in idle.judged if j.figure.key.endswith("DRAM"))
    assert dram.verdict == "fail" and not idle.is_busy()
    # slow DRAM latency is a configuration finding (pages, VM, BIOS): the environment fails, the node does not
    assert idle.environment_verdict() == "fail" and exit_status(idle) == 0
    loaded = _busy_doc(True)
    dram = next(j for j in loaded.judged if j.figure.key.endswith("DRAM"))
    assert dram.verdict == "inconclusive" and "measured while the node was busy" in dram.rule
    assert "alone it would be fail" in dram.rule
    assert loaded.verdict() != "fail" and exit_status(loaded) == 2  # retry, do not drain
    assert not any("DRAM" in f.text for f in loaded.findings)  # no fix proposed from interference
    stream = next(j for j in loaded.judged if j.figure.key == "host/stream/triad")
    assert stream.verdict == idle.judged[0].verdict  # an idle step keeps its verdict


def test_a_busy_check_says_so_at_the_top_of_every_report():
    from nodemap.report import html, terminal

    doc = _busy_doc(True)
    lines = terminal.summary(doc).splitlines()
    assert lines[1].startswith("node: could not judge (busy)")  # the verdict first, then why
    assert lines[2].startswith("BUSY: other work shared this node")
    assert "latency against working-set size: other processes used 0.98 cores" in " ".join(lines[3:5])
    assert "1 inconclusive" in terminal.summary(doc)
    page = html.render(doc)
    assert "id='busy'" in page and page.index("id='busy'") < page.index("id='areas'")
    d = json.loads(doc.to_json())
    assert d["busy"]["busy"] is True and d["busy"]["steps"][0]["step"] == "latency against working-set size"
    again = from_dict(d, expectations.shipped())  # re-judged from the saved results: still inconclusive
    assert again.is_busy() and exit_status(again) == 2
    assert next(j for j in again.judged if j.figure.key.endswith("DRAM")).verdict == "inconclusive"
    assert "BUSY" not in terminal.summary(_busy_doc(False))


def test_run_check_samples_before_and_around_every_step(monkeypatch, tmp_path):
    from nodemap.check import node, suite

    fake = FakeProc(tmp_path)
    fake.proc(ME, 1, 0, comm="nodemap")
    fake.proc(200, 1, 0, comm="spin")
    d, clock = detector(fake)
    steps = []

    def measure(kind, argv, level="full", *rest):
        steps.append(kind)
        clock.t += 10.0
        if kind == "latency":  # another job starts spinning during the latency step
            fake.proc(200, 1, 9 * busy.HZ, comm="spin")
            return syn.latency({"L1d": (32, 1.2), "DRAM": (1 << 20, 547.0)})
        return syn.stream({"1/core": (2, 20.0)})

    monkeypatch.setattr(node, "measure", measure)
    monkeypatch.setenv(suite.TINY_ENV, "1")
    doc = node.run_check("quick", expectations.shipped(), detector=d)
    assert doc.is_busy() and doc.busy.before.busy is False
    assert [s.busy for s in doc.busy.steps] == [k == "latency" for k in steps]
    assert doc.busy.reasons[0].startswith("latency against working-set size: other processes used 0.9 cores")
    assert next(j for j in doc.judged if j.figure.key.endswith("DRAM")).verdict == "inconclusive"
    assert exit_status(doc) == 2


def test_a_bandwidth_no_sharing_explains_still_fails_on_a_busy_node(tmp_path):
    """Others took 1 of 2 CPUs: at most half the bandwidth is theirs to cost. STREAM at 5% of the DRAM peak
    fails all the same; at 49% (above the 60% floor once doubled) it is inconclusive."""
    site = tmp_path / "site.toml"
    site.write_text('[[limit]]\nkind = "stream"\nmatch = "."\npeak = 40.0\nwarn = 0.72\nfail = 0.60\n'
                    'source = "our DIMMs"\n')
    exp = expectations.load(str(site))
    sample = busy.Sample(busy=True, cpus=2, other_cores=1.0,
                         reasons=["other processes used 1 cores of the 2 measured (at least 0.5 is busy): spin (pid 7) 1"])

    def judged(best, per_core=None):
        rs = syn.stream({"1/core": (2, per_core or best), "1/L3": (1, best)})
        rs.environment["busy"] = sample
        doc = CheckDoc(level="quick", topology=nodes.build(nodes.Spec(1, 1, 1, 2)), expectations=exp, results=[rs])
        doc.busy = busy.summary(None, [("STREAM placement sweep", sample)])
        doc.rejudge()
        return next(j for j in doc.judged if j.figure.key == "host/stream/best"), doc


    j, doc = judged(2.0, per_core=0.5)  # one thread per core at a quarter of the best: fails alone, even x2
    assert j.verdict == "fail" and "even credited x2.00" in j.rule and exit_status(doc) == 1
    placement = next(k for k in doc.judged if k.figure.key == "host/stream/triad")
    assert placement.figure.kind == "placement" and placement.verdict != "fail"  # its peak shared the interference
    j, doc = judged(19.7)
    assert j.verdict == "inconclusive" and exit_status(doc) == 2
    pressure = msgspec.structs.replace(sample, reasons=sample.reasons + ["memory pressure: tasks stalled on memory 30% ..."])
    rs = syn.stream({"1/core": (2, 2.0)})
    rs.environment["busy"] = pressure  # memory pressure has no measure to credit: not judged
    doc = CheckDoc(level="quick", topology=nodes.build(nodes.Spec(1, 1, 1, 2)), expectations=exp, results=[rs])
    doc.rejudge()
    assert next(j for j in doc.judged if j.figure.key == "host/stream/best").verdict == "inconclusive"


def test_work_that_stopped_before_the_steps_ran_does_not_make_the_check_busy():
    cpu = busy.Sample(busy=True, reasons=["other processes used 1 cores of the 2 measured: make (pid 9) 1"])
    idle = busy.Sample()
    assert busy.summary(cpu, []).busy  # nothing measured yet: what we know is the sample before
    done = busy.summary(cpu, [("STREAM placement sweep", idle)])
    assert not done.busy and done.reasons[0].startswith("before the check: other processes")  # still said
    gpu = busy.Sample(busy=True, reasons=["GPU0: 97% busy with no process of this check (at least 10% is busy)"])
    assert busy.summary(gpu, [("GPU memory bandwidth (BabelStream)", idle)]).busy


def test_work_of_another_container_is_seen_through_proc_stat(tmp_path):
    """On the shared CI VM the other agents' processes are in other PID namespaces: /proc/PID cannot show
    them, /proc/stat's per-CPU time does. Our own ranks that ended (in our cutime) are not others."""
    hz = busy.HZ
    fake = FakeProc(tmp_path)
    fake.proc(ME, 1, 0, comm="nodemap")
    fake.stat(0, 0)
    d, clock = detector(fake)

    def hidden_job(f):  # 10 s: we used 10 s of CPU, the CPUs were busy 10 + 12 s
        f.proc(ME, 1, 10 * hz, comm="nodemap")
        f.stat(11 * hz, 11 * hz)

    s = run_step(fake, d, clock, hidden_job)
    assert s.busy and s.unseen_cores == 1.2 and "1.2 by work not visible here" in s.reasons[0]

    fake.proc(ME, 1, 0, comm="nodemap")
    fake.stat(0, 0)
    d, clock = detector(fake)

    def our_ranks_ended(f):  # the ranks' 18 s are in our cutime once waited for
        f.proc(ME, 1, 2 * hz, comm="nodemap", cticks=18 * hz)
        f.stat(10 * hz, 10 * hz)

    s = run_step(fake, d, clock, our_ranks_ended)
    assert not s.busy and s.unseen_cores == 0.0


def test_a_short_step_with_a_spinner_is_busy_at_its_real_rate(tmp_path):
    """Rates are over the step's real window: a spinner's 2/3 core over a 0.1 s step (7 ticks) is busy.
    Divided by a 1 s floor it read 0.07 cores: a 2-core node could not be judged busy under 0.25 s, and
    the 0.5 s sample before the check read half the load."""
    hz = busy.HZ
    fake = FakeProc(tmp_path)
    fake.proc(ME, 1, 0, comm="nodemap")
    fake.proc(200, 1, 0, comm="spin")
    fake.stat(0, 0)
    d, clock = detector(fake)

    def spinning(f, seconds):
        f.proc(200, 1, round(0.67 * seconds * hz), comm="spin")
        f.stat(round(0.67 * seconds * hz), 0)

    s = run_step(fake, d, clock, lambda f: spinning(f, 0.1), seconds=0.1)
    assert s.busy and 0.5 <= s.other_cores <= 0.67, s
    assert s.unseen_cores == 0.0  # the spinner's ticks on /proc/stat are not counted twice

    fake.proc(200, 1, 0, comm="spin")
    fake.stat(0, 0)
    d, clock = detector(fake)
    d.sleep = lambda seconds: (spinning(fake, seconds), setattr(clock, "t", clock.t + seconds))
    s = d.sample(0.5)  # the sample before the check
    assert s.busy and s.other_cores == 0.66, s


def test_a_short_idle_step_is_not_busy_for_one_clock_tick(tmp_path):
    """/proc's counters are whole ticks: a daemon's one tick and each CPU's one tick in a 20 ms step
    (2 ticks) would read 0.5 and 1.0 cores; one tick less per counter, they read 0."""
    fake = FakeProc(tmp_path)
    fake.proc(ME, 1, 0, comm="nodemap")
    fake.proc(300, 1, 0, comm="sshd")
    fake.stat(0, 0)
    d, clock = detector(fake)

    def a_tick_each(f):
        f.proc(300, 1, 1, comm="sshd")
        f.proc(ME, 1, 1, comm="nodemap")
        f.stat(2, 1)

    s = run_step(fake, d, clock, a_tick_each, seconds=0.02)
    assert not s.busy and s.other_cores == 0.0 and s.top == [], s
