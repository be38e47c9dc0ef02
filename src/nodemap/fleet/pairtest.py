"""One node pair's MPI test over the fabric, under deadlines.

Between two ranks on different nodes (the nodes' leaders, or the k-th
local ranks of both for rail k): a handshake, then bandwidth (the lower
rank sends windows of non-blocking messages, acknowledged per window, as
OSU's osu_bw) and latency (ping-pong, half the round trip, as osu_latency),
over each buffer kind asked for:
  host    host memory;
  device  GPU memory (CuPy; GPU = the rank's local index modulo the GPUs it
          sees). Straight to MPI only where both sides' library says it is
          CUDA-aware (`mpi_common.capability`, as `nodemap bench mpi`) and a
          verified device transfer between the two proved it; otherwise
          staged through pinned host memory in pipelined chunks, in the
          timing (what an application without CUDA-aware MPI pays). The
          record says which ("transport"). Without a GPU on either side the
          device tests are skipped, with the reason.
The buffers, the pattern, the poison before every repetition and the check
after it, the loops and the device proof are `nodemap bench mpi`'s
(bench/comm/p2p.py); a mismatch is an error, not a number. What is the
fleet's is here: every wait polls against the pair's deadline (`wire.Late`
past it: a partner node that dies costs the timeout, and the rank goes on
serving rank 0, where bench mpi blocks under one deadline per phase that
ends the process), each round's tags, the agreement on the checks, the
records."""

from __future__ import annotations

import functools
import statistics
from dataclasses import dataclass
from typing import Any

from ..bench.comm import p2p
from . import wire

KINDS = ("host", "device")
STEP = 16  # tags per round: hello 0, tests 1..5, every test's sync 6 and ack 7, agreements +8
OFFSET = {("host", "bw"): 1, ("host", "latency"): 2, ("device", "bw"): 3, ("device", "latency"): 4}
PROOF, SYNC, ACK, AGREE = 5, 6, 7, 8
TRANSPORT = {"host": "host", "cuda-aware": "cuda-aware", "staged": "staged (pinned host)"}  # p2p's -> the records'


@dataclass(frozen=True)
class Sizes:
    bw_bytes: int = 4 << 20  # per message
    window: int = 16
    bw_windows: int = 8  # windows per repetition
    lat_iters: int = 200
    repeats: int = 5
    lat_bytes: int = 8  # the ping-pong's message


@functools.lru_cache(maxsize=None)
def device_capability() -> dict[str, Any]:
    """This rank's side of the device decision (asked once per process), as bench mpi asks it."""
    from ..bench.comm import mpi_common

    cap = mpi_common.capability()
    return {"gpu": cap.gpu, "aware": cap.aware, "how": cap.how}


def device_mode(mine: dict[str, Any] | None, theirs: dict[str, Any] | None) -> tuple[str | None, str]:
    """("cuda-aware" | "staged" | None to skip, why); the same on both sides
    (it reads both capabilities, which both sides have after the handshake;
    mpi_common.agreed, bench mpi's rule over its ranks)."""
    from ..bench.comm.mpi_common import NOT_AWARE, Awareness, agreed

    if not (mine and mine.get("gpu") and theirs and theirs.get("gpu")):
        return None, "device buffers skipped: no GPU visible on " + ("both sides" if not (mine or {}).get("gpu") and
                                                                      not (theirs or {}).get("gpu") else "one side")
    both = agreed([Awareness(**mine), Awareness(**theirs)])
    if both.aware:
        return "cuda-aware", f"both sides' MPI says it is CUDA-aware ({both.how})"
    return "staged", f"{NOT_AWARE} ({both.how})"


def gpu_for(local: int) -> int:
    """The GPU of a rank's k-th local slot among those it sees."""
    import cupy as cp

    return local % max(1, cp.cuda.runtime.getDeviceCount())


# --- the test ---------------------------------------------------------------------


def run(comm: Any, peer: int, rnd: int, sends: bool, tests: tuple[str, ...], sizes: Sizes,
        timeout: float, buffers: tuple[str, ...] = ("host",), local: int = 0) -> list[dict[str, Any]]:
    """This rank's side of one pair test; the sender's side returns the
    figures (each with its "buffers" kind and "transport") and, for a kind
    it could not test, a record with the reason ("skipped")."""
    from mpi4py import MPI

    tag = wire.PAIR + rnd * STEP
    at = wire.deadline(timeout)
    wait = functools.partial(wire.wait_all, at=at)  # every request of the pair polled against its deadline
    mine = device_capability() if "device" in buffers else None
    token = comm.isend(("hello", rnd, mine), dest=peer, tag=tag)
    theirs = wire.recv(comm, peer, tag, at)[2]
    wire.wait(token, at)
    out: list[dict[str, Any]] = []
    for kind in buffers:
        transport, note = _transport(MPI, comm, peer, tag, kind, mine, theirs, local, wait, at)
        if transport is None:
            out.append({"test": "skipped", "buffers": kind, "reason": note})
            continue
        for test in ("bw", "latency"):
            if test in tests:
                n = sizes.bw_bytes if test == "bw" else sizes.lat_bytes
                ep = p2p.make_endpoint("HH" if kind == "host" else "DD", "H" if kind == "host" else "D", MPI, comm,
                                       n, p2p.seed_of(comm.Get_rank()), transport == "cuda-aware",
                                       tag=tag + OFFSET[(kind, test)], wait=wait)
                side = p2p.Side(MPI, comm, ep, peer, sends, sync_tag=tag + SYNC, ack_tag=tag + ACK)
                fig = _measure(test, side, sizes, at)
                if fig:
                    out.append({**fig, "buffers": kind, "transport": TRANSPORT[transport], "why": note})
    return out if sends else []


def _transport(MPI: Any, comm: Any, peer: int, tag: int, kind: str, mine: Any, theirs: Any, local: int,
               wait: p2p.Wait, at: float) -> tuple[str | None, str]:
    """How this kind's buffers go to MPI for this pair ("host", "cuda-aware",
    "staged"; None: skipped), and why."""
    if kind == "host":
        return "host", ""
    mode, why = device_mode(mine, theirs)
    if mode is None:
        return None, why
    import cupy as cp

    cp.cuda.Device(gpu_for(local)).use()  # the GPU of this kind's endpoints
    if mode == "cuda-aware" and not _prove(MPI, comm, peer, tag + PROOF, wait, at):
        mode, why = "staged", "the CUDA-aware transfer of a checked device buffer failed: staged instead"
    return mode, why


def _prove(MPI: Any, comm: Any, peer: int, tag: int, wait: p2p.Wait, at: float, n: int = 1 << 16) -> bool:
    """One checked device-to-device transfer each way before any device
    pointer is trusted for timing (only asked when both libraries say they
    are aware: a device pointer into a non-aware MPI can crash it)."""
    ep = p2p.DeviceEndpoint(MPI, comm, n, p2p.seed_of(comm.Get_rank()), tag, wait)
    return _agree(comm, peer, tag, p2p.transfer_checked(ep, n, peer, peer), at)


def _measure(test: str, s: p2p.Side, sz: Sizes, at: float) -> dict[str, Any] | None:
    """sz.repeats repetitions of bench mpi's loop (p2p.LOOPS), each into a
    poisoned receive buffer checked after it by the rank that received (both,
    in the ping-pong); the sender's record."""
    n, iters, window = (sz.bw_bytes, sz.bw_windows, sz.window) if test == "bw" else (sz.lat_bytes, sz.lat_iters, 1)
    receives = test != "bw" or not s.first
    samples, ok = [], True
    for _ in range(sz.repeats):
        s.ep.poison()
        samples.append(p2p.to_unit(test, n, iters, window, p2p.LOOPS[test](s, n, iters, window)))
        ok = ok and (not receives or s.check(n))
    verified = _agree(s.comm, s.peer, s.ep.tag, ok, at)
    if not s.first:
        return None
    if not verified:
        raise ValueError(f"the {WHAT[test]} test's received bytes did not match the sender's pattern")
    if test == "bw":
        return {"test": "bw", "unit": "GB/s", "higher_is_better": True, "value": statistics.median(samples),
                "samples": samples, "bytes": n,
                "counting": f"{window} messages of {n} B per window, acknowledged per window", "verified": True}
    return {"test": "latency", "unit": "us", "higher_is_better": False, "value": statistics.median(samples),
            "samples": samples, "bytes": n, "counting": f"half the round trip of a {n} B ping-pong", "verified": True}


WHAT = {"bw": "bandwidth", "latency": "latency"}


def _agree(comm: Any, peer: int, tag: int, ok: bool, at: float) -> bool:
    """Both sides' checks, known to both."""
    token = comm.isend(ok, dest=peer, tag=tag + AGREE)
    theirs = wire.recv(comm, peer, tag + AGREE, at)
    wire.wait(token, at)
    return bool(ok and theirs)
