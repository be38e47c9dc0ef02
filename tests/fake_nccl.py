"""A stand-in for CuPy's NCCL (cupy.cuda.nccl) over fake_cupy's host
"device" memory, so `bench nccl`, `bench ring` and `bench jacobi` run their
plans, timing and verification without a GPU. Calls queued between
groupStart and groupEnd run at groupEnd, as one NCCL group: every rank's
n-th collective together; sends matched to receives by (sender, receiver)
in order. A world of one process's communicators (`initAll`) does it all
in memory; communicators made from a unique id over several MPI ranks (one
per process) move their sends and receives through mpi4py, the k-th to a
peer on the k-th tag, and their collectives by allgather. While a stream
capture is open the calls, and the group's start and end, are kept for the
graph (fake_cupy._Capture). Every call is logged (`World.log`) and
`World.corrupt` elements of rank 0's received data are made wrong after
each group (a link that corrupts data). Like NCCL, ranks of one host on
one device are refused at init (NcclError, NCCL_ERROR_INVALID_USAGE).
What it cannot show: NCCL itself,
and streams running concurrently."""

from __future__ import annotations

import ctypes

import numpy as np

NCCL_FLOAT32, NCCL_FLOAT64, NCCL_SUM = 7, 8, 0
NCCL_ERROR_INVALID_USAGE = 5
DTYPES = {NCCL_FLOAT32: np.float32, NCCL_FLOAT64: np.float64}
TAG = 1000  # + k: the k-th message between two ranks in a group (MPI worlds)
available = True


def view(ptr: int, count: int, dtype: int = NCCL_FLOAT32) -> np.ndarray:
    """`count` elements of NCCL type `dtype` at address `ptr`."""
    t = DTYPES[dtype]
    if count <= 0:
        return np.zeros(0, dtype=t)
    return np.ctypeslib.as_array((ctypes.c_char * (count * np.dtype(t).itemsize)).from_address(ptr)).view(t)


class World:
    """The ranks of one NCCL communicator: all in this process (`initAll`), or
    one per MPI process (`mpi`: MPI.COMM_WORLD, its ranks the NCCL ranks)."""

    corrupt = 0  # elements of rank 0's received data made wrong after each group

    def __init__(self, n: int, mpi=None) -> None:
        self.n, self.mpi = n, mpi
        self.pending: list[tuple[int, str, tuple]] = []
        self.log: list[tuple[int, str, tuple]] = []

    def post(self, rank: int, name: str, args: tuple) -> None:
        """A call: run now (at groupEnd), or kept for the graph its stream is captured into."""
        from fake_cupy import _Capture, _queue

        if name in ("send", "recv"):
            assert _depth[0] or _Capture.open, "ncclSend/ncclRecv outside a group (unmatched pairs deadlock)"
        self.log.append((rank, "captured " + name if _Capture.open else name, args))
        _queue(args[-1], lambda: self.pending.append((rank, name, args)))  # args[-1]: the call's stream
        if not _Capture.open and _depth[0] == 0:
            self.flush()

    def flush(self) -> None:
        calls, self.pending = self.pending, []
        coll: dict[int, list[tuple[str, tuple]]] = {}
        for rank, name, args in calls:
            if name not in ("send", "recv"):
                coll.setdefault(rank, []).append((name, args))
        for step in zip(*(coll[r] for r in sorted(coll))):
            self._collective(sorted(coll), step)
        p2p = [(rank, name, args) for rank, name, args in calls if name in ("send", "recv")]
        if p2p:
            (self._mpi_p2p if self.mpi is not None else self._p2p)(p2p)
        if self.corrupt:
            for rank, name, args in calls:
                if rank == 0 and name != "send":
                    ptr, count, dtype = (args[0], args[1], args[2]) if name == "recv" else (args[1], args[2], args[3])
                    view(ptr, count, dtype)[:self.corrupt] += 1
                    break

    @staticmethod
    def _p2p(calls: list) -> None:
        """Each rank's k-th send to a peer lands in the peer's k-th receive from it."""
        sends: dict[tuple[int, int], list[tuple]] = {}
        for rank, name, args in calls:
            if name == "send":
                sends.setdefault((rank, args[3]), []).append(args)
        got = []
        for rank, name, (rp, count, dtype, peer, _) in calls:
            if name == "recv":
                queue = sends.get((peer, rank))
                assert queue, f"rank {rank} receives from {peer}, which sends it nothing more in this group"
                sp, m, sdt, _, _ = queue.pop(0)
                assert (m, sdt) == (count, dtype), f"rank {peer} sends {m} elements to {rank}, which receives {count}"
                got.append((view(rp, count, dtype), view(sp, m, sdt).copy()))
        assert not any(sends.values()), "a send no receive matches"
        for dst, data in got:
            dst[:] = data

    def _mpi_p2p(self, calls: list) -> None:
        """This rank's sends and receives through MPI: the k-th to or from a peer on tag TAG + k."""
        from mpi4py import MPI

        order: dict[tuple[str, int], int] = {}
        reqs, landed = [], []
        for _, name, (ptr, count, dtype, peer, _) in calls:
            k = order[(name, peer)] = order.get((name, peer), -1) + 1
            if name == "send":
                reqs.append(self.mpi.Isend(view(ptr, count, dtype).copy(), dest=peer, tag=TAG + k))
            else:
                buf = np.empty(count, dtype=DTYPES[dtype])
                reqs.append(self.mpi.Irecv(buf, source=peer, tag=TAG + k))
                landed.append((view(ptr, count, dtype), buf))
        MPI.Request.Waitall(reqs)
        for dst, buf in landed:
            dst[:] = buf

    def _collective(self, ranks: list[int], step: tuple) -> None:
        """Every rank's n-th collective (the ranks of this process: `ranks`; the others' sources by MPI)."""
        name = step[0][0]
        args = [a for _, a in step]
        src = [view(a[0], a[2] * (self.n if name == "reduceScatter" else 1), a[3]).copy() for a in args]
        if self.mpi is not None:
            src = [s for part in self.mpi.allgather(src) for s in part]
        if name == "broadcast":
            data = src[0]
        elif name == "allGather":
            data = np.concatenate(src)
        else:  # allReduce, reduce, reduceScatter
            data = sum(src)
        for rank, a in zip(ranks, args):
            if name == "reduceScatter":
                view(a[1], a[2], a[3])[:] = data[rank * a[2]:(rank + 1) * a[2]]
            elif name != "reduce" or rank == 0:
                view(a[1], data.size, a[3])[:] = data


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


class NcclError(RuntimeError):
    """cupy_backends.cuda.libs.nccl.NcclError: the status and its name."""

    NAMES = {NCCL_ERROR_INVALID_USAGE: "NCCL_ERROR_INVALID_USAGE"}

    def __init__(self, status: int) -> None:
        self.status = status
        super().__init__(f"{self.NAMES.get(status, status)}: invalid usage (run with NCCL_DEBUG=WARN for details)")


def _refuse_shared_devices(mpi) -> None:
    """As ncclCommInitRank does (since NCCL 2.5, 'Duplicate GPU detected'): every rank gathers
    (host, device) and all fail alike when two ranks of a host are on one device."""
    import socket

    from fake_cupy import Device

    where = mpi.allgather((socket.gethostname(), Device.current))
    if len(set(where)) < len(where):
        raise NcclError(NCCL_ERROR_INVALID_USAGE)


class NcclCommunicator:
    """Rank `rank` of `ndev`: of one process (initAll), else of MPI's ranks (a unique id, one rank a process)."""

    def __init__(self, ndev: int, uid, rank: int, world: World | None = None) -> None:
        if world is None:
            from mpi4py import MPI

            if ndev > 1:
                _refuse_shared_devices(MPI.COMM_WORLD)
            world = World(ndev, MPI.COMM_WORLD if ndev > 1 else None)
            _worlds.append(world)
        self.world, self.rank, self.size = world, rank, ndev
        self.destroyed = False

    @classmethod
    def initAll(cls, devs):
        w = World(len(devs))
        _worlds[:] = [w]
        return [cls(len(devs), None, r, w) for r in range(len(devs))]

    def allReduce(self, sp, rp, count, dtype, op, stream):
        self.world.post(self.rank, "allReduce", (sp, rp, count, dtype, stream))

    def allGather(self, sp, rp, count, dtype, stream):
        self.world.post(self.rank, "allGather", (sp, rp, count, dtype, stream))

    def reduceScatter(self, sp, rp, count, dtype, op, stream):
        self.world.post(self.rank, "reduceScatter", (sp, rp, count, dtype, stream))

    def broadcast(self, sp, rp, count, dtype, root, stream):
        self.world.post(self.rank, "broadcast", (sp, rp, count, dtype, stream))

    def reduce(self, sp, rp, count, dtype, op, root, stream):
        self.world.post(self.rank, "reduce", (sp, rp, count, dtype, stream))

    def send(self, sp, count, dtype, peer, stream):
        self.world.post(self.rank, "send", (sp, count, dtype, peer, stream))

    def recv(self, rp, count, dtype, peer, stream):
        self.world.post(self.rank, "recv", (rp, count, dtype, peer, stream))

    def destroy(self):
        self.destroyed = True
        if self.world in _worlds and self.world.mpi is not None:
            _worlds.remove(self.world)


def get_unique_id() -> bytes:
    return b"fake"


def get_version() -> int:
    return 22809


def install(monkeypatch, devices: int = 2):
    """`bench nccl` and `bench ring` on `devices` fake GPUs; returns (fake_cupy, this module)."""
    import sys

    import fake_cupy
    from nodemap.bench.comm import world
    from nodemap.bench.gpu import common as gpu_common, graphs

    me = sys.modules[__name__]
    monkeypatch.setattr(fake_cupy.cuda.runtime, "devices", devices)
    # the fake's graph handles are not the driver's: where libcuda loads (a GPU machine) it must not see them
    monkeypatch.setattr(graphs, "_driver_instantiate", lambda: None)
    monkeypatch.setattr(world, "import_nccl", lambda: me)
    monkeypatch.setattr(gpu_common, "import_cupy", lambda: fake_cupy)
    monkeypatch.setattr(world, "gpu_keys", lambda cp, devs, topology=None: [f"GPU{d}" for d in devs])
    return fake_cupy, me
