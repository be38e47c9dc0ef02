"""The fleet's false-drain and missed-fault rates under real measurement noise.

  python3 benchmarks/fleet_false_drain.py [--nodes 1000] [--seeds 100] [--faults 5] [--out PREFIX]
  python3 benchmarks/fleet_false_drain.py --network [--faulty 20] [--clean 20] [--out PREFIX]   (root)

--network: live, on a networked test cluster (scripts/slurm-test-cluster
start --network: 3 nodes, each in its own namespace with rails rail0 and
rail1 of 200mbit): runs `nodemap check --fleet --slurm-drain` (2 ranks a
node, one a rail) --faulty times with one fault on a random node and rail
(rate at 1/10, loss 1%, delay +2 ms, down: in turn; during a loss the
node's other rail gets a forwarder too, losing nothing: SIBLINGS) and --clean times with
none, in random order; per run whether the faulty node was found (in the
drain list), named with its rail (the reason names it), drained in Slurm,
how long the fleet took, and every other node drained (a false drain).
See network_markdown for what the table says.

For each scenario and seed: N node documents made from one real check
document (its 8 figures, keys, labels, units and topology), each figure's
value drawn around the template's value with the figure's own measured
repetition spread: each measurement's spread is the figure's times a
log-normal factor (sigma 0.5: the two H100 runs' spreads differ up to 3.4x)
and its value's error has sigma = that spread / 2 (Student t with 5 degrees
of freedom: heavier tails than a normal). Then `--faults` nodes get one
judged figure each at 80-90% of the median (latency: 1/0.9-1/0.8 times; a
figure its own check did not judge, the H100 VM's L3, is set aside by the
fleet and gets none). The fleet's own code judges them: `fnodes.node_from_doc`,
`remeasure.suspects` round by round (what the driver re-measures, until each
suspect is settled by its pooled measurements, at most fleetnoise.REMEASURES rounds), each
re-measure drawn from the same noise, its spread afresh (the fault persists), then
`merge.merge(..., remeasured=...)`.
A fault is found when its node is drained for that figure; a healthy node
drained is a false drain.

Scenarios (the spreads' sources, per figure key the larger of the files'):
- h100: benchmarks/results/check_h100_20261125/{quick,full}/check.json, one
  H100 node checked alone (GPU figures 0.2-1.2%, host 1-5.5%);
- co-scheduled: benchmarks/results/fleet_h100_20261123/nodes.jsonl, two
  "nodes" checked at once on one H100 VM (ranks as nodes: 0.4-93%). No rule
  finds a 10% fault inside 93% noise; its misses are the price of no false
  drains, recorded, not hidden.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))

from nodemap.check import expectations  # noqa: E402
from nodemap.fleet import nodes as fnodes  # noqa: E402
from nodemap.fleet import merge  # noqa: E402
from nodemap.fleet import noise as fleetnoise  # noqa: E402
from nodemap.fleet import remeasure  # noqa: E402
from nodemap import records  # noqa: E402
from nodemap.fleet.nodefile import Judged, Remeasured  # noqa: E402

RESULTS = os.path.join(ROOT, "benchmarks", "results")
SCENARIOS = {
    "h100": ["check_h100_20261125/full/check.json", "check_h100_20261125/quick/check.json"],
    "co-scheduled": ["fleet_h100_20261123/nodes.jsonl"],
}
DOF = 5  # Student t: heavier tails than the normal the rule's z assumes
JITTER = 0.5  # sigma of log(a node's recorded spread / the figure's)


def documents(files: list[str]) -> list[dict[str, Any]]:
    out = []
    for rel in files:
        with open(os.path.join(RESULTS, rel)) as f:
            out += [json.loads(x) for x in f if x.strip()] if rel.endswith(".jsonl") else [json.load(f)]
    return out


def template(files: list[str]) -> tuple[dict[str, Any], dict[str, float]]:
    """The first document (its figures and topology) and each figure key's
    spread: the largest any of the files recorded."""
    docs = documents(files)
    spreads: dict[str, float] = {}
    for d in docs:
        for f in d["figures"]:
            spreads[f["key"]] = max(spreads.get(f["key"], 0.0), float(f.get("spread") or 0.0))
    base = docs[0]
    keep = {k: base[k] for k in ("schema", "level", "complete", "topology", "environment")}
    keep["figures"] = [{k: f.get(k) for k in ("key", "area", "label", "path", "unit", "value", "higher_is_better")}
                       for f in base["figures"]]
    keep["findings"] = []
    return keep, spreads


def noise(rng: random.Random, sigma: float) -> float:
    """A relative error with standard deviation `sigma`, Student-t tailed."""
    t = rng.gauss(0, 1) / math.sqrt(rng.gammavariate(DOF / 2, 2) / DOF)
    return sigma * t * math.sqrt((DOF - 2) / DOF)


def measured(rng: random.Random, f: dict[str, Any], spread: float, scale: float) -> dict[str, Any]:
    """One measurement of figure `f` on a node whose part runs at `scale` of
    the norm: its repetitions spread around the figure's typical spread (a
    noisier run is noisier in its value too)."""
    mine = spread * math.exp(rng.gauss(0, JITTER))
    v = f["value"] * (scale if f["higher_is_better"] else 1 / scale)
    return {**f, "value": v * max(0.05, 1 + noise(rng, mine / 2)), "spread": mine}


def one_seed(tmpl: dict[str, Any], spreads: dict[str, float], n: int, faults: int, seed: int,
             th: expectations.FleetRules = expectations.fleet_defaults()) -> dict[str, Any]:
    rng = random.Random(seed)
    keys = [f["key"] for f in tmpl["figures"] if fnodes.NOT_JUDGED not in f["label"]]  # the fleet sets those aside
    injected = {f"node{i:05d}": (rng.choice(keys), rng.uniform(0.80, 0.90)) for i in rng.sample(range(n), faults)}

    def doc(host: str) -> dict[str, Any]:
        bad = injected.get(host)
        figs = [measured(rng, f, spreads[f["key"]], bad[1] if bad and bad[0] == f["key"] else 1.0)
                for f in tmpl["figures"]]
        return {**tmpl, "host": host, "figures": figs}

    nodes = [fnodes.node_from_doc(doc(f"node{i:05d}")) for i in range(n)]
    norm = {f["key"]: f for f in tmpl["figures"]}
    again: Remeasured = {}
    asked_total = node_checks = 0
    for _ in range(fleetnoise.REMEASURES):  # the driver's rounds (driver.remeasure_phase)
        asked = remeasure.suspects(nodes, th, again)
        if not asked:
            break
        asked_total += sum(map(len, asked.values()))
        node_checks += len(asked)  # the driver runs one node check per suspect node and round
        for host, ks in asked.items():  # measured afresh: the same noise, a fault persists
            bad = injected.get(host)
            for k in ks:
                again.setdefault(host, {}).setdefault(k, []).append(records.convert(  # typed, as the driver records it
                    host, measured(rng, norm[k], spreads[k], bad[1] if bad and bad[0] == k else 1.0), Judged, "figure"))
    fleet = merge.merge(nodes, thresholds=th, remeasured=again)
    drained = {d.node: d for d in fleet.drain}
    found = [h for h, (k, _) in injected.items() if h in drained
             and any(x.node == h and x.key == k and x.verdict == "fail" for x in fleet.findings)]
    why = {h: missed_why(fleet, h, injected[h][0]) for h in set(injected) - set(found)}
    return {"seed": seed, "injected": {h: [k, round(s, 4)] for h, (k, s) in injected.items()},
            "suspects": asked_total, "node_checks": node_checks, "found": sorted(found), "missed_why": why,
            "missed": sorted(set(injected) - set(found)),
            "false_drains": sorted(set(drained) - set(injected)),
            "false_drain_reasons": [drained[h].reason for h in sorted(set(drained) - set(injected))][:3],
            "transient": sum(1 for x in fleet.findings if "transient" in x.text)}


def missed_why(fleet: merge.Fleet, host: str, key: str) -> str:
    """How a fault was missed: its first pass did not look like one (not
    measured again), or its re-measures cleared it or left it unsettled."""
    texts = [x.text for x in fleet.findings if x.node == host and x.key == key]
    for outcome, said in remeasure.OUTCOMES.items():
        if any(said in t for t in texts):
            return outcome
    return "not a suspect"


def scenario(name: str, n: int, seeds: int, faults: int, first_seed: int = 1,
             th: expectations.FleetRules = expectations.fleet_defaults()) -> dict[str, Any]:
    tmpl, spreads = template(SCENARIOS[name])
    t0 = time.perf_counter()
    runs = [one_seed(tmpl, spreads, n, faults, s, th) for s in range(first_seed, first_seed + seeds)]
    wall = time.perf_counter() - t0
    injected = faults * seeds
    missed = sum(len(r["missed"]) for r in runs)
    false = sum(len(r["false_drains"]) for r in runs)
    by_key: dict[str, list[int]] = {}
    for r in runs:
        for h, (k, _) in r["injected"].items():
            by_key.setdefault(k, [0, 0])[0] += 1
            by_key[k][1] += h in r["missed"]
    return {"scenario": name, "sources": SCENARIOS[name], "spreads": {k: round(v, 4) for k, v in spreads.items()},
            "nodes": n, "seeds": seeds, "faults_per_seed": faults, "injected": injected, "missed": missed,
            "missed_rate": missed / injected, "false_drains": false,
            "false_drain_rate": false / ((n - faults) * seeds), "seeds_with_a_false_drain":
            sum(1 for r in runs if r["false_drains"]),
            "suspects_per_seed": statistics.mean(r["suspects"] for r in runs),
            "node_checks_per_seed": statistics.mean(r["node_checks"] for r in runs),
            "missed_why": {w: sum(1 for r in runs for x in r["missed_why"].values() if x == w)
                           for w in ("not a suspect", "transient", "unsettled")},
            "transient_per_seed": statistics.mean(r["transient"] for r in runs),
            "missed_by_key": {k: {"injected": v[0], "missed": v[1]} for k, v in sorted(by_key.items())},
            "wall_s": round(wall, 1), "runs": runs}


def markdown(results: list[dict[str, Any]], machine: str, date: str, command: str) -> str:
    lines = [f"# Fleet false drains under measured noise ({date}, {machine})", "", f"`{command}`", "",
             "| scenario | nodes | seeds | faults | missed | missed rate | false drains | false-drain rate | "
             "figures re-measured / seed | node checks re-run / seed | wall |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['scenario']} | {r['nodes']:,} | {r['seeds']} | {r['injected']} | {r['missed']} | "
                     f"{r['missed_rate']:.1%} | {r['false_drains']} | {r['false_drain_rate']:.2e} | "
                     f"{r['suspects_per_seed']:.1f} | {r['node_checks_per_seed']:.1f} | {r['wall_s']} s |")
    fleet = expectations.fleet_defaults()
    lines += ["", "The rule (src/nodemap/fleet/merge.py, docs/fleet.md): first pass: warn below 95% of the class "
              f"median; fail below 95% and robust z <= -{fleet.z_fail:g}, sigma the largest of 1.4826 MAD / "
              "median, the figure's median repetition noise and the node's own. Suspect: a failure, or a figure "
              f"below 95% and {fleet.z_suspect:g} of the figure's typical sigmas below the median where the "
              f"re-measures can resolve it (3 x sigma / sqrt(1 + {fleetnoise.REMEASURES}) <= 10%). Each round re-measures "
              f"the open suspects (at most {fleetnoise.REMEASURES}); the node's measurements are pooled (inverse-variance "
              "weighted mean of the ratios, each sigma the measurement's own repetition noise or the figure's typical "
              "one, whichever is larger; at least the scatter of 3 or more): drained when the pooled value + "
              f"{fleet.z_drain:g} sigma is below 95% and the re-measures alone, at least {fleet.min_fresh}, + "
              f"{fleet.z_fresh:g} of their sigma are below it too (the first pass picked the suspect for being low); "
              "cleared when the pooled value is at least 95% or the re-measures alone lie wholly above it. "
              f"Noise: Student t ({DOF} dof) with sigma = half a per-measurement spread, that spread the figure's "
              f"times a log-normal factor (sigma {JITTER}), drawn afresh for every measurement, re-measures "
              "included. A missed fault is one whose node was not drained for that figure; a false drain, a "
              "healthy node drained."]
    for r in results:
        w = r["missed_why"]
        lines += ["", f"{r['scenario']}: of {r['missed']} missed, {w['not a suspect']} were not suspects (the first "
                  f"pass within the noise: not measured again), {w['transient']} cleared by their re-measures, "
                  f"{w['unsettled']} unsettled after {fleetnoise.REMEASURES}."]
    lines += ["", "In the co-scheduled scenario a 10-20% fault inside 35-93% noise cannot be told from noise: those "
              "figures are not re-measured (a re-measure of that noise settles nothing), only their first-pass "
              "failures are, and the rule leaves such a fault a warning rather than drain on noise."]
    for r in results:
        lines += ["", f"## {r['scenario']}: spreads from {', '.join(r['sources'])}", "",
                  "| figure | spread (range / median) | faults | missed |", "|---|---|---|---|"]
        for k, v in r["spreads"].items():
            m = r["missed_by_key"].get(k, {"injected": 0, "missed": 0})
            lines.append(f"| {k} | {v:.2%} | {m['injected']} | {m['missed']} |")
    return "\n".join(lines) + "\n"



# --- live: a networked test cluster ---------------------------------------------------------------

CLUSTER = os.path.join(ROOT, "scripts", "slurm-test-cluster")
RAIL_RATE = "200mbit"  # the script's default rail rate
FAULTS = {"rate 1/10": ["rate=20mbit"], "loss 1%": ["loss=1%"], "delay +2 ms": ["delay=2ms"], "down": ["down"]}
# The faulty node's other rails during a fault: a lossy rail's forwarder alone costs it as much bandwidth
# as 1% loss (network_faults_20261202_rails.md), so its sibling gets the same forwarder, losing nothing
# (delay=1us: `link` puts a forwarder in for any delay or loss): rail against rail then compares loss alone
SIBLINGS = {"loss 1%": ["delay=1us"]}
# The fleet's rules for three nodes on one 2-core host shared with other work (docs/fleet.md's recipe)
LOOSE = "[fleet]\nlink_bad = 0.5\nlink_latency = 1e6\n"


class Live:
    """A networked test cluster (2 rails) started in a folder of its own, stopped by `close`."""

    def __init__(self, top: str, nodes: int = 3, rate: str = RAIL_RATE) -> None:
        self.top = top
        p = subprocess.run([sys.executable, CLUSTER, "start", top, "--json", "--network", "--nodes", str(nodes),
                            "--rate", rate], capture_output=True, text=True, timeout=300)
        if p.returncode:
            self.close()
            raise SystemExit(f"fleet_false_drain: the networked test cluster did not start: {p.stderr.strip()}")
        info = json.loads(p.stdout)
        self.nodes, self.rails = info["nodes"], info["network"]["nics"]
        bin_dir = os.path.dirname(sys.executable)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SLURMD_"))}
        self.env.update(info["env"], CUDA_VISIBLE_DEVICES="",
                        PATH=os.pathsep.join((bin_dir, os.environ.get("PATH", ""), "/usr/sbin", "/sbin")))

    def link(self, node: str, rail: str, *settings: str) -> None:
        subprocess.run([sys.executable, CLUSTER, "link", self.top, node, rail, *settings], check=True,
                       capture_output=True, timeout=60)

    def states(self) -> dict[str, tuple[str, str]]:
        """node -> (sinfo state, reason)."""
        p = subprocess.run(["sinfo", "-h", "-N", "-o", "%N|%t|%E"], capture_output=True, text=True, env=self.env,
                           timeout=60)
        return {n: (st, why) for n, st, why in (ln.split("|", 2) for ln in p.stdout.splitlines())}

    def resume(self, node: str) -> None:
        subprocess.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"], env=self.env,
                       capture_output=True, timeout=60)

    def close(self) -> None:
        subprocess.run([sys.executable, CLUSTER, "stop", self.top], capture_output=True, timeout=120)
        shutil.rmtree(self.top, ignore_errors=True)


def fleet_run(c: Live, i: int, fault: tuple[str, str, str] | None, opts: list[str]) -> dict[str, Any]:
    """One fleet run with `fault` (kind, node, rail) on its link (cleared after): what it found and drained."""
    out = os.path.join(c.top, f"run{i:03d}")
    links = fault_links(fault, c.rails)
    for node, rail, settings in links:
        c.link(node, rail, *settings)
    load = os.getloadavg()[0]
    t0 = time.monotonic()
    try:
        p = subprocess.run(["srun", "--mpi=pmi2", "-N3", "--ntasks-per-node=2", sys.executable, "-m", "nodemap",
                            "check", "--fleet", "-o", out, "-q", "--no-html", "--expect",
                            os.path.join(c.top, "loose.toml"), "--slurm-drain", *opts],
                           capture_output=True, text=True, env=c.env, timeout=900)
        rc, said = p.returncode, (p.stdout + p.stderr)[-2000:]
    except subprocess.TimeoutExpired:
        rc, said = 124, "timed out after 900 s"
    took = time.monotonic() - t0
    for node, rail, _ in links:
        c.link(node, rail, "clear")
    try:
        with open(os.path.join(out, "fleet.json")) as f:
            doc = json.load(f)
    except (OSError, ValueError):
        doc = {}
    listed = {d["node"]: d["reason"] for d in doc.get("drain", ())}
    states = c.states()
    drained = {n: why for n, (st, why) in states.items() if st.startswith("drain")}
    for n in drained:
        c.resume(n)
    bad = fault[1] if fault else None
    r: dict[str, Any] = {"run": i, "fault": fault[0] if fault else None, "node": bad, "rail": fault[2] if fault else None,
                         "rc": rc, "wall_s": round(took, 1), "load": round(load, 1),
                         "listed": listed, "slurm_drained": drained,
                         "false_drains": sorted((set(listed) | set(drained)) - {bad}),
                         "rails": rail_figures(doc.get("links", ()), bad), "rail_pairs": rail_pairs(out)}
    if fault:
        reason = listed.get(bad, "")
        first = re.search(r"rail\d+", reason)  # the rail the reason names first
        r.update(found=bad in listed, named=bool(first) and first.group() == fault[2], drained=bad in drained,
                 reason=reason[:160])
    if rc not in (0, 1):
        r["said"] = said
    return r


def fault_links(fault: tuple[str, str, str] | None, rails: list[str]) -> list[tuple[str, str, list[str]]]:
    """The links a run changes, (node, rail, `link` settings): the fault's, and for a fault in SIBLINGS
    the node's other rails (all cleared after the run)."""
    if not fault:
        return []
    kind, node, rail = fault
    return [(node, rail, FAULTS[kind])] + [(node, r, SIBLINGS[kind]) for r in rails if r != rail and kind in SIBLINGS]


def rail_pairs(out: str) -> list[dict[str, Any]]:
    """The run's single-rail pair records as pairs.jsonl holds them (each repetition's samples and, for
    latency, floors and ceilings), to read a rail against its sibling beyond what the fleet judged."""
    keep = ("a", "b", "key", "value", "samples", "floors", "ceilings", "nics", "round")
    try:
        with open(os.path.join(out, "pairs.jsonl")) as f:
            recs = [json.loads(ln) for ln in f if ln.strip()]
    except (OSError, ValueError):
        return []
    return [{k: r[k] for k in keep if k in r} for r in recs if re.fullmatch(r"mpi (bw|latency) host rail\d+", r["key"])]


def rail_figures(links: Any, node: str | None) -> dict[str, dict[str, float]]:
    """Per rail figure (`mpi bw host rail0`...): the worst of `node`'s pairs and the worst of the others'
    (bandwidth: the lowest fraction of the best pair; latency: the highest multiple of the lowest pair),
    to show how far a fault moved it."""
    out: dict[str, dict[str, float]] = {}
    for j in links:
        if "rail" not in j["key"]:
            continue
        side = "node" if node in (j["a"], j["b"]) else "others"
        row = out.setdefault(j["key"], {})
        hib = j["higher_is_better"]
        v = float(j["of_best"]) if hib else 1 / float(j["of_best"])
        row[side] = round(v if side not in row else min(row[side], v) if hib else max(row[side], v), 3)
    return out


def network(a: argparse.Namespace) -> dict[str, Any]:
    """--faulty runs with one fault each and --clean without, shuffled, on one networked cluster."""
    rng = random.Random(a.seed)
    kinds = [k for k in FAULTS if k.split()[0] in a.kinds.split(",")]
    if not kinds:
        raise SystemExit(f"fleet_false_drain: --kinds {a.kinds!r} names none of rate, loss, delay, down")
    plan: list[tuple[str, str, str] | None] = [None] * a.clean
    c = Live(tempfile.mkdtemp(prefix="nmfd-"))
    try:
        plan += [(kinds[i % len(kinds)], rng.choice(c.nodes), rng.choice(c.rails)) for i in range(a.faulty)]
        rng.shuffle(plan)
        with open(os.path.join(c.top, "loose.toml"), "w") as f:
            f.write(LOOSE)
        opts = shlex.split(a.fleet_options)
        if a.tiny:
            c.env["NODEMAP_CHECK_TINY"] = "1"
        runs = []
        t0 = time.monotonic()
        for i, fault in enumerate(plan, 1):
            if runs and time.monotonic() - t0 + statistics.median(r["wall_s"] + 10 for r in runs) > a.within:
                print(f"fleet_false_drain: {len(runs)} of {len(plan)} runs within --within {a.within:g} s", flush=True)
                break
            runs.append(fleet_run(c, i, fault, opts))
            r = runs[-1]
            if i == 1 and r["rc"] not in (0, 1):
                raise SystemExit(f"fleet_false_drain: the first fleet run failed (exit {r['rc']}): {r['said']}")
            if a.out:  # each run as it ends: a run cut short keeps what it measured
                with open(a.out + ".runs.jsonl", "a") as f:
                    f.write(json.dumps(r) + "\n")
            print(f"run {i}/{len(plan)}: {r['fault'] or 'no fault'} {r['node'] or ''} {r['rail'] or ''}: rc {r['rc']}, "
                  f"{r['wall_s']} s at load {r['load']}, drained {sorted(r['slurm_drained']) or 'none'}"
                  + (f", found {r['found']} named {r['named']}" if r["fault"] else ""), flush=True)
    finally:
        c.close()
    return {"cluster": "scripts/slurm-test-cluster start --network --nodes 3 (rails rail0, rail1 of "
                       f"{RAIL_RATE})", "fleet_options": a.fleet_options, "rules": LOOSE, "seed": a.seed,
            "tiny": a.tiny, "planned": len(plan), "siblings": SIBLINGS, "runs": runs}


def commit() -> str:
    return subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()


def record(out: str | None, head: dict[str, Any], res: dict[str, Any], markdown: Any) -> None:
    """Print the result's table (markdown(head)); with `out`, write it to OUT.md and head + res to OUT.json."""
    md = markdown(head)
    print(md)
    if out:
        with open(out + ".json", "w") as f:
            json.dump({**head, **res}, f, indent=1)
        with open(out + ".md", "w") as f:
            f.write(md)


def network_summary(res: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per fault kind (and "none"): runs, found, named, drained, false drains, time to find."""
    out: dict[str, dict[str, Any]] = {}
    for r in res["runs"]:
        row = out.setdefault(r["fault"] or "none", {"runs": 0, "found": 0, "named": 0, "drained": 0,
                                                    "false_drains": 0, "errors": 0, "wall_s": [], "load": []})
        row["runs"] += 1
        row["errors"] += r["rc"] not in (0, 1)
        row["false_drains"] += len(r["false_drains"])
        row["load"].append(r["load"])
        for k in ("found", "named", "drained"):
            row[k] += bool(r.get(k))
        if r.get("found") or not r["fault"]:
            row["wall_s"].append(r["wall_s"])
    return out


def network_markdown(res: dict[str, Any], machine: str, date: str, command: str, commit: str) -> str:
    summary = network_summary(res)
    loads = [r["load"] for r in res["runs"]]
    cut = (f" {len(res['runs'])} of the {res['planned']} runs planned fitted the time given (--within)."
           if len(res["runs"]) < res["planned"] else "")
    lines = [f"# The fleet against link faults on a networked test cluster ({date}, {machine})", "",
             f"`{command}` at commit {commit}; load (1-min average at each run's start) {min(loads):.1f}-"
             f"{max(loads):.1f}, median {statistics.median(loads):.1f}.{cut}", "",
             f"Cluster: {res['cluster']}; each run `srun --mpi=pmi2 -N3 --ntasks-per-node=2 nodemap check --fleet "
             f"--slurm-drain --no-html --expect loose.toml {res['fleet_options']}`"
             f"{' with NODEMAP_CHECK_TINY=1' if res['tiny'] else ''} (loose.toml: docs/fleet.md's "
             "rules for 3 nodes on one shared 2-core host: `link_bad = 0.5`, `link_latency = 1e6`)."
             + "".join(f" During a {k} fault the node's other rails had `{' '.join(v)}` (a forwarder, as the "
                       "faulty rail's: SIBLINGS)." for k, v in res.get("siblings", {}).items()
                       if any(r["fault"] == k for r in res["runs"])), "",
             "| fault | runs | found | named with its rail | drained in Slurm | false drains | time (median, range) |",
             "|---|---|---|---|---|---|---|"]
    for kind in [*FAULTS, "none"]:
        row = summary.get(kind)
        if not row:
            continue
        w = row["wall_s"]
        t = f"{statistics.median(w):.0f} s ({min(w):.0f}-{max(w):.0f})" if w else "-"
        dash = kind == "none"
        lines.append(f"| {kind} | {row['runs']} | {'-' if dash else row['found']} | {'-' if dash else row['named']} | "
                     f"{'-' if dash else row['drained']} | {row['false_drains']} | {t} |")
    lines += ["", "found: the faulty node is in the fleet's drain list; named: its reason names the faulty rail; "
              "drained: Slurm shows it drained with that reason; false drain: any other node drained (fleet "
              "list or Slurm), in any run; time: the fleet run's wall time, start to drain (runs that found the fault; "
              "no fault: every run). A run's errors (exit not 0 or 1) are listed below.", "",
              "| run | fault | node | rail | found | named | drained | others drained | wall | load | "
              "faulty rail's worst pair, the node's / the others' (bw: of the best pair; latency: x the lowest) | "
              "against its sibling rail, the same (bw: of it; latency: x it; every repetition; tail: slowest round "
              "trips, x it, most repetitions) | reason |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in res["runs"]:
        figs = r["rails"]
        rail = r["rail"] or "rail0"
        bw, lat = figs.get(f"mpi bw host {rail}", {}), figs.get(f"mpi latency host {rail}", {})
        shown = (f"{bw.get('node', '-')} / {bw.get('others', '-')}; {lat.get('node', '-')} / {lat.get('others', '-')}"
                 if r["fault"] else "-")
        sib = {k.split()[1]: v for k, v in figs.items() if k.startswith(tuple(f"mpi {t} host {rail} vs "
                                                                              for t in ("bw", "latency", "tail")))}
        beside = ("; ".join(f"{sib.get(t, {}).get('node', '-')} / {sib.get(t, {}).get('others', '-')}"
                            for t in ("bw", "latency", "tail")) if r["fault"] and sib else "-")
        yes = {True: "yes", False: "no", None: "-"}
        lines.append(f"| {r['run']} | {r['fault'] or 'none'} | {r['node'] or '-'} | {r['rail'] or '-'} | "
                     f"{yes[r.get('found')]} | {yes[r.get('named')]} | {yes[r.get('drained')]} | "
                     f"{', '.join(r['false_drains']) or '-'} | {r['wall_s']} s | {r['load']} | {shown} | {beside} | "
                     f"{r.get('reason', '').replace('|', '/')[:110] or '-'} |")
    errors = [r for r in res["runs"] if r["rc"] not in (0, 1)]
    lines += ["", f"Errors: {len(errors)}."] + [f"- run {r['run']}: exit {r['rc']}: {r.get('said', '')[-300:]}"
                                                 for r in errors]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--seeds", type=int, default=100)
    ap.add_argument("--faults", type=int, default=5)
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument("--machine", default=f"{platform.node()} ({os.cpu_count()} CPUs)")
    ap.add_argument("--date", default=time.strftime("%Y%m%d"))
    ap.add_argument("--out", help="write PREFIX.json and PREFIX.md")
    ap.add_argument("--network", action="store_true", help="live, on a networked test cluster (root)")
    ap.add_argument("--faulty", type=int, default=20, help="--network: runs with one fault each")
    ap.add_argument("--clean", type=int, default=20, help="--network: runs with none")
    ap.add_argument("--seed", type=int, default=38, help="--network: which nodes, rails and order")
    ap.add_argument("--kinds", default="rate,loss,delay,down",
                    help="--network: the faults the faulty runs take in turn (a row of the table alone: --kinds down)")
    ap.add_argument("--fleet-options", default="--pair-size 128KiB",
                    help="--network: more options of each `nodemap check --fleet`")
    ap.add_argument("--within", type=float, default=math.inf,
                    help="--network: start no run that would end after this many seconds (a shared host's deadline)")
    ap.add_argument("--tiny", action="store_true",
                    help="--network: the node checks with NODEMAP_CHECK_TINY=1 (tiny arrays: docs/slurm.md)")
    a = ap.parse_args(argv)
    given = argv if argv is not None else sys.argv[1:]
    command = shlex.join(["python3", "benchmarks/fleet_false_drain.py", *given])
    if a.network:
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the cluster is stopped on the way out
        res = network(a)
        res["summary"] = network_summary(res)
        record(a.out, {"machine": a.machine, "date": a.date, "commit": commit(), "command": command}, res,
               lambda head: network_markdown(res, a.machine, a.date, command, head["commit"]))
        return 0
    results = []
    for name in a.scenarios.split(","):
        r = scenario(name, a.nodes, a.seeds, a.faults)
        results.append(r)
        print(f"{name}: {a.nodes} nodes x {a.seeds} seeds, {r['injected']} faults at 80-90%: missed {r['missed']} "
              f"({r['missed_rate']:.1%}); false drains {r['false_drains']} (rate {r['false_drain_rate']:.2e}, "
              f"{r['seeds_with_a_false_drain']} seeds with one); {r['suspects_per_seed']:.1f} figures re-measured "
              f"a seed in {r['node_checks_per_seed']:.1f} node checks; missed: {r['missed_why']}; {r['wall_s']} s",
              flush=True)
    if a.out:
        with open(a.out + ".json", "w") as f:
            json.dump({"machine": a.machine, "date": a.date, "command": command, "results": results}, f, indent=1)
        with open(a.out + ".md", "w") as f:
            f.write(markdown(results, a.machine, a.date, command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
