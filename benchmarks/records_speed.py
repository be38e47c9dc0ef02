#!/usr/bin/env python3
"""How long reading a saved document takes: decode + validate into records.

Times what `nodemap report FILE` does before judging: a bench result file
into a ResultSet, a check document into a CheckDoc (its own verdicts kept),
each field checked; the median of --runs, in ms. `json.loads` alone is
printed as the floor of any reader that goes through Python objects.

Both readers are known: today's (nodemap.records, msgspec) and the one
before it (json.loads + check/saved.py's hand checks + from_dict). To time
another checkout (the reader before), give its sources:
  git archive REV src | tar -x -C /tmp/before
  python benchmarks/records_speed.py --src /tmp/before/src

With --nodes N, also `check --fleet --from`'s reader: a nodes.jsonl of N
copies (other host names) of a node document from the tree, read by
fleet.output.read_saved (parse, check, reduce to what the fleet compares).

usage: python benchmarks/records_speed.py [--runs N] [--nodes N] [--src DIR] [FILE...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
FILES = [os.path.join(HERE, "results", "multi_gpu_h100x2_20261125", "nccl_single.json"),  # 192 results
         os.path.join(HERE, "results", "multi_gpu_h100x2_20261125", "check", "full_2gpu.json")]  # 322 results


def _use(src: str) -> None:
    """Import nodemap from `src` instead of the installed (editable) one."""
    sys.meta_path[:] = [f for f in sys.meta_path if "nodemap" not in repr(f) and "Redirect" not in type(f).__name__
                        and "ScikitBuild" not in type(f).__name__]
    sys.path.insert(0, os.path.abspath(src))


def reader(schema: str):
    """(name, function of (path, bytes)) of the reader this nodemap has."""
    from nodemap.check import document

    if schema.startswith("nodemap.check/"):  # /1 and /2 (findings' shortfall) alike
        if hasattr(document, "decode"):  # one class both ways (document.CheckFile)
            return "records", document.decode
        if hasattr(document, "from_file"):  # read by check/saved.py's mirrors
            from nodemap.check import saved

            return "records", lambda p, b: document.from_file(*saved.decode(p, b))
        from nodemap.check import saved

        def before(p: str, b: bytes):
            d = json.loads(b)
            saved.check_document(d, p)
            return document.from_dict(d)
        return "json+saved+from_dict", before
    try:
        from nodemap.bench import resultfile
        return "records", resultfile.decode
    except ImportError:
        from nodemap.bench.results import ResultSet
        from nodemap.check import saved

        def before(p: str, b: bytes):
            d = json.loads(b)
            saved.check_results(d, p)
            return ResultSet.from_dict(d)
        return "json+saved+from_dict", before


NODE_DOC = os.path.join(HERE, "results", "multi_gpu_h100x2_20261125", "fleet4", "nodes.jsonl")


def fleet_row(n: int, runs: int) -> dict:
    from nodemap.fleet import output

    with open(NODE_DOC) as f:
        doc = json.loads(f.readline())
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "nodes.jsonl")
        with open(path, "w") as f:
            for i in range(n):
                f.write(json.dumps({**doc, "host": f"n{i}"}) + "\n")
        size = os.path.getsize(path)
        ms = median_ms(lambda: output.read_saved([path]), runs)
    return {"file": f"nodes.jsonl, {n} x a node document of {os.path.relpath(NODE_DOC, os.path.dirname(HERE))}",
            "schema": doc["schema"], "results": 0, "bytes": size, "reader": "fleet.output.read_saved",
            "ms": round(ms, 3), "json_loads_ms": None}


def median_ms(fn, runs: int) -> float:
    fn()  # warm: imports and caches
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", default=FILES)
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--src", help="time the nodemap sources in this folder (another checkout's src/)")
    ap.add_argument("--nodes", type=int, default=0, help="also time reading N node documents (nodes.jsonl)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.src:
        _use(args.src)
    import nodemap

    rows = []
    for path in args.files:
        with open(path, "rb") as f:
            data = f.read()
        d = json.loads(data)
        n = (sum(len(rs["results"]) for rs in d["results"]) if d["schema"].startswith("nodemap.check/")
             else len(d["results"]))
        name, fn = reader(d["schema"])
        rows.append({"file": os.path.relpath(path, os.path.dirname(HERE)), "schema": d["schema"], "results": n,
                     "bytes": len(data), "reader": name, "ms": round(median_ms(lambda: fn(path, data), args.runs), 3),
                     "json_loads_ms": round(median_ms(lambda: json.loads(data), args.runs), 3)})
    if args.nodes:
        rows.append(fleet_row(args.nodes, max(3, args.runs // 10)))
    if args.json:
        print(json.dumps({"nodemap": os.path.dirname(nodemap.__file__), "runs": args.runs, "rows": rows}, indent=1))
        return 0
    print(f"nodemap from {os.path.dirname(nodemap.__file__)}, median of {args.runs}")
    for r in rows:
        floor = f" (json.loads alone {r['json_loads_ms']:.2f} ms)" if r["json_loads_ms"] is not None else ""
        print(f"{r['file']}: {r['schema']}, {r['results']} results, {r['bytes'] >> 10} KiB: "
              f"{r['reader']} {r['ms']:.2f} ms{floor}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
