"""Memory timelines written by `nodemap run --watch`: their format and reader.

Pure: `read`/`read_dir` parse the files, `peek_dir` reads only their ends
(the monitor's wait for its peers), `series` is the data of a
memory-against-time plot. Statistics and findings: nodemap.watch.analysis;
sampling: nodemap.watch.monitor.

A timeline file is JSON lines (docs/watch.md, "Timeline format"). Every line
is decoded into its record (Header, Sample, Event: nodemap.records, msgspec)
and a damaged one is one InputError naming the file, the line and the
field; only a last line cut short by a kill (no newline after it) is
skipped. A file without "end" is a monitor that was killed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import IO

import msgspec

from .. import records
from ..errors import InputError
from ..infile import open_regular, read as read_checked
from ..records import Finite, finite

SCHEMA = "nodemap.watch/1"  # monitor.py writes these records (Header, Event), this module reads them
WHAT = "watch timeline (nodemap run --watch wrote it)"


class Header(msgspec.Struct):
    """The first line (monitor.prepare writes it; the lines after it: Event, Sample)."""

    schema: str
    host: str = ""
    job: str = ""
    rank: int = 0
    local_rank: int = 0
    local_size: int = 1
    pid: int = 0
    argv: list[str] = []
    start: float = 0.0  # time.time() at the start
    interval: float = 0.0
    planned_gpus: list[int] = []
    planned_pci: list[str] = []
    cpus: str = ""
    mem_total: int = 0
    env: dict[str, str] = {}

    def __post_init__(self) -> None:
        if self.schema != SCHEMA:
            raise ValueError(f"schema is {self.schema!r}, not {SCHEMA!r}: not a nodemap watch timeline")
        finite(self, "start", "interval")


class Gpu(msgspec.Struct):
    index: int  # the topology's (physical) index; negative: no topology named it (see bus_id)
    bus_id: str = ""  # PCI bus id (timelines of older monitors lack it)
    uuid: str = ""
    name: str = ""
    total: int = 0


class End(msgspec.Struct, omit_defaults=True):
    t: float = 0.0
    samples: int = 0
    exit: int | None = None
    signal: int | None = None


class Event(msgspec.Struct, omit_defaults=True):
    """An object line: what changed (the monitor writes one field or two, the others left out)."""

    gpus: list[Gpu] | None = None
    note: str = ""
    libs: list[str] = []
    others: dict[int, list[tuple[int, str, list[int]]]] = {}  # GPU index -> [pid, comm, ancestors] of others
    end: End | None = None


# seconds since the start, host RSS, node available, per GPU: own, used, others' (bytes)
Sample = tuple[Finite, int, int, list[int], list[int], list[int]]
_LINE = Sample | Event


@dataclass
class Timeline:
    path: str
    header: Header
    t: list[float] = field(default_factory=list)
    rss: list[int] = field(default_factory=list)
    avail: list[int] = field(default_factory=list)
    own: list[list[int]] = field(default_factory=list)  # per sample, per GPU
    used: list[list[int]] = field(default_factory=list)
    others: list[list[int]] = field(default_factory=list)
    gpus: list[Gpu] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    libs: list[str] = field(default_factory=list)
    other_procs: dict[int, list] = field(default_factory=dict)  # GPU index -> [(pid, comm, ancestors)] ever seen
    end: End | None = None
    torn: int = 0  # a last line cut by a kill

    @property
    def host(self) -> str:
        return self.header.host

    @property
    def job(self) -> str:
        return self.header.job

    @property
    def rank(self) -> int:
        return self.header.rank

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


# bytes of one timeline: a sample line is ~100 bytes, so a day of samples a
# second on 8 GPUs fits many times over; a link to /dev/zero does not
MAX_TIMELINE = 256 << 20


def header(where: str, line: bytes) -> Header:
    return records.decode(where, line, Header, WHAT)


def read(path: str) -> Timeline:
    """One timeline, every line checked (InputError naming the file, line
    and field); the file as infile reads one, of at most MAX_TIMELINE bytes."""
    data = read_checked(path, MAX_TIMELINE, WHAT)
    lines = data.split(b"\n")
    tl = Timeline(path, header(f"{path}, line 1", lines[0]))
    last = len(lines) - 1  # the piece after the last newline: empty unless a kill cut that line
    for n, raw in enumerate(lines[1:], 2):
        try:
            rec = records.decode(f"{path}, line {n}", raw, _LINE, WHAT) if raw.strip() else None
        except InputError:
            if n - 1 < last:
                raise
            tl.torn += 1
            continue
        if isinstance(rec, tuple):
            for column, v in zip((tl.t, tl.rss, tl.avail, tl.own, tl.used, tl.others), rec):
                column.append(v)
        elif rec is not None:
            _add(tl, rec)
    return tl


def _add(tl: Timeline, e: Event) -> None:
    if e.gpus is not None:
        tl.gpus = e.gpus
    if e.note:
        tl.notes.append(e.note)
    tl.libs += e.libs
    for g, procs in e.others.items():
        seen = tl.other_procs.setdefault(g, [])
        seen += [p for p in procs if p[0] not in {q[0] for q in seen}]
    if e.end is not None:
        tl.end = e.end


def _timeline_names(directory: str) -> list[str]:
    """The timeline files of a folder (.watch), sorted; none when it cannot be listed."""
    try:
        return sorted(n for n in os.listdir(directory) if n.endswith(".watch"))
    except OSError:
        return []


class Skipped(msgspec.Struct, frozen=True):
    """A timeline read_dir could not read: the file and why (as the report's JSON names it)."""

    path: str
    reason: str  # 'line N: why' or 'why'

    @classmethod
    def of(cls, path: str, text: str) -> "Skipped":
        """From the error's line ('FILE: why' or 'FILE, line N: why')."""
        return cls(path, text[len(path):].lstrip(",: ") if text.startswith(path) else text)

    @property
    def text(self) -> str:
        """The one line that says both, as the error said it."""
        return f"{self.path}{', ' if self.reason.startswith('line ') else ': '}{self.reason}"


def read_dir(directory: str, unreadable: list[Skipped] | None = None) -> list[Timeline]:
    """Every timeline in a folder (files ending .watch), by host and rank. A file
    that cannot be read (permissions, a FIFO or folder named *.watch, a damaged
    header) is skipped, the others read; `unreadable` gets a Skipped each."""
    out = []
    for n in _timeline_names(directory):
        path = os.path.join(directory, n)
        try:
            out.append(read(path))
        except InputError as e:  # names the file (and line) and why
            if unreadable is not None:
                unreadable.append(Skipped.of(path, str(e)))
        except OSError as e:  # a read that failed once open (EIO)
            if unreadable is not None:
                unreadable.append(Skipped(path, f"{e.strerror or e}"))
    out.sort(key=lambda t: (t.job, t.host, t.rank, t.header.start))
    return out


def say_unreadable(unreadable: list[Skipped], out: IO[str]) -> None:
    """One line per timeline read_dir skipped: a summary that leaves a rank
    out must say which file and why."""
    out.writelines(f"nodemap watch: skipped {s.text}\n" for s in unreadable)


def peek_dir(directory: str, job: str, host: str) -> list[tuple[Header, bool]]:
    """(header, ended) of the timelines of one job on one host, reading only each file's first line and its
    tail: the monitor polls this while its peers end, and full timelines of a long run are large."""
    out = []
    for n in _timeline_names(directory):
        path = os.path.join(directory, n)
        try:
            fd = open_regular(path, 1 << 62, WHAT)  # only its ends are read
            with os.fdopen(fd, "rb") as f:
                head = header(path, f.readline(1 << 16))
                f.seek(max(f.tell(), os.fstat(f.fileno()).st_size - 4096))
                tail = f.read()
        except (OSError, InputError):
            continue
        if head.job == job and head.host == host:
            out.append((head, b'{"end":' in tail))
    return out


class Series(msgspec.Struct):
    """Plot data (and a part of the report's JSON): time (s), the rank's GPU memory and host RSS (bytes)."""

    host: str
    rank: int
    t: list[float]
    gpu: list[int]
    gpu_what: str  # Timeline.gpu_series's
    rss: list[int]


def series(tl: Timeline) -> Series:
    y, what = tl.gpu_series()
    return Series(tl.host, tl.rank, list(tl.t), y, what, list(tl.rss))
