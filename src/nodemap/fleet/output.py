"""What the fleet writes, as it goes: nodes.jsonl (one node document per
line, appended and flushed as each node finishes), nodes/NAME.json,
pairs.jsonl (one pair figure per line), isolation.json (what the re-tests
concluded: the bad nodes and links the drain list names), then fleet.json and fleet.html;
and the terminal summary. `read_saved` reads any of these back (`--from`)."""

from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass
from typing import Any, Iterable

import msgspec

from ..check.document import CheckFile
from ..outfile import check_folder, json_text, make_folder, open_append, write
from ..text import printable
from .merge import Fleet, no_gc
from .nodefile import Conclusion, Isolation, Judged, NodeDoc, PairResult, Remeasured, RemeasuredFile, node_document
from .nodes import Node, name, node_from_doc, shown_pair


def safe_name(node: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", node) or "_"


NODE_SUFFIXES = (".json", ".check.json")  # nodes/NAME.json (what rank 0 gathered), NAME.check.json (the leader's)


@dataclass(frozen=True)
class NodeLine:
    """A node document as nodes.jsonl holds it, one line, encoded once (by its leader: rank 0 writes and
    reads these bytes, nodefile.node_document), and the host it names."""

    host: str
    text: str

    @classmethod
    def of(cls, doc: CheckFile) -> NodeLine:
        """A node check's document (nodecheck.run_check's, or what rank 0 gathers of it: nodecheck.compact)."""
        return cls(doc.host, json_text(doc, indent=None))


def save_node(outdir: str, line: NodeLine, suffix: str = ".json") -> str:
    """DIR/nodes/NAME{suffix}: the node document on one line, as nodes.jsonl holds it."""
    folder = os.path.join(outdir, "nodes")
    make_folder(folder, "--output")
    path = os.path.join(folder, safe_name(line.host) + suffix)
    write(path, line.text)
    return path


def check_nodes(outdir: str, nodes: Iterable[str]) -> None:
    """Before any measuring: DIR/nodes/NAME.json and NAME.check.json of each
    node writable (outfile.check_folder: nothing planted there)."""
    check_folder(os.path.join(outdir, "nodes"), "--output",
                 written=[safe_name(n) + suffix for n in nodes for suffix in NODE_SUFFIXES])


ISOLATION, REMEASURED = "isolation.json", "remeasured.json"


class FleetOutput:
    def __init__(self, outdir: str) -> None:
        self.outdir = outdir
        make_folder(outdir, "--output")
        self.nodes_path = os.path.join(outdir, "nodes.jsonl")
        self.pairs_path = os.path.join(outdir, "pairs.jsonl")
        self.json_path = os.path.join(outdir, "fleet.json")
        self.html_path = os.path.join(outdir, "fleet.html")

    def check(self) -> None:
        """Before any measuring, one line naming a file of DIR a later write or
        append would refuse (a link planted in a shared folder, a FIFO,
        another user's file), not a fleet that measured every node and
        then could not write it."""
        name = os.path.basename
        check_folder(self.outdir, "--output", written=[name(self.json_path), name(self.html_path), ISOLATION,
                                                      REMEASURED], appended=[name(self.nodes_path), name(self.pairs_path)])

    def _append(self, path: str, line: str) -> None:
        # One write per line, synced: a run killed later keeps every line written. The folder may
        # be shared (docs/fleet.md): never appended through a link planted in it.
        fd = open_append(self.outdir, os.path.basename(path), "--output")
        with os.fdopen(fd, "w") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())

    def node_line(self, line: NodeLine) -> None:
        self._append(self.nodes_path, line.text)
        save_node(self.outdir, line)

    def pair_line(self, r: PairResult) -> None:
        self._append(self.pairs_path, json_text(r, indent=None))

    def isolation(self, conclusion: Conclusion) -> None:
        write(os.path.join(self.outdir, ISOLATION), msgspec.json.encode(Isolation(conclusion)))

    def remeasured(self, got: Remeasured) -> None:
        """The suspects' figures measured again (what the drain list is confirmed by)."""
        # to_builtins leaves out a record's fields at their defaults, as the check document it came from does
        write(os.path.join(self.outdir, REMEASURED), json_text(msgspec.to_builtins(RemeasuredFile(got)), indent=None))

    def fleet(self, fleet: Fleet, messages: list[str], html: bool = True) -> None:
        write(self.json_path, msgspec.json.encode(fleet.file(messages)).decode())
        if html:
            from . import html as htmlmod

            write(self.html_path, htmlmod.page(fleet, messages))


Saved = tuple[list[Node], list[PairResult], "Conclusion | None"]


def read_saved(dirs: list[str]) -> Saved:
    """The nodes, pair results and the pair tests' conclusion (when exactly
    one run's was found) under the given folders (or files): nodes/*.json, nodes.jsonl,
    *.json of the node schema, pairs.jsonl. Each
    document is reduced to what the fleet compares as it is read (10,000
    topologies are not held at once). A figure that cannot be a measurement
    (infinite, NaN, negative) stops the read in one line naming the file and
    field; so do two different documents of one node name (the same
    document seen twice, as nodes.jsonl and nodes/NAME.json hold it, is one)."""
    with no_gc():
        return _read_saved(dirs)


def _read_saved(dirs: list[str]) -> Saved:
    from ..errors import NodemapError

    nodes: dict[str, Node] = {}
    seen: dict[str, tuple[str, str]] = {}  # node -> (file, fingerprint of its document)
    pair_results: list[PairResult] = []
    isolations = []
    for d in dirs:
        files = [d] if os.path.isfile(d) else sorted(glob.glob(os.path.join(d, "*.json*"))) + sorted(
            glob.glob(os.path.join(d, "nodes", "*.json")))
        for path in files:
            for obj in _objects(path, nodes=True):
                if isinstance(obj, NodeDoc):
                    node = node_from_doc(obj)
                    if node.rejected:
                        raise NodemapError(f"{path}: node {node.name}: {node.rejected[0]}; a figure is a finite "
                                           "number >= 0: fix or remove the document")
                    mine = (path, fingerprint(obj))
                    before = seen.get(node.name)
                    if before and before[1] != mine[1]:
                        raise NodemapError(f"{path}: node {node.name} again, other than in {before[0]}: "
                                           "two machines of one name, or two runs of one node; give each node once "
                                           "(leave one file out, or fix its host)")
                    seen[node.name] = mine
                    nodes[node.name] = node
                elif isinstance(obj, PairResult):
                    pair_results.append(shown_pair(obj))
                elif set(obj) == {"isolation"}:  # isolation.json
                    isolations.append(named_isolation(msgspec.convert(obj, Isolation).isolation))  # checked
    # one run's conclusion stands; several runs' pairs are concluded again together (merge replays them)
    return list(nodes.values()), pair_results, isolations[0] if len(isolations) == 1 else None


def named_isolation(c: Conclusion) -> Conclusion:
    """isolation.json's conclusion with its nodes named as the fleet names them (nodes.name)."""
    def links(xs: list[tuple[str, str]]) -> list[tuple[str, str]]:
        return [(name(a), name(b)) for a, b in xs]

    return msgspec.structs.replace(c, bad_nodes=[name(n) for n in c.bad_nodes], unsettled=[name(n) for n in c.unsettled],
                                   bad_links=links(c.bad_links), transient=links(c.transient))


def what_files(dirs: list[str]) -> str:
    """"; fleet.json is a fleet summary (nodemap.fleet/2, ...)" for each file (not folder) --from was given: why
    it held no node document."""
    from .. import records

    out = ""
    for path in (d for d in dirs if os.path.isfile(d) and not d.endswith(".jsonl")):
        objs = _objects(path)
        out += f"; {path} is {records.got(str(objs[0].get('schema') or '') if objs else '')}"
    return out


def fingerprint(doc: NodeDoc) -> bytes:
    """What tells two documents of one node apart: when it was measured and
    what (the compact copy rank 0 keeps and the leader's full one agree)."""
    return msgspec.json.encode([doc.started, doc.finished, doc.figures])


def read_remeasured(dirs: list[str]) -> Remeasured | None:
    """The re-measures one fleet run recorded (remeasured.json), None where
    none (or several runs') are found: a failure then says it was not re-measured."""
    from .. import infile, records

    found = [p for d in dirs if os.path.isdir(d) for p in [os.path.join(d, REMEASURED)] if os.path.isfile(p)]
    if len(found) != 1:
        return None
    what = "fleet document (nodemap check --fleet wrote it)"
    got = records.decode(found[0], infile.read(found[0], infile.MAX_DOCUMENT, what), RemeasuredFile, what)
    return {name(node): {name(k): [v] if isinstance(v, Judged) else v if isinstance(v, list) else printable(v)
                         for k, v in keys.items()} for node, keys in got.remeasured.items()}


def _objects(path: str, nodes: bool = False) -> list[Any]:
    """The objects of a .json file (none when it holds no object) or of
    each line of a .jsonl file, read through infile's checks: a FIFO or a
    link to a device in a --from folder is refused, not waited on or read
    whole; a damaged line is named by its number. A node document is
    checked field by field (fleet/nodefile.py); with `nodes`, it is that
    typed NodeDoc, decoded straight from its bytes."""
    from .. import infile
    from ..errors import InputError

    what = "fleet document (nodes.jsonl, pairs.jsonl, nodes/NAME.json)"
    if not path.endswith(".jsonl"):
        obj = _object(path, infile.read(path, infile.MAX_DOCUMENT, what), what, nodes)
        return [obj] if isinstance(obj, (dict, NodeDoc, PairResult)) else []
    fd = infile.open_regular(path, 1 << 62, what)  # appended by every node: bounded line by line
    out = []
    with os.fdopen(fd, "rb") as f:
        for n, raw in enumerate(iter(lambda: f.readline(infile.MAX_DOCUMENT + 1), b""), 1):
            if len(raw) > infile.MAX_DOCUMENT:
                raise InputError(path, f"line {n} is over {infile.MAX_DOCUMENT >> 20} MiB, more than any "
                                       "node document; remove it or fix it")
            if not raw.strip():
                continue
            obj = _object(f"{path}, line {n}", raw, what, nodes)
            if not isinstance(obj, (dict, NodeDoc, PairResult)):
                raise InputError(f"{path}, line {n}", f"is {type(obj).__name__}, not a JSON object; remove the "
                                                      "line or fix it")
            out.append(obj)
    return out


def _object(where: str, data: bytes, what: str, nodes: bool = False) -> Any:
    from .. import records

    doc = node_document(where, data) if nodes else None
    if doc is not None:
        return doc
    obj = records.parse(where, data, what)
    if isinstance(obj, dict):
        from . import nodefile

        typed = nodefile.check(where, obj)
        return typed if nodes and isinstance(typed, (NodeDoc, PairResult)) else obj
    return obj


def summary(fleet: Fleet, messages: list[str], out: FleetOutput | None = None, top: int = 10) -> str:
    """One screen: the verdict count, the drain list with reasons, where the files are."""
    from .html import verdict_counts

    counts = verdict_counts(fleet)
    lines = [f"fleet: {len(fleet.nodes)} nodes: " + ", ".join(f"{counts[k]} {k}" for k in
                                                              ("pass", "warn", "fail", "missing") if k in counts)
             + ("" if fleet.complete else " (incomplete)")]
    if fleet.drain:
        lines.append(f"drain ({len(fleet.drain)}):")
        for d in fleet.drain[:top]:
            lines.append(f"  {d.rank:3d}. {d.node}: {d.reason}")
        if len(fleet.drain) > top:
            lines.append(f"  ... {len(fleet.drain) - top} more in fleet.json")
    else:
        lines.append("drain: none")
    lines += [f"note: {m}" for m in messages + fleet.notes]
    if out is not None:
        lines.append(f"written: {out.json_path}" + (f", {out.html_path}" if os.path.exists(out.html_path) else "")
                     + f", {out.nodes_path}" * os.path.exists(out.nodes_path))
    return "\n".join(lines)
