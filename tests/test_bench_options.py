"""bench/options: --gpus, --dtype and choice lists defined once for every kind."""

from __future__ import annotations

import argparse
import ast
import dataclasses
from pathlib import Path

import pytest

from nodemap.bench import options
from nodemap.commands import bench as bench_cli
from nodemap.bench.kinds import BENCHES
from nodemap.errors import NodemapError

BENCH = Path(options.__file__).parent


@pytest.mark.parametrize("spec, names, want", [
    ("fp64", ("float64", "float32"), ["float64"]),  # was refused by bench gpu
    ("float64", ("fp32", "fp64"), ["fp64"]),  # was refused by bench jacobi
    ("FP32,double,fp32", ("fp32", "fp64"), ["fp32", "fp64"]),
    ("float64,float32", ("float64", "float32"), ["float64", "float32"]),
])
def test_every_spelling_of_a_dtype_is_taken(spec, names, want):
    assert options.dtypes(spec, names) == want


@pytest.mark.parametrize("spec", ["", "fp16", "float64,int8"])
def test_unknown_dtypes_are_named(spec):
    with pytest.raises(NodemapError, match="--dtype .*choose from fp32, fp64"):
        options.dtypes(spec, ("fp32", "fp64"))


def test_gpu_lists_with_and_without_repeats():
    assert options.gpus("0,0,1", 2, repeats=True) == [0, 0, 1]
    with pytest.raises(NodemapError, match="twice"):
        options.gpus("0,0", 2)
    with pytest.raises(NodemapError, match="0-1"):
        options.gpus("0,2", 2, repeats=True)


def test_the_kinds_parse_dtype_and_gpus_alike():
    import importlib

    for kind, (modname, _) in BENCHES.items():
        p = argparse.ArgumentParser(add_help=False)
        bench_cli.add_options(p, importlib.import_module(modname).Options)
        flags = {o: a for a in p._actions for o in a.option_strings}
        if "--gpus" in flags:
            assert flags["--gpus"].metavar == "LIST" and "CUDA ordinals" in flags["--gpus"].help, kind
        if "--dtype" in flags:
            assert "are taken too" in flags["--dtype"].help, kind


def test_no_kind_writes_an_option_twice():
    """Each option is one field of its kind's Options (options.option); no
    module under bench/ calls add_argument: commands/bench.py builds every
    kind's parser (was: each option an Options field and an add_argument
    call, with its own default: 78 calls)."""
    for f in BENCH.rglob("*.py"):
        for node in ast.walk(ast.parse(f.read_text())):
            called = getattr(getattr(node, "func", None), "attr", "")
            assert called not in ("add_argument", "add_mutually_exclusive_group"), \
                f"{f.relative_to(BENCH)}:{node.lineno}: declare the option as an Options field (options.option)"


def test_a_kinds_bounds_are_declared_with_its_options():
    """A count's least value and a factor above 0 are declared with the option and checked before the kind
    plans (options.check_bounds); kinds checked them in their plans, 13 calls in 7 kinds, until issue 37."""
    for f in BENCH.rglob("*.py"):
        if f.name in ("options.py", "harness.py"):  # the checks, and --repeats' (a shared option)
            continue
        for node in ast.walk(ast.parse(f.read_text())):
            called = getattr(node, "func", None)
            name = getattr(called, "id", "") or getattr(called, "attr", "")
            assert name not in ("check_count", "check_positive"), \
                f"{f.relative_to(BENCH)}:{node.lineno}: declare the bound with the option (option(minimum=...))"
    bounded = {(kind, f.name): f.metadata["cli"] for kind, (module, _) in BENCHES.items()
               for f in dataclasses.fields(__import__(module + "_options", fromlist=["Options"]).Options)
               if f.metadata["cli"]["minimum"] is not None or f.metadata["cli"]["positive"]}
    assert len(bounded) == 11 and bounded["memory", "batch"]["minimum"] == 1, sorted(bounded)
    for (kind, name), cli in bounded.items():
        Options = __import__(BENCHES[kind][0] + "_options", fromlist=["Options"]).Options
        flag = "--" + name.replace("_", "-")
        with pytest.raises(NodemapError, match=f"^{flag} "):
            options.check_bounds(Options(**{name: cli["minimum"] - 1 if cli["minimum"] is not None else 0}))
        options.check_bounds(Options(**{name: cli["minimum"] if cli["minimum"] is not None else 0.5}))


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Base:
    repeats: int = options.repeat_count(4, old=("--iterations",))
    topology: str | None = options.topology_file()
    size: str | None = options.option(None, "bytes (default %(default)s)", metavar="BYTES")


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Kind(_Base):
    cpus: str | None = options.option(None, "a CPU list", group="where")
    threads: int | None = options.option(None, "a count", group="where")
    pair: tuple[str, ...] = options.option((), "repeatable", metavar="A,B")
    scale: float = options.option(1.0, "a factor", aliases=("--factor",))
    fast: bool = options.option(False, "a switch")


def _parser(cls: type) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="k", add_help=False)
    bench_cli.add_options(p, cls)
    return p


def test_a_parser_is_built_from_the_options_fields():
    p = _parser(_Kind)
    # the kind's own options (most derived first), then the shared ones, then where the results go
    assert [a.option_strings[0] for a in p._actions] == [
        "--cpus", "--threads", "--pair", "--scale", "--fast", "--size", "--repeats", "--iterations", "--topology",
        "--json", "-o", "-q"]
    a = p.parse_args(["--threads", "3", "--pair", "0,1", "--pair", "2,3", "--factor", "0.5", "--fast",
                      "--iterations", "7", "--input", "t.json"])
    assert (a.threads, a.pair, a.scale, a.fast, a.repeats, a.topology) == (3, ["0,1", "2,3"], 0.5, True, 7, "t.json")
    assert a._topology_option == "--input"  # an error names the spelling typed
    d = p.parse_args([])
    assert (d.cpus, d.pair, d.scale, d.fast, d.repeats, d.size) == (None, [], 1.0, False, 4, None)
    with pytest.raises(SystemExit):  # one group: one of them
        p.parse_args(["--cpus", "0", "--threads", "1"])
    text = " ".join(p.format_help().split())
    assert "--iterations" not in text and "(default 4)" in text and "--size BYTES bytes (default None)" in text


def test_a_field_without_its_command_line_is_refused():
    @dataclasses.dataclass(frozen=True)
    class Bare(_Base):
        loads: int = 8

    with pytest.raises(TypeError, match="Bare.loads: declare it with options.option"):
        _parser(Bare)


def test_a_kind_builds_only_its_own_parser():
    # was: every kind imported (nccl's, jacobi's...) to print `bench memory --help`
    import subprocess
    import sys

    # every other kind's module by its full name (bench/kinds.py): gpu's module is also "memory"
    code = ("import sys\nfrom nodemap.cli import main\nfrom nodemap.bench.kinds import BENCHES\n"
            "try:\n    main(['bench', 'memory', '--help'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for k, (m, _) in BENCHES.items() if k != 'memory' and m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "--sweep" in r.stdout, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "[]"


# what a help screen or a usage error never needs: the results' records (msgspec), the topology model, NVML,
# the driver and harness (modules imported beyond `topo --help`: benchmarks/import_time.py --cli)
MEASURING = ("msgspec", "nodemap.topology.model", "nodemap.topology.nvml", "nodemap.bench.driver",
             "nodemap.bench.harness", "nodemap.bench.results")


def test_a_kinds_help_and_usage_errors_import_nothing_that_measures():
    # was: `bench memory --help` imported its kind's module and with it the driver, msgspec, the topology
    # model and NVML: 106 ms against 32 ms for `topo --help` (2-vCPU CI VM); every kind, both ways out
    import subprocess
    import sys

    code = ("import sys\nfrom nodemap.cli import main\nfrom nodemap.bench.kinds import BENCHES\n"
            f"measuring = {MEASURING!r}\n"
            "for kind, (module, _) in BENCHES.items():\n"
            "    for last in ('--help', '--no-such-option'):\n"
            "        try:\n            main(['bench', kind, last])\n        except SystemExit as e:\n"
            "            assert e.code == (0 if last == '--help' else 2), (kind, last, e.code)\n"
            "        got = [m for m in (*measuring, module) if m in sys.modules]\n"
            "        print(kind, last, got, file=sys.stderr)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = [line for line in r.stderr.splitlines() if line.endswith("]") and line.split(" ", 1)[0] in BENCHES]
    assert len(lines) == 2 * len(BENCHES), r.stderr[-2000:]
    assert [line for line in lines if not line.endswith(" []")] == []


def test_a_kind_takes_its_options_from_its_options_module():
    # one Options per kind (no copy): the record check builds is the one the command line is built from
    import importlib

    from nodemap.bench.kinds import options_module

    for kind, (modname, _) in BENCHES.items():
        declared = importlib.import_module(options_module(modname))
        assert importlib.import_module(modname).Options is declared.Options, kind
        assert declared.DESCRIPTION.strip(), kind


def test_placement_strategies_are_one_comma_list_of_choices(capsys):
    from nodemap import cli

    rc = cli.main(["bench", "placement", "--strategies", "analysis,nope"])
    assert rc == 2 and "--strategies 'analysis,nope': choose from" in capsys.readouterr().err
