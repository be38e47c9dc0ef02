"""nodemap's readers against hwloc's whole test suite; prints and records the tally.

    .venv/bin/python benchmarks/hwloc_suite_tally.py HWLOC_TESTS [--refs CONSOLES] [--hwloc-commit HASH]
        [-o benchmarks/results/hwloc_suite.md]

HWLOC_TESTS is tests/hwloc of an open-mpi/hwloc checkout (e.g.
`git clone --depth 1 https://github.com/open-mpi/hwloc && ... hwloc/tests/hwloc`).
Each case (tests/hwloc_suite.py) agrees, is an expected failure with its
reason, or fails; the exit status is 1 when any case fails or an expected
failure agrees. --refs names a folder of lstopo 3.0 console references of
the suite's XML files (tests/hwloc_suite.py says how they are made);
--hwloc-commit records the hwloc commit when HWLOC_TESTS is no git checkout.
"""

from __future__ import annotations

import argparse
import datetime
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "src")]

import hwloc_suite  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", help="tests/hwloc of an hwloc checkout (holding linux/ and xml/)")
    ap.add_argument("--refs", help="folder of <stem>.console references for the suite's XML files")
    ap.add_argument("--hwloc-commit", default="", help="hwloc commit of HWLOC_TESTS (default: git rev-parse there)")
    ap.add_argument("-o", "--output", help="write the tally as Markdown here")
    args = ap.parse_args()
    from nodemap.topology import snapshot

    cases = hwloc_suite.cases(args.folder, args.refs)
    if not cases:
        print(f"no hwloc .test cases under {args.folder}/linux or /xml", file=sys.stderr)
        return 2
    rows, counts = [], {"agrees": 0, "expected failure": 0, "FAILS": 0, "AGREES (listed as expected failure)": 0}
    with tempfile.TemporaryDirectory() as tmp:
        roots: dict[Path, str] = {}

        def unpack(tarball: Path) -> str:
            if tarball not in roots:
                dest = Path(tmp) / tarball.name.replace(".", "_")
                dest.mkdir()
                snapshot.unpack(str(tarball), str(dest))
                roots[tarball] = snapshot.find_root(str(dest))
            return roots[tarball]

        for case in cases:
            try:
                diffs = hwloc_suite.check(case, unpack)
            except Exception as e:  # a crash is a failure with its message
                diffs = [f"error: {type(e).__name__}: {e}"]
            expected = hwloc_suite.EXPECTED.get(case.name)
            if not diffs:
                verdict = "AGREES (listed as expected failure)" if expected else "agrees"
            else:
                verdict = "expected failure" if expected else "FAILS"
            counts[verdict] += 1
            detail = expected or "; ".join(d[:300] for d in diffs)
            rows.append((case.name, verdict, detail))
            print(f"{verdict:17} {case.name}" + (f"  -- {detail}" if verdict != "agrees" else ""))
    total = len(rows)
    print(f"\n{total} cases: " + ", ".join(f"{n} {k}" for k, n in counts.items() if n))
    if args.output:
        _write(Path(args.output), args, rows, counts)
    return 1 if counts["FAILS"] or counts["AGREES (listed as expected failure)"] else 0


def _write(path: Path, args, rows, counts) -> None:
    commit = args.hwloc_commit or subprocess.run(["git", "-C", args.folder, "rev-parse", "HEAD"], capture_output=True,
                                                 text=True).stdout.strip()
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    lines = [
        "# nodemap against hwloc's test suite (tests/hwloc/linux, tests/hwloc/xml)",
        "",
        f"- date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; nodemap {head}; "
        f"hwloc {commit or 'commit unknown'}",
        "- command: `.venv/bin/python benchmarks/hwloc_suite_tally.py HWLOC/tests/hwloc"
        + (" --refs CONSOLES" if args.refs else "") + (f" --hwloc-commit {commit}" if args.hwloc_commit else "")
        + f" -o {path.name}`" + (" (CONSOLES: lstopo 3.0.0a1-git `--if xml -v` of each XML file)" if args.refs else ""),
        "- " + ", ".join(f"{n} {k}" for k, n in counts.items() if n) + f" of {len(rows)} cases",
        "",
        "| case | verdict | reason / difference |",
        "|---|---|---|",
    ]
    lines += [f"| {name} | {verdict} | {detail.replace('|', '/')} |" for name, verdict, detail in rows]
    path.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
