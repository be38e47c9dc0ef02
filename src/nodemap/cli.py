"""nodemap's command line: parse, call, print. Thin by design.

Each command lives in nodemap/commands/<name>.py with two functions:
`add_arguments(parser)` (imports nothing heavy) and `run(args) -> int`.
Heavy imports (NVML, CuPy, mpi4py) happen inside `run`, so `nodemap --help`
and `nodemap topo` start fast. One parser, argparse: only the named
command's arguments are built (the others get a help-only stub); a line
made only of a command's declared OPTIONS (topo) is read without it
(plain_args), every other line, help and errors by argparse.
"""

from __future__ import annotations

import sys

from . import __version__
from .errors import NodemapError

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse

# name -> (module, one-line help). Order is the order --help shows.
COMMANDS: dict[str, tuple[str, str]] = {
    "topo": ("nodemap.commands.topo", "show the node: NUMA, caches, cores, GPUs, NICs and the paths between them"),
    "plan": ("nodemap.commands.plan", "plan where each rank's cores, memory, GPUs and NICs go"),
    "run": ("nodemap.commands.run", "apply the plan to this rank and exec the application"),
    "show": ("nodemap.commands.show", "report the binding in effect for every rank, with verdicts"),
    "bench": ("nodemap.commands.bench", "measure memory, GPU copies, MPI and NCCL paths against their peaks"),
    "compare": ("nodemap.commands.compare", "the same probes under several bindings: what each binding costs"),
    "place": ("nodemap.commands.place", "place data larger than one GPU across GPUs by access counts"),
    "check": ("nodemap.commands.check", "is this node right? measurements with verdicts, findings and a report"),
    "report": ("nodemap.commands.report", "render saved check or bench results again, or compare two of them"),
    "slurm": ("nodemap.commands.slurm", "this node's gres.conf lines and node features for Slurm, from its topology"),
}

EPILOG = """\
examples:
  nodemap check                     is this node right? verdicts, findings, JSON + HTML report
  nodemap topo                      the node as a tree (like lstopo)
  nodemap topo --matrix             GPU/NIC paths (like nvidia-smi topo -m)
  nodemap plan --tasks 8            one rank per GPU, cores/memory/NIC near it
  srun nodemap run -- ./app         bind each rank as planned, then exec ./app
  mpirun -np 4 nodemap run -- nodemap show    check the binding really in effect

every command takes --json for machine-readable output.
"""


def build_parser(only: str | None = None, words: list[str] | None = None, alone: bool = False) -> argparse.ArgumentParser:
    """The full parser; with `only`, other commands get a help-only stub so
    that their modules (and what they import) are not loaded ("": every
    command a stub, for a command line that names none), or with `alone`
    no parser at all (the command is the first word: argparse dispatches
    on it and shows no other; 9 stubs cost 4% of `nodemap topo`). `words`:
    the command line after `only`, for a command with subcommands (bench)
    to build only the one named."""
    import argparse

    from . import commands

    class Parser(argparse.ArgumentParser):  # subparsers are made of the same class
        def __init__(self, *args, formatter_class=commands.formatter, **kwargs):
            super().__init__(*args, formatter_class=formatter_class, **kwargs)

        def error(self, message: str):
            super().error(one_line(message))  # a megabyte value echoed by argparse, cut

    p = Parser(
        prog="nodemap",
        description="Map MPI+X applications onto multi-GPU nodes and prove the mapping by measurement.",
        epilog=EPILOG,
    )
    p.add_argument("--version", action="version", version=f"nodemap {__version__}")
    p.set_defaults(_parser=p)
    # the stubs keep `nodemap run` (every rank) from importing every command's module
    # and building its options: the one trick kept for the per-rank launch time
    registry = {only: COMMANDS[only]} if alone and only else COMMANDS
    commands.add_commands(p.add_subparsers(dest="command", metavar="COMMAND"), registry, only, "_module", words)
    return p


def main(argv: list[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else argv
    _guard_streams()
    args = plain_args(words)
    if args is None:
        args = _parse(words)
        if isinstance(args, int):
            return args
    try:
        code = int(args._module.run(args) or 0)
        sys.stdout.flush()  # a full disk shows here, not in a message at exit
        return code
    except NodemapError as e:
        print(f"nodemap {args.command}: error: {one_line(str(e))}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print(f"nodemap {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        sys.stdout.failed = True
        return _failed_write(f"nodemap {args.command}", None)
    except OSError as e:
        return _failed_write(f"nodemap {args.command}", e)


def _parse(words: list[str]) -> argparse.Namespace | int:
    """The command line read by argparse, or the exit status when it only printed help, the version or an error."""
    first = next((w for w in words if not w.startswith("-")), None)
    # No command named: the parser only prints help, version or an error.
    named = first if first in COMMANDS else ""
    parser = build_parser(named, words[words.index(first) + 1:] if first else None, alone=words[:1] == [named])
    try:
        args, extra = parser.parse_known_args(words)
    except SystemExit as e:  # --help, --version: argparse ignores a failed write and exits 0
        error = getattr(sys.stdout, "error", None)
        if e.code == 0 and error is not None:
            return _failed_write("nodemap", error)
        raise
    if extra:  # named by the (sub)command that was given them, with its usage
        args._parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if not getattr(args, "_module", None):
        parser.print_help()
        return 2
    return args


def plain_args(words: list[str]):
    """The arguments of a command line made of a command whose module declares its OPTIONS
    (commands/topo.py) and only those, each option whole, each value one word not starting
    with '-' and among its choices: exactly what argparse makes of it, without argparse's
    import and parser (~15% of `nodemap topo`). None for any other line (help, an error, an
    abbreviation, --option=value): argparse reads it, so its help and messages are its own."""
    if not words or words[0] not in COMMANDS:
        return None
    module = __import__(COMMANDS[words[0]][0], fromlist=["run"])
    table = getattr(module, "OPTIONS", None)
    if table is None:
        return None
    options = {option: (metavar, choices) for option, metavar, choices, _, _ in table}
    values = {_dest(option): default for option, _, _, default, _ in table}
    rest = iter(words[1:])
    for word in rest:
        if word not in options:
            return None
        metavar, choices = options[word]
        value = True if metavar is None else next(rest, None)
        if value is None or value is not True and (value.startswith("-") or choices and value not in choices):
            return None
        values[_dest(word)] = value
    import types

    return types.SimpleNamespace(command=words[0], _module=module, **values)


def _dest(option: str) -> str:
    return option.lstrip("-").replace("-", "_")  # argparse's name for it


def _failed_write(who: str, e: OSError | None) -> int:
    """Report a failed write (None or a broken pipe: the reader left, as in
    `| head`; stop quietly, as other tools do) and return the exit status."""
    where = "standard output" if _drop_stdout() else (getattr(e, "filename", None) or "a file")
    if e is None or isinstance(e, BrokenPipeError):
        return 0
    hint = {28: "free some space or write elsewhere", 122: "free some space or write elsewhere",
            27: "the file is over this shell's size limit (ulimit -f)",
            9: "redirect it (>/dev/null) instead of closing it"}.get(e.errno, "check where the output goes")
    print(f"{who}: error: {one_line(f'cannot write {where}: {e.strerror or e} ({hint})')}", file=sys.stderr)
    return 2


# C0 and C1 control characters but tab, newline and carriage return, as \xNN
_CONTROL = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0)) if c not in (9, 10, 13)}


MAX_LINE = 500  # characters of one error message, about: its start (the cause) and end (the fix) are kept


def one_line(text: str) -> str:
    """An error message as one line of plain text, about MAX_LINE characters
    at most: input files can hold newlines and terminal escape sequences,
    and a value echoed whole can be megabytes."""
    text = text.replace("\n", " ").replace("\r", " ").translate(_CONTROL)
    if len(text) <= MAX_LINE:
        return text
    head, tail = MAX_LINE - 200, 160
    return f"{text[:head]} ...({len(text) - head - tail} characters cut)... {text[-tail:]}"


class _Guarded:
    """A text stream that remembers a failed write (a full disk: say which
    output failed) and, on a terminal, shows control characters as \\xNN:
    names read from input files (a CPU model, a hostname, a path) must not
    drive the terminal (escape sequences retitle it, rewrite the screen)."""

    def __init__(self, stream) -> None:
        self._stream, self.failed, self.error = stream, False, None
        self._clean = bool(getattr(stream, "isatty", lambda: False)())

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text.translate(_CONTROL) if self._clean else text)
        except OSError as e:
            self.failed, self.error = True, e
            raise

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as e:
            self.failed, self.error = True, e
            raise

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


class _ClosedStdout:
    """Standard output when the shell closed it (>&-): Python's sys.stdout is
    None then, and print() would drop everything and exit 0."""

    failed, error = False, None

    def write(self, text: str) -> int:
        import errno

        self.failed, self.error = True, OSError(errno.EBADF, "standard output is closed")
        raise self.error

    def flush(self) -> None:
        pass


def _guard_streams() -> None:
    if not isinstance(sys.stdout, (_Guarded, _ClosedStdout)):  # main() may run again in one process
        sys.stdout = _ClosedStdout() if sys.stdout is None else _Guarded(sys.stdout)
    if sys.stderr is not None and not isinstance(sys.stderr, _Guarded) and sys.stderr.isatty():
        sys.stderr = _Guarded(sys.stderr)


def _drop_stdout() -> bool:
    """After a failed write: whether standard output is what failed; if so,
    point it at /dev/null so that Python's own flush at exit stays quiet."""
    import os

    if not getattr(sys.stdout, "failed", False):
        return False
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        os.close(null)
    except (OSError, ValueError, AttributeError):
        pass
    return True


if __name__ == "__main__":
    sys.exit(main())
