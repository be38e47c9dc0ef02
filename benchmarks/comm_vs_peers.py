"""nodemap's communication numbers side by side with their peers.

Run on a node with 2+ GPUs, one process per GPU:
  mpirun -np 2 python3 benchmarks/comm_vs_peers.py --out DIR
Compares, at the same sizes and in the same processes:
  - NCCL all_reduce / all_gather / reduce_scatter busbw: nodemap (CuPy's NCCL
    binding) vs torch.distributed with the NCCL backend (target >= 1.00x at
    >= 64 MiB);
  - MPI host-buffer bandwidth: nodemap's osu_bw window vs a plain blocking
    mpi4py Send/Recv loop (target >= 1.00x at >= 1 MiB).
Every figure is the best of --repeats repetitions (NCCL: of --rounds
alternating blocks of --repeats, nodemap and torch in turn). Rank 0 prints a markdown
table and writes DIR/comm_vs_peers.md and .json with machine, date and versions.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import time

os.environ["NCCL_NVLS_ENABLE"] = "0"  # before any NCCL starts: multicast can wedge a shared node

from nodemap.bench import driver  # noqa: E402
from nodemap.bench.comm import collectives as co  # noqa: E402
from nodemap.bench.comm import mpi_common as mc  # noqa: E402
from nodemap.bench.comm.world import open_gpus  # noqa: E402
from nodemap.bench.comm import mpi_p2p as mp  # noqa: E402

NCCL_OPS = ("all_reduce", "all_gather", "reduce_scatter")


def mpi_rows(MPI, comm, sizes, repeats):
    """(size, nodemap GB/s, plain Send/Recv GB/s) for ranks 0 and 1."""
    import numpy as np

    rank = comm.Get_rank()
    rows = []
    ep = mp.Endpoint(MPI, comm, max(sizes), rank + 1)
    for size in sizes:
        w = mp.window_for(64, size)
        iters = mp.iterations("bw", size, 1.0, w)
        if rank > 1:
            comm.Barrier()
            continue
        side = mp.Side(MPI, comm, ep, 1 - rank, rank == 0)
        ours = [mp.bw_loop(side, size, iters, w) for _ in range(repeats + 1)][1:]
        n_plain = iters * w
        buf = np.empty(size, dtype=np.uint8)
        plain = []
        for _ in range(repeats + 1):
            side.sync()
            t0 = MPI.Wtime()
            for _ in range(n_plain):
                if rank == 0:
                    comm.Send([ep.sbuf[:size], MPI.BYTE], dest=1, tag=5)
                else:
                    comm.Recv([buf, MPI.BYTE], source=0, tag=5)
            side.ack(receive=rank == 0)
            plain.append(MPI.Wtime() - t0)
        plain = plain[1:]
        ok = rank == 0 or bool(np.array_equal(buf, mp.pattern(size, 1)))
        ok = comm.sendrecv(ok, dest=1 - rank, source=1 - rank) and ok
        if not ok:
            raise SystemExit(f"MPI transfer of {size} B delivered wrong bytes")
        moved = size * w * iters
        rows.append((size, moved / min(ours) / 1e9, moved / min(plain) / 1e9))
        comm.Barrier()
    return rows


def torch_busbw(op, size, n, iters, repeats):
    import torch
    import torch.distributed as dist

    dev = torch.device("cuda", torch.cuda.current_device())
    total = size // 4
    part = total // n
    if op == "all_reduce":
        a = torch.ones(total, device=dev)
        fn = lambda: dist.all_reduce(a)  # noqa: E731
    elif op == "all_gather":
        s, r = torch.ones(part, device=dev), torch.empty(part * n, device=dev)
        fn = lambda: dist.all_gather_into_tensor(r, s)  # noqa: E731
    else:
        s, r = torch.ones(part * n, device=dev), torch.empty(part, device=dev)
        fn = lambda: dist.reduce_scatter_tensor(r, s)  # noqa: E731
    best = float("inf")
    for i in range(repeats + 1):
        torch.cuda.synchronize()
        dist.barrier()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(iters):
            fn()
        e1.record()
        e1.synchronize()
        t = torch.tensor([e0.elapsed_time(e1) * 1e-3 / iters], device=dev)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        if i:
            best = min(best, float(t))
    return size / best / 1e9 * co.bus_factor(op, n)


def nccl_rows(ctx, sizes, iters, repeats, rounds):
    import torch
    import torch.distributed as dist

    rank, n = ctx.comm.Get_rank(), ctx.n
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    torch.cuda.set_device(ctx.locals[0].device)
    dist.init_process_group("nccl", rank=rank, world_size=n, device_id=torch.device("cuda", ctx.locals[0].device))
    co.allocate(ctx, max(sizes))
    rows = []
    for op in NCCL_OPS:
        for size in sizes:
            # alternate blocks of repetitions so that clock or link drift during
            # the run favours neither side; best of all blocks for each
            ours = theirs = 0.0
            for _ in range(rounds):
                case = co.OpCase(ctx, op, size, False, co.Options(iters=iters), "")
                try:  # bench nccl's own case, through the driver's loop
                    (r,) = driver.measure_case(case, driver.Repeats(count=repeats, warmup=1), lambda: False)
                except driver.PartFailed as e:
                    raise SystemExit(str(e)) from None
                ours = max(ours, r.stats.best)
                theirs = max(theirs, torch_busbw(op, size, n, iters, repeats))
            rows.append((op, size, ours, theirs))
    dist.destroy_process_group()
    return rows


def versions(MPI):
    v = {"python": platform.python_version(), "mpi": mc.library()}
    for mod in ("torch", "cupy", "mpi4py", "numpy"):
        try:
            v[mod] = __import__(mod).__version__
        except Exception:
            pass
    try:
        from cupy.cuda import nccl

        v["nccl (cupy)"] = nccl.get_version()
        import torch

        v["nccl (torch)"] = ".".join(map(str, torch.cuda.nccl.version()))
        v["gpu"] = torch.cuda.get_device_name(0)
    except Exception:
        pass
    return v


def ratio_table(headers, rows):
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default=".")
    ap.add_argument("--nccl-sizes", default="1MiB:1GiB")
    ap.add_argument("--mpi-sizes", default="1KiB:64MiB")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3, help="alternating nodemap/torch blocks per NCCL size")
    a = ap.parse_args()
    ctx = open_gpus("mpi", None, 600)
    ctx.require_nccl()
    MPI = __import__("mpi4py.MPI", fromlist=["MPI"])
    comm = ctx.comm
    with mc.deadline(900, "the MPI comparison"):
        mrows = mpi_rows(MPI, comm, mp.parse_sizes(a.mpi_sizes), a.repeats)
    failed = ""
    try:
        with mc.deadline(900, "the NCCL comparison"):
            nrows = nccl_rows(ctx, mp.parse_sizes(a.nccl_sizes), a.iters, a.repeats, a.rounds)
    except Exception as e:  # keep the MPI table; say why the NCCL one is missing
        nrows, failed = [], f"NCCL comparison failed: {type(e).__name__}: {e}"
    if comm.Get_rank() != 0:
        return
    head = (f"machine: {socket.gethostname()}, {ctx.n} ranks, {time.strftime('%Y-%m-%d %H:%M %Z')}\n\n"
            f"versions: {json.dumps(versions(MPI))}\n")
    t1 = ratio_table(["op", "size", "nodemap busbw GB/s", "torch.distributed busbw GB/s", "ratio"],
                     [(op, mp._size(s), f"{x:.1f}", f"{y:.1f}", f"{x / y:.3f}x") for op, s, x, y in nrows])
    t2 = ratio_table(["size", "nodemap bw GB/s (window)", "mpi4py Send/Recv GB/s", "ratio"],
                     [(mp._size(s), f"{x:.2f}", f"{y:.2f}", f"{x / y:.3f}x") for s, x, y in mrows])
    md = (f"# nodemap communication vs peers\n\n{head}\n## NCCL busbw\n\n{failed or t1}\n\n"
          f"## MPI host bandwidth\n\n{t2}\n")
    print(md)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "comm_vs_peers.md"), "w") as f:
        f.write(md)
    with open(os.path.join(a.out, "comm_vs_peers.json"), "w") as f:
        json.dump({"host": socket.gethostname(), "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                   "versions": versions(MPI), "nccl": [dict(zip(("op", "size", "nodemap", "torch"), r)) for r in nrows],
                   "mpi": [dict(zip(("size", "nodemap", "mpi4py_sendrecv"), r)) for r in mrows]}, f, indent=1)


if __name__ == "__main__":
    main()
