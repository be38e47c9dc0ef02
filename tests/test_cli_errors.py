"""Argument errors as a user meets them: one usage line of the command that
was given the argument, one error line naming it, exit 2, no traceback."""

from __future__ import annotations

import subprocess
import sys

import contextlib
import io

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodemap.cli import build_parser, plain_args


@pytest.mark.parametrize("argv, who", [
    (["topo", "--bogus"], "nodemap topo"),
    (["bench", "memory", "--bogus"], "nodemap bench memory"),
    (["bench", "placement", "--nope"], "nodemap bench placement"),
    (["plan", "--tasks", "2", "--launcher", "srun", "extra"], "nodemap plan"),
    (["--bogus"], "nodemap"),
])
def test_unrecognized_arguments_are_named_by_their_command(argv, who):
    r = subprocess.run([sys.executable, "-m", "nodemap", *argv], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert lines[0].startswith(f"usage: {who}"), r.stderr
    assert lines[-1].startswith(f"{who}: error: unrecognized arguments:"), r.stderr
    assert "Traceback" not in r.stderr


def test_a_command_named_first_builds_only_its_parser(monkeypatch, capsys):
    """Help-only stubs of the other commands serve the top-level help and
    errors only: `nodemap topo` built 9 of them (4% of its time, issue 37);
    before the command (`nodemap -h topo`) they are still there."""
    import argparse

    from nodemap.cli import COMMANDS, main

    made = []
    real = argparse.ArgumentParser.__init__
    monkeypatch.setattr(argparse.ArgumentParser, "__init__", lambda self, *a, **k: made.append(1) or real(self, *a, **k))
    assert main(["topo", "--input=/nonexistent"]) == 2  # (--option=value: argparse reads it, test below)
    assert len(made) == 2  # nodemap's and topo's
    made.clear()
    with pytest.raises(SystemExit):
        main(["-h", "topo"])
    out = capsys.readouterr().out
    assert len(made) == 1 + len(COMMANDS) and all(name in out for name in COMMANDS), out


# --- a command line read without argparse (cli.plain_args) ---------------------------------------------------

VALUES = ["auto", "hwloc", "bogus", "node.xml", "", "a b", "-1", "-", "--json", "topo"]
STRAY = ["-1", "-", "--", "-h", "--help", "--mat", "--input=x", "--json=1", "--bogus", "topo", "x"]
# a line as people write them, mostly valid: options with a value each, flags, now and then a stray word
PIECES = st.one_of(st.tuples(st.sampled_from(["--input", "--source", "--export"]), st.sampled_from(VALUES)),
                   st.tuples(st.sampled_from(["--matrix", "--json"])), st.tuples(st.sampled_from(STRAY)))


def _argparse(argv: list[str]) -> dict | None:
    """What argparse makes of `argv` (its _parser aside), None where it refuses it or only prints help."""
    try:
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            args, extra = build_parser(argv[0], argv[1:], alone=True).parse_known_args(argv)
    except SystemExit:
        return None
    return None if extra else {k: v for k, v in vars(args).items() if k != "_parser"}


@given(st.lists(PIECES, max_size=5).map(lambda pieces: [w for p in pieces for w in p]))
def test_a_line_read_without_argparse_is_read_as_argparse_reads_it(words):
    plain = plain_args(["topo", *words])
    if plain is not None:
        assert vars(plain) == _argparse(["topo", *words])


def test_the_usual_lines_are_read_without_argparse_and_the_rest_by_it():
    for argv in (["topo"], ["topo", "--json"], ["topo", "--input", "node.xml", "--matrix"],
                 ["topo", "--source", "sysfs", "--export", "n.json", "--json"], ["topo", "--input", ""]):
        assert plain_args(argv) is not None and vars(plain_args(argv)) == _argparse(argv), argv
    for argv in (["topo", "--source", "bogus"], ["topo", "--mat"], ["topo", "-h"], ["topo", "--input"],
                 ["topo", "--input", "--json"], ["topo", "--input=x"], ["topo", "--", "x"], ["topo", "x"],
                 ["plan", "--tasks", "2"], ["--json", "topo"], []):
        assert plain_args(argv) is None, argv
