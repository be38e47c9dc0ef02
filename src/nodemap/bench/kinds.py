"""The benchmark kinds: name -> (module, one-line help).

Here, below the CLI, so the harness (`measure`), `check` and `compare` find
a kind without importing the command layer. Adding a kind is one line here,
its module in bench/ and, beside it, its options module (`options_module`);
what the result reader, check and compare know of it is its module's
STORY (bench/story.py), read through `story`.

A kind's options module holds its command line and nothing that measures:
DESCRIPTION and EPILOG (its --help), its Options and the names they offer
(kernels, dtypes...), importing only bench/options.py. The kind's module
takes its Options from there. So `nodemap bench KIND --help` and a usage
error build the parser without the kind's module, the driver, the results'
records, the topology model or NVML (tests/test_bench_options.py).
"""

from __future__ import annotations

BENCHES: dict[str, tuple[str, str]] = {
    "memory": ("nodemap.bench.host.memory", "STREAM bandwidth for one thread order, or --sweep over thread orders"),
    "numa": ("nodemap.bench.host.numa", "NUMA bandwidth and idle-latency matrices (threads on node i, memory on node j)"),
    "latency": ("nodemap.bench.host.latency", "load latency against working-set size, L1 through DRAM"),
    "gpu": ("nodemap.bench.gpu.memory", "GPU memory bandwidth (BabelStream kernels) per GPU and all at once"),
    "copies": ("nodemap.bench.gpu.copies", "host<->device and device<->device copy matrices (copy engine and SM)"),
    "mpi": ("nodemap.bench.comm.mpi_p2p", "MPI latency and bandwidth, host and GPU buffers, staged and CUDA-aware"),
    "nccl": ("nodemap.bench.comm.collectives", "NCCL collectives: algbw and busbw per size"),
    "ring": ("nodemap.bench.comm.ring", "1D periodic ring halo exchange over every GPU transport"),
    "placement": ("nodemap.bench.app.placement", "data larger than one GPU: placement strategies compared"),
    "jacobi": ("nodemap.bench.app.jacobi", "2D Jacobi proxy app: step time per multi-GPU programming model, verified"),
}


def story(kind: str):
    """What `kind` declares for the result reader, check and compare (bench/story.py): its module's
    STORY, imported now (never for --help); a name not registered here declares nothing."""
    import importlib

    from .story import NOTHING

    entry = BENCHES.get(kind)
    return NOTHING if entry is None else getattr(importlib.import_module(entry[0]), "STORY", NOTHING)


def options_module(module: str) -> str:
    """The options module of the kind whose module is `module`: beside it, named `<module>_options`;
    a kind of one file (no such module) is its own."""
    import importlib.util

    light = module + "_options"
    return light if importlib.util.find_spec(light) is not None else module
