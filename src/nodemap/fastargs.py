"""Plain command lines parsed without argparse.

argparse costs 10-20 ms to import and build, a third of what `nodemap topo`
may take (within 3x of lstopo) and of `nodemap run`'s launch overhead. A
command's `add_arguments(p)` runs against a Recorder, which stands in for
the parser and keeps the option table, so the options are defined once.
`parse` takes the plain lines: exact option names, plain values
(`--tasks 4`, `--input=x`), store/store_true options and a trailing
REMAINDER positional; repeated options: the last one counts. Anything else
(--help, abbreviations, empty values or values starting with "-", a value
its type or choices refuse, two options of one exclusive group, an action
or positional the Recorder does not model) gives None, and argparse then
parses the line or rejects it with its own message.
tests/test_fastargs.py checks that both agree wherever parse answers.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing imports re: kept off topo's and run's path
    from typing import Any, Callable

REMAINDER = "..."  # argparse.REMAINDER's value, without importing argparse


class Unsupported(Exception):
    """add_arguments used something parse does not model: use argparse."""


class _Option:
    __slots__ = ("dest", "flag", "type", "choices", "group")

    def __init__(self, dest: str, flag: bool, type: Callable | None, choices, group: int | None) -> None:
        self.dest, self.flag, self.type, self.choices, self.group = dest, flag, type, choices, group


class Recorder:
    """The ArgumentParser methods add_arguments uses, recording options."""

    def __init__(self) -> None:
        self.options: dict[str, _Option] = {}
        self.defaults: dict[str, Any] = {}
        self.remainder: str | None = None  # dest of a nargs=REMAINDER positional
        self._groups = 0

    def add_argument(self, *names: str, action: str | None = None, type: Callable | None = None,
                     default: Any = None, choices=None, dest: str | None = None, nargs=None,
                     _group: int | None = None, **_help: Any) -> None:
        if not names:
            raise Unsupported("no name")
        if not names[0].startswith("-"):
            if nargs != REMAINDER or len(names) != 1 or self.remainder is not None:
                raise Unsupported(f"positional {names[0]}")
            self.remainder = dest or names[0]
            self.defaults[self.remainder] = []
            return
        if nargs is not None or action not in (None, "store", "store_true"):
            raise Unsupported(f"{names[0]}: action {action}, nargs {nargs}")
        longs = [n for n in names if n.startswith("--")]
        dest = dest or (longs[0] if longs else names[0]).lstrip("-").replace("-", "_")
        flag = action == "store_true"
        if flag and default is None:
            default = False
        elif isinstance(default, str) and type is not None:
            default = type(default)  # argparse converts string defaults too
        self.defaults[dest] = default
        for n in names:
            self.options[n] = _Option(dest, flag, type, choices, _group)

    def add_argument_group(self, *args: Any, **kwargs: Any) -> Recorder:
        return self

    def add_mutually_exclusive_group(self, **kwargs: Any) -> _Exclusive:
        self._groups += 1
        return _Exclusive(self, self._groups)

    def set_defaults(self, **values: Any) -> None:
        self.defaults.update(values)

    def __getattr__(self, name: str):
        raise Unsupported(name)  # add_subparsers, ...


class _Exclusive:
    def __init__(self, rec: Recorder, group: int) -> None:
        self._rec, self._group = rec, group

    def add_argument(self, *names: str, **kwargs: Any) -> None:
        self._rec.add_argument(*names, _group=self._group, **kwargs)


def record(add_arguments: Callable[[Any], None]) -> Recorder | None:
    """The option table `add_arguments` defines, or None if it uses more."""
    rec = Recorder()
    try:
        add_arguments(rec)
    except Unsupported:
        return None
    return rec


def parse(rec: Recorder, words: list[str]) -> dict[str, Any] | None:
    """`words` as argparse would parse them with `rec`'s options, or None."""
    values = dict(rec.defaults)
    groups: dict[int, str] = {}
    i = 0
    while i < len(words):
        word = words[i]
        if rec.remainder is not None and (word == "--" or not word.startswith("-")):
            values[rec.remainder] = words[i:]  # argparse keeps a leading "--" in a REMAINDER
            break
        name, eq, value = word.partition("=") if word.startswith("--") else (word, "", "")
        opt = rec.options.get(name)
        if opt is None:
            return None
        if opt.flag:
            if eq:
                return None
            values[opt.dest] = True
            i += 1
        else:
            if not eq:
                if i + 1 == len(words):
                    return None
                value = words[i + 1]
            i += 1 if eq else 2
            if not value or value.startswith("-"):
                return None
            try:
                value = opt.type(value) if opt.type is not None else value
            except Exception:
                return None
            if opt.choices is not None and value not in opt.choices:
                return None
            values[opt.dest] = value
        if opt.group is not None and groups.setdefault(opt.group, opt.dest) != opt.dest:
            return None
    return values
