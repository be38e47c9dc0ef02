"""nodemap's GPU bandwidth numbers side by side with PyTorch's and CuPy's own.

One process, same GPUs, same sizes, same byte counting:
  HBM     nodemap `bench gpu` copy/triad (BabelStream kernels) vs
          torch `b.copy_(a)` / `torch.add(b, c, alpha=s, out=a)` and
          CuPy `b[...] = a` / ElementwiseKernel `a = b + s * c`
          (bytes read + written; peak: the GPU's datasheet HBM bandwidth)
  D2D     nodemap `bench copies` d2d CE/SM vs torch `dst.copy_(src)` across
          devices and cupy.cuda.runtime.memcpyPeerAsync (bytes copied; peak:
          the NVLink path of the topology)
  H2D/D2H nodemap h2d/d2h CE from pinned memory on the GPU's NUMA node vs
          torch pinned tensors `.copy_(non_blocking=True)` and CuPy
          memcpyAsync from cupy.cuda.alloc_pinned_memory (peak: PCIe link)
Peers are timed with CUDA events (torch.cuda.Event / cupy.cuda.Event) around
`iters` operations, after a warm-up; best and median of `repeats`.

  python3 benchmarks/gpu_vs_peers.py --out DIR   (writes gpu_vs_peers.md/.json)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

import cupy as cp
import numpy as np

from nodemap.bench import driver
from nodemap.bench.gpu import copies, common as gc, memory as gpu_memory

TARGET = {"HBM": 0.90, "NVLink": 0.85, "PCIe": 0.85}


def events_time(record_on, fn, iters, repeats, sync):
    """[seconds per op] over repeats, events on the stream `record_on()` gives."""
    out = []
    for r in range(repeats + 1):
        s = record_on()
        e0, e1 = s.Event(), s.Event()
        s.record(e0)
        for _ in range(iters):
            fn()
        s.record(e1)
        e1.synchronize()
        sync()
        if r:
            out.append(e0.elapsed_time(e1) * 1e-3 / iters)
    return out


class TorchStream:
    """torch's current stream with a cupy-like Event/record surface."""

    def __init__(self, torch, dev):
        self.torch, self.dev = torch, dev

    def Event(self):
        return self.torch.cuda.Event(enable_timing=True)

    def record(self, e):
        e.record(self.torch.cuda.current_stream(self.dev))


class CupyStream:
    def __init__(self, stream):
        self.stream = stream

    def Event(self):
        return _CupyEvent()

    def record(self, e):
        e.record(self.stream)


class _CupyEvent:
    def __init__(self):
        self.e = cp.cuda.Event()

    def record(self, s):
        self.e.record(s)

    def synchronize(self):
        self.e.synchronize()

    def elapsed_time(self, other):
        return cp.cuda.get_elapsed_time(self.e, other.e)


def gbs(nbytes, secs):
    v = [nbytes / s / 1e9 for s in secs]
    return max(v), statistics.median(v)


# --- peers ---------------------------------------------------------------------


def torch_hbm(torch, dev, n, dtype, iters, repeats):
    t = getattr(torch, dtype)
    with torch.cuda.device(dev):
        a = torch.full((n,), 0.1, dtype=t, device=f"cuda:{dev}")
        b = torch.full((n,), 0.2, dtype=t, device=f"cuda:{dev}")
        c = torch.zeros((n,), dtype=t, device=f"cuda:{dev}")
        st = TorchStream(torch, dev)
        sync = torch.cuda.synchronize
        copy = events_time(lambda: st, lambda: c.copy_(a), iters, repeats, sync)
        triad = events_time(lambda: st, lambda: torch.add(b, c, alpha=0.4, out=a), iters, repeats, sync)
        ok = torch.allclose(a, torch.full_like(a, 0.2 + 0.4 * 0.1))
        del a, b, c
        torch.cuda.empty_cache()
    if not ok:
        raise SystemExit("torch triad gave wrong values")
    item = 8 if dtype == "float64" else 4
    return {"copy": gbs(2 * n * item, copy), "triad": gbs(3 * n * item, triad)}


def cupy_hbm(dev, n, dtype, iters, repeats):
    triad_k = cp.ElementwiseKernel("T b, T c, T s", "T a", "a = b + s * c", "nm_peer_triad")
    with cp.cuda.Device(dev):
        a, b, c = cp.full(n, 0.1, dtype), cp.full(n, 0.2, dtype), cp.zeros(n, dtype)
        s = cp.cuda.Stream(non_blocking=True)
        st = CupyStream(s)

        def copy():
            with s:
                c[...] = a

        def triad():
            with s:
                triad_k(b, c, a.dtype.type(0.4), a)

        sync = cp.cuda.Device().synchronize
        r = {"copy": events_time(lambda: st, copy, iters, repeats, sync),
             "triad": events_time(lambda: st, triad, iters, repeats, sync)}
        ok = bool(cp.allclose(a, 0.2 + 0.4 * 0.1))
        del a, b, c
    cp.get_default_memory_pool().free_all_blocks()
    if not ok:
        raise SystemExit("cupy triad gave wrong values")
    item = 8 if dtype == "float64" else 4
    return {"copy": gbs(2 * n * item, r["copy"]), "triad": gbs(3 * n * item, r["triad"])}


def torch_d2d(torch, a, b, nbytes, iters, repeats):
    n = nbytes // 4
    src = torch.arange(n, dtype=torch.int32, device=f"cuda:{a}")
    dst = torch.empty(n, dtype=torch.int32, device=f"cuda:{b}")
    st = TorchStream(torch, a)

    def sync():
        torch.cuda.synchronize(a)
        torch.cuda.synchronize(b)

    with torch.cuda.device(a):
        t = events_time(lambda: st, lambda: dst.copy_(src, non_blocking=True), iters, repeats, sync)
    ok = torch.equal(dst.cpu(), src.cpu())
    del src, dst
    torch.cuda.empty_cache()
    if not ok:
        raise SystemExit("torch d2d copy wrong")
    return gbs(nbytes, t)


def cupy_d2d(a, b, nbytes, iters, repeats):
    rt = cp.cuda.runtime
    with cp.cuda.Device(a):
        src = cp.arange(nbytes // 4, dtype=cp.int32)
        s = cp.cuda.Stream(non_blocking=True)
    with cp.cuda.Device(b):
        dst = cp.empty(nbytes // 4, dtype=cp.int32)
    st = CupyStream(s)
    with cp.cuda.Device(a):
        t = events_time(lambda: st, lambda: rt.memcpyPeerAsync(dst.data.ptr, b, src.data.ptr, a, nbytes, s.ptr),
                        iters, repeats, s.synchronize)
    ok = bool((dst.get() == src.get()).all())
    del src, dst
    cp.get_default_memory_pool().free_all_blocks()
    if not ok:
        raise SystemExit("cupy d2d copy wrong")
    return gbs(nbytes, t)


def torch_host(torch, dev, nbytes, iters, repeats):
    n = nbytes // 4
    host = torch.arange(n, dtype=torch.int32).pin_memory()
    back = torch.empty(n, dtype=torch.int32).pin_memory()
    d = torch.empty(n, dtype=torch.int32, device=f"cuda:{dev}")
    st = TorchStream(torch, dev)
    with torch.cuda.device(dev):
        sync = torch.cuda.synchronize
        h2d = events_time(lambda: st, lambda: d.copy_(host, non_blocking=True), iters, repeats, sync)
        d2h = events_time(lambda: st, lambda: back.copy_(d, non_blocking=True), iters, repeats, sync)
    ok = torch.equal(back, host)
    del host, back, d
    torch.cuda.empty_cache()
    if not ok:
        raise SystemExit("torch host copies wrong")
    return {"h2d": gbs(nbytes, h2d), "d2h": gbs(nbytes, d2h)}


def cupy_host(dev, nbytes, iters, repeats):
    rt = cp.cuda.runtime
    mem_in, mem_out = cp.cuda.alloc_pinned_memory(nbytes), cp.cuda.alloc_pinned_memory(nbytes)
    h_in = np.frombuffer(mem_in, dtype=np.int32, count=nbytes // 4)
    h_out = np.frombuffer(mem_out, dtype=np.int32, count=nbytes // 4)
    h_in[:] = np.arange(h_in.size, dtype=np.int32)
    with cp.cuda.Device(dev):
        d = cp.empty(nbytes // 4, dtype=cp.int32)
        s = cp.cuda.Stream(non_blocking=True)
        st = CupyStream(s)
        up = lambda: rt.memcpyAsync(d.data.ptr, mem_in.ptr, nbytes, rt.memcpyHostToDevice, s.ptr)  # noqa: E731
        down = lambda: rt.memcpyAsync(mem_out.ptr, d.data.ptr, nbytes, rt.memcpyDeviceToHost, s.ptr)  # noqa: E731
        h2d = events_time(lambda: st, up, iters, repeats, s.synchronize)
        d2h = events_time(lambda: st, down, iters, repeats, s.synchronize)
    ok = np.array_equal(h_in, h_out)
    del d
    cp.get_default_memory_pool().free_all_blocks()
    if not ok:
        raise SystemExit("cupy host copies wrong")
    return {"h2d": gbs(nbytes, h2d), "d2h": gbs(nbytes, d2h)}


# --- nodemap -------------------------------------------------------------------


def nodemap_hbm(devs, dtype, repeats, size):
    s = gpu_memory.Settings(("copy", "triad"), size, repeats, 0)  # block: auto, as users get it
    out = {}
    with gc.device_memory(cp), gc.gate(cp) as gate:
        for d in devs:
            for r in driver.measure_case(gpu_memory.Stream(cp, gate, [d], dtype, s), driver.Repeats(repeats)):
                out[(d.key, r.metric)] = r
        if len(devs) > 1:
            for r in driver.measure_case(gpu_memory.Stream(cp, gate, devs, dtype, s), driver.Repeats(repeats)):
                out[("all", r.metric)] = r
    return out


def nodemap_copies(devs, topo, size, iters, repeats):
    args = argparse.Namespace(repeats=repeats, iters=iters)
    out = {}
    with gc.device_memory(cp), gc.gate(cp) as gate, copies.Bench(cp, gate, devs, topo, size, args) as b:
        for build in b.builders(("host", "d2d", "bidir", "local"), ("ce", "sm")):
            for r in driver.measure_case(copies.Pattern(b, build), driver.Repeats(repeats)):
                out[(r.metric, r.params["src"], r.params["dst"])] = r
    return out


def versions():
    import torch

    v = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "host": platform.node(), "python": sys.version.split()[0],
         "cupy": cp.__version__, "torch": torch.__version__, "numpy": np.__version__,
         "cuda_runtime": cp.cuda.runtime.runtimeGetVersion(), "cuda_driver_api": cp.cuda.runtime.driverGetVersion(),
         "kernel": platform.release()}
    try:
        q = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,pcie.link.gen.max,"
                            "pcie.link.width.max", "--format=csv,noheader"], capture_output=True, text=True, timeout=30)
        v["nvidia_smi"] = q.stdout.strip().splitlines()
        topo = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True, timeout=30)
        v["nvidia_smi_topo"] = topo.stdout.strip().splitlines()
    except (OSError, subprocess.SubprocessError) as e:
        v["nvidia_smi"] = [f"unavailable: {e}"]
    return v


def row(rows, test, kind, ours, peers, peak):
    """ours: Result; peers: {name: (best, median)}."""
    best_peer = max((p[0] for p in peers.values()), default=0.0)
    eff = ours.stats.best / peak if peak else None
    ratio = ours.stats.best / best_peer if best_peer else None
    ok_eff = eff is not None and eff >= TARGET[kind]
    ok_peer = None if ratio is None else ratio >= 1.0  # None: no peer measures this pattern
    rows.append({"test": test, "path": ours.path_class, "nodemap_best": ours.stats.best,
                 "nodemap_median": ours.stats.median, "peak": peak, "of_peak": eff,
                 **{f"{k}_best": v[0] for k, v in peers.items()}, **{f"{k}_median": v[1] for k, v in peers.items()},
                 "vs_best_peer": ratio, "target_peak": TARGET[kind], "meets_peak": ok_eff, "meets_peer": ok_peer})


def _peer_cell(r):
    if r["vs_best_peer"] is None:
        return "-"
    return f"{r['vs_best_peer']:.3f} {'ok' if r['meets_peer'] else 'MISS'}"


def markdown(rows, env):
    lines = ["# nodemap GPU bandwidth vs PyTorch and CuPy", "",
             f"{env['date']} on `{env['host']}`; " + "; ".join(env.get("nvidia_smi", [])), "",
             f"CuPy {env['cupy']}, torch {env['torch']}, CUDA runtime {env['cuda_runtime']}, "
             f"driver API {env['cuda_driver_api']}, kernel {env['kernel']}", "",
             "GB/s (1e9 B/s), best of the repetitions (median in brackets). `of peak` = nodemap best / peak.", "",
             "| test | path | nodemap | torch | cupy | peak | of peak (target) | vs best peer |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        def f(k):
            b, m = r.get(f"{k}_best"), r.get(f"{k}_median")
            return f"{b:,.1f} ({m:,.1f})" if b else "-"

        lines.append(f"| {r['test']} | {r['path']} | {r['nodemap_best']:,.1f} ({r['nodemap_median']:,.1f}) | "
                     f"{f('torch')} | {f('cupy')} | {r['peak'] or 0:,.1f} | "
                     f"{(r['of_peak'] or 0) * 100:.1f}% ({r['target_peak'] * 100:.0f}%) "
                     f"{'ok' if r['meets_peak'] else 'MISS'} | "
                     f"{_peer_cell(r)} |")
    lines += ["", "nvidia-smi topo -m:", "```", *env.get("nvidia_smi_topo", []), "```"]
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=".")
    p.add_argument("--hbm-size", default="1GiB", help="bytes per array (BabelStream)")
    p.add_argument("--copy-size", default="512MiB")
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--iters", type=int, default=8)
    a = p.parse_args()
    import torch

    topo, why = gc.load_topology(None)
    devs = gc.gpus(cp, None, topo)
    env = versions()
    env["topology_note"] = why
    hbm_size, copy_size = gc.parse_size(a.hbm_size), gc.parse_size(a.copy_size)
    rows = []
    for dtype in ("float64", "float32"):
        ours = nodemap_hbm(devs, dtype, a.repeats, hbm_size)
        for d in devs:
            n = gpu_memory.elements(d, 8 if dtype == "float64" else 4, hbm_size)
            th = torch_hbm(torch, d.ordinal, n, dtype, a.iters, a.repeats)
            ch = cupy_hbm(d.ordinal, n, dtype, a.iters, a.repeats)
            for k in ("copy", "triad"):
                r = ours[(d.key, k)]
                row(rows, f"{d.key} HBM {k} {dtype}", "HBM", r, {"torch": th[k], "cupy": ch[k]}, r.peak)
        if len(devs) > 1:
            for k in ("copy", "triad"):
                r = ours[("all", k)]
                row(rows, f"all GPUs HBM {k} {dtype} (aggregate)", "HBM", r, {}, r.peak)
    cps = nodemap_copies(devs, topo, copy_size, a.iters, a.repeats)
    for d in devs:
        nodes = copies.numa_nodes(topo)
        node = d.numa if d.numa in nodes else nodes[0]  # the GPU's own node where known
        where = f"NUMA{node}" if node >= 0 else "host"
        th = torch_host(torch, d.ordinal, copy_size, a.iters, a.repeats)
        ch = cupy_host(d.ordinal, copy_size, a.iters, a.repeats)
        for k, src, dst in (("h2d", where, d.key), ("d2h", d.key, where)):
            for e in ("ce", "sm"):
                r = cps[(f"{k}_{e}", src, dst)]
                row(rows, f"{k} {e.upper()} {src}->{dst}", "PCIe", r, {"torch": th[k], "cupy": ch[k]}, r.peak)
    for x in devs:
        for y in devs:
            if x is y:
                continue
            tp = torch_d2d(torch, x.ordinal, y.ordinal, copy_size, a.iters, a.repeats)
            cpp = cupy_d2d(x.ordinal, y.ordinal, copy_size, a.iters, a.repeats)
            for m in ("d2d_write_ce", "d2d_read_ce", "d2d_write_sm", "d2d_read_sm"):
                r = cps[(m, x.key, y.key)]
                row(rows, f"{m} {x.key}->{y.key}", "NVLink" if r.path_class.startswith("NV") else "PCIe", r,
                    {"torch": tp, "cupy": cpp}, r.peak)
            r = cps[("d2d_bidir_ce", x.key, y.key)]
            link = "NVLink" if r.path_class.startswith("NV") else "PCIe"
            row(rows, f"d2d_bidir_ce {x.key}<->{y.key}", link, r, {}, r.peak)
    md = markdown(rows, env)
    print(md)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "gpu_vs_peers.md"), "w") as f:
        f.write(md + "\n")
    with open(os.path.join(a.out, "gpu_vs_peers.json"), "w") as f:
        json.dump({"environment": env, "rows": rows,
                   "nodemap_copies": [r.to_dict() for r in cps.values()]}, f, indent=1, default=str)


if __name__ == "__main__":
    main()
