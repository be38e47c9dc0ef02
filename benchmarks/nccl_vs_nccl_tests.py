"""`nodemap bench nccl` beside NVIDIA nccl-tests: the ratio per size (issue 21).

    python3 benchmarks/nccl_vs_nccl_tests.py OUTDIR

Reads the blocks benchmarks/nccl_vs_nccl_tests.sh left in OUTDIR/blocks:
nodemap_MODE_OP_rR.json (nodemap's result sets) and nccltests_MODE_OP_rR.txt
(nccl-tests' stdout), MODE single or mpi, R the round. Prints a markdown
table and writes OUTDIR/nccl_vs_nccl_tests.md and .json.

How the figures are chosen, the same way for both tools:
  - one block = one process (or one mpirun) of one tool for one operation;
    inside it, each size is timed --repeats / -N times (20 operations each);
    the block's figure is the median of those repetitions;
  - over the rounds (alternating blocks), the best block counts, and the
    spread of the block figures across rounds is shown beside it;
  - ratio = nccl-tests time / nodemap time for the same size and place,
    which is nodemap busbw / nccl-tests busbw (same size, same bus factor),
    but stays exact at the small sizes where nccl-tests prints busbw 0.00.
    Above 1: nodemap is faster.
Flags: wrong elements (nccl-tests #wrong != 0 or nodemap's wrong-element
message), blocks cut short (no closing line / result set not complete).
nodemap's result files are read by nodemap's own reader (schema checked).
"""

from __future__ import annotations

import json
import os
import re
import statistics
import sys
import time

from nodemap.bench import resultfile
from nodemap.errors import InputError

TOOLS = ("nodemap", "nccltests")
OPS = ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "sendrecv")
BLOCK = re.compile(r"^(nodemap|nccltests)_(single|mpi)_([a-z_]+)_r(\d+)\.(json|txt)$")
LARGE = 64 << 20  # sizes from here on are summarised (bandwidth-bound)


# --- nccl-tests' stdout -----------------------------------------------------------


def _number(tok: str) -> float | None:
    try:
        return float(tok)
    except ValueError:
        return None


def _half(toks: list[str]) -> dict | None:
    """time algbw busbw #wrong (one of out-of-place / in-place); None if malformed."""
    if len(toks) < 4:
        return None
    t, alg, bus = (_number(x) for x in toks[:3])
    if t is None or alg is None or bus is None:
        return None
    wrong = None if toks[3] == "N/A" else _number(toks[3])
    if wrong is None and toks[3] != "N/A":
        return None
    return {"time_us": t, "algbw": alg, "busbw": bus, "wrong": None if wrong is None else int(wrong)}


def table_row(line: str) -> dict | None:
    """One result line: size count type redop root, then out-of-place and
    in-place (time algbw busbw #wrong each), as nccl-tests' util.cu prints it."""
    toks = line.split()
    if len(toks) < 9 or not (toks[0].isdigit() and toks[1].isdigit()):
        return None
    out = _half(toks[5:9])
    if out is None:
        return None
    row = {"size": int(toks[0]), "count": int(toks[1]), "type": toks[2], "redop": toks[3], "root": toks[4],
           "out": out}
    inp = _half(toks[9:13])
    if inp is not None:
        row["in"] = inp
    return row


HEADER = re.compile(r"^# nccl-tests version (\S+) nccl-headers=(\d+) nccl-library=(\d+)")
DEVICE = re.compile(r"^#\s+Rank\s+(\d+) Group\s+\d+ Pid\s+\d+ on\s+(\S+) device\s+(\d+) \[([0-9a-fA-F:]+)\] (.+)$")


def parse_nccl_tests(text: str) -> dict:
    """nccl-tests' stdout -> version, devices, table rows, whether it finished.
    Only newline-terminated lines count: a block killed mid-line loses that
    line, never reads a cut-off number."""
    lines = text.split("\n")[:-1]  # the last piece has no newline: complete or cut, it is no line
    res: dict = {"version": None, "nccl_headers": None, "nccl_library": None, "devices": [], "rows": [],
                 "complete": False, "out_of_bounds": None, "errors": []}
    for line in lines:
        if line.startswith("#"):
            _comment(res, line)
        else:
            row = table_row(line)
            if row is not None:
                res["rows"].append(row)
    return res


def _comment(res: dict, line: str) -> None:
    m = HEADER.match(line)
    if m:
        res["version"], res["nccl_headers"], res["nccl_library"] = m.group(1), int(m.group(2)), int(m.group(3))
    elif DEVICE.match(line):
        m = DEVICE.match(line)
        res["devices"].append({"rank": int(m.group(1)), "host": m.group(2), "device": int(m.group(3)),
                               "pci": m.group(4), "name": m.group(5).strip()})
    elif line.startswith("# Out of bounds values"):
        res["out_of_bounds"] = int(line.split(":", 1)[1].split()[0])
    elif line.startswith("# Collective test concluded"):
        res["complete"] = True
    elif line.startswith("# error:"):
        res["errors"].append(line[len("# error:"):].strip())


def nccl_tests_cases(parsed: dict) -> dict:
    """(size, place) -> {"times": [us per cycle], "busbw": [...], "wrong": total or None}."""
    cases: dict = {}
    for row in parsed["rows"]:
        for place in ("out", "in"):
            if place not in row:
                continue
            h = row[place]
            c = cases.setdefault((row["size"], place), {"times": [], "busbw": [], "wrong": None})
            c["times"].append(h["time_us"])
            c["busbw"].append(h["busbw"])
            if h["wrong"] is not None:
                c["wrong"] = (c["wrong"] or 0) + h["wrong"]
    return cases


# --- nodemap's result set -----------------------------------------------------------


def nodemap_cases(rs) -> dict:
    """(size, place) -> {"times": [us per repetition], "busbw": [...], "wrong": 0} of one op's ResultSet."""
    cases = {}
    for r in rs.results:
        if r.benchmark != "nccl":
            continue
        p = r.params
        factor = p.get("bus_factor") or 1.0  # one rank: the values are algbw
        times = [p["size"] * factor / v / 1e3 for v in r.samples]  # GB/s -> us
        cases[(p["size"], "in" if p["inplace"] else "out")] = {
            "times": times, "busbw": list(r.samples), "wrong": p.get("wrong", 0)}
    return cases


def nodemap_flags(rs) -> list[str]:
    # the operations whose elements came back wrong: the set's typed failures (a block saved before
    # failures were typed says them among its messages only)
    flags = [f.message for f in rs.failures] or [m for m in rs.messages if "wrong" in m]
    if not rs.complete:
        flags.append("result set not complete")
    return flags


# --- blocks, pairing, ratios ------------------------------------------------------


def load_blocks(directory: str) -> list[dict]:
    """Every block file in `directory`: tool, mode, op, round, cases, flags, header info."""
    blocks = []
    for name in sorted(os.listdir(directory)):
        m = BLOCK.match(name)
        if not m:
            continue
        tool, mode, op, rnd = m.group(1), m.group(2), m.group(3), int(m.group(4))
        path = os.path.join(directory, name)
        b = {"tool": tool, "mode": mode, "op": op, "round": rnd, "file": name}
        try:
            if tool == "nodemap":
                with open(path, "rb") as f:
                    rs = resultfile.decode(path, f.read())  # nodemap's own reader: every field checked
                b.update(cases=nodemap_cases(rs), flags=nodemap_flags(rs), environment=rs.environment, host=rs.host)
            else:
                with open(path, errors="replace") as f:
                    parsed = parse_nccl_tests(f.read())
                b.update(cases=nccl_tests_cases(parsed), flags=nccl_tests_flags(parsed),
                         header={k: parsed[k] for k in ("version", "nccl_headers", "nccl_library", "devices")})
        except (OSError, ValueError, KeyError, TypeError, InputError) as e:  # a block cut before its file was whole
            b.update(cases={}, flags=[f"unreadable: {type(e).__name__}: {e}"])
        blocks.append(b)
    return blocks


def nccl_tests_flags(parsed: dict) -> list[str]:
    flags = [f"nccl-tests error: {e}" for e in parsed["errors"]]
    if not parsed["complete"]:
        flags.append("output cut short (no 'Collective test concluded')")
    if parsed["out_of_bounds"]:
        flags.append(f"{parsed['out_of_bounds']} out-of-bounds values")
    return flags


def block_figure(case: dict) -> dict:
    """One block's figure for one size: the median over its repetitions."""
    return {"time_us": statistics.median(case["times"]), "busbw": statistics.median(case["busbw"]),
            "wrong": case["wrong"]}


def over_rounds(figures: list[dict]) -> dict:
    """The best block (shortest median time) and the spread of block figures across rounds."""
    times = [f["time_us"] for f in figures]
    best = min(figures, key=lambda f: f["time_us"])
    wrong = [f["wrong"] for f in figures if f["wrong"]]
    return {"time_us": best["time_us"], "busbw": best["busbw"], "blocks": len(figures),
            "spread": (max(times) - min(times)) / min(times) if min(times) > 0 else 0.0,
            "wrong": sum(wrong) if wrong else 0}


def pair(blocks: list[dict]) -> list[dict]:
    """One row per mode, op, size, place: each tool's best block, the ratio."""
    per: dict = {}
    for b in blocks:
        for (size, place), case in b["cases"].items():
            if case["times"]:
                per.setdefault((b["mode"], b["op"], size, place), {}).setdefault(b["tool"], []).append(
                    block_figure(case))
    rows = []
    for key in sorted(per, key=_order):
        mode, op, size, place = key
        row = {"mode": mode, "op": op, "size": size, "place": place}
        for tool in TOOLS:
            row[tool] = over_rounds(per[key][tool]) if tool in per[key] else None
        n, t = row["nodemap"], row["nccltests"]
        row["ratio"] = t["time_us"] / n["time_us"] if n and t and n["time_us"] > 0 else None
        rows.append(row)
    return rows


def _order(key: tuple) -> tuple:
    mode, op, size, place = key
    return (mode != "single", OPS.index(op) if op in OPS else len(OPS), op, size, place != "out")


def large_size_summary(rows: list[dict]) -> list[dict]:
    """Geometric mean of the ratios at >= 64 MiB per mode and op (bandwidth-bound sizes)."""
    groups: dict = {}
    for r in rows:
        if r["ratio"] and r["size"] >= LARGE:
            groups.setdefault((r["mode"], r["op"]), []).append(r["ratio"])
    return [{"mode": m, "op": o, "sizes": len(v), "geomean_ratio": statistics.geometric_mean(v),
             "min_ratio": min(v)} for (m, o), v in sorted(groups.items(), key=lambda kv: _order((*kv[0], 0, "out")))]


# --- report ---------------------------------------------------------------------------


def _fmt(v: float | None, spec: str = ".2f") -> str:
    return "-" if v is None else format(v, spec)


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def markdown_table(rows: list[dict]) -> str:
    head = ["mode", "op", "size B", "place", "nodemap us", "nccl-tests us", "nodemap busbw", "nccl-tests busbw",
            "ratio", "spread n / t", "wrong n / t"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        n, t = r["nodemap"] or {}, r["nccltests"] or {}
        spread = f"{_pct(n.get('spread'))} / {_pct(t.get('spread'))}"
        wrong = f"{n.get('wrong', '-')} / {t.get('wrong', '-')}"
        out.append("| " + " | ".join([
            r["mode"], r["op"], str(r["size"]), r["place"], _fmt(n.get("time_us")), _fmt(t.get("time_us")),
            _fmt(n.get("busbw")), _fmt(t.get("busbw")), _fmt(r["ratio"], ".3f") + ("x" if r["ratio"] else ""),
            spread, wrong]) + " |")
    return "\n".join(out)


def provenance(blocks: list[dict], directory: str) -> dict:
    """Machine, date and versions: the blocks' own headers, and the machine file the script wrote."""
    info: dict = {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "nodemap": {}, "nccl_tests": {}}
    for b in blocks:
        if b["tool"] == "nodemap" and b.get("environment"):
            env = b["environment"]
            info["nodemap"].setdefault(b["mode"], {"host": b.get("host"), "nccl": env.get("nccl"),
                                                   "cupy": env.get("cupy"), "ranks": env.get("ranks"),
                                                   "gpus": env.get("gpus"), "mpi": env.get("mpi"),
                                                   "NCCL_NVLS_ENABLE": env.get("NCCL_NVLS_ENABLE")})
        elif b["tool"] == "nccltests" and b.get("header", {}).get("version"):
            info["nccl_tests"].setdefault(b["mode"], b["header"])
    for name in ("machine.txt", "COMMIT"):
        try:
            with open(os.path.join(directory, name)) as f:
                info[name] = f.read().strip()
        except OSError:
            pass
    return info


def flagged(blocks: list[dict]) -> list[str]:
    return [f"{b['file']}: {f}" for b in blocks for f in b["flags"]]


def report(directory: str) -> tuple[str, dict]:
    bdir = os.path.join(directory, "blocks")
    blocks = load_blocks(bdir if os.path.isdir(bdir) else directory)
    rows = pair(blocks)
    info = provenance(blocks, directory)
    flags = flagged(blocks) + [f"{r['mode']} {r['op']} {r['size']} B {r['place']}: wrong elements "
                               f"(nodemap {(r['nodemap'] or {}).get('wrong', '-')}, "
                               f"nccl-tests {(r['nccltests'] or {}).get('wrong', '-')})"
                               for r in rows if (r["nodemap"] or {}).get("wrong") or (r["nccltests"] or {}).get("wrong")]
    summary = large_size_summary(rows)
    md = ["# nodemap bench nccl vs nccl-tests", "",
          "Per block (one process or mpirun of one tool, one op): the median over its repetitions; "
          "over rounds: the best block, and the spread of block figures (n = nodemap, t = nccl-tests). "
          "ratio = nccl-tests time / nodemap time = nodemap busbw / nccl-tests busbw (> 1: nodemap faster). "
          "busbw in GB/s, time in us per operation.", "",
          f"date: {info['date']}", "", "```", json.dumps({k: info[k] for k in ("nodemap", "nccl_tests")}, indent=1),
          "```", ""]
    if "machine.txt" in info:
        md += ["machine:", "", "```", info["machine.txt"], "```", ""]
    if summary:
        md += ["## From 64 MiB up (geometric mean of the ratios)", "",
               "| mode | op | sizes | ratio (geomean) | lowest |", "|---|---|---|---|---|"]
        md += [f"| {s['mode']} | {s['op']} | {s['sizes']} | {s['geomean_ratio']:.3f}x | {s['min_ratio']:.3f}x |"
               for s in summary]
        md.append("")
    md += ["## Per size", "", markdown_table(rows) if rows else "(no block produced a figure)", ""]
    md += ["## Flags", ""] + ([f"- {f}" for f in flags] or ["none: 0 wrong elements, every block complete"])
    doc = {"info": info, "rows": rows, "large_sizes": summary, "flags": flags,
           "blocks": [{k: b[k] for k in ("file", "tool", "mode", "op", "round", "flags")} for b in blocks]}
    return "\n".join(md) + "\n", doc


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not os.path.isdir(argv[0]):
        print("usage: nccl_vs_nccl_tests.py OUTDIR (the folder nccl_vs_nccl_tests.sh wrote)", file=sys.stderr)
        return 2
    md, doc = report(argv[0])
    print(md)
    with open(os.path.join(argv[0], "nccl_vs_nccl_tests.md"), "w") as f:
        f.write(md)
    with open(os.path.join(argv[0], "nccl_vs_nccl_tests.json"), "w") as f:
        json.dump(doc, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
