"""The package's import graph keeps the shape DESIGN.md draws (read from the source, AST only).

- no upward import: each package room imports only rooms of its own layer or below;
- no circle between modules (imports inside functions count: they are edges too;
  imports under `if TYPE_CHECKING:` do not run and do not count);
- launcher variables are read as integers only in nodemap.env, and listed only there;
- a process is bound (sched_setaffinity, set_mempolicy) only by mapping.launch (compare's ranks too);
- argparse only in the command line (cli, commands/): mapping takes a Request's fields, not a Namespace;
- Slurm's node name is read only by nodemap.launcher.node_name (the ground floor: check, bench and
  fleet name the node without importing mapping);
- pynvml is imported only by the NVML source (topology/nvml.py);
- tomllib is imported only with its Python 3.10 fallback (tomli);
- HTML tables are written only by nodemap.htmlpage.table (it escapes every cell);
- check, compare and the result reader name no benchmark kind and import no kind's module: they read
  its STORY through the registry (bench/kinds.py), so a new kind is one file and a registry line.
- no kind imports another kind's module: what several kinds share lives beside them (comm/world.py,
  gpu/devices.py...), not in one of them;
- one world for every multi-process kind (bench/comm/world.py World): no second class of ranks, and
  NCCL communicators are made only there; NCCL operations are records (collectives.OP), not a switch.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from nodemap.bench.comm.collectives_options import OPS

SRC = Path(__file__).resolve().parent.parent / "src" / "nodemap"

# Lowest first. A room may import its own layer and the layers below it.
LAYERS = (
    ("nodemap", "errors", "text", "units", "outfile", "infile", "records", "htmlpage", "scratch", "native", "env",
     "launcher", "proc", "finding"),
    ("topology",),
    ("mapping", "placement"),
    ("bench",),
    ("check", "compare", "watch"),
    ("fleet", "slurm"),
    ("report",),
    ("commands",),
    ("cli", "__main__"),
)
RANK = {room: i for i, rooms in enumerate(LAYERS) for room in rooms}
NVML_SOURCE = "nodemap.topology.nvml"
ENV_MODULE = "nodemap.env"


def _modules() -> dict[str, Path]:
    out = {}
    for f in SRC.rglob("*.py"):
        parts = list(f.relative_to(SRC.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = f
    return out


MODULES = _modules()
TREES = {m: ast.parse(f.read_text(), str(f)) for m, f in MODULES.items()}


def _runtime_nodes(tree: ast.AST):
    """Every node, less the bodies of `if TYPE_CHECKING:` (they never run)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                stack.extend(child.orelse)
                continue
            stack.append(child)


def _targets(module: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The modules of nodemap an import statement loads (the deepest one that exists)."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        if node.level:
            base = module.split(".")
            if not MODULES[module].name == "__init__.py":
                base = base[:-1]
            base = base[: len(base) - (node.level - 1)]
            prefix = ".".join(base + ([node.module] if node.module else []))
        else:
            prefix = node.module or ""
        names = [f"{prefix}.{a.name}" if f"{prefix}.{a.name}" in MODULES else prefix for a in node.names]
    out = []
    for name in names:
        while name not in MODULES and "." in name:
            name = name.rsplit(".", 1)[0]
        if name in MODULES and name != module:
            out.append(name)
    return out


def _edges() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {m: set() for m in MODULES}
    for m, tree in TREES.items():
        for node in _runtime_nodes(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                edges[m].update(_targets(m, node))
    return edges


EDGES = _edges()


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def test_every_room_has_a_layer():
    assert {_room(m) for m in MODULES} - set(RANK) == set(), "add the new room to LAYERS"


def upward(edges: dict[str, set[str]]) -> set[tuple[str, str]]:
    return {(a, b) for a, targets in edges.items() for b in targets if RANK[_room(b)] > RANK[_room(a)]}


def test_no_upward_import():
    assert upward(EDGES) == set()


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_no_circle():
    assert circles(EDGES) == []


def test_the_rules_catch_what_they_forbid():
    # the checks themselves, on small graphs: an upward edge and a two-module circle
    assert upward({"nodemap.bench.harness": {"nodemap.commands.bench"}}) == {
        ("nodemap.bench.harness", "nodemap.commands.bench")}
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert int_of_environ(ast.parse("import os\nn = int(os.environ.get('PMI_SIZE', '1'))"))
    assert int_of_environ(ast.parse("import os\nn = int(os.getenv('X') or 1)"))
    assert not int_of_environ(ast.parse("import os\nn = int(x)"))
    assert bare_tomllib(ast.parse("def f():\n    import tomllib\n"))
    assert not bare_tomllib(ast.parse("try:\n    import tomllib\nexcept ModuleNotFoundError:\n    import tomli as tomllib\n"))


def int_of_environ(tree: ast.AST) -> list[int]:
    """Lines where int() reads os.environ or os.getenv directly."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "int" and node.args:
            inner = ast.unparse(node.args[0])
            if "os.environ" in inner or "getenv(" in inner:
                out.append(node.lineno)
    return out


def test_launcher_integers_are_read_only_in_env():
    found = {m: lines for m, t in TREES.items() if m != ENV_MODULE and (lines := int_of_environ(t))}
    assert found == {}, "read integers from the environment with nodemap.env.integer"


def env_lists(tree: ast.AST, names: set[str]) -> list[int]:
    """Lines of a tuple, list or set literal naming two or more of `names`: a copy of one of env's lists."""
    return [n.lineno for n in ast.walk(tree) if isinstance(n, (ast.Tuple, ast.List, ast.Set))
            and sum(isinstance(e, ast.Constant) and e.value in names for e in n.elts) >= 2]


def test_launcher_and_visibility_variables_are_listed_only_in_env():
    from nodemap import env

    names = set(env.GLOBAL_RANK_VARS + env.WORLD_SIZE_VARS + env.MPI_JOB_VARS + env.LOCAL_RANK_VARS
                + env.GPU_VISIBILITY_VARS) | {size for _, _, size in env.LOCAL_PAIRS}
    assert env_lists(ast.parse('V = ("PMI_RANK", "OMPI_COMM_WORLD_RANK")'), names)  # the rule can fail
    found = {m: lines for m, t in TREES.items() if m != ENV_MODULE and (lines := env_lists(t, names))}
    assert found == {}, "import the list from nodemap.env"


def node_name_reads(tree: ast.AST) -> list[int]:
    """Lines naming Slurm's node-name variable: the literal, or env's SLURM_NODE."""
    return [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Constant) and n.value == "SLURMD_NODENAME"
            or isinstance(n, (ast.Name, ast.Attribute)) and getattr(n, "id", getattr(n, "attr", "")) == "SLURM_NODE"]


LAUNCHER_MODULE = "nodemap.launcher"


def test_the_node_name_is_decided_only_in_the_launcher_module():
    # one rule for which name is this node's (a name mpiexec forwarded from the batch node is not, or
    # --slurm-drain drains the batch node): nodemap.launcher.node_name, on the ground floor (it was
    # mapping.localrank: check, bench and fleet imported mapping to name their node)
    assert node_name_reads(ast.parse('n = env.get("SLURMD_NODENAME")'))  # the rule can fail
    found = {m: lines for m, t in TREES.items() if m not in (ENV_MODULE, LAUNCHER_MODULE)
             and (lines := node_name_reads(t))}
    assert found == {}, "name the node with nodemap.launcher.node_name"
    assert _room(LAUNCHER_MODULE) in LAYERS[0]


def test_pynvml_only_in_the_nvml_source():
    found = {m for m, t in TREES.items() for n in ast.walk(t)
             if isinstance(n, ast.Import) and any(a.name.split(".")[0] == "pynvml" for a in n.names)
             or isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[0] == "pynvml"}
    assert found <= {NVML_SOURCE}, "open NVML through nodemap.topology.nvml.start"


def nvml_opens(tree: ast.AST) -> list[int]:
    """Lines that take `start` from the NVML source (`from ..topology.nvml import start`, `nvml.start()`)."""
    return [n.lineno for n in ast.walk(tree)
            if isinstance(n, ast.ImportFrom) and (n.module or "").endswith("nvml") and any(a.name == "start" for a in n.names)
            or isinstance(n, ast.Attribute) and n.attr == "start" and isinstance(n.value, ast.Name) and n.value.id == "nvml"]


# What only a live NVML session gives: health counters (check) and memory samples over a run (watch).
# Facts about a GPU (its PCIe link, memory, NVLinks) come from the Topology the NVML source filled in
# (the GPU kinds opened NVML per GPU for the link's maximum and never closed it).
NVML_SESSIONS = {NVML_SOURCE, "nodemap.check.inventory", "nodemap.watch.monitor"}


def test_nvml_is_opened_only_where_the_topology_cannot_answer():
    assert nvml_opens(ast.parse("from ...topology.nvml import start\nnv, why = nvml.start()\n")) == [1, 2]
    found = {m: lines for m, t in TREES.items() if m not in NVML_SESSIONS and (lines := nvml_opens(t))}
    assert found == {}, "read the GPU's facts from the Topology (nodemap.topology.nvml.enrich fills them in)"


def bare_tomllib(tree: ast.AST) -> list[int]:
    """Lines importing tomllib outside a try that falls back on ImportError (Python 3.10 has no tomllib)."""
    guarded = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(
                h.type is not None and any(e in ast.unparse(h.type) for e in ("ImportError", "ModuleNotFoundError"))
                for h in node.handlers):
            guarded.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return [n.lineno for n in ast.walk(tree) if id(n) not in guarded and (
        isinstance(n, ast.Import) and any(a.name == "tomllib" for a in n.names)
        or isinstance(n, ast.ImportFrom) and n.module == "tomllib")]


def test_no_bare_tomllib():
    found = {m: lines for m, t in TREES.items() if (lines := bare_tomllib(t))}
    assert found == {}, "read TOML through nodemap.check.sitefile (tomllib, else tomli on Python 3.10)"


@pytest.mark.parametrize("room", ["bench", "topology", "mapping"])
def test_lower_rooms_never_import_the_cli(room):
    # the edge the kinds' registry once made (bench/harness -> commands/bench)
    assert not {(a, b) for a, b in upward(EDGES) if _room(a) == room and _room(b) in ("commands", "cli")}


TEXT_MODULE, UNITS_MODULE = "nodemap.text", "nodemap.units"
_BINARY_UNITS = {"2 ** 20", "2 ** 30", "2 ** 40", "1 << 20", "1 << 30", "1 << 40"}


def column_padding(tree: ast.AST) -> list[int]:
    """Lines that pad text to a computed width (ljust/rjust/center of a width that is no literal): a table
    built by hand."""
    return [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and n.func.attr in ("ljust", "rjust", "center") and n.args and not isinstance(n.args[0], ast.Constant)]


def sizes_by_hand(tree: ast.AST) -> list[int]:
    """Lines that print bytes in MiB/GiB/TiB by hand: a division by 2**30, 1 << 30 or a GiB constant inside an
    f-string; and functions named as a size formatter."""
    out = [n.lineno for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
           and n.name.lstrip("_") in ("gib", "mib", "human_bytes", "format_size", "format_bytes")]
    for f in (n for n in ast.walk(tree) if isinstance(n, ast.FormattedValue)):
        for n in ast.walk(f.value):
            if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Div) and (
                    ast.unparse(n.right).strip("()") in _BINARY_UNITS
                    or ast.unparse(n.right).split(".")[-1].lower() in ("mib", "gib", "tib")):
                out.append(n.lineno)
    return out


def test_tables_and_sizes_are_written_in_one_place_each():
    # the rules can fail: the copies they replaced
    assert column_padding(ast.parse('"  ".join(c.ljust(w) for c, w in zip(r, widths))'))
    assert not column_padding(ast.parse('dom.rjust(4, "0")'))
    assert sizes_by_hand(ast.parse('f"{b / (1 << 30):.2f} GiB"')) and sizes_by_hand(ast.parse('f"{b / GiB:.2f}"'))
    assert sizes_by_hand(ast.parse("def _gib(b):\n    return b"))
    assert not sizes_by_hand(ast.parse("gib = memory / 2**30"))
    found = {m: lines for m, t in TREES.items() if m != TEXT_MODULE and (lines := column_padding(t))}
    assert found == {}, "render tables with nodemap.text.table"
    found = {m: lines for m, t in TREES.items() if m != UNITS_MODULE and (lines := sizes_by_hand(t))}
    assert found == {}, "print sizes with nodemap.units (format_size, format_size_short, gib)"


HTML_MODULE = "nodemap.htmlpage"


def tables_by_hand(tree: ast.AST) -> list[int]:
    """Lines whose string literals (f-string parts included) open an HTML table: one built by hand."""
    return [n.lineno for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and "<table" in n.value.lower()]


def test_html_tables_are_written_in_one_place():
    # the rule can fail: the hand-built tables it replaced
    assert tables_by_hand(ast.parse('parts.append("<table><tr><th>#</th></tr>")'))
    assert tables_by_hand(ast.parse('f"<TABLE id=\'{x}\'>{rows}</table>"'))
    assert not tables_by_hand(ast.parse('table(["#"], rows)'))
    found = {m: lines for m, t in TREES.items() if m != HTML_MODULE and (lines := tables_by_hand(t))}
    assert found == {}, "build HTML tables with nodemap.htmlpage.table (it escapes every cell)"


def _spells_a_gpu(text: str) -> bool:
    """`text` ends in a GPU's name before its number: "GPU", "gpu", "cuda" (not "vGPU", "pycuda")."""
    low = text.lower()
    return any(low.endswith(w) and not text[-len(w) - 1:-len(w)].isalpha() for w in ("gpu", "cuda"))


def gpu_labels_by_hand(tree: ast.AST) -> list[int]:
    """Lines of f-strings that spell a GPU from a number ("GPU{i}", "gpu{i}", "cuda{d}"): one GPU came out
    as GPU3, gpu3 and cuda3, built by hand in 19 places."""
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.JoinedStr):
            parts = n.values
            out += [n.lineno for a, b in zip(parts, parts[1:]) if isinstance(a, ast.Constant)
                    and isinstance(a.value, str) and _spells_a_gpu(a.value)
                    and isinstance(b, ast.FormattedValue)]
    return out


# Where the spelling is defined, and where it is not a Topology GPU yet or not one at all.
GPU_SPELLERS = {
    "nodemap.topology.model",  # GPU.key
    "nodemap.bench.endpoints",  # Endpoint: key "gpu3", label "GPU3"
    "nodemap.bench.gpu.devices",  # ordinal_key: a CUDA device the Topology does not know ("cuda1")
    "nodemap.topology.hwloc_xml",  # names the GPUs it is about to make (below bench: no Endpoint)
    "nodemap.bench.figures",  # an unknown spelling kept as figure keys always wrote it
    "nodemap.fleet.facts",  # a fleet document's index (the document readers are typed separately)
    "nodemap.bench.app.placement",  # CUDA ordinals in the result's environment record
}


def test_gpus_are_spelled_by_the_model_or_an_endpoint():
    assert gpu_labels_by_hand(ast.parse('a = f"GPU{i} ECC"\nb = f"inventory/pcie/gpu{g.index}"\nc = f"vGPU{i}"\n'
                                        'd = f"{node}:cuda{d}"\ne = f"pycuda{v}"')) == [1, 2, 4]
    found = {m: lines for m, t in TREES.items() if m not in GPU_SPELLERS and (lines := gpu_labels_by_hand(t))}
    assert found == {}, "use GPU.key (a Topology GPU) or bench.endpoints.Endpoint('gpu', i) (.key, .label)"


def child_starts(tree: ast.AST) -> list[int]:
    """Lines that start a child process through subprocess (run, Popen, call, check_*)."""
    return [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
            and n.value.id == "subprocess" and n.attr in ("run", "Popen", "call", "check_call", "check_output")]


CHILD_STARTERS = {"nodemap.proc"}  # compare's ranks too: proc.start_group takes their pass_fds and binder


def test_children_start_in_their_own_process_group_through_proc():
    assert child_starts(ast.parse("import subprocess\nsubprocess.run(['x'], timeout=5)\n")) == [2]
    found = {m: lines for m, t in TREES.items() if m not in CHILD_STARTERS and (lines := child_starts(t))}
    assert found == {}, ("start a child with nodemap.proc.run_group: a timeout or Ctrl-C then ends it and "
                         "everything it started")


PROM_MODULE = "nodemap.report.prom"


def prometheus_text(tree: ast.AST) -> list[int]:
    """Lines whose string literals (f-string parts included) write a Prometheus TYPE or HELP line."""
    return [n.lineno for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.startswith(("# TYPE ", "# HELP "))]


def test_prometheus_text_is_rendered_only_beside_the_other_renderers():
    # it was check/prom.py: a renderer under the judging package
    assert prometheus_text(ast.parse('lines = [f"# TYPE {PREFIX}{name} gauge"]'))
    found = {m: lines for m, t in TREES.items() if m != PROM_MODULE and (lines := prometheus_text(t))}
    assert found == {}, "render Prometheus text in nodemap.report.prom"
    assert _room(PROM_MODULE) == "report" and PROM_MODULE in MODULES


def argparse_imports(tree: ast.AST) -> list[int]:
    """Lines importing argparse (inside functions too)."""
    return [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Import) and any(a.name == "argparse" for a in n.names)
            or isinstance(n, ast.ImportFrom) and n.module == "argparse"]


# Below the command line and still speaking argparse: `check --fleet`'s options module, and the argparse
# types of units (seconds, fraction: their message travels in argparse's ArgumentTypeError).
ARGPARSE_LEFT = {"nodemap.fleet.command", "nodemap.units"}


def test_argparse_only_in_the_command_line():
    # mapping/nodeplan.py took an argparse.Namespace and built a parser to learn the request's defaults;
    # bench/options.py built the kinds' parsers (now commands/bench.py, from the same Options)
    assert argparse_imports(ast.parse("def f():\n    import argparse\n")) == [2]
    found = {m for m, t in TREES.items() if _room(m) not in ("cli", "commands") and argparse_imports(t)}
    assert found <= ARGPARSE_LEFT, "parse the command line in commands/; hand the rooms below typed values"


BINDER = "nodemap.mapping.launch"


def binding_calls(tree: ast.AST) -> list[int]:
    """Lines calling sched_setaffinity or set_mempolicy (os.sched_setaffinity, native.set_mempolicy...)."""
    return [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call)
            and getattr(n.func, "attr", getattr(n.func, "id", "")) in ("sched_setaffinity", "set_mempolicy")]


def test_a_process_is_bound_only_by_launch():
    # compare/probes.py bound its ranks with its own code and its own answer to a refused memory policy
    assert binding_calls(ast.parse("os.sched_setaffinity(0, cpus)\nnative.set_mempolicy(native.MPOL_BIND, m)")) == [1, 2]
    found = {m: lines for m, t in TREES.items() if m != BINDER and (lines := binding_calls(t))}
    assert found == {}, "bind through nodemap.mapping.launch.apply (one answer to a refused memory policy)"



def method_bodies(cls: ast.ClassDef) -> dict[str, tuple[int, str]]:
    """method -> (line, its body less the docstring, as an AST dump)."""
    out = {}
    for f in cls.body:
        if isinstance(f, ast.FunctionDef):
            body = f.body[1:] if ast.get_docstring(f) is not None else f.body
            out[f.name] = f.lineno, ast.dump(ast.Module(body=body, type_ignores=[]))
    return out


def classes(tree: ast.AST) -> list[ast.ClassDef]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]


def test_no_case_restates_the_drivers_default():
    # mpi_p2p.MultirailCase.gather returned its results as driver.Case.gather does: a copy that would not
    # follow a change of the default
    [case] = [c for c in classes(TREES["nodemap.bench.driver"]) if c.name == "Case"]
    default = {m: body for m, (_, body) in method_bodies(case).items()}

    def restated(tree: ast.AST) -> list[tuple[str, str, int]]:
        return [(c.name, m, line) for c in classes(tree) if any(ast.unparse(b).split(".")[-1] == "Case" for b in c.bases)
                for m, (line, body) in method_bodies(c).items() if default.get(m) == body]

    assert restated(ast.parse("class A(driver.Case):\n    def gather(self, results):\n        return results")) == [
        ("A", "gather", 2)]
    found = {m: r for m, t in TREES.items() if (r := restated(t))}
    assert found == {}, "leave the driver's default to driver.Case: override only what differs"

# --- a kind's story is its own (bench/story.py): the readers of what kinds measure name none ----------------

KIND_READERS = ("nodemap.check", "nodemap.compare", "nodemap.bench.resultfile")


def _registered() -> dict[str, str]:
    """bench/kinds.py's registry as written: kind name -> its module."""
    for node in ast.walk(TREES["nodemap.bench.kinds"]):
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "BENCHES":
            return {k: module for k, (module, _) in ast.literal_eval(node.value).items()}
    raise AssertionError("bench/kinds.py has no BENCHES")


def _readers() -> list[str]:
    return [m for m in MODULES if m == KIND_READERS[-1] or m.startswith(KIND_READERS[:2])]


def kind_names(tree: ast.AST, kinds: set[str]) -> list[tuple[str, int]]:
    """(kind name, line) of every string literal that is a kind's name."""
    return [(n.value, n.lineno) for n in ast.walk(tree) if isinstance(n, ast.Constant) and n.value in kinds]


# The same words in other vocabularies, each use counted: a new literal of a kind's name here fails.
OTHER_WORDS = {
    ("nodemap.check.inventory", "gpu"): 2,  # an Endpoint's kind (bench/endpoints.py: "gpu3"), not bench gpu
    ("nodemap.check.busy", "placement"): 1,
    ("nodemap.check.mpi", "gpu"): 1,  # document keys: the CUDA-awareness record's GPU, compare's resource columns
    ("nodemap.compare.bindings", "gpu"): 1,
}


def test_the_readers_of_what_kinds_measure_name_no_kind():
    # check, compare and the result reader held a table per kind (figures' extractors, costs, priorities,
    # steps, failure areas, probes, parameter schemas): 110 kind-name literals at 4006b1a, 97 naming kinds;
    # a kind's STORY says it now
    assert kind_names(ast.parse('if step.kind == "nccl":\n    x = {"memory": 1}\nf"bench {k}"'), {"nccl", "memory"}) == [
        ("nccl", 1), ("memory", 2)]
    kinds = set(_registered())
    found: dict[tuple[str, str], int] = {}
    for m in _readers():
        for name, _ in kind_names(TREES[m], kinds):
            found[m, name] = found.get((m, name), 0) + 1
    assert found == OTHER_WORDS, "read the kind's STORY through bench.kinds.story, not its name"


def test_the_readers_of_what_kinds_measure_import_no_kind():
    # a kind reaches check and compare through the registry only: one file and a registry line
    kind_modules = {m for module in _registered().values() for m in (module, module + "_options")}
    got = {(m, t) for m in _readers() for t in EDGES[m] if t in kind_modules}
    assert got == set(), "read the kind through bench.kinds.story (its STORY), not by importing its module"


def test_the_host_kinds_shared_rooms_name_no_kind():
    # bench/host/stream.py (the STREAM case of memory and numa) switched its progress line on
    # `self.benchmark == "memory"` and defaulted benchmark to "memory", chase.py (latency's and numa's) to
    # "latency": a kind says what differs in its own module (memory.ThreadOrder) and names itself
    kind_modules = {m for module in _registered().values() for m in (module, module + "_options")}
    rooms = [m for m in TREES if m.startswith("nodemap.bench.host.") and m not in kind_modules]
    assert {"nodemap.bench.host.stream", "nodemap.bench.host.chase"} <= set(rooms)
    found = {(m, name): line for m in rooms for name, line in kind_names(TREES[m], set(_registered()))}
    # the pointer chase's errors start "latency:" (what failed, as the user reads it), not the kind
    assert {k for k in found} <= {("nodemap.bench.host.kernels", "latency")}, \
        "the kind passes its name and overrides what differs (a Case subclass in its own module)"


FINDINGS = "nodemap.check.findings"


def figure_kinds() -> set[str]:
    """The figures' kinds (Figure.kind: expectations.toml's limit rows) and their families ("mpi_")."""
    from nodemap.check.expectations import shipped

    rows = {limit.kind for limit in shipped().limits}
    return rows | {k[:k.index("_") + 1] for k in rows if "_" in k}


def kind_switches(tree: ast.AST, words: set[str]) -> list[int]:
    """Lines naming a kind's or a figure kind's word, or comparing a `.kind` or `.area` with a literal."""
    said = {n.lineno for n in ast.walk(tree) if isinstance(n, ast.Constant) and n.value in words}
    compared = {n.lineno for n in ast.walk(tree) if isinstance(n, ast.Compare)
                and any(isinstance(x, ast.Attribute) and x.attr in ("kind", "area") for x in [n.left, *n.comparators])
                and any(isinstance(x, ast.Constant) for x in [n.left, *n.comparators])}
    return sorted(said | compared)


def test_findings_switch_on_no_kind():
    # check/findings.py explained a figure by a 10-branch switch over its kind ("h2d", "hbm", "nccl",
    # f.kind.startswith("mpi_"), f.area == "NUMA"...) until issue 37: each kind's STORY.finding says it now
    old = 'if f.kind == "h2d" or (f.area == "host<->GPU" and x):\n    pass\nif f.kind.startswith("mpi_"):\n    pass\n'
    assert kind_switches(ast.parse(old), figure_kinds() | set(_registered())) == [1, 3]
    assert {"hbm", "mpi_", "latency_DRAM"} <= figure_kinds()
    found = kind_switches(TREES[FINDINGS], figure_kinds() | set(_registered()))
    assert found == [], f"check/findings.py lines {found}: explain a kind's figure in its STORY's finding"


SNAPSHOT_MODULE = "nodemap.topology.snapshot"


def snapshot_roots(tree: ast.AST) -> list[int]:
    """Lines joining "sys" onto a path: looking for a sysfs snapshot's root."""
    return [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "join"
            and any(isinstance(a, ast.Constant) and a.value == "sys" for a in n.args)]


def test_a_snapshot_root_is_found_only_by_snapshot():
    # topology/discover.py had its own _sysfs_dir beside snapshot.find_root, with its own message
    assert snapshot_roots(ast.parse('os.path.isdir(os.path.join(path, "sys"))')) == [1]
    found = {m: lines for m, t in TREES.items() if m != SNAPSHOT_MODULE and (lines := snapshot_roots(t))}
    assert found == {}, "find a snapshot's root with nodemap.topology.snapshot.find_root (read_dir)"


def _kind_modules() -> dict[str, set[str]]:
    """Each registered kind's modules: its module and its options module."""
    return {kind: {module, module + "_options"} & set(MODULES) for kind, module in _registered().items()}


def test_no_kind_imports_another_kind():
    # ring, jacobi and placement imported the nccl kind (collectives) to start NCCL or name GPUs before
    # one world (issue 37)
    kinds = _kind_modules()
    got = {(m, t) for kind, mine in kinds.items() for m in mine for t in EDGES[m]
           if any(t in theirs for other, theirs in kinds.items() if other != kind)}
    # and numa imported memory and latency, latency imported memory (--mem, free memory, the STREAM case,
    # the chase): host/machine.py, stream.py, chase.py and stream_options.py hold what they share
    assert got == set(), "move what kinds share beside them (bench/comm/world.py, bench/host/stream.py...)"


RANK_METHODS = {"max_all", "sum_all", "barrier", "allgather", "is_root", "nccl_refusal", "open_nccl"}


def world_like(tree: ast.AST) -> list[str]:
    """Classes that hold ranks: named World, Ctx or Launch, or with two or more of the World's rank methods."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            methods = {f.name for f in node.body if isinstance(f, ast.FunctionDef)}
            if node.name in ("World", "Ctx", "Launch") or len(methods & RANK_METHODS) >= 2:
                out.append(node.name)
    return out


def test_one_world_for_every_multi_process_kind():
    # collectives.Ctx (with its own open_ctx) and Jacobi's World and Launch held the ranks beside
    # comm/world.py's World until issue 37
    assert world_like(ast.parse("class Ctx:\n    pass\nclass R:\n    def max_all(self): ...\n"
                                "    def is_root(self): ...\n")) == ["Ctx", "R"]
    got = {(m, c) for m, tree in TREES.items() for c in world_like(tree)}
    assert got == {("nodemap.bench.comm.world", "World")}, "use bench/comm/world.py's World"
    nccl_made = {m for m, tree in TREES.items() for node in ast.walk(tree)
                 if isinstance(node, ast.Attribute) and node.attr in ("NcclCommunicator", "get_unique_id")}
    assert nccl_made == {"nodemap.bench.comm.world"}, "open NCCL through World.open_nccl"


def test_nccl_operations_are_records_not_a_switch():
    # bus factor, counts, pointers, the call and the expected data were five string switches over the
    # operation's name; nccl-tests keeps one struct per collective
    tree = TREES["nodemap.bench.comm.collectives"]
    switches = [ast.unparse(n) for n in ast.walk(tree) if isinstance(n, ast.Compare) and getattr(n.left, "id", "") == "op"
                and any(isinstance(c, ast.Constant) and c.value in OPS for c in n.comparators)]
    assert switches == [], "describe the operation in collectives.OP"


def long_values_cut_by_hand(tree: ast.AST) -> list[int]:
    """Lines of f-strings that cut a long value for a message by hand ("... (N characters)")."""
    return [n.lineno for n in ast.walk(tree) if isinstance(n, ast.JoinedStr)
            and any(isinstance(v, ast.Constant) and str(v.value).startswith(" characters)") for v in n.values)]


def test_a_long_value_in_a_message_is_cut_by_text_shown():
    # env.cut, cpuset._cut, snapshot._cut and hwloc_xml's own each cut a repr their way
    assert long_values_cut_by_hand(ast.parse('x = repr(t[:9]) + f"... ({len(t)} characters)"')) == [1]
    found = {m: lines for m, t in TREES.items() if m != "nodemap.text" and (lines := long_values_cut_by_hand(t))}
    assert found == {}, "show a value from outside in a message with nodemap.text.shown"


def help_formatters(tree: ast.AST) -> list[int]:
    """Lines naming one of argparse's help formatters."""
    return [n.lineno for n in ast.walk(tree) if getattr(n, "attr", getattr(n, "id", "")).endswith("HelpFormatter")]


def test_help_is_formatted_by_the_one_formatter():
    # each parser named argparse.RawDescriptionHelpFormatter, whose width comes from shutil (bz2, lzma: 3.8% of
    # `nodemap topo`); commands.formatter is cli.Parser's default, subparsers included
    assert help_formatters(ast.parse("p = P(formatter_class=argparse.RawDescriptionHelpFormatter)")) == [1]
    found = {m: lines for m, t in TREES.items() if m != "nodemap.commands" and (lines := help_formatters(t))}
    assert found == {}, "leave formatter_class to cli.Parser's default (nodemap.commands.formatter)"
    # and the terminal's width is read once, by text.columns (harness and report/terminal read it through shutil)
    widths = {m: lines for m, t in TREES.items() if m != "nodemap.text" and (lines := [
        n.lineno for n in ast.walk(t) if getattr(n, "attr", "") == "get_terminal_size"])}
    assert widths == {}, "read the terminal's width with nodemap.text.columns"


def nvml_calls(tree: ast.AST, names: tuple[str, ...]) -> list[int]:
    """Lines naming one of NVML's functions `names`."""
    return [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr in names]


def test_gpu_processes_and_nvml_shutdown_only_in_the_nvml_source():
    # watch/monitor.py listed a GPU's processes and shut NVML down with its own code beside nvml.gpu_activity
    names = ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses", "nvmlShutdown")
    assert nvml_calls(ast.parse("n.nvmlShutdown()"), names) == [1]
    found = {m: lines for m, t in TREES.items() if m != NVML_SOURCE and (lines := nvml_calls(t, names))}
    assert found == {}, "use nodemap.topology.nvml.processes and stop"


# The fleet judges typed records (fleet/nodefile.py's Fig, TopologyView) read straight from the documents:
# fleet/merge.py walked dicts (figure["median"], doc.get("topology")) beside the reader that had checked them.
FLEET_JUDGES = ("noise", "verdicts", "remeasure", "findings", "drain", "nodes", "facts", "merge")
# ... and the records the check builds its parts with, where they are built: busy.py's samples, verdicts.py's Bounds
DOCUMENT_STRUCTS = {"nodemap.check.document", "nodemap.fleet.nodefile", "nodemap.check.busy", "nodemap.check.verdicts"}


def keyed_reads(tree: ast.AST) -> list[int]:
    """Lines reading a record as a dict by a literal key: doc.get("topology"), f.get("median")."""
    return [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "get"
            and n.args and isinstance(n.args[0], ast.Constant) and isinstance(n.args[0].value, str)]


def test_the_fleet_judges_typed_records_not_dicts():
    assert keyed_reads(ast.parse('f.get("median") + doc.get("topology", {})')) == [1, 1]
    found = {m: lines for m in (f"nodemap.fleet.{x}" for x in FLEET_JUDGES) if (lines := keyed_reads(TREES[m]))}
    assert found == {}, "read a node document into fleet/nodefile.py's typed records and judge those"


def test_the_check_and_fleet_documents_are_read_by_their_one_reader():
    # fleet/merge.py had its own [fleet] TOML validator beside check/expectations.py's
    def structs(tree: ast.AST) -> bool:
        return any(isinstance(n, ast.ClassDef) and any("Struct" in ast.unparse(b) for b in n.bases) for n in ast.walk(tree))

    def site_readers(tree: ast.AST) -> bool:
        return any(isinstance(n, ast.Attribute) and ast.unparse(n) in ("sitefile.load", "sitefile.parse")
                   for n in ast.walk(tree))

    assert structs(ast.parse("class A(msgspec.Struct): pass")) and site_readers(ast.parse("sitefile.load(p)"))
    rooms = [m for m in TREES if m.startswith(("nodemap.check.", "nodemap.fleet."))]
    assert {m for m in rooms if structs(TREES[m])} <= DOCUMENT_STRUCTS, "a document's typed shape has one home"
    assert {m for m in TREES if site_readers(TREES[m])} == {"nodemap.check.expectations"}, \
        "a site file is read by check/expectations.py alone (its [fleet] table too)"


# The check document was written by hand `to_dict` methods (check/document.py, verdicts.Judged, inventory.Check,
# ...) and read by mirror Structs in check/saved.py (_Judgement, _Budget, _Remeasured: "mirror of budget.py");
# now check/document.CheckFile is its one shape both ways, its records the classes the check itself uses.
CHECK_RECORDS = ("CheckFile", "Judged", "Check", "Skipped", "Limit", "Busy", "Spent", "Remeasured", "Summary",
                 "SavedExpectations", "Sample", "Other", "Memory", "GpuUse", "GpuProcess", "Bounds")

# A document is one typed class both ways (issue 37): the writer encodes the record the readers decode, so no
# hand-built to_dict mirrors its fields beside it (one was missed when a field was added, the other not).
ONE_CLASS_DOCUMENTS = {"nodemap.watch.analysis", "nodemap.watch.timeline", "nodemap.watch.monitor",
                       "nodemap.report.watch", "nodemap.report.compare", "nodemap.compare.bindings",
                       "nodemap.commands.compare", "nodemap.placement.planfile", "nodemap.placement.planner",
                       "nodemap.commands.place", "nodemap.bench.results", "nodemap.slurm.config",
                       "nodemap.fleet.merge", "nodemap.fleet.links", "nodemap.fleet.pairs", "nodemap.fleet.output",
                       "nodemap.fleet.remeasure"}


def to_dicts(tree: ast.AST) -> list[int]:
    return [n.lineno for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "to_dict"]


def test_the_check_document_is_one_class_both_ways():
    import typing

    from nodemap.bench.story import Skipped
    from nodemap.check import budget, document, inventory, verdicts
    from nodemap.finding import Finding

    assert to_dicts(ast.parse("class A:\n    def to_dict(self): pass")) == [2]
    found = {m: lines for m, t in TREES.items() if m.startswith("nodemap.check.") and (lines := to_dicts(t))}
    assert found == {}, "a check record is encoded as it is (msgspec), not by a hand to_dict"
    assert "nodemap.check.saved" not in TREES, "the check document is read by check/document.py's CheckFile"
    defined: dict[str, list[str]] = {}
    for m, t in TREES.items():
        for n in ast.walk(t):
            if m.startswith("nodemap.check.") and isinstance(n, ast.ClassDef) and n.name in CHECK_RECORDS:
                defined.setdefault(n.name, []).append(m)
    assert {k: v for k, v in defined.items() if len(v) > 1} == {}, "a record of the check document has one class"
    # what the check holds is what is written and read: the very classes, not look-alikes
    hints = typing.get_type_hints(document.CheckFile)
    assert hints["figures"] == list[verdicts.Judged] and hints["checks"] == list[inventory.Check]
    assert hints["findings"] == list[Finding] and hints["skipped"] == list[Skipped]
    assert typing.get_type_hints(document.CheckDoc)["budget"] == hints["budget"] == typing.Optional[document.Spent]
    assert typing.get_type_hints(budget.Budget.spent)["return"] is document.Spent
    # its sections typed (they were dict[str, Any]): the node as the Topology's own saved form, decoded in the
    # document's one pass; the environment and the fleet's extra as the records the check and report read
    assert hints["topology"] == typing.Optional[document.SavedTopology]
    for name, record in (("environment", document.Environment), ("extra", document.Extra)):
        assert hints[name] is typing.get_type_hints(document.CheckDoc)[name] is record
    # the fleet reads a part of it (fleet/nodefile.py, for speed at 10,000 nodes): the same fields, the same types
    from nodemap.fleet import nodefile

    view, whole = typing.get_type_hints(nodefile.BusyView), typing.get_type_hints(document.Busy)
    assert view == {k: whole[k] for k in view}


def test_the_busy_samples_and_a_figures_bounds_are_records():
    # document.Busy held `before: dict[str, Any]` and `steps: list[dict[str, Any]]`, Judged `expectation: dict[str,
    # Any]`: built as dicts in busy.py and verdicts.py, walked by .get("reasons", []) there, in findings.py, in
    # slurm/verdict.py and in report/html.py
    import typing

    from nodemap.check import busy, verdicts

    def untyped(t: object) -> bool:
        return t is typing.Any or any(untyped(a) for a in typing.get_args(t))

    assert untyped(dict[str, typing.Any]) and not untyped(list[busy.Sample])
    records = (busy.Busy, busy.Sample, busy.Other, busy.Memory, busy.GpuUse, busy.GpuProcess, verdicts.Bounds)
    assert {r.__name__: k for r in records for k, t in typing.get_type_hints(r).items() if untyped(t)} == {}
    assert typing.get_type_hints(verdicts.Judged)["expectation"] is verdicts.Bounds
    # keyed reads left: a ResultSet's environment (bench/results.py: a dict of the run's facts), where a step's
    # sample is kept
    readers = ("nodemap.check.busy", "nodemap.check.verdicts", "nodemap.check.remeasure", "nodemap.slurm.verdict")
    found = {m: [ast.unparse(n) for n in ast.walk(TREES[m]) if isinstance(n, ast.Call)
                 and n.lineno in keyed_reads(TREES[m]) and not ast.unparse(n.func).endswith("environment.get")]
             for m in readers}
    assert found == {m: [] for m in readers}, "walk a busy sample and a figure's bounds by their fields"


def test_the_pair_tests_conclusion_is_one_class_both_ways():
    # pairs.conclusion wrote a dict that fleet/nodefile.py read back through a mirror Struct (_Isolation)
    import typing

    from nodemap.fleet import links, nodefile, pairs

    assert typing.get_type_hints(pairs.conclusion)["return"] is nodefile.Conclusion
    assert typing.get_type_hints(nodefile.Isolation)["isolation"] is nodefile.Conclusion
    assert typing.get_type_hints(links.isolation_findings)["iso"] is nodefile.Conclusion


def literal_keys(tree: ast.AST) -> list[int]:
    """Lines reading a record as a dict by a literal key: r["value"], j.get("nics")."""
    return [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Constant)
            and isinstance(n.slice.value, str)] + keyed_reads(tree)


def test_the_pair_results_and_fleet_json_are_one_class_both_ways():
    # pair results were dicts built by hand (driver.add_pair), re-built by links.judge_links ({"of_best": ...,
    # **({"nics": ...})}) and walked by r["a"], r.get("higher_is_better", True); fleet.json was Fleet.to_dict's
    import inspect
    import typing

    from nodemap.fleet import driver, links, merge, nodefile, output, pairs, remeasure

    assert literal_keys(ast.parse('r["a"] + j.get("nics")')) == [1, 1]
    found = {m: lines for m in ("nodemap.fleet.links", "nodemap.fleet.pairs") if (lines := literal_keys(TREES[m]))}
    assert found == {}, "judge fleet/nodefile.PairResult and links.Link, not dicts"
    assert typing.get_type_hints(links.judge_links)["results"] == list[nodefile.PairResult]
    assert typing.get_type_hints(links.judge_links)["return"] == tuple[list[links.Link], list[links.Finding]]
    assert typing.get_type_hints(pairs.replay)["results"] == list[nodefile.PairResult]
    assert typing.get_type_hints(merge.merge)["pair_results"] == typing.Iterable[nodefile.PairResult]
    assert typing.get_type_hints(output.FleetOutput.pair_line)["r"] is nodefile.PairResult
    assert typing.get_args(output.Saved)[1] == list[nodefile.PairResult]
    assert typing.get_type_hints(merge.Fleet)["links"] == typing.get_type_hints(merge.FleetFile)["links"] \
        == list[links.Link]
    assert typing.get_type_hints(merge.Fleet.file)["return"] is merge.FleetFile
    assert "PairResult(" in inspect.getsource(driver.Coordinator.add_pair)
    # the suspects' re-measures were dicts too: json.dumps({"remeasured": got}), read by got[0]["remeasured"]
    remeasured = dict[str, dict[str, typing.Union[list[nodefile.Judged], str]]]
    assert nodefile.Remeasured == remeasured
    for hints in (merge.Fleet, merge.FleetFile, merge.merge, remeasure.suspects, remeasure.confirm):
        assert typing.get_type_hints(hints)["remeasured"] in (remeasured, typing.Optional[remeasured]), hints
    assert typing.get_type_hints(output.FleetOutput.remeasured)["got"] == remeasured
    assert typing.get_type_hints(output.read_remeasured)["return"] == typing.Optional[remeasured]
    for f in (output.FleetOutput.remeasured, output.read_remeasured):
        assert "RemeasuredFile" in inspect.getsource(f) and not literal_keys(ast.parse(inspect.getsource(f).strip()))


def test_documents_of_one_class_have_no_hand_written_to_dict():
    assert to_dicts(ast.parse("class A:\n    def to_dict(self): return {}")) == [2]
    found = {m: lines for m in ONE_CLASS_DOCUMENTS if (lines := to_dicts(TREES[m]))}
    assert found == {}, "encode the document's Struct (outfile.json_text), do not mirror its fields in a dict"


def json_dumps(tree: ast.AST) -> list[int]:
    """Lines calling the json module's writers (json.dumps, json.dump) directly."""
    return [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call)
            and ast.unparse(n.func) in ("json.dumps", "json.dump")]


def test_the_fleet_writes_json_through_the_one_writer():
    # fleet/output.save_node wrote nodes/NAME.json by json.dumps beside outfile.json_text, which every other fleet
    # file (nodes.jsonl, pairs.jsonl, remeasured.json) goes through: one writer, one JSON dialect
    assert json_dumps(ast.parse("json.dumps(d)\nf(json.dump(d, f))")) == [1, 2]
    found = {m: lines for m in TREES if m.startswith("nodemap.fleet.") and (lines := json_dumps(TREES[m]))}
    assert found == {}, "write a fleet file through outfile.json_text (or its Struct's msgspec encoder)"


def test_the_watch_monitor_writes_the_records_the_timeline_reader_decodes():
    # monitor.py wrote its timeline lines as dicts ({"gpus": ..., "note": ...}) beside timeline.py's Header/Event
    def dict_lines(tree: ast.AST) -> list[int]:
        return [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call) and ast.unparse(n.func) == "_write"
                and len(n.args) > 1 and isinstance(n.args[1], ast.Dict)]

    assert dict_lines(ast.parse('_write(fd, {"note": n})')) == [1]
    assert dict_lines(TREES["nodemap.watch.monitor"]) == [], "write timeline.Header/Event, not a dict"


def defines(tree: ast.AST, names: set[str]) -> set[str]:
    """Which of `names` a module defines at its top (a def, or an assignment)."""
    out = set()
    for n in getattr(tree, "body", []):
        if isinstance(n, (ast.FunctionDef, ast.ClassDef)):
            out |= {n.name} & names
        elif isinstance(n, (ast.Assign, ast.AnnAssign)):
            out |= {t.id for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
                    if isinstance(t, ast.Name)} & names
    return out


def test_finite_is_typed_once_on_the_ground_floor():
    # `nodemap run --watch` starts a monitor on every rank: its timeline took `finite` from bench.results and
    # `Finite` from topology.model, and with them dataclasses, inspect, the topology (28-77 -> 112-244 ms)
    assert defines(ast.parse("Finite = 1\ndef finite(): pass"), {"Finite", "finite"}) == {"Finite", "finite"}
    found = {m: d for m, tree in TREES.items() if (d := defines(tree, {"Finite", "finite"}))}
    assert found == {"nodemap.records": {"Finite", "finite"}}, "type a finite number with nodemap.records'"
    assert not EDGES["nodemap.watch.timeline"] & {"nodemap.bench.results", "nodemap.topology.model"}
