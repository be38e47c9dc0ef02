"""The one harness every benchmark kind runs on.

A kind (host memory, numa, latency, gpu memory, copies, mpi, nccl, ring,
placement, jacobi) adds only its own options and cases (driver.py); the
harness owns the rest, the same for every kind:
- the shared options' checks (`check_shared`: --repeats, a --topology file;
  they are declared in options.py, on options.Common);
- (the timing loop, warm-up and repetitions are the driver's: driver.py);
- progress on stderr (`Progress`): a live line with step, elapsed and ETA
  on a terminal, a few lines otherwise, nothing with -q;
- interruption and saving (`session`): the first Ctrl-C stops the kernels
  within about a second (nodemap.bench.interrupt), the results measured so
  far are printed, saved and the exit code is 130; with --output the file is
  rewritten after every case, valid JSON marked `"complete": false` until
  the end;
- cautions every result gets (spread above 10%);
- the one result emitter (`finish`): JSON or the kind's table, notes, the
  file.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import sys
import threading
import time
from contextlib import ExitStack, contextmanager
from typing import Any, Callable, Iterator, TextIO

from . import interrupt
from .options import check_count
from .results import Result, ResultSet

SPREAD_CAUTION = 0.10  # spread (max-min)/median above this across repetitions: say so


class Stopped(Exception):
    """Raised at a step boundary once a stop was requested (Ctrl-C)."""


# --- options ----------------------------------------------------------------------


# Far beyond any figure's need (--adaptive stops once its interval is tight); the kernels keep a time per
# repetition and thread, so --repeats 99999999999 was a MemoryError traceback
MAX_REPEATS = 100_000


def check_repeats(repeats: int) -> None:
    check_count("--repeats", repeats, 1, "repetition", MAX_REPEATS)


def check_shared(args: Any) -> None:
    """The shared options' own errors, before a kind starts MPI, a GPU or a
    measurement: --repeats, and a --topology file that cannot be read."""
    if getattr(args, "repeats", None) is not None:
        check_repeats(args.repeats)
    if getattr(args, "topology", None):
        read_topology(args.topology, typed_option(args))


def typed_option(args: Any, dest: str = "topology") -> str:
    return getattr(args, f"_{dest}_option", None) or f"--{dest}"


_TOPOLOGIES: dict[tuple[str, int, int], Any] = {}


def read_topology(path: str, option: str = "--topology") -> Any:
    """The Topology of a --topology file, read once per run however many
    parts of it ask (the kind, the session's cautions); a file that cannot
    be read is one error that names the option."""
    from ..errors import InputError, NodemapError
    from ..topology.discover import discover

    try:
        st = os.stat(path)
        key = (os.path.abspath(path), st.st_mtime_ns, st.st_size)
    except OSError:
        key = None
    if key in _TOPOLOGIES:
        return _TOPOLOGIES[key]
    try:
        topo = discover(path)
    except InputError as e:
        why = e.problem if e.where == os.fspath(path) else str(e)
        raise NodemapError(f"{option} {path}: {why}") from None
    if key is not None:
        _TOPOLOGIES[key] = topo
    return topo


# --- timing -------------------------------------------------------------------------


def slowest_rank(world: Any, steps: int, run: Callable[[], None]) -> Callable[[], float]:
    """A case's timed repetition (driver.Case.run): seconds per step of `run` (which does
    `steps` steps and waits for them), the slowest process's. `world` is the
    kind's comm.world.World: its barrier starts the processes together and
    max_all takes the largest time (a collective: every process calls it
    alike); a World of one process makes both no-ops. Device work queued
    before must be waited for by the caller: the barrier does not."""

    def once() -> float:
        world.barrier()
        t0 = time.perf_counter()
        run()
        return world.max_all((time.perf_counter() - t0) / steps)

    return once


# --- progress -------------------------------------------------------------------------


class Progress:
    """Progress on stderr (stdout stays clean for --json and tables).

    On a terminal: one line rewritten in place, "[memory 3/12 4.1s, ETA 12s]
    what". Otherwise: the first step, each quarter and the last (plus one
    line a minute on slow runs), so logs stay short. `step` raises Stopped
    once a stop is requested, ending the kind's loop at a case boundary
    (`stops=False` where ranks must agree first, as under MPI).

    Why not rich.progress (issue 13 asked for a well-kept library "where it
    does not slow nodemap run"): importing it cost 66-124 ms on the dev VM
    (2026-11-25, rich 15.0.0, `python -X importtime -c 'import
    rich.progress'`, 5 runs), more than this whole module with its imports
    (~50 ms), and it brings rich, pygments and markdown-it into a core that
    is the standard library plus defusedxml. The line below is ~40 lines,
    needs no import, and the non-terminal mode (a few lines, not one per
    step) would be ours either way.
    """

    def __init__(self, total: int, label: str, stream: TextIO | None = None, quiet: bool = False,
                 stops: bool = True) -> None:
        self.total = max(1, total)
        self.label = label
        self.done = 0
        self.stream = stream or sys.stderr
        self.quiet = quiet
        self.stops = stops
        self.t0 = time.monotonic()
        self.last_line = self.t0
        self.live = not self.quiet and _isatty(self.stream)
        self.width = 0

    def step(self, what: str) -> None:
        self.done += 1
        if not self.quiet:
            self._show(what)
        if self.stops and interrupt.requested():
            raise Stopped

    def _show(self, what: str) -> None:
        now = time.monotonic()
        el = now - self.t0
        eta = el / self.done * (self.total - self.done) if self.done < self.total else 0.0
        head = f"[{self.label} {self.done}/{self.total} {el:.1f}s" + (f", ETA {eta:.0f}s]" if eta else "]")
        line = f"{head} {what}"
        if self.live:
            from ..text import columns

            cols = columns()
            line = line[: cols - 1]
            pad = " " * max(0, self.width - len(line))  # clears the rest of a longer previous line
            self.stream.write("\r" + line + pad + ("\n" if self.done >= self.total else ""))
            self.width = len(line) if self.done < self.total else 0
            self.stream.flush()
            return
        quarter = self.total // 4 or 1
        if self.done in (1, self.total) or self.done % quarter == 0 or now - self.last_line > 60:
            print(line, file=self.stream, flush=True)
            self.last_line = now

    def close(self) -> None:
        """End a live line that stopped short of the total (an interrupted run)."""
        if self.live and self.width:
            self.stream.write("\n")
            self.stream.flush()
            self.width = 0


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty() and os.environ.get("TERM") != "dumb"
    except (AttributeError, ValueError):
        return False


# --- the session: saving as cases complete, interruption --------------------------


class _Autosave:
    """Writes the ResultSet after every added case (rank 0, a real file),
    marked `"complete": false`: the run is not over."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.error = ""

    def __call__(self, rs: ResultSet) -> None:
        if self.error:
            return
        from ..errors import NodemapError
        from ..outfile import write

        try:
            write(self.path, dataclasses.replace(rs, complete=False, on_add=None).to_json() + "\n")
        except NodemapError as e:  # said once at the end, with the results printed
            self.error = str(e)


class _Watchdog:
    """--timeout for kinds that do not bound their own steps: a case (the
    time between two completed cases) running longer stops the run as
    Ctrl-C would, and the run ends with exit 2 and what was measured.
    Through proc.cut_after, because a stop flag alone is read only between
    repetitions: the flag (kernels that poll it stop within a repetition),
    a KeyboardInterrupt in the main thread CUT_GRACE s later (a repetition
    stuck in one call: a sleep, a wait, a hung device), and TIMEOUT_KILL s
    past the timeout the forked watchdog ends a process that a call
    holding the GIL keeps from stopping (what --output saved stays)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.cut: ExitStack | None = None
        self.timer: threading.Timer | None = None

    def arm(self) -> None:
        self.cancel()
        stop = functools.partial(interrupt.request, TIMEOUT)
        if threading.current_thread() is not threading.main_thread():  # signals reach the main thread only
            self.timer = threading.Timer(self.seconds, stop)
            self.timer.daemon = True
            self.timer.start()
            return
        from ..proc import cut_after

        line = (f"nodemap bench: error: a case ran past --timeout {self.seconds:g} s and a call that holds the "
                "interpreter kept it from stopping: ended (--output keeps the cases done before it)")
        self.cut = ExitStack()
        self.cut.enter_context(cut_after(self.seconds, stop, line, kill=TIMEOUT_KILL))

    def cancel(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.cut is not None:
            cut, self.cut = self.cut, None
            cut.close()


TIMEOUT_KILL = 10.0  # s past --timeout before the process is ended from outside (proc.CUT_KILL)
TIMEOUT = "timeout"
INTERRUPTED = "interrupted (Ctrl-C): the results are what was measured until then"
CUT = "cut at the end of nodemap check's --budget: the results are what was measured until then"


@contextmanager
def session(rs: ResultSet, args: Any, *, root: bool = True, watchdog: bool = True) -> Iterator[ResultSet]:
    """Run a kind's case loop: saves after every case (when --output names
    a file and this is the reporting rank), turns Ctrl-C into a clean stop,
    and (`watchdog`) ends a case that runs past --timeout. The ResultSet is
    complete only when the block ends normally."""
    hooks: list[Callable[[ResultSet], None]] = []
    out = getattr(args, "output", None)
    if root and out and out != "-":
        hooks.append(_Autosave(out))
    dog = _Watchdog(args.timeout) if watchdog and getattr(args, "timeout", None) else None
    if dog is not None:
        hooks.append(lambda _: dog.arm())
        dog.arm()
    rs.on_add = (lambda s: [h(s) for h in hooks]) if hooks else None
    rs.messages += [m for m in given_topology_cautions(args) if m not in rs.messages]
    if hooks and isinstance(hooks[0], _Autosave):
        hooks[0](rs)  # the file exists, marked incomplete, before the first case
    if interrupt.why() != interrupt.BUDGET:  # check's budget ended while this kind planned: stop at once
        interrupt.reset()
    stopped, why = False, ""
    try:
        with interrupt.sigint_stops():
            yield rs
    except (Stopped, KeyboardInterrupt):
        stopped = True
    finally:
        if dog is not None:
            dog.cancel()
        stopped = stopped or interrupt.requested()
        why = interrupt.why()
        interrupt.reset()
    if stopped:
        rs.complete = False  # else as the kind left it (a failed part sets it false)
    if stopped and why == TIMEOUT:
        rs.messages.append(f"timeout: a case ran longer than --timeout {args.timeout:g} s; the run ended there "
                           "(raise --timeout if the machine is just slow)")
    elif stopped:
        rs.messages.append(CUT if why == interrupt.BUDGET else INTERRUPTED)


# --- output -------------------------------------------------------------------------


def cautions(r: Result) -> Result:
    """The Result with the harness's cautions added to its notes."""
    notes = list(r.notes)
    if r.stats.n > 1 and r.stats.spread > SPREAD_CAUTION:
        notes.append(f"caution: spread {100 * r.stats.spread:.0f}% across {r.stats.n} repetitions (over "
                     f"{100 * SPREAD_CAUTION:.0f}%)")
    return r if len(notes) == len(r.notes) else dataclasses.replace(r, notes=tuple(dict.fromkeys(notes)))


def given_topology_cautions(args: Any) -> list[str]:
    """Cautions for a --topology file of another machine, for every kind:
    the session adds them, so no kind has to."""
    given = getattr(args, "topology", None)
    if not given:
        return []
    option = typed_option(args)
    return topology_cautions(read_topology(given, option), given, option)


def topology_cautions(topo: Any, given: str | None, option: str = "--topology") -> list[str]:
    """A --topology file that describes another machine labels this one wrongly."""
    if not given:
        return []
    import socket

    out = []
    host = getattr(topo.machine, "hostname", "")
    if host and host != socket.gethostname():
        out.append(f"caution: {option} {given} describes host {host}, this is {socket.gethostname()}: "
                   "labels, caches and peaks may not be this machine's")
    cpus = len(topo.pus)
    here = os.cpu_count() or 0
    if cpus and here and cpus != here:
        out.append(f"caution: {option} {given} has {cpus} CPUs, this machine {here}: "
                   "placements and cache sizes may not be this machine's")
    return out


def caution_lines(results: list[Result]) -> list[str]:
    """The results' cautions, once each; spreads summed up in one line."""
    spread = [r for r in results if r.stats.n > 1 and r.stats.spread > SPREAD_CAUTION]
    out = []
    if spread:
        worst = sorted(spread, key=lambda r: -r.stats.spread)[:4]
        out.append(f"caution: {len(spread)} of {len(results)} results spread over {100 * SPREAD_CAUTION:.0f}% "
                   f"across repetitions (worst: {', '.join(f'{r.metric} {100 * r.stats.spread:.0f}%' for r in worst)}): "
                   "the machine was busy or the cases too short; rerun with more --repeats on an idle node")
    seen = {n for r in results for n in r.notes if n.startswith("caution") and not n.startswith("caution: spread")}
    return out + sorted(seen)


def finish(rs: ResultSet, args: Any, text: Callable[[ResultSet], str]) -> int:
    """The one result emitter: save, then print JSON or the kind's table and
    the notes. 0 complete, 130 interrupted, 1 a part failed; a save that
    fails at the end is named after the printed results (exit 2)."""
    rs.results = [cautions(r) for r in rs.results]
    rs.on_add = None
    code = exit_code(rs)
    out = getattr(args, "output", None)
    error = ""
    if out and out != "-":
        from ..errors import NodemapError

        try:
            rs.save(out)
        except NodemapError as e:
            error = str(e)
    shown = sys.stderr if out == "-" else sys.stdout  # -o - : stdout carries the JSON
    if out == "-":
        print(rs.to_json(), flush=True)
    if getattr(args, "json", False) and out != "-":
        print(rs.to_json())
    elif not getattr(args, "json", False):
        print(text(rs), file=shown)
        for m in rs.messages:
            print(f"note: {m}", file=shown)
        for line in caution_lines(rs.results):
            print(f"note: {line}", file=shown)
    if error:
        print(f"nodemap {rs.command.split(' --')[0]}: error: results printed above, not saved: {error}",
              file=sys.stderr)
        return 2
    return code


def exit_code(rs: ResultSet) -> int:
    """0 complete, 130 interrupted, 2 timed out, 1 a part failed."""
    return 0 if rs.complete else 130 if INTERRUPTED in rs.messages else 2 if _timed_out(rs) else 1


def _timed_out(rs: ResultSet) -> bool:
    return any(m.startswith(TIMEOUT + ":") for m in rs.messages)
