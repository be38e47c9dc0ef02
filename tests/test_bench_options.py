"""bench/options: --gpus, --dtype and choice lists defined once for every kind."""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

import pytest

from nodemap.bench import options
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
        importlib.import_module(modname).add_arguments(p)
        flags = {o: a for a in p._actions for o in a.option_strings}
        if "--gpus" in flags:
            assert flags["--gpus"].metavar == "LIST" and "CUDA ordinals" in flags["--gpus"].help, kind
        if "--dtype" in flags:
            assert "are taken too" in flags["--dtype"].help, kind


def test_no_kind_defines_gpus_or_dtype_itself():
    # one definition each: a new kind takes them from bench/options
    for f in BENCH.glob("*.py"):
        if f.name == "options.py":
            continue
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
                flags = [a.value for a in node.args if isinstance(a, ast.Constant)]
                assert not {"--gpus", "--dtype"} & set(flags), f"{f.name}: use bench.options"


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


def test_placement_strategies_are_one_comma_list_of_choices(capsys):
    from nodemap import cli

    rc = cli.main(["bench", "placement", "--strategies", "analysis,nope"])
    assert rc == 2 and "--strategies 'analysis,nope': choose from" in capsys.readouterr().err
