"""Memory timelines written by `nodemap run --watch`: their format and reader.

Pure: `read`/`read_dir` parse the files, `peek_dir` reads only their ends
(the monitor's wait for its peers), `series` is the data of a
memory-against-time plot. Statistics and findings: nodemap.watch.analysis;
sampling: nodemap.watch.monitor.

A timeline file is JSON lines: a header object (schema nodemap.watch/1),
then samples `[t_s, host_rss, node_available, [own per GPU], [used per GPU],
[others per GPU]]` (bytes; GPUs in the order of the `gpus` record) and
event objects: {"gpus": [...]}, {"note": ...}, {"libs": [...]}, {"others":
{gpu: [[pid, comm, ancestors]]}}, {"end": {...}}. A line cut by a kill is
skipped; a file without "end" is a monitor that was killed.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from ..errors import InputError
from ..infile import open_regular, read as read_checked


@dataclass
class Timeline:
    path: str
    header: dict
    t: list[float] = field(default_factory=list)
    rss: list[int] = field(default_factory=list)
    avail: list[int] = field(default_factory=list)
    own: list[list[int]] = field(default_factory=list)  # per sample, per GPU
    used: list[list[int]] = field(default_factory=list)
    others: list[list[int]] = field(default_factory=list)
    gpus: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    libs: list[str] = field(default_factory=list)
    other_procs: dict[str, list] = field(default_factory=dict)  # GPU index -> [[pid, comm, ancestors]] ever seen
    end: dict | None = None
    torn: int = 0  # lines that could not be read (cut by a kill)

    @property
    def host(self) -> str:
        return self.header.get("host", "")

    @property
    def job(self) -> str:
        return self.header.get("job", "")

    @property
    def rank(self) -> int:
        return int(self.header.get("rank", 0))

    @property
    def ended(self) -> bool:
        return self.end is not None

    def gpu_series(self) -> tuple[list[int], str]:
        """The rank's GPU memory per sample and what it is: its processes' (NVML), else its GPUs' used."""
        own = [sum(s) for s in self.own]
        if any(own):
            return own, "own"
        if self.gpus and any(any(s) for s in self.used):
            return [sum(s) for s in self.used], "gpu-used"
        return [], ""


class TimelineError(Exception):
    pass


NUMERIC_HEADER = ("start", "rank", "local_rank", "pid", "mem_total")  # read as numbers below


# bytes of one timeline: a sample line is ~100 bytes, so a day of samples a
# second on 8 GPUs fits many times over; a link to /dev/zero does not
MAX_TIMELINE = 256 << 20


def read(path: str) -> Timeline:
    """One timeline; InputError (infile) for what is not a regular file of
    at most MAX_TIMELINE bytes, TimelineError for a damaged header."""
    lines = read_checked(path, MAX_TIMELINE, "watch timeline").split(b"\n")
    try:
        header = json.loads(lines[0])
    except (ValueError, RecursionError):
        raise TimelineError(f"{path}: not a nodemap watch timeline (first line is not its header)") from None
    if not isinstance(header, dict) or not str(header.get("schema", "")).startswith("nodemap.watch/"):
        raise TimelineError(f"{path}: not a nodemap watch timeline (schema {header.get('schema')!r})")
    for key in NUMERIC_HEADER:
        v = header.get(key, 0)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise TimelineError(f"{path}: header field {key}={v!r} is not a number: a damaged or foreign "
                                "timeline (move it out of the folder, or rerun with nodemap run --watch)")
    tl = Timeline(path, header)
    for raw in lines[1:]:
        if raw:
            _add(tl, raw)
    return tl


def _add(tl: Timeline, raw: bytes) -> None:
    try:
        rec = json.loads(raw)
    except (ValueError, RecursionError):  # a torn line, or 100,000 nested brackets
        tl.torn += 1
        return
    if isinstance(rec, list) and len(rec) == 6:
        try:
            sample = float(rec[0]), int(rec[1]), int(rec[2]), *(list(map(int, g)) for g in rec[3:])
        except (TypeError, ValueError):
            tl.torn += 1
            return
        for column, v in zip((tl.t, tl.rss, tl.avail, tl.own, tl.used, tl.others), sample):
            column.append(v)
    elif isinstance(rec, dict):
        tl.gpus = rec.get("gpus", tl.gpus)
        if rec.get("note"):
            tl.notes.append(str(rec["note"]))
        tl.libs += rec.get("libs", [])
        for g, procs in rec.get("others", {}).items():
            seen = tl.other_procs.setdefault(g, [])
            seen += [p for p in procs if p[0] not in {q[0] for q in seen}]
        if "end" in rec:
            tl.end = rec["end"]
    else:
        tl.torn += 1


def _timeline_names(directory: str) -> list[str]:
    """The timeline files of a folder (.watch), sorted; none when it cannot be listed."""
    try:
        return sorted(n for n in os.listdir(directory) if n.endswith(".watch"))
    except OSError:
        return []


def read_dir(directory: str) -> list[Timeline]:
    """Every timeline in a folder (files ending .watch), by host and rank; unreadable files are skipped."""
    out = []
    for n in _timeline_names(directory):
        try:
            out.append(read(os.path.join(directory, n)))
        except (OSError, TimelineError, InputError):  # a FIFO or device named *.watch among them too
            continue
    out.sort(key=lambda t: (t.job, t.host, t.rank, t.header.get("start", 0)))
    return out


def peek_dir(directory: str, job: str, host: str) -> list[tuple[dict, bool]]:
    """(header, ended) of the timelines of one job on one host, reading only each file's first line and its
    tail: the monitor polls this while its peers end, and full timelines of a long run are large."""
    out = []
    for n in _timeline_names(directory):
        try:
            fd = open_regular(os.path.join(directory, n), 1 << 62, "watch timeline")  # only its ends are read
            with os.fdopen(fd, "rb") as f:
                header = json.loads(f.readline(1 << 16))
                f.seek(max(f.tell(), os.fstat(f.fileno()).st_size - 4096))
                tail = f.read()
        except (OSError, ValueError, RecursionError, InputError):
            continue
        if isinstance(header, dict) and header.get("job") == job and header.get("host") == host:
            out.append((header, b'{"end":' in tail))
    return out


def series(tl: Timeline) -> dict[str, Any]:
    """Plot data: time (s), the rank's GPU memory and host RSS (bytes)."""
    y, what = tl.gpu_series()
    return {"host": tl.host, "rank": tl.rank, "t": list(tl.t), "gpu": y, "gpu_what": what, "rss": list(tl.rss)}
