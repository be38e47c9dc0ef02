"""Argument errors as a user meets them: one usage line of the command that
was given the argument, one error line naming it, exit 2, no traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest


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
    assert main(["topo", "--input", "/nonexistent"]) == 2
    assert len(made) == 2  # nodemap's and topo's
    made.clear()
    with pytest.raises(SystemExit):
        main(["-h", "topo"])
    out = capsys.readouterr().out
    assert len(made) == 1 + len(COMMANDS) and all(name in out for name in COMMANDS), out
