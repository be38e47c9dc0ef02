"""A stand-in for CuPy's NCCL (cupy.cuda.nccl) over fake_cupy's host
"device" memory, so `bench nccl` and `bench ring` run their plans, timing
and verification without a GPU. Calls queued between groupStart and
groupEnd run at groupEnd, as one NCCL group: every rank's n-th collective
together, sends matched to receives by (sender, receiver) in order. Every
call is logged (`World.log`) and `World.corrupt` elements of rank 0's
received data are made wrong after each group (a link that corrupts data).
What it cannot show: NCCL itself, and streams running concurrently."""

from __future__ import annotations

import ctypes

import numpy as np

NCCL_FLOAT32, NCCL_SUM = 7, 0
available = True


def view(ptr: int, count: int) -> np.ndarray:
    """`count` float32 elements at address `ptr`."""
    if count <= 0:
        return np.zeros(0, dtype=np.float32)
    return np.ctypeslib.as_array((ctypes.c_float * count).from_address(ptr))


class World:
    """The ranks of one NCCL world (single mode: every local GPU's communicator)."""

    corrupt = 0  # elements of rank 0's received data made wrong after each group

    def __init__(self, n: int) -> None:
        self.n = n
        self.pending: list[tuple[int, str, tuple]] = []
        self.log: list[tuple[int, str, tuple]] = []

    def post(self, rank: int, name: str, args: tuple) -> None:
        """A call: run now (at groupEnd), or kept for the graph its stream is captured into."""
        from fake_cupy import _Capture, _queue

        self.log.append((rank, "captured " + name if _Capture.open else name, args))
        _queue(args[-1], lambda: self.pending.append((rank, name, args)))  # args[-1]: the call's stream
        if not _Capture.open and _depth[0] == 0:
            self.flush()

    def flush(self) -> None:
        calls, self.pending = self.pending, []
        coll: dict[int, list[tuple[str, tuple]]] = {}
        sends: dict[tuple[int, int], list[tuple]] = {}
        recvs: list[tuple[int, tuple]] = []
        for rank, name, args in calls:
            if name == "send":
                sends.setdefault((rank, args[2]), []).append(args)
            elif name == "recv":
                recvs.append((rank, args))
            else:
                coll.setdefault(rank, []).append((name, args))
        for step in zip(*(coll[r] for r in sorted(coll))):
            self._collective(step)
        got = [(rank, args, view(*sends[(args[2], rank)].pop(0)[:2]).copy()) for rank, args in recvs]
        for _, (rp, count, _peer, _stream), data in got:
            view(rp, count)[:] = data
        if self.corrupt:
            for rank, name, args in calls:
                if rank == 0 and name != "send":
                    ptr, count = (args[0], args[1]) if name == "recv" else (args[1], args[2])
                    view(ptr, count)[:self.corrupt] += 1
                    break

    def _collective(self, step: tuple) -> None:
        name = step[0][0]
        args = [a for _, a in step]
        if name == "broadcast":
            data = view(args[0][0], args[0][2]).copy()
        elif name == "allGather":
            data = np.concatenate([view(a[0], a[2]).copy() for a in args])
        elif name == "reduceScatter":
            data = sum(view(a[0], a[2] * self.n).copy() for a in args)
        else:  # allReduce, reduce
            data = sum(view(a[0], a[2]).copy() for a in args)
        for rank, a in enumerate(args):
            if name == "reduceScatter":
                view(a[1], a[2])[:] = data[rank * a[2]:(rank + 1) * a[2]]
            elif name != "reduce" or rank == 0:
                view(a[1], data.size)[:] = data


_depth = [0]


def groupStart() -> None:
    _grouped(_group_start)


def groupEnd() -> None:
    _grouped(_group_end)


def _grouped(fn) -> None:
    """Now, or (while a capture is open) kept in the graph, where its calls are."""
    from fake_cupy import _Capture

    if not _Capture.open:
        fn()
    else:
        _Capture.ops.append(fn)


def _group_start() -> None:
    _depth[0] += 1


def _group_end() -> None:
    _depth[0] -= 1
    if _depth[0] == 0:
        for w in list(_worlds):
            w.flush()


_worlds: list[World] = []


class NcclCommunicator:
    def __init__(self, world: World, rank: int) -> None:
        self.world, self.rank = world, rank
        self.destroyed = False

    @classmethod
    def initAll(cls, devs):
        w = World(len(devs))
        _worlds[:] = [w]
        return [cls(w, r) for r in range(len(devs))]

    def allReduce(self, sp, rp, count, dtype, op, stream):
        self.world.post(self.rank, "allReduce", (sp, rp, count, stream))

    def allGather(self, sp, rp, count, dtype, stream):
        self.world.post(self.rank, "allGather", (sp, rp, count, stream))

    def reduceScatter(self, sp, rp, count, dtype, op, stream):
        self.world.post(self.rank, "reduceScatter", (sp, rp, count, stream))

    def broadcast(self, sp, rp, count, dtype, root, stream):
        self.world.post(self.rank, "broadcast", (sp, rp, count, stream))

    def reduce(self, sp, rp, count, dtype, op, root, stream):
        self.world.post(self.rank, "reduce", (sp, rp, count, stream))

    def send(self, sp, count, dtype, peer, stream):
        self.world.post(self.rank, "send", (sp, count, peer, stream))

    def recv(self, rp, count, dtype, peer, stream):
        self.world.post(self.rank, "recv", (rp, count, peer, stream))

    def destroy(self):
        self.destroyed = True


def get_version() -> int:
    return 22809


def install(monkeypatch, devices: int = 2):
    """`bench nccl` and `bench ring` on `devices` fake GPUs; returns (fake_cupy, this module)."""
    import sys

    import fake_cupy
    from nodemap.bench.comm import collectives
    from nodemap.bench.gpu import common as gpu_common

    me = sys.modules[__name__]
    monkeypatch.setattr(fake_cupy.cuda.runtime, "devices", devices)
    monkeypatch.setattr(collectives, "import_nccl", lambda: (fake_cupy, me))
    monkeypatch.setattr(gpu_common, "import_cupy", lambda: fake_cupy)
    monkeypatch.setattr(collectives, "gpu_keys", lambda cp, devs, topology=None: [f"GPU{d}" for d in devs])
    return fake_cupy, me
