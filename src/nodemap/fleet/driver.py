"""The MPI side of `nodemap check --fleet`.

Every rank says hello to rank 0 (its node name, host, CPUs); rank 0 groups
ranks by node and names one leader per node (the lowest rank, but not rank
0 when its node has another rank, so that rank 0 stays free to gather).
Leaders run their node's check in parallel (its MPI step with the node's
second local rank, `localpair`; the other local ranks run no check), keep
the full document (nodes/NAME.check.json) and send a compact one (no
ResultSets or samples);
rank 0 writes one JSON line per node as each arrives (nodes.jsonl, and
nodes/NAME.json), so a partial run is usable. Then rank 0 schedules the
pair tests round by round (`pairs.isolate`): in each pair the two leaders
measure bandwidth and latency (host and device buffers, `pairtest`), and
the k-th local ranks of both nodes measure bandwidth at the same time
(rail k), so a pair's bandwidth is the sum over its rails; what the
re-tests conclude (DIR/isolation.json) is what the drain list says. Last, rank 0 merges (`merge`), writes fleet.json and
fleet.html and tells every rank to end.

Never hang: no collective is used after MPI_Init; every message is
non-blocking and polled against a deadline (`wire`). A node whose leader
does not answer in time is reported missing with its last known state; a
pair that does not report is left out. If any rank was late, rank 0 ends
the job with MPI_Abort after writing everything (a hung rank would
otherwise hold the allocation to its time limit). Ctrl-C or SIGTERM on rank
0 writes what was gathered, marked incomplete.

A dead rank costs seconds, not timeouts (`liveness`: heartbeats between
rank 0 and every rank, GONE_S without one is gone): rank 0 stops waiting
for a leader that died (its node is missing), for a pair test with a rank
that died, and names the rank; it ends the job once every other rank is
gone. A rank that loses rank 0 stops its node check keeping what it
measured, keeps its node document (nodes/NAME.check.json), says how to
finish the report (`check --fleet --from DIR`) and ends, without
MPI_Finalize (which can wait for the dead rank forever).

Why not MPI_Comm_split_type(COMM_TYPE_SHARED): it is a collective, which
one silent rank hangs with no way to time out. The node is the hostname
(one OS per node on every cluster launcher), gathered point to point, or
NODEMAP_FLEET_NODE for tests that make ranks of one machine act as nodes.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, NoReturn

from msgspec.structs import replace

from ..check.document import SCHEMAS, CheckFile
from ..check.expectations import FleetRules, fleet_defaults
from ..errors import NodemapError
from ..outfile import json_text
from . import liveness, nodecheck, output, pairtest, wire
from . import merge as mergemod
from .messages import Done, Hello, PairReport, PairTest, Remeasure, Role
from .noise import REMEASURES
from .nodes import Node, missing_node, node_from_doc
from .nodes import name as fleet_name
from .remeasure import suspects
from .nodefile import Conclusion, Judged, PairResult, Remeasured, node_document
from .output import NodeLine
from .pairs import (TAIL, Figures, Pair, against_siblings, conclusion, is_tail, isolate, rail_rules, said,
                    sibling_key, tail_ratio)


@dataclass
class Config:
    outdir: str
    level: str = "quick"
    expect: str | None = None
    join_timeout: float = 60.0  # every rank says hello within this
    check_timeout: float = 1800.0  # every node's check arrives within this
    pair_timeout: float = 60.0  # one pair test, both sides, within this
    gone_after: float = liveness.GONE_S  # a rank unheard this long is gone (liveness)
    pairs: bool = True
    shifts: tuple[int, ...] = (1, 2)
    sizes: pairtest.Sizes = field(default_factory=pairtest.Sizes)
    buffers: tuple[str, ...] = ("host", "device")  # pair test buffer kinds (device: skipped without GPUs)
    thresholds: FleetRules = field(default_factory=fleet_defaults)
    html: bool = True
    json_out: bool = False
    quiet: bool = False
    slurm: tuple[bool, float] | None = None  # --slurm-drain: (dry run, scontrol timeout); rank 0 drains (`drains`)


@dataclass
class NodeRec:
    name: str
    ranks: list[int]  # leader first, then the other local ranks by rank
    state: str = "joined"
    seen: Node | None = None  # its document as the fleet sees it (the document itself is on disk)
    answered: bool = True  # False once it missed a deadline
    nics: list[tuple[str, str]] = field(default_factory=list)  # (name, local CPUs) from its topology

    @property
    def leader(self) -> int:
        return self.ranks[0]

    def rail_rank(self, k: int) -> int:
        """The rank of rail k: the node's k-th local rank in the launcher's order (by rank, not leader
        first), whose plan gives it the node's k-th NIC, as local rank k of every other node."""
        return sorted(self.ranks)[k]


def leader_first(ranks: list[int]) -> list[int]:
    """Rank 0 leads its node only when it is alone there."""
    ranks = sorted(ranks)
    if ranks[0] == 0 and len(ranks) > 1:
        return ranks[1:] + [0]
    return ranks


def main(cfg: Config, check: nodecheck.CheckFn) -> int:
    from ..bench.comm import mpi_common, world

    os.environ.update(world.planned_nics(os.environ))  # rail k for local rank k, before MPI reads them
    MPI = mpi_common.start()
    comm = MPI.COMM_WORLD
    _refuse_singletons(comm.Get_size())
    signal.signal(signal.SIGTERM, _interrupt)  # the job's time limit: write what was gathered
    rank = comm.Get_rank()
    me = Hello(rank, nodecheck.node_name(rank), socket.gethostname(), sorted(os.sched_getaffinity(0)),
               world.visibility(os.environ), os.environ.get("NODEMAP_NIC", ""), _netns())
    try:
        if rank == 0:
            return Coordinator(comm, cfg, check).run(me)
        return member(comm, cfg, check, me)
    except NodemapError as e:  # a folder that cannot be written: every rank ends at once, one line says why
        _end_job(comm, e)


def _end_job(comm: Any, e: NodemapError) -> NoReturn:
    sys.stderr.write(f"nodemap check --fleet: error: {' '.join(str(e).split())}\n")
    abort(comm, 2)
    _exit(2)


def abort(comm: Any, code: int) -> None:
    """End every rank (MPI_Abort), what this one printed forwarded first."""
    sys.stdout.flush()
    sys.stderr.flush()
    # the launcher forwards a rank's output from its pipe at its own pace, and Abort kills that
    # forwarding: what rank 0 printed was lost in 1 of ~10 runs (Hydra) without a moment's grace
    time.sleep(ABORT_GRACE_S)
    comm.Abort(code)


def _netns() -> str:
    """This process's network namespace ("net:[4026531840]"): nodes on one host in one namespace
    (ranks acting as nodes) meet over shared memory and loopback, not over a link."""
    try:
        return os.readlink("/proc/self/ns/net")
    except OSError:
        return ""


def _refuse_singletons(size: int) -> None:
    """srun without a PMI (Debian's MpiDefault=none) starts every task as an
    MPI job of its own: each would be a fleet of one, all writing one DIR."""
    from ..launcher import ALONE_FIX, srun_tasks

    tasks = srun_tasks(os.environ)
    if size == 1 and tasks > 1:
        raise NodemapError(f"--fleet: MPI sees 1 rank of the {tasks} srun started: the tasks were started without a "
                           f"PMI, each its own MPI job; {ALONE_FIX}")


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt()


# --- every rank but 0 -----------------------------------------------------------


@dataclass
class Kept:
    """A leader's node document and where it is saved ("": not yet)."""

    doc: CheckFile | None = None
    path: str = ""


def member(comm: Any, cfg: Config, check: nodecheck.CheckFn, me: Hello) -> int:
    kept = Kept()
    pulse = liveness.Pulse(comm, [0], lambda ranks: _lost_rank0(me, kept, cfg), cfg.gone_after).start()
    if nodecheck.hang_point() == "join":
        nodecheck.hang_forever()
    try:
        wire.send(comm, me, 0, wire.HELLO, wire.deadline(cfg.join_timeout))
        role: Role = wire.recv(comm, 0, wire.ROLE, wire.deadline(2 * cfg.join_timeout))
        if role.leader:
            output.check_nodes(cfg.outdir, [me.node])  # where DIR is not shared, rank 0 did not see it
            wire.post(comm, f"running its node check since {time.strftime('%H:%M:%S')} (rank {me.rank})", 0,
                      wire.STATE)
            with liveness.keeping():  # measured, not yet saved: losing rank 0 cuts the check, which keeps it
                kept.doc = lead_check(comm, cfg, check, me.node, role)
                kept.path = saved(kept.doc, cfg)
            wire.send(comm, NodeLine.of(nodecheck.compact(kept.doc, kept.path)), 0, wire.DOC,
                      wire.deadline(cfg.check_timeout))
        elif role.lead is not None:
            await_leader(comm, role.lead, cfg, role.seat)
        code = serve(comm, cfg, lambda keys: remeasure(check, me.node, cfg, keys))
        if nodecheck.hang_point() == "end":
            nodecheck.hang_forever()
    except (wire.Late, KeyboardInterrupt) as e:
        if isinstance(e, wire.Late) or 0 in wire.gone:
            _orphan(me, kept, cfg)
        code = _await_rank0()
    return _finalizable(pulse, code)


def _lost_rank0(me: Hello, kept: Kept, cfg: Config) -> None:
    """Rank 0 is gone (the pulse's watch thread): end this rank now when
    it holds nothing unsaved (its main thread may be blocked in MPI for
    good: an MPI call to a dead rank can hang), else cut its node check,
    which keeps what it measured, and end it WRAP_UP_S later at the latest."""
    if not liveness.keeping_now():
        _orphan(me, kept, cfg)
    liveness.abandon("rank 0 stopped answering", _orphan_line(me, kept, cfg, cut=True))


FINALIZE_S = 30.0  # MPI_Finalize's bound: a rank stopped inside it holds every other in its barrier


def _finalizable(pulse: liveness.Pulse, code: int, abort: Callable[[int], None] | None = None) -> int:
    """`code`, once the heartbeats have stopped (every peer said goodbye),
    for MPI_Finalize at exit, bounded by FINALIZE_S (proc.end_by: its
    forked watchdog acts while Python has stopped). Where a heartbeat is
    stuck in MPI, rank 0 is gone or a peer never said goodbye (it stopped
    at the very end), MPI_Finalize would wait for good: `abort` (rank 0's:
    MPI_Abort, which also ends the ranks already waiting in MPI_Finalize)
    or an exit without it."""
    if not pulse.stop() or 0 in wire.gone:
        if abort is not None:
            abort(code)
        _exit(code)
    from .. import proc

    proc.end_by(FINALIZE_S, f"nodemap check --fleet: MPI_Finalize did not return within {FINALIZE_S:g} s (a rank "
                            "stopped in it): ended")
    return code


def _exit(code: int) -> NoReturn:
    """End now, without MPI_Finalize (it can wait for a dead rank forever)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def lead_check(comm: Any, cfg: Config, check: nodecheck.CheckFn, node: str, role: Role) -> CheckFile:
    """The node's check, its MPI step run with the role's partner (the node's second
    local rank; None: the node has one), which is released after it either way."""
    from .localpair import Lead

    lead = Lead(comm, role.partner, role.partner_cpus, cfg.pair_timeout, cfg.buffers, node, role.seat)
    try:
        doc = nodecheck.run_check(check, node, cfg.level, cfg.expect, lead.step())
    finally:  # else the second rank waits out its timeout for a word that never comes
        lead.release()
    if lead.silent:  # for rank 0, which ends the job with MPI_Abort rather than wait on it at the end
        doc = replace(doc, extra=replace(doc.extra, fleet_silent_ranks=(role.partner,)))
    return doc


ABORT_GRACE_S = 0.5  # after the report is printed, before MPI_Abort ends a job with silent ranks


def await_leader(comm: Any, leader: int, cfg: Config, seat: pairtest.Seat) -> None:
    """The node's second local rank: its part of the node's MPI step when the
    leader says go, nothing when it says skip. A word from rank 0 first
    means the leader missed its deadline: stop waiting and serve rank 0."""
    from . import localpair

    at = wire.deadline(cfg.check_timeout + cfg.join_timeout)
    while wire.left(at) > 0 and leader not in wire.gone:
        said = localpair.heard(comm, leader)
        if said is not None:
            localpair.follow(comm, leader, cfg.pair_timeout, cfg.buffers, said, seat)
            return
        if comm.iprobe(source=0, tag=wire.CMD):
            return
        time.sleep(wire.POLL_S)


def _await_rank0(grace_s: float = 30.0) -> int:
    """Interrupted (Ctrl-C reaches every rank, the job's limit SIGTERMs every
    rank): give rank 0 time to write what was gathered and end the job with
    MPI_Abort; a rank exiting first could make the launcher kill rank 0 mid-write."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(grace_s)
    return 130


def gathered(doc: CheckFile, cfg: Config) -> NodeLine:
    """The compact document rank 0 gathers; the full one is kept by the
    leader as DIR/nodes/NAME.check.json (on its own file system when DIR is
    not shared)."""
    return NodeLine.of(nodecheck.compact(doc, saved(doc, cfg)))


def saved(doc: CheckFile, cfg: Config) -> str:
    """DIR/nodes/NAME.check.json, the full document written; "" when it could not be."""
    try:
        return output.save_node(cfg.outdir, NodeLine.of(doc), ".check.json")
    except (OSError, NodemapError):
        return ""


def serve(comm: Any, cfg: Config, redo: Callable[[list[str]], dict[str, Judged | str]]) -> int:
    """Run rank 0's commands until it says done (a leader may be asked to
    measure its suspect figures again first: `redo`)."""
    patience = 2 * cfg.check_timeout + cfg.join_timeout + 8 * cfg.pair_timeout
    while True:
        cmd: PairTest | Remeasure | Done = wire.recv(comm, 0, wire.CMD, wire.deadline(patience))
        if isinstance(cmd, Done):
            return 0
        if isinstance(cmd, Remeasure):
            wire.send(comm, redo(cmd.keys), 0, wire.REPORT, wire.deadline(cfg.check_timeout))
            continue
        wire.send(comm, do_pair(comm, cmd, cfg), 0, wire.REPORT, wire.deadline(cfg.pair_timeout))


REDO_WHY = "the fleet's re-measure of suspect figures runs without the node's MPI step"


def remeasure(check: nodecheck.CheckFn, node: str, cfg: Config, keys: list[str]) -> dict[str, Judged | str]:
    """The node's check once more, for its suspect figures: key -> the new
    figure record as the check judged it, or why there is none. The MPI step is left out (its
    partner rank is serving rank 0 by now): an MPI figure is not re-measured."""
    from ..check.mpi import InJob

    try:
        doc = nodecheck.run_check(check, node, cfg.level, cfg.expect, InJob(None, REDO_WHY), again=True)
    except Exception as e:  # the first check passed: whatever fails now is said, the first value stands
        return {k: f"its node check failed when run again ({type(e).__name__}: {e})" for k in keys}
    got = {f.key: f for f in doc.figures}
    return {k: got.get(k) or ("an MPI figure: " + REDO_WHY if k.startswith("mpi/") else
                              "the check run again did not measure it") for k in keys}


def do_pair(comm: Any, cmd: PairTest, cfg: Config) -> PairReport:
    """One side of one pair test, as rank 0 asked; errors become the report."""
    rep = PairReport(cmd.round, cmd.pair, cmd.rail, comm.Get_rank())
    try:
        rep.figures = pairtest.run(comm, cmd.peer, cmd.round, cmd.sends, cfg.sizes, cfg.pair_timeout, cfg.buffers,
                                   cmd.seat, cmd.nap)
    except wire.Gone:
        rep.error = f"rank {cmd.peer} stopped answering (no heartbeat for {cfg.gone_after:g} s)"
        rep.gone = True
    except wire.Late:
        rep.error = f"rank {cmd.peer} did not answer within {cfg.pair_timeout:g} s"
    except ValueError as e:
        rep.error = str(e)
    return rep


_ending = threading.Lock()  # one thread ends an orphan: the main one, or the pulse's when the main one is blocked


def _orphan(me: Hello, kept: Kept, cfg: Config) -> NoReturn:
    """Rank 0 stopped answering: keep this node's document beside its
    output, say how to finish the report (a leader: one line per node),
    and end, without MPI_Finalize."""
    if not _ending.acquire(blocking=False):
        while True:  # the other thread is ending the process
            time.sleep(3600)
    if kept.doc is not None and not kept.path:
        kept.path = saved(kept.doc, cfg)
    if kept.doc is not None:
        sys.stderr.write(_orphan_line(me, kept, cfg) + "\n")
    _exit(2)


def _orphan_line(me: Hello, kept: Kept, cfg: Config, cut: bool = False) -> str:
    """What a rank that lost rank 0 says; `cut`: when its node check did not stop in time."""
    why = (f"no heartbeat for {cfg.gone_after:g} s: it died or its MPI hangs" if 0 in wire.gone else
           "no answer within its timeout")
    if cut:
        what = (f"its node check did not stop within {liveness.WRAP_UP_S:g} s (blocked in MPI): ended; what it "
                f"kept is in {os.path.join(cfg.outdir, 'nodes')}")
    elif kept.path:
        what = ("its node document is kept" + ("" if kept.doc and kept.doc.complete else " (incomplete)")
                + f" in {kept.path}")
    else:
        what = f"its node document could not be saved in {os.path.join(cfg.outdir, 'nodes')}"
    return (f"nodemap check --fleet: rank {me.rank} ({me.node}) lost rank 0 ({why}); {what}: when every "
            f"rank has ended, nodemap check --fleet --from {cfg.outdir} -o {cfg.outdir} makes the fleet's report")


# --- rank 0 ----------------------------------------------------------------------


class Coordinator:
    def __init__(self, comm: Any, cfg: Config, check: nodecheck.CheckFn) -> None:
        self.comm, self.cfg, self.check = comm, cfg, check
        self.nodes: dict[str, NodeRec] = {}
        self.node_of: dict[int, str] = {}
        self.hellos: dict[int, Hello] = {}  # rank -> what it said of itself
        self.crowded: set[int] = set()  # ranks on a host with other nodes' ranks
        self.linked = True  # every node has a network stack of its own (`join`)
        self.never_joined: list[int] = []
        self.pair_results: list[PairResult] = []
        self.isolation: Conclusion | None = None
        self.remeasured: Remeasured | None = None  # suspects measured again (`remeasure_phase`)
        self.directions: dict[str, bool] = {}  # pair figure -> higher is better (the keys isolate judges)
        self.messages: list[str] = []
        self.late = False
        self.out = output.FleetOutput(cfg.outdir)
        self.started = time.monotonic()

    def say(self, text: str) -> None:
        if not self.cfg.quiet:
            sys.stderr.write(f"[{time.monotonic() - self.started:6.1f}s] {text}\n")
            sys.stderr.flush()

    def run(self, me: Hello) -> int:
        interrupted = False
        self.out.check()
        self.pulse = liveness.Pulse(self.comm, range(self.comm.Get_size()), self.lost, self.cfg.gone_after).start()
        try:
            self.join(me)
            self.checks(me)
            self.remeasure_phase(me)
            if self.cfg.pairs:
                self.pair_phase()
        except KeyboardInterrupt:
            interrupted = True
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the writing short
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            self.messages.append("interrupted: the report holds what was gathered until then")
        fleet = self.finish(interrupted)
        code = 1 if fleet.drain else 0
        if self.late or interrupted:
            abort(self.comm, 130 if interrupted else 1)  # end the silent ranks too; all is written
        self.done()
        return _finalizable(self.pulse, code, lambda c: abort(self.comm, c))

    def lost(self, ranks: set[int]) -> None:
        """Ranks whose heartbeats stopped (the pulse's watch thread): said,
        and every wait on them ends (wire.gone); once every other rank is
        gone, the report is written with what was gathered."""
        self.late = True
        for r in sorted(ranks):
            text = (f"{self.who(r)} stopped answering at {time.monotonic() - self.started:.0f} s (no heartbeat for "
                    f"{self.cfg.gone_after:g} s: it died, or its MPI hangs)")
            self.messages.append(text)
            self.say(text)
        if set(self.pulse.peers) <= wire.gone:
            self.messages.append("every other rank stopped answering: the report holds what was gathered until then")
            liveness.abandon("every other rank stopped answering",
                             f"nodemap check --fleet: rank 0: every other rank stopped answering and the report was "
                             f"not written within {liveness.WRAP_UP_S:g} s (blocked in MPI): ended; "
                             f"nodemap check --fleet --from {self.cfg.outdir} -o {self.cfg.outdir} makes it from "
                             "the node documents kept")

    def who(self, r: int) -> str:
        """"rank 3 (n2's leader)", "rank 4 (of n2)", "rank 5" (before it joined)."""
        name = self.node_of.get(r)
        if name is None:
            return f"rank {r}"
        return f"rank {r} ({name}'s leader)" if self.nodes[name].leader == r else f"rank {r} (of {name})"

    # phases

    def join(self, me: Hello) -> None:
        n = self.comm.Get_size()
        hellos = {0: me}
        at = wire.deadline(self.cfg.join_timeout)
        for src, hello in wire.arriving(self.comm, (wire.HELLO,), at, lambda: len(set(hellos) | wire.gone) < n):
            hellos[src] = hello
        self.hellos = hellos
        nodes_on: dict[str, set[str]] = {}
        for h in hellos.values():
            nodes_on.setdefault(h.host, set()).add(h.node)
        # ranks of nodes that share a host (test nodes on one machine) share its CPUs: their waits nap
        self.crowded = {r for r, h in hellos.items() if len(nodes_on[h.host]) > 1}
        stacks = {(h.host, h.netns) for h in hellos.values()}
        # every node on a network stack of its own (hosts, or namespaces of one): its pairs cross links
        self.linked = len(stacks) == len({h.node for h in hellos.values()})
        self.never_joined = sorted(set(range(n)) - set(hellos))
        if self.never_joined:
            self.late = True
            self.messages.append(f"rank{'s' * (len(self.never_joined) > 1)} {', '.join(map(str, self.never_joined))} "
                                 f"did not join within {self.cfg.join_timeout:g} s")
        by_node: dict[str, list[int]] = {}
        for r, h in hellos.items():
            by_node.setdefault(fleet_name(h.node), []).append(r)  # as its document's host will be named
        for name, ranks in sorted(by_node.items()):
            self.nodes[name] = NodeRec(name, leader_first(ranks))
            for r in self.nodes[name].ranks:
                self.node_of[r] = name
        output.check_nodes(self.cfg.outdir, self.nodes)  # before any rank is told to measure
        for node in self.nodes.values():
            for i, r in enumerate(node.ranks):
                if r != 0 and r not in wire.gone:
                    wire.post(self.comm, self.role(node, i), r, wire.ROLE)
        self.say(f"{len(hellos)} of {n} ranks joined, {len(self.nodes)} nodes")

    def role(self, node: NodeRec, i: int) -> Role:
        """A rank's part: the leader (i = 0) is told its MPI step's partner,
        the node's second rank (i = 1) its leader."""
        partner = node.ranks[1] if i == 0 and len(node.ranks) > 1 else None
        cpus = sorted(self.hellos[partner].cpus) if partner is not None else []
        return Role(self.seat(node.ranks[i]), i == 0, partner, cpus, node.leader if i == 1 else None)

    def seat(self, r: int) -> pairtest.Seat:
        """Where rank r is on its node (for its GPU): its local rank in the
        launcher's order (by rank, not leader first), and the node's ranks' device visibility."""
        order = sorted(self.nodes[self.node_of[r]].ranks)
        return pairtest.Seat(order.index(r), len(order), tuple(self.hellos[x].visibility for x in order))

    def checks(self, me: Hello) -> None:
        from . import localpair

        mine = self.nodes[me.node]
        if mine.leader == 0:  # rank 0 leads only where it is alone: no partner for the MPI step
            mine.state = "running its node check (rank 0)"
            doc = lead_check(self.comm, self.cfg, self.check, mine.name, Role(self.seat(0), True))
            self.arrived(mine, gathered(doc, self.cfg))
        lead = mine.leader if mine.ranks[1:2] == [0] else None  # rank 0 is its node's second rank
        at = wire.deadline(self.cfg.check_timeout)
        while any(n.seen is None and n.leader not in wire.gone for n in self.nodes.values()) and wire.left(at) > 0:
            said = localpair.heard(self.comm, lead) if lead is not None else None
            if said is not None:
                localpair.follow(self.comm, lead, self.cfg.pair_timeout, self.cfg.buffers, said, self.seat(0))
                lead = None
                continue
            got = wire.poll(self.comm, (wire.DOC, wire.STATE))
            if got is None:
                time.sleep(wire.POLL_S)
                continue
            src, tag, obj = got
            node = self.nodes[self.node_of[src]]
            if tag == wire.STATE:
                node.state = str(obj)
            else:
                self.arrived(node, obj)
        for node in self.nodes.values():
            if node.seen is None:
                node.answered = False
                self.late = True
                if node.leader in wire.gone:
                    node.state = (f"its leader, rank {node.leader}, stopped answering (no heartbeat for "
                                  f"{self.cfg.gone_after:g} s) while {node.state}")
                    self.say(f"{node.name}: {node.state}")
                else:
                    self.say(f"{node.name}: no node document within {self.cfg.check_timeout:g} s ({node.state})")

    def arrived(self, node: NodeRec, line: NodeLine) -> None:
        doc = node_document(f"{node.name}'s node document", line.text.encode())
        assert doc is not None  # a check's, of its schema
        node.seen = node_from_doc(doc)
        for why in node.seen.rejected:
            self.messages.append(f"{node.name}: its document's {why}: left out (a figure is a finite number >= 0)")
        node.nics = [(n.name, n.cpuset) for n in doc.topology.nics] if doc.topology else []
        node.state = "node check done"
        for r in doc.extra.fleet_silent_ranks:
            self.late = True
            self.messages.append(f"{node.name}: rank {r}, its second local rank, did not answer or finish "
                                 f"the node's MPI step within {self.cfg.pair_timeout:g} s")
        self.saving(self.out.node_line, line)
        done = sum(n.seen is not None for n in self.nodes.values())
        self.say(f"{node.name}: node check done ({len(doc.figures)} figures; {done}/{len(self.nodes)})")

    def remeasure_phase(self, me: Hello) -> None:
        """Every node with a suspect figure (failing against the fleet, or
        below `warn` by [fleet] z_suspect of its figure's noise) measures it
        again, all at once, round after round until each is settled
        (`remeasure.suspects`, `remeasure.settle`: drained once its pooled
        measurements lie wholly below the line, cleared once they reach it;
        at most noise.REMEASURES rounds), before anyone is drained for it."""
        self.remeasured = {}
        seen = [n.seen for n in self.nodes.values() if n.seen is not None]
        for rnd in range(1, REMEASURES + 1):
            asked = suspects(seen, self.cfg.thresholds, self.remeasured)
            if not asked:
                break
            self.say(f"re-measure round {rnd}: {sum(map(len, asked.values()))} suspect figures on {len(asked)} nodes")
            for name, got in self.remeasure_round(asked).items():
                mine = self.remeasured.setdefault(name, {})
                for k, v in got.items():
                    if isinstance(v, Judged) and not isinstance(mine.get(k), str):
                        mine.setdefault(k, []).append(v)  # type: ignore[union-attr]
                    else:  # why none came: the first measurement stands, said so
                        mine[k] = str(v)
        if self.remeasured:
            self.saving(self.out.remeasured, self.remeasured)

    def remeasure_round(self, asked: dict[str, list[str]]) -> dict[str, dict[str, Judged | str]]:
        """One round: each asked node's leader runs its check again; node -> key -> figure record or why not."""
        out: dict[str, dict[str, Judged | str]] = {}
        waiting = {}
        for name, keys in asked.items():
            leader = self.nodes[name].leader
            if leader == 0:
                out[name] = remeasure(self.check, name, self.cfg, keys)
            elif leader in wire.gone:
                out[name] = {k: "its leader stopped answering (no heartbeat)" for k in keys}
            else:
                wire.post(self.comm, Remeasure(keys), leader, wire.CMD)
                waiting[leader] = name
        at = wire.deadline(self.cfg.check_timeout)
        for src, rep in wire.arriving(self.comm, (wire.REPORT,), at, lambda: bool(set(waiting) - wire.gone)):
            name = waiting.pop(src, None)
            if name:
                out[name] = rep if isinstance(rep, dict) else {}
        for leader, name in waiting.items():
            self.late = True
            why = ("stopped answering (no heartbeat)" if leader in wire.gone else
                   f"no answer within {self.cfg.check_timeout:g} s")
            self.nodes[name].state = f"node check done; re-measure: {why}"
            out[name] = {k: why for k in asked[name]}
        return out

    def pair_phase(self) -> None:
        alive = [n for n in self.nodes.values() if n.seen is not None and n.leader not in wire.gone]
        if len(alive) < 2:
            self.messages.append("pair tests skipped: fewer than two nodes answered")
            return
        self.say(f"pair tests among {len(alive)} nodes")
        self.round_no = 0
        iso = isolate(len(alive), lambda rnd: self.run_round(alive, rnd), True, self.cfg.shifts,
                      self.cfg.thresholds.link_bad, self.cfg.thresholds.link_latency, self.directions,
                      by_ring=self.linked, rails=rail_rules(self.cfg.thresholds))
        self.isolation = conclusion(iso, [n.name for n in alive])
        self.saving(self.out.isolation, self.isolation)
        self.say(f"pair tests: {len(iso.tests)} tests in {iso.rounds} rounds "
                 f"(all pairs would be {len(alive) * (len(alive) - 1) // 2})")
        self.messages.append(said(self.isolation))

    def run_round(self, alive: list[NodeRec], rnd: list[Pair]) -> dict[Pair, Figures]:
        """One round of pair tests; each pair's figures (`take_reports`)."""
        self.round_no += 1
        cmds: dict[int, PairTest] = {}
        for p in rnd:
            a, b = alive[p[0]], alive[p[1]]
            rails = range(min(len(a.ranks), len(b.ranks)))
            if any(x.rail_rank(k) in wire.gone for x in (a, b) for k in rails):
                continue  # not measured: `isolate` leaves the pair out
            for k in rails:
                ra, rb = a.rail_rank(k), b.rail_rank(k)
                nap = bool({ra, rb} & self.crowded)
                cmds[ra] = PairTest(self.round_no, (a.name, b.name), k, rb, True, self.seat(ra), nap)
                cmds[rb] = PairTest(self.round_no, (a.name, b.name), k, ra, False, self.seat(rb), nap)
        for r, c in cmds.items():
            if r != 0:
                wire.post(self.comm, c, r, wire.CMD)
        reports = [do_pair(self.comm, cmds[0], self.cfg)] if 0 in cmds else []
        at = wire.deadline(self.cfg.pair_timeout + 5)
        waiting = set(cmds) - {0}
        for src, rep in wire.arriving(self.comm, (wire.REPORT,), at, lambda: bool(waiting - wire.gone)):
            if isinstance(rep, PairReport):  # else a re-measure that came past its deadline
                waiting.discard(src)
                reports.append(rep)
        for r in waiting:
            self.late = True
            node = self.nodes[self.node_of[r]]
            node.state = f"node check done; rank {r} stopped answering in pair round {self.round_no}"
        return self.take_reports(alive, rnd, reports)

    def take_reports(self, alive: list[NodeRec], rnd: list[Pair], reports: list[PairReport]) -> dict[Pair, Figures]:
        """Each pair's figures: latency per buffer kind (rail 0's), bandwidth per
        buffer kind summed over its rails, and with several rails each rail's
        bandwidth and latency, judged on their own (a rail at a tenth of its rate
        is a small part of a total over many); a pair with a rail missing is not measured."""
        totals: dict[tuple[str, str], dict[str, float]] = {}
        complete: dict[tuple[str, str], int] = {}
        lat: dict[tuple[str, str], dict[str, float]] = {}
        rails_of = {(alive[p[0]].name, alive[p[1]].name): min(len(alive[p[0]].ranks), len(alive[p[1]].ranks))
                    for p in rnd}
        failed: dict[tuple[str, str], dict[int, str]] = {}
        repeats: dict[tuple[str, str], dict[str, dict[int, list[float]]]] = {}  # pair -> figure -> rail -> samples
        for rep in reports:
            key = rep.pair
            if rep.error:
                self.messages.append(f"pair {key[0]} <-> {key[1]} rail {rep.rail}: {rep.error}")
                if not rep.gone:
                    failed.setdefault(key, {}).setdefault(rep.rail, rep.error)
                continue
            if any(f.test == "bw" for f in rep.figures):  # the sender's side of a rail
                complete[key] = complete.get(key, 0) + 1
            for f in rep.figures:
                if f.test == "skipped":
                    self.note_once(f"pair tests, {f.buffers} buffers: {f.reason}")
                    continue
                name = f"mpi {f.test} {f.buffers}"
                rail = f"{name} rail{rep.rail}"
                if f.test == "bw" or rails_of.get(key, 1) > 1:
                    self.add_measured(key, rail, f, self.rail_nics(key, rep.rail))
                    if rails_of.get(key, 1) > 1:
                        lat.setdefault(key, {})[rail] = f.value
                        self.directions[rail] = f.higher_is_better
                        # latency: its floors (pairtest.FLOOR)
                        repeats.setdefault(key, {}).setdefault(name, {})[rep.rail] = list(f.floors or f.samples)
                        if f.ceilings:  # and its slowest round trips (pairtest.CEILING)
                            tail = f"mpi {TAIL} {f.buffers}"
                            repeats[key].setdefault(tail, {})[rep.rail] = list(f.ceilings)
                            self.directions[tail] = False
                if f.test == "bw":
                    totals.setdefault(key, {})[name] = totals.get(key, {}).get(name, 0.0) + f.value
                elif rep.rail == 0:
                    self.add_measured(key, name, f)
                    lat.setdefault(key, {})[name] = f.value
                self.directions[name] = f.higher_is_better
        for key, rails in failed.items():  # a rail that failed its test (past the pair's timeout: cut, or
            for k, err in rails.items():  # too slow to finish) carries nothing: it is judged so, not left out
                name = "mpi bw host"
                if any(r.rail == k and r.pair == key and any(f.test == "bw" for f in r.figures) for r in reports):
                    continue  # its sender measured it: the error is the other side's epilogue
                complete[key] = complete.get(key, 0) + 1
                self.add_pair(key, f"{name} rail{k}", "GB/s", 0.0, True, nics=self.rail_nics(key, k), error=err)
                totals.setdefault(key, {})[name] = totals.get(key, {}).get(name, 0.0)
                if rails_of.get(key, 1) > 1:
                    lat.setdefault(key, {})[f"{name} rail{k}"] = 0.0
                    self.directions[f"{name} rail{k}"] = True
                self.directions[name] = True
        # Each rail against its sibling, measured at the same moment; not where nodes share one network
        # stack: their rails are one loopback, and what differs between them is the host's noise
        for key, figures in (repeats if self.linked else {}).items():
            for name, by_rail in figures.items():
                hib = self.directions[name]
                for (k, j), ratio in against_siblings(by_rail, hib, tail_ratio if is_tail(name) else None).items():
                    sib = sibling_key(name, k, j)
                    self.add_pair(key, sib, "x", ratio, hib, nics=self.rail_nics(key, k))
                    lat.setdefault(key, {})[sib] = ratio
                    self.directions[sib] = hib
        out = {}
        for p in rnd:
            key = (alive[p[0]].name, alive[p[1]].name)
            rails = rails_of[key]
            if complete.get(key) != rails:
                continue
            out[p] = dict(lat.get(key, {}))
            for name, v in totals.get(key, {}).items():
                self.add_pair(key, name, "GB/s", v, True, rails=rails)
                out[p][name] = v
        return out

    def saving(self, write: Callable[..., None], *args: Any) -> None:
        """A file written as the run goes (nodes.jsonl, nodes/NAME.json,
        pairs.jsonl, ...): one that cannot be (planted since `FleetOutput.check`,
        the disk full) is said and the run goes on; fleet.json holds it all at the end."""
        try:
            write(*args)
        except NodemapError as e:
            self.note_once(f"not written: {' '.join(str(e).split())}")

    def note_once(self, text: str) -> None:
        if text not in self.messages:
            self.messages.append(text)

    def rail_nics(self, key: tuple[str, ...], rail: int) -> list[str]:
        """The NIC nearest the rail's rank on each side ("" where none is
        local to its CPUs or the topology names no NIC): the rail's name."""
        return [self.nic_near(self.nodes[name], rail) for name in key]

    def nic_near(self, node: NodeRec, rail: int) -> str:
        """The NICs its plan gave the rail's rank (NODEMAP_NIC), else those local to its CPUs."""
        r = node.rail_rank(rail) if rail < len(node.ranks) else None
        if r is None:
            return ""
        return self.hellos[r].nic or nearest_nic(node.nics, set(self.hellos[r].cpus))

    def add_measured(self, key: tuple[str, str], name: str, f: pairtest.Figure, nics: list[str] | None = None
                     ) -> None:
        """A figure as pairtest.run measured it (`nics`: a rail's), recorded (`add_pair`)."""
        self.add_pair(key, name, f.unit, f.value, f.higher_is_better, samples=f.samples, floors=f.floors,
                      ceilings=f.ceilings, nics=nics or [], gpus=f.gpus, buffers=f.buffers, transport=f.transport,
                      why=f.why)

    def add_pair(self, key: tuple[str, str], name: str, unit: str, value: float, higher_is_better: bool,
                 **more: Any) -> None:
        """A pair test's figure (`add_measured`'s, or one the driver derives: a total, a rail against its sibling,
        a rail that failed) recorded and appended to pairs.jsonl; `more`: the PairResult's other fields."""
        r = PairResult(a=key[0], b=key[1], key=name, unit=unit, value=value, higher_is_better=higher_is_better,
                       round=self.round_no, **more)
        self.pair_results.append(r)
        self.saving(self.out.pair_line, r)

    # the end

    def fleet_nodes(self) -> list[Node]:
        out = []
        for n in self.nodes.values():
            if n.seen is not None:
                out.append(n.seen)
            else:
                out.append(missing_node(n.name, n.state))
        for r in self.never_joined:
            out.append(missing_node(f"rank{r}", "never joined (no hello within the join timeout)"))
        return out

    def finish(self, interrupted: bool) -> mergemod.Fleet:
        fleet = mergemod.merge(self.fleet_nodes(), self.pair_results, self.cfg.thresholds, self.isolation,
                               self.remeasured)
        if interrupted:
            fleet.complete = False
        if self.cfg.slurm is not None and not interrupted:
            from . import drain

            self.messages += [f"slurm: {said}" for said in drain.act(fleet, self.cfg.pairs, *self.cfg.slurm)]
        self.out.fleet(fleet, self.messages, html=self.cfg.html)
        text = output.summary(fleet, self.messages, self.out)
        if self.cfg.json_out:
            print(json_text(fleet.file(self.messages)))
        else:
            print(text)
        return fleet

    def done(self) -> None:
        reqs = [wire.post(self.comm, Done(), r, wire.CMD) for r in self.node_of if r != 0 and r not in wire.gone]
        try:
            wire.wait_all(reqs, wire.deadline(10), spin=False)
        except wire.Late:
            pass


def nearest_nic(nics: list[tuple[str, str]], cpus: set[int]) -> str:
    """The NICs local to a rank's CPUs ("mlx5_0", "mlx5_0+mlx5_1" when it
    spans several, "" when none or unknown)."""
    from ..topology.cpuset import CpuSet

    near = [name for name, local in nics if cpus and local and cpus & set(CpuSet.parse(local))]
    return "+".join(near)


def run_from(dirs: list[str], cfg: Config) -> int:
    """`--from DIR`: the same report from node documents saved by separate jobs."""
    nodes, pair_results, isolation = output.read_saved(dirs)
    remeasured = output.read_remeasured(dirs)
    if not nodes:
        raise NodemapError(f"--from {' '.join(dirs)}: no node documents (nodes/*.json, nodes.jsonl or *.json of "
                           f"schema {' or '.join(SCHEMAS)}) found{output.what_files(dirs)}; run "
                           "`nodemap check --output DIR` on each node first")
    out = output.FleetOutput(cfg.outdir)
    fleet = mergemod.merge(nodes, pair_results, cfg.thresholds, isolation, remeasured)
    messages = [f"built from {len(nodes)} saved node documents in {', '.join(dirs)}"]
    out.fleet(fleet, messages, html=cfg.html)
    if cfg.json_out:
        print(json_text(fleet.file(messages)))
    else:
        print(output.summary(fleet, messages, out))
    return 1 if fleet.drain else 0
