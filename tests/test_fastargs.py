"""nodemap.fastargs parses plain command lines exactly as argparse does,
and gives up (None) on everything else; cli falls back to argparse then."""

import itertools

import pytest

from nodemap import cli, fastargs

# per command: words to combine (options, values good and bad, argparse's
# traps: abbreviations, "=", empty, "-" values, "--", help)
WORDS = {
    "topo": ["--matrix", "--json", "--input", "--source", "--export", "auto", "sysfs", "magic", "x.json", "-",
             "--", "--mat", "--input=a", "--input=", "--source=nvml", "--source=bad", "--json=1", "-h", "", "-5"],
    "plan": ["--tasks", "4", "x", "-1", "--threads=2", "--gpu-order", "index", "sideways", "--no-gpus",
             "--launcher=srun", "--launcher=pbs", "--nic-rails", "all", "--task", "--env", "--json", "0-3", "--cpus"],
    "run": ["--tasks", "2", "--", "./app", "-x", "--dry-run", "--local-rank=1", "--mem-policy", "none", "bogus",
            "-v", "--verbose=1", "--input", "t.xml", "--no-cache"],
    "show": ["--json", "--no-mpi", "--timeout", "2.5", "nan", "soon", "--timeout=-1", "--tim"],
}


def _module(command):
    __import__(cli.COMMANDS[command][0])
    import sys

    return sys.modules[cli.COMMANDS[command][0]]


@pytest.mark.parametrize("command", sorted(WORDS))
def test_fast_parse_agrees_with_argparse(command, capsys):
    rec = fastargs.record(_module(command).add_arguments)
    assert rec is not None
    parser = cli.build_parser(command)
    checked = refused = 0
    for n in range(4):
        for line in itertools.product(WORDS[command], repeat=n):
            fast = fastargs.parse(rec, list(line))
            if fast is None:
                refused += 1
                continue
            ns, extra = parser.parse_known_args([command, *line])
            assert not extra, line
            got = {k: getattr(ns, k) for k in fast}
            assert got == fast or str(got) == str(fast), line  # str: nan != nan
            checked += 1
    assert checked > 20 and refused > 20  # both paths really taken


def test_commands_with_subcommands_are_left_to_argparse():
    for command in ("bench", "place"):
        assert fastargs.record(_module(command).add_arguments) is None


def test_exclusive_options_and_unsupported_actions():
    rec = fastargs.Recorder()
    g = rec.add_mutually_exclusive_group()
    g.add_argument("--cpus")
    g.add_argument("--threads", type=int)
    assert fastargs.parse(rec, ["--cpus", "0-3"]) == {"cpus": "0-3", "threads": None}
    assert fastargs.parse(rec, ["--cpus", "0-3", "--threads", "2"]) is None  # argparse's "not allowed with"
    with pytest.raises(fastargs.Unsupported):
        rec.add_argument("--many", nargs="+")
    with pytest.raises(fastargs.Unsupported):
        rec.add_argument("--count", action="count")
    with pytest.raises(fastargs.Unsupported):
        rec.add_argument("file")


def test_run_takes_the_fast_path_without_importing_argparse():
    import subprocess
    import sys

    code = ("import sys, io, contextlib\nfrom nodemap.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    main(['run', '--local-rank', '0', '--local-size', '1', '--dry-run', '--', 'true'])\n"
            "print('argparse' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip().splitlines()[-1] == "False"
