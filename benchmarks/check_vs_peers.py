"""`nodemap check` figures: quick against full on the same node, and both
beside the dedicated benches and BabelStream / nvbandwidth built from source.

  python3 benchmarks/check_vs_peers.py DIR [--out PREFIX]

DIR holds what benchmarks/check_device.sh leaves there (any part may be
missing; what is absent is said):
  quick/check.json, full/check.json     nodemap check --level quick / full
  bench_gpu.json, bench_copies.json,    the dedicated kinds at their defaults
  bench_memory.json                     (nodemap bench KIND -o FILE)
  babelstream.csv                       BabelStream CUDA --csv (float64, 1 GiB arrays)
  nvbandwidth.json                      nvbandwidth -j (host<->device CE)
Prints a markdown report; writes PREFIX.md and PREFIX.json (default
DIR/comparison). Target: every quick figure within 3% of the full one
(host figures on a shared machine may not be; the table says where).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys

TARGET = 0.03


def load(path: str):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError):
        return None


def figures(doc) -> dict[str, dict]:
    return {f["key"]: f for f in doc["figures"]} if doc else {}


def bench_value(rs, metric: str, **params) -> float | None:
    """Best of the first Result of `metric` whose params match."""
    if not rs:
        return None
    for r in rs["results"]:
        if r["metric"] == metric and all(r["params"].get(k) == v for k, v in params.items()):
            return r["stats"]["best"]
    return None


def babelstream(path: str) -> dict[str, float]:
    """function -> GB/s (BabelStream prints MB/s = 1e6 B/s by default)."""
    out = {}
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError:
        return out
    start = next((i for i, ln in enumerate(lines) if ln.startswith("function,")), None)
    if start is None:
        return out
    for row in csv.DictReader(lines[start:]):
        col = next((c for c in row if c and c.startswith("max_") and c.endswith("_per_sec")), None)
        if col and row.get(col):
            # max_MB_per_sec (1e6 B/s, the default) or max_GB_per_sec
            scale = 1.0 if col.lower().startswith("max_gb") else 1e-3
            out[row["function"].strip()] = float(row[col]) * scale
    return out


def nvbandwidth(path: str) -> dict[str, float]:
    """testcase -> GB/s of device 0 (nvbandwidth's JSON: sum of the matrix row)."""
    d = load(path)
    out: dict[str, float] = {}
    if not d:
        return out
    for t in d.get("nvbandwidth", {}).get("testcases", []):
        m = t.get("bandwidth_matrix") or []
        vals = [float(x) for row in m for x in row if x not in ("N/A", None, "")]
        if vals:
            out[t["name"]] = max(vals)
    return out


def quick_vs_full(q: dict, f: dict) -> list[dict]:
    rows = []
    for key in sorted(set(q) & set(f)):
        a, b = q[key]["value"], f[key]["value"]
        rows.append({"key": key, "unit": q[key]["unit"], "quick": a, "full": b, "ratio": a / b,
                     "within": abs(a / b - 1) <= TARGET, "quick_verdict": q[key]["verdict"],
                     "full_verdict": f[key]["verdict"], "spread_full": f[key].get("spread", 0.0)})
    return rows


def peers(d: str, q: dict, f: dict) -> list[dict]:
    """(what, check quick, check full, dedicated bench, peer, peer name)."""
    bg, bc, bm = (load(os.path.join(d, n)) for n in ("bench_gpu.json", "bench_copies.json", "bench_memory.json"))
    bs = babelstream(os.path.join(d, "babelstream.csv"))
    nv = nvbandwidth(os.path.join(d, "nvbandwidth.json"))
    rows = []
    for key, fig in sorted(f.items() or q.items()):
        if key.startswith("gpu/") and key.endswith("/hbm_triad"):
            g = f"GPU{key.split('/')[1]}"
            ded = bench_value(bg, "triad", dtype="float64", gpus=[g])
            rows.append(_row(key, q, f, ded, "nodemap bench gpu (defaults)", bs.get("Triad"), "BabelStream CUDA Triad"))
        elif key.startswith("h2d/") or key.startswith("d2h/"):
            kind = key.split("/")[0]
            a, b = key.split("/")[1].split("->")
            host, gpu = (a, b) if kind == "h2d" else (b, a)
            src, dst = (host.upper(), gpu.upper()) if kind == "h2d" else (gpu.upper(), host.upper())
            ded = bench_value(bc, f"{kind}_ce", src=src, dst=dst)
            local = fig.get("path_class") == "NODE"
            peer = nv.get("host_to_device_memcpy_ce" if kind == "h2d" else "device_to_host_memcpy_ce") if local else None
            rows.append(_row(key, q, f, ded, "nodemap bench copies (defaults)", peer,
                             "nvbandwidth CE (GPU's own NUMA node)" if local else ""))
        elif key == "host/stream/triad":
            ded = None
            if bm:
                ded = max((r["stats"]["best"] for r in bm["results"] if r["metric"] == "triad"), default=None)
            rows.append(_row(key, q, f, ded, "nodemap bench memory (1/core)", None, ""))
    return rows


def _row(key, q, f, ded, ded_name, peer, peer_name) -> dict:
    get = lambda d: d[key]["value"] if key in d else None  # noqa: E731
    return {"key": key, "quick": get(q), "full": get(f), "dedicated": ded, "dedicated_name": ded_name,
            "peer": peer, "peer_name": peer_name}


def fmt(x) -> str:
    return "-" if x is None else f"{x:,.1f}"


def ratio(a, b) -> str:
    return "-" if a is None or b is None or not b else f"{a / b:.3f}"


def report(d: str) -> tuple[str, dict]:
    qd, fd = load(os.path.join(d, "quick", "check.json")), load(os.path.join(d, "full", "check.json"))
    q, f = figures(qd), figures(fd)
    lines = ["# nodemap check: quick against full, and beside the dedicated benches and peers", ""]
    for name, doc in (("quick", qd), ("full", fd)):
        if doc:
            env = doc.get("environment", {})
            gpus = ", ".join(sorted({g["model"] for g in (doc.get("topology") or {}).get("gpus", [])})) or "no GPU"
            dur = f"{doc['started']} .. {doc['finished']}"
            lines.append(f"- {name}: host `{doc['host']}`, {gpus}, {dur}, complete={doc['complete']}, "
                         f"verdict {doc['summary']['verdict']}, nodemap {doc['nodemap_version']}, "
                         f"cupy {env.get('cupy-cuda13x') or env.get('cupy-cuda12x') or '-'}")
        else:
            lines.append(f"- {name}: no check.json in {d}/{name}")
    qvf = quick_vs_full(q, f)
    bad = [r for r in qvf if not r["within"]]
    lines += ["", f"## quick / full (target: within {TARGET:.0%})", "",
              "| figure | unit | quick | full | quick/full | within 3% | verdicts (quick, full) | full spread |",
              "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['key']} | {r['unit']} | {fmt(r['quick'])} | {fmt(r['full'])} | {r['ratio']:.3f} | "
              f"{'yes' if r['within'] else 'NO'} | {r['quick_verdict']}, {r['full_verdict']} | "
              f"{100 * r['spread_full']:.1f}% |" for r in qvf]
    lines.append("")
    lines.append(f"{len(qvf) - len(bad)} of {len(qvf)} figures within {TARGET:.0%}"
                 + (f"; outside: {', '.join(r['key'] for r in bad)}" if bad else "") + ".")
    pr = peers(d, q, f)
    lines += ["", "## beside the dedicated benches and peers (GB/s, best)", "",
              "| figure | check quick | check full | dedicated bench | full/dedicated | peer | full/peer |",
              "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['key']} | {fmt(r['quick'])} | {fmt(r['full'])} | {fmt(r['dedicated'])} ({r['dedicated_name']}) | "
              f"{ratio(r['full'], r['dedicated'])} | {fmt(r['peer'])}{' (' + r['peer_name'] + ')' if r['peer'] else ''} | "
              f"{ratio(r['full'], r['peer'])} |" for r in pr]
    for name in ("babelstream.csv", "nvbandwidth.json"):
        if not os.path.exists(os.path.join(d, name)):
            lines.append(f"\n{name}: not present (not built or not run; see the run's log)")
    return "\n".join(lines) + "\n", {"quick_vs_full": qvf, "peers": pr,
                                     "babelstream": babelstream(os.path.join(d, "babelstream.csv")),
                                     "nvbandwidth": nvbandwidth(os.path.join(d, "nvbandwidth.json"))}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dir")
    p.add_argument("--out", help="PREFIX for PREFIX.md and PREFIX.json (default DIR/comparison)")
    a = p.parse_args(argv)
    text, data = report(a.dir)
    prefix = a.out or os.path.join(a.dir, "comparison")
    with open(prefix + ".md", "w") as f:
        f.write(text)
    with open(prefix + ".json", "w") as f:
        json.dump(data, f, indent=1)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
