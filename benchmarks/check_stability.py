"""Are `nodemap check` verdicts stable? Idle, under injected load, and with real injected faults.

  python3 benchmarks/check_stability.py [--idle N] [--load M] [--faults F] [--out PREFIX]
  python3 benchmarks/check_stability.py --dry-run --nodemap "python3 stand_in.py" ...   (the logic, no load)

Runs `nodemap check --level quick` as a user does (`-o DIR -q`, then
DIR/check.json), back to back, in five scenarios, and records every run's
verdict, exit status, busy reasons and failed figures:

  idle          N runs (default 20) of the node as it is
  load          M runs (default 10) with one process spinning on every CPU
                and one streaming memory (256 MiB copies), started before
                the check and stopped after it
  fault-limit   F runs (default 5) with a site expectation above the node:
                a DRAM peak of 20x the node's STREAM (the best all-cores
                triad of the idle runs), so the best placement is ~5% of it
  fault-cpuset  F runs under `taskset` with half the CPUs while a site
                expectation holds the full node's STREAM (that best) as
                the DRAM peak and fails below 90% of it: half the cores of a
                node whose STREAM needs them all
  fault-slow    F runs of a test double: this script runs nodemap in-process
                with every STREAM Result forced to half, against the full
                node's STREAM as the DRAM peak with the shipped fractions
                (warn below 72%, fail below 60%): a DRAM fault that halves
                the bandwidth

The DRAM peak is what makes STREAM a hardware figure (the node's fault);
without it STREAM is judged only as a placement (the job's configuration),
which never fails a node.

Targets (issue 29), on the node verdict a scheduler acts on (exit 0
healthy, 1 unhealthy, 2 busy): idle - one node verdict every time and no
fail (on a shared node, among the runs that were not busy: the busy ones
say so and exit 2; the JSON keeps whether every run agreed); load - "busy" every time and no hardware fail; each fault - unhealthy
(exit 1) every time. Writes PREFIX.json (every run) and PREFIX.md (the table) after every
run, so a campaign cut short keeps its runs; the default PREFIX is
benchmarks/results/check_stability_YYYYMMDD_MACHINE. --dry-run runs a
stand-in nodemap (--nodemap) with no load, taskset or test double; the
scenario is in $NODEMAP_STABILITY_SCENARIO of every run. --tiny runs the
check with its testing knob NODEMAP_CHECK_TINY=1 (small host arrays: the
figures are cache bandwidths, the verdict logic the same) where a loaded
machine cannot run the real quick level often enough.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from collections import Counter

from check_quick_vs_full import machine

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCENARIOS = ("idle", "load", "fault-limit", "fault-cpuset", "fault-slow")
SCENARIO_ENV = "NODEMAP_STABILITY_SCENARIO"
SLOW_FACTOR = 0.5  # of every STREAM Result (the test double)
ABOVE = 20.0  # fault-limit: the DRAM peak as a multiple of the node's STREAM
CPUSET_FAIL = 0.90  # fault-cpuset: fail below this fraction of the full node's STREAM
SPIN = "while True: pass"
STREAM = "a = bytearray(1 << 28)\nb = bytearray(1 << 28)\nwhile True: b[:] = a"


def nodemap_command() -> list[str]:
    here = os.path.join(os.path.dirname(sys.executable), "nodemap")
    return [here] if os.access(here, os.X_OK) else [sys.executable, "-m", "nodemap"]


def load_json(path: str) -> dict | None:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


class Load:
    """One spinning process per CPU and one streaming memory, stopped by their pids."""

    def __init__(self, on: bool) -> None:
        self.procs: list[subprocess.Popen] = []
        self.on = on

    def __enter__(self) -> "Load":
        if self.on:
            n = len(os.sched_getaffinity(0))
            self.procs = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(n)]
            self.procs.append(subprocess.Popen([sys.executable, "-c", STREAM]))
            time.sleep(1.0)  # running before the check's first sample
        return self

    def __exit__(self, *exc) -> None:
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            p.wait()


def half_cpus() -> str:
    cpus = sorted(os.sched_getaffinity(0))
    return ",".join(str(c) for c in cpus[: max(1, len(cpus) // 2)])


def run_once(base: list[str], scenario: str, out: str, extra: list[str] = (), prefix: list[str] = ()) -> dict:
    """One check; what the benchmark keeps of it."""
    env = dict(os.environ, **{SCENARIO_ENV: scenario})
    cmd = list(prefix) + base + ["check", "--level", "quick", "-o", out, "-q", *extra]
    load0 = os.getloadavg()[0]
    t0 = time.monotonic()
    p = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.monotonic() - t0
    return dict(record(load_json(os.path.join(out, "check.json")), p.returncode, p.stderr),
                scenario=scenario, wall_s=round(wall, 1), load_before=load0, load_after=os.getloadavg()[0],
                command=" ".join(shlex.quote(shown(c)) for c in cmd))


def shown(arg: str) -> str:
    """A path inside the checkout as relative to it: result files are
    committed, and a checkout's absolute path names the machine it ran on."""
    return os.path.relpath(arg, ROOT) if arg.startswith(ROOT + os.sep) else arg


def record(doc: dict | None, rc: int, stderr: str = "") -> dict:
    """A run's verdict, exit status, busy reasons, fails and whether any is hardware."""
    if doc is None:
        return {"rc": rc, "node": "no document", "verdict": "no document", "busy": False, "complete": False,
                "stderr": stderr[-1500:]}
    figs = doc.get("figures", [])
    fails = [f["key"] for f in figs if f.get("verdict") == "fail"]
    fails += [c["key"] for c in doc.get("checks", []) if c.get("verdict") == "fail"]
    hardware = [f["text"] for f in doc.get("findings", []) if f.get("verdict") == "fail" and f.get("cause") == "hardware"]
    busy = doc.get("busy") or {}
    summary = doc.get("summary", {})
    return {"rc": rc, "node": summary.get("node", summary.get("verdict", "?")), "verdict": summary.get("verdict", "?"),
            "environment": summary.get("environment", ""), "complete": doc.get("complete", False),
            "busy": bool(busy.get("busy")), "busy_reasons": busy.get("reasons", [])[:4], "fails": fails,
            "hardware_fails": hardware, "inconclusive": [f["key"] for f in figs if f.get("verdict") == "inconclusive"],
            "figures": {f["key"]: round(f["value"], 4) for f in figs}, "stderr": stderr[-600:] if rc not in (0, 1, 2)
            else ""}


def full_node_stream(runs: list[dict]) -> float | None:
    """The best all-cores STREAM triad of the idle runs: the full node's
    figure (their median undersells a shared node: on the CI VM the idle runs
    ranged 6.4-18.3 GB/s, memory bandwidth taken by other tenants)."""
    vals = [r["figures"]["host/stream/triad"] for r in runs if r["scenario"] == "idle"
            and "host/stream/triad" in r.get("figures", {})]
    return max(vals) if vals else None


def site_file(folder: str, name: str, text: str) -> str:
    path = os.path.join(folder, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def campaign(a: argparse.Namespace, keep: str, runs: list[dict], saved, notes: list[str]) -> None:
    base = shlex.split(a.nodemap) if a.nodemap else nodemap_command()
    double = base if a.dry_run else [sys.executable, os.path.abspath(__file__), "--as-slow-nodemap", "--"]
    counts = {"idle": a.idle, "load": a.load, "fault-limit": a.faults, "fault-cpuset": a.faults,
              "fault-slow": a.faults}
    for scenario in SCENARIOS:
        cmd, extra, prefix = base, [], []
        if scenario.startswith("fault") and counts[scenario]:
            full = full_node_stream(runs)
            if full is None:
                notes.append(f"{scenario} not run: no idle run gave the node's STREAM to build its expectation on")
                continue
            warn, fail, why = {"fault-limit": (0.72, 0.60, f"{ABOVE:g}x the node's STREAM: a limit above the node"),
                               "fault-cpuset": (CPUSET_FAIL + 0.05, CPUSET_FAIL, "the full node's STREAM"),
                               "fault-slow": (0.72, 0.60, "the node's STREAM; the test double halves it")}[scenario]
            peak = full * (ABOVE if scenario == "fault-limit" else 1.0)
            extra = ["--expect", site_file(keep, f"{scenario}.toml", (
                f'[[limit]]\nkind = "stream"\nmatch = "."\npeak = {peak:.3f}\nwarn = {warn:.2f}\nfail = {fail:.2f}\n'
                f'source = "check_stability.py {scenario}: {why} (best idle run {full:.2f} GB/s)"\n'))]
            if scenario == "fault-cpuset" and not a.dry_run:
                prefix = ["taskset", "-c", half_cpus()]
            if scenario == "fault-slow":
                cmd = double
        for i in range(counts[scenario]):
            with Load(on=scenario == "load" and not a.dry_run):
                r = run_once(cmd, scenario, os.path.join(keep, f"{scenario}-{i}"), extra, prefix)
            runs.append(dict(r, index=i))
            saved()
            print(f"{scenario} {i + 1}/{counts[scenario]}: node {r['node']} exit {r['rc']}"
                  f"{' busy' if r['busy'] else ''}, {r['wall_s']} s", file=sys.stderr, flush=True)


def targets(runs: list[dict]) -> list[dict]:
    """Per scenario: what happened and whether the issue's target was met."""
    out = []
    for s in SCENARIOS:
        rs = [r for r in runs if r["scenario"] == s]
        if not rs:
            continue
        verdicts = Counter(r["node"] for r in rs)
        rcs = Counter(r["rc"] for r in rs)
        busy = sum(r["busy"] for r in rs)
        hw = sum(bool(r.get("hardware_fails")) for r in rs)
        if s == "idle":
            # a shared node is not idle: its busy runs say so (exit 2); the others must agree
            calm = Counter(r["node"] for r in rs if not r["busy"])
            want, met = "no fail; one node verdict among the runs not busy", len(calm) <= 1 and rcs[1] == 0
        elif s == "load":
            want, met = "busy every time, no hardware fail", busy == len(rs) and hw == 0
        else:
            want, met = "unhealthy (exit 1) every time", rcs[1] == len(rs)
        out.append({"scenario": s, "runs": len(rs), "verdicts": dict(verdicts), "exit": {str(k): v for k, v in
                    sorted(rcs.items())}, "busy": busy, "hardware_fail_runs": hw, "target": want, "met": met,
                    "one_verdict_every_run": len(verdicts) == 1})
    return out


def markdown(doc: dict) -> str:
    m = doc["machine"]
    lines = [f"# nodemap check verdict stability ({m['date']})", "",
             f"- machine: `{m['host']}`, {m['cpu']}, {m['cpus']} CPUs; commit {m['commit']}",
             f"- command: `{doc['command']}`", *(f"- note: {n}" for n in doc.get("notes", [])), "",
             "| scenario | runs | node verdicts | exit statuses | busy | runs with a hardware fail | target | met |",
             "|---|---|---|---|---|---|---|---|"]
    for t in doc["targets"]:
        lines.append(f"| {t['scenario']} | {t['runs']} | {', '.join(f'{k} {v}' for k, v in t['verdicts'].items())} | "
                     f"{', '.join(f'{k}: {v}' for k, v in t['exit'].items())} | {t['busy']} | "
                     f"{t['hardware_fail_runs']} | {t['target']} | {'yes' if t['met'] else '**no**'} |")
    lines += ["", "| scenario | run | node | environment | exit | busy | failed | inconclusive | wall s | load before |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for r in doc["runs"]:
        lines.append(f"| {r['scenario']} | {r['index'] + 1} | {r['node']} | {r.get('environment', '')} | {r['rc']} | "
                     f"{'yes' if r['busy'] else 'no'} | {', '.join(r.get('fails', [])) or '-'} | "
                     f"{len(r.get('inconclusive', []))} | {r['wall_s']} | {r['load_before']:.2f} |")
    reasons = Counter(reason_kind(x) for r in doc["runs"] for x in r.get("busy_reasons", []))
    if reasons:
        lines += ["", "busy reasons seen (the first 4 of each run): " + "; ".join(f"{k} ({v})" for k, v in
                                                                                reasons.most_common())]
    return "\n".join(lines) + "\n"


REASON_KINDS = (("other processes used", "other processes' CPU time"), ("memory pressure", "memory pressure"),
                ("memory:", "little memory available"), ("other process(es) on it", "another process on a GPU"),
                ("% busy with no process", "GPU busy before the check"))


def reason_kind(reason: str) -> str:
    where, _, what = reason.partition(": ")
    kind = next((k for mark, k in REASON_KINDS if mark in what), what[:40])
    return f"{kind} {'before the check' if where == 'before the check' else 'during a step'}"


def save(doc: dict, prefix: str) -> str:
    sys.path.insert(0, os.path.join(ROOT, "src"))
    from nodemap.outfile import write

    doc["targets"] = targets(doc["runs"])
    text = markdown(doc)
    write(prefix + ".json", json.dumps(doc, indent=1) + "\n", "--out")
    write(prefix + ".md", text, "--out")
    return text


def slow_nodemap(argv: list[str]) -> int:
    """The test double: nodemap in this process with every STREAM Result SLOW_FACTOR x its bandwidth."""
    import dataclasses

    from nodemap import cli
    from nodemap.check import node

    real = node.measure

    def slow(kind, *args, **kw):
        rs = real(kind, *args, **kw)
        for i, r in enumerate(rs.results):
            if r.benchmark == "memory":
                st = r.stats
                rs.results[i] = dataclasses.replace(r, stats=dataclasses.replace(
                    st, best=st.best * SLOW_FACTOR, median=st.median * SLOW_FACTOR, min=st.min * SLOW_FACTOR,
                    max=st.max * SLOW_FACTOR, mean=st.mean * SLOW_FACTOR, stdev=st.stdev * SLOW_FACTOR),
                    samples=tuple(x * SLOW_FACTOR for x in r.samples))
        return rs

    node.measure = slow
    return cli.main(argv)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:2] == ["--as-slow-nodemap", "--"]:
        return slow_nodemap(argv[2:])
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--idle", type=int, default=20, metavar="N", help="runs on the node as it is (default 20)")
    p.add_argument("--load", type=int, default=10, metavar="M", help="runs under injected load (default 10)")
    p.add_argument("--faults", type=int, default=5, metavar="F", help="runs of each injected fault (default 5)")
    p.add_argument("--out", metavar="PREFIX", help="PREFIX.json and PREFIX.md (default "
                   "benchmarks/results/check_stability_YYYYMMDD_MACHINE)")
    p.add_argument("--machine", default=f"{len(os.sched_getaffinity(0))}cpu-{platform.node()}",
                   help="the machine's name in the default PREFIX")
    p.add_argument("--keep", metavar="DIR", help="keep every run's check.json under DIR (default: a temporary folder)")
    p.add_argument("--nodemap", metavar="CMD", help="the nodemap to run (default: beside this Python)")
    p.add_argument("--note", action="append", default=[], help="a line for the result file (the machine's state)")
    p.add_argument("--tiny", action="store_true", help="the check's testing knob NODEMAP_CHECK_TINY=1: small host "
                   "arrays (cache-resident STREAM) so a loaded machine runs the campaign in minutes, not hours")
    p.add_argument("--from", dest="saved", metavar="JSON", help="judge the runs of a saved PREFIX.json again "
                   "(writes PREFIX.md beside it), run nothing")
    p.add_argument("--dry-run", action="store_true", help="no load, taskset or test double: the script's logic "
                   "with a stand-in --nodemap")
    a = p.parse_args(argv)
    if a.saved:
        with open(a.saved) as f:
            print(save(json.load(f), a.saved.removesuffix(".json")))
        return 0
    if a.tiny:
        os.environ["NODEMAP_CHECK_TINY"] = "1"  # every run inherits it
    prefix = a.out or os.path.join(ROOT, "benchmarks", "results",
                                   f"check_stability_{time.strftime('%Y%m%d', time.gmtime())}_{a.machine}")
    keep = a.keep or tempfile.mkdtemp(prefix="nodemap-stability-")
    os.makedirs(keep, exist_ok=True)
    doc = {"machine": machine(), "command": " ".join(["python3", "benchmarks/check_stability.py", *argv]),
           "notes": a.note, "dry_run": a.dry_run, "runs": []}
    campaign(a, keep, doc["runs"], lambda: save(doc, prefix), doc["notes"])
    print(save(doc, prefix))
    return 0


if __name__ == "__main__":
    sys.exit(main())
