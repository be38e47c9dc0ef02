"""What every GPU benchmark needs from CuPy: import, devices, kernels, timing.

- `import_cupy()` turns a missing [cuda] extra or an invisible GPU into a
  one-line NodemapError (exit 2), never a traceback.
- `gpus()` maps CUDA ordinals to the Topology's physical GPUs by PCI bus id
  (then UUID), so results name "GPU3" as `nodemap topo` does even when
  CUDA_VISIBLE_DEVICES renumbers them, and carry each GPU's peaks.
- `kernel()` compiles a .cu file of nodemap/kernels with NVRTC, per device.
- `Gate` + `time_streams()` time device work as nvbandwidth does: a spin
  kernel holds each stream while the work and its events are queued, then the
  host releases every stream at once by writing a flag in mapped pinned memory.
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

from ..errors import NodemapError
from ..units import format_size
from ..topology.model import GPU, Topology, norm_bus_id
from .peaks import Peak, hbm_peak, pcie_peak

CUDA_MISSING = ("[cuda] extra missing: CuPy is not installed; pip install 'nodemap[cuda]' "
                "(or cupy-cuda12x / cupy-cuda13x to match your CUDA driver)")
NO_GPU = "no CUDA GPU visible: check nvidia-smi and CUDA_VISIBLE_DEVICES (this benchmark needs a GPU)"
SPIN_TIMEOUT_NS = 20_000_000_000  # a stream held longer than this means a lost release


def import_cupy() -> Any:
    try:
        import cupy
    except ImportError:
        raise NodemapError(CUDA_MISSING) from None
    except Exception as e:  # CuPy present but its CUDA libraries do not load
        raise NodemapError(f"CuPy cannot load ({type(e).__name__}: {e}): reinstall the CuPy wheel matching "
                           "your CUDA driver (cupy-cuda12x or cupy-cuda13x)") from None
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception:  # no driver, or CUDA_VISIBLE_DEVICES names nothing
        n = 0
    if n == 0:
        raise NodemapError(NO_GPU)
    return cupy


@dataclass(frozen=True)
class Gpu:
    ordinal: int  # CUDA ordinal in this process
    name: str
    memory: int  # bytes
    sm_count: int
    l2_bytes: int
    bus_id: str  # normalized "0000:1b:00.0"
    uuid: str = ""
    key: str = ""  # the Topology's key ("GPU3"), "cuda0" when not found there
    numa: int = -1
    hbm: Peak | None = None
    pcie: Peak | None = None


def match_gpu(topo: Topology | None, bus_id: str, uuid: str = "") -> GPU | None:
    """The Topology GPU with this PCI bus id, else this UUID."""
    if topo is None:
        return None
    bus = norm_bus_id(bus_id)
    for g in topo.gpus:
        if g.pci_bus_id and norm_bus_id(g.pci_bus_id) == bus:
            return g
    u = uuid.lower().removeprefix("gpu-")
    for g in topo.gpus:
        if u and g.uuid.lower().removeprefix("gpu-") == u:
            return g
    return None


def gpu_pcie(topo: Topology | None, g: GPU | None, nvml_link: tuple[int, int] = (0, 0)) -> Peak | None:
    """PCIe peak of a GPU's link. NVML's maximum link wins over the
    topology's current link state, which an idle GPU trains down to Gen1."""
    gen, width = nvml_link
    if not (gen and width) and g is not None:
        pci = topo.pci(g.pci_bus_id) if topo is not None and g.pci_bus_id else None
        gen = g.pcie_gen or (pci.link_gen if pci else 0)
        width = g.pcie_width or (pci.link_width if pci else 0)
    return pcie_peak(gen, width)


def describe(cp: Any, ordinal: int, topo: Topology | None) -> Gpu:
    p = cp.cuda.runtime.getDeviceProperties(ordinal)
    name = _text(p.get("name", b""))
    bus = f"{p.get('pciDomainID', 0):04x}:{p.get('pciBusID', 0):02x}:{p.get('pciDeviceID', 0):02x}.0"
    uuid = _uuid(p.get("uuid", b""))
    g = match_gpu(topo, bus, uuid)
    return Gpu(
        ordinal=ordinal,
        name=name,
        memory=int(p.get("totalGlobalMem", 0)),
        sm_count=int(p.get("multiProcessorCount", 0)),
        l2_bytes=int(p.get("l2CacheSize", 0)),
        bus_id=bus,
        uuid=uuid,
        key=g.key if g is not None else f"cuda{ordinal}",
        numa=g.numa_node if g is not None else -1,
        hbm=hbm_peak(name, int(p.get("totalGlobalMem", 0))),
        pcie=gpu_pcie(topo, g, _nvml_link(bus)),
    )


def gpus(cp: Any, spec: str | None, topo: Topology | None) -> list[Gpu]:
    """The GPUs named by --gpus (CUDA ordinals "0,2"; default all visible)."""
    n = cp.cuda.runtime.getDeviceCount()
    return [describe(cp, d, topo) for d in parse_ordinals(spec, n)]


def parse_ordinals(spec: str | None, n: int) -> list[int]:
    if not spec or spec == "all":
        return list(range(n))
    try:
        out = [int(x) for x in spec.split(",") if x.strip()]
    except ValueError:
        raise NodemapError(f"--gpus {spec!r}: give CUDA ordinals like 0,1 (or 'all')") from None
    bad = [d for d in out if not 0 <= d < n]
    if bad or not out or len(set(out)) != len(out):
        raise NodemapError(f"--gpus {spec!r}: this process sees CUDA devices 0-{n - 1} "
                           "(CUDA_VISIBLE_DEVICES renumbers them); name each once")
    return out


def load_topology(path: str | None) -> tuple[Topology | None, str]:
    """The node's Topology (for path classes and PCIe links), or None and why."""
    from ..topology.discover import discover

    if path:
        return discover(path), ""
    try:
        return discover(), ""
    except Exception as e:  # a node we cannot read still has GPUs to measure
        why = f"node topology unavailable ({e})"
    try:  # NVML alone still gives GPU names, NUMA nodes, PCIe and NVLinks
        from ..topology import nvml

        topo = nvml.enrich(Topology(source=""))
        if topo.gpus:
            return topo, f"{why}: GPUs and NVLinks from NVML only"
    except Exception:
        pass
    return None, f"{why}: paths are labelled without classes"


def _text(v: Any) -> str:
    return v.decode(errors="replace") if isinstance(v, bytes) else str(v)


def _uuid(v: Any) -> str:
    if isinstance(v, (bytes, bytearray)) and len(v) == 16:
        h = v.hex()
        return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
    return _text(v)


def _nvml_link(bus_id: str) -> tuple[int, int]:
    """(generation, width) NVML says the link can run at; (0, 0) without NVML."""
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByPciBusId(bus_id.encode() if isinstance(bus_id, str) else bus_id)
        return pynvml.nvmlDeviceGetMaxPcieLinkGeneration(h), pynvml.nvmlDeviceGetMaxPcieLinkWidth(h)
    except Exception:
        return 0, 0


# --- kernels ------------------------------------------------------------------

_MODULES: dict[tuple[str, int], Any] = {}


def kernel(cp: Any, source: str, name: str) -> Any:
    """Function `name` of nodemap/kernels/`source`, for the current device."""
    dev = cp.cuda.Device().id
    mod = _MODULES.get((source, dev))
    if mod is None:
        mod = cp.RawModule(code=kernel_source(source), options=("-std=c++17",))
        _MODULES[(source, dev)] = mod
    return mod.get_function(name)


def kernel_source(source: str) -> str:
    from importlib import resources

    return (resources.files("nodemap") / "kernels" / source).read_text()


def launch(cp: Any, fn: Any, n: int, args: tuple, stream: Any, block: int = 256, max_grid: int = 0) -> None:
    """Launch over n items, one per thread, or max_grid blocks grid-striding."""
    grid = max(1, -(-n // block))
    if max_grid:
        grid = min(grid, max_grid)
    fn((grid,), (block,), args, stream=stream)


# --- memory ---------------------------------------------------------------------


def ensure_free(cp: Any, nbytes: int, what: str, headroom: float = 0.95) -> None:
    """Refuse an allocation larger than the current device's free memory."""
    free, total = cp.cuda.runtime.memGetInfo()
    if nbytes > free * headroom:
        dev = cp.cuda.Device().id
        raise NodemapError(f"{what} needs {format_size(nbytes)} on CUDA device {dev} but only "
                           f"{format_size(free)} of {format_size(total)} are free: use a smaller --size "
                           "or free the GPU")


@contextmanager
def device_memory(cp: Any) -> Iterator[None]:
    """Give every block back to the driver when a benchmark ends or fails
    (CuPy's pool would keep them, and the next ensure_free would see less)."""
    try:
        yield
    finally:
        cp.get_default_memory_pool().free_all_blocks()
        cp.get_default_pinned_memory_pool().free_all_blocks()


# --- timing ---------------------------------------------------------------------


class Gate:
    """A flag in mapped pinned host memory that spin kernels wait on."""

    def __init__(self, cp: Any) -> None:
        self.cp = cp
        rt = cp.cuda.runtime
        self.ptr = rt.hostAlloc(64, rt.hostAllocMapped | rt.hostAllocPortable)
        self.flag = (ctypes.c_int * 2).from_address(self.ptr)
        self.close_ = rt.freeHost

    def hold(self, stream: Any) -> None:
        """Queue a spin kernel on `stream` (on its device, the current one)."""
        fn = kernel(self.cp, "copies.cu", "spin")
        fn((1,), (1,), (_ptr(self.ptr), _u64(SPIN_TIMEOUT_NS)), stream=stream)

    def arm(self) -> None:
        self.flag[0] = 0
        self.flag[1] = 0

    def release(self) -> None:
        self.flag[0] = 1

    def timed_out(self) -> bool:
        return bool(self.flag[1])

    def close(self) -> None:
        if self.ptr:
            self.close_(self.ptr)
            self.ptr = 0


@dataclass
class Job:
    """Work for one stream: `enqueue(stream)` queues it (copies, kernels)."""

    device: int
    stream: Any
    enqueue: Callable[[Any], None]


def time_streams(cp: Any, gate: Gate, jobs: Sequence[Job]) -> list[float]:
    """Seconds each job took on its stream, all released together."""
    gate.arm()
    events = []
    try:
        for j in jobs:
            with cp.cuda.Device(j.device):
                gate.hold(j.stream)
                e0, e1 = cp.cuda.Event(), cp.cuda.Event()
                e0.record(j.stream)
                j.enqueue(j.stream)
                e1.record(j.stream)
                events.append((e0, e1))
    finally:
        gate.release()  # never leave a stream held, even when queuing failed
    for _, e1 in events:
        e1.synchronize()
    if gate.timed_out():
        raise NodemapError("a spin kernel gave up waiting for the host's release after 20 s: work queued "
                           "behind it waited for the device (an allocation or module load inside the timed "
                           "region: a bug) or took that long to queue (use a smaller --size or fewer --iters)")
    return [cp.cuda.get_elapsed_time(e0, e1) * 1e-3 for e0, e1 in events]


@contextmanager
def gate(cp: Any) -> Iterator[Gate]:
    g = Gate(cp)
    try:
        yield g
    finally:
        g.close()


def _ptr(p: int) -> Any:
    import numpy

    return numpy.uintp(p)


def _u64(v: int) -> Any:
    import numpy

    return numpy.uint64(v)


def pattern(start: int, count: int, seed: int) -> Any:
    """numpy twin of copies.cu's nm_pattern: words start..start+count."""
    import numpy as np

    i = np.arange(start, start + count, dtype=np.uint64)
    with np.errstate(over="ignore"):
        x = (i & 0xFFFFFFFF).astype(np.uint32) * np.uint32(0x9E3779B1)
        x ^= (i >> np.uint64(32)).astype(np.uint32) ^ np.uint32(seed)
        x ^= x >> np.uint32(16)
        x *= np.uint32(0x7FEB352D)
        x ^= x >> np.uint32(15)
        x *= np.uint32(0x846CA68B)
        x ^= x >> np.uint32(16)
    return x


def environment(cp: Any, devs: Sequence[Gpu]) -> dict[str, Any]:
    rt = cp.cuda.runtime
    env: dict[str, Any] = {"cupy": cp.__version__, "cuda_runtime": rt.runtimeGetVersion(),
                           "cuda_driver": rt.driverGetVersion()}
    for d in devs:
        env[d.key] = dataclasses.asdict(d) | {"hbm": d.hbm and d.hbm.source, "pcie": d.pcie and d.pcie.source}
    vis = os.environ.get("CUDA_VISIBLE_DEVICES")
    if vis is not None:
        env["CUDA_VISIBLE_DEVICES"] = vis
    return env


# --- output ---------------------------------------------------------------------


def add_common_arguments(p: Any, size_help: str, repeats: int) -> None:
    from .harness import add_shared

    p.add_argument("--gpus", metavar="LIST", help="CUDA ordinals to measure, e.g. 0,1 (default: all visible)")
    p.add_argument("--size", metavar="BYTES", help=size_help)
    add_shared(p, repeats=repeats)


def result_row(r: Any) -> list[str]:
    eff = r.efficiency
    dtype = r.params.get("dtype", "")
    return [r.metric + (f" {dtype}" if dtype else ""), r.path, r.path_class,
            f"{r.stats.best:,.1f}", f"{r.stats.median:,.1f}", f"{r.stats.spread * 100:.1f}%",
            f"{eff * 100:.1f}%" if eff is not None else "-", r.unit]


RESULT_HEADER = ("metric", "path", "class", "best", "median", "spread", "of peak", "unit")


def results_text(results: Sequence[Any]) -> str:
    from .report import table

    return table(RESULT_HEADER, [result_row(r) for r in results], right=[False] * 3 + [True] * 4 + [False])


def open_bench(args: Any, command: str) -> tuple[Any, Topology | None, list[Gpu], Any]:
    """CuPy, the topology (for path classes and links), the GPUs of --gpus
    and an empty ResultSet that says why the topology is missing, if it is."""
    from .results import ResultSet

    cp = import_cupy()
    from .harness import topology_cautions

    topo, why = load_topology(args.topology)
    devs = gpus(cp, args.gpus, topo)
    rs = ResultSet(command=command, environment=environment(cp, devs))
    if why:
        rs.messages.append(why)
    if topo is not None:
        rs.messages += topology_cautions(topo, args.topology)
    return cp, topo, devs, rs


# --- pinned host memory on a chosen NUMA node ---------------------------------

_REGISTER_PORTABLE_MAPPED = 0x01 | 0x02  # cudaHostRegisterPortable | cudaHostRegisterMapped
_ATTR_HOST_PTR_FOR_REGISTERED = 91  # cudaDevAttrCanUseHostPointerForRegisteredMem


class HostBuffer:
    """Page-aligned host memory bound to NUMA `node` (mbind before the pages
    exist), then pinned and mapped for every GPU (cudaHostRegister). With
    UVA its address is also its device address. `node` -1 leaves the
    process's policy in charge. `placed` says where the pages really are."""

    def __init__(self, cp: Any, nbytes: int, node: int = -1) -> None:
        self.cp, self.nbytes, self.node = cp, nbytes, node
        self.ptr = _mmap(nbytes)
        self.registered = False
        self.note = ""
        try:
            if node >= 0:
                self.note = _bind(self.ptr, nbytes, node)
            ctypes.memset(self.ptr, 0, nbytes)  # fault every page in under the policy
            cp.cuda.runtime.hostRegister(self.ptr, nbytes, _REGISTER_PORTABLE_MAPPED)
            self.registered = True
            for d in range(cp.cuda.runtime.getDeviceCount()):
                if not cp.cuda.runtime.deviceGetAttribute(_ATTR_HOST_PTR_FOR_REGISTERED, d):
                    raise NodemapError(f"CUDA device {d} cannot address registered host memory directly "
                                       "(no UVA host pointers): host copies are not supported here")
            self.placed = page_nodes(self.ptr, nbytes)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self.registered:
            self.cp.cuda.runtime.hostUnregister(self.ptr)
            self.registered = False
        if self.ptr:
            _libc().munmap(ctypes.c_void_p(self.ptr), ctypes.c_size_t(self.nbytes))
            self.ptr = 0

    def __enter__(self) -> "HostBuffer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    return libc


def _mmap(nbytes: int) -> int:
    import mmap

    p = _libc().mmap(None, nbytes, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
    if p in (None, ctypes.c_void_p(-1).value):
        raise NodemapError(f"cannot map {gib(nbytes)} of host memory ({os.strerror(ctypes.get_errno())}): "
                           "use a smaller --size")
    return p


def _native() -> Any:
    """The native library with the host-buffer helpers, or None (and why)."""
    from .. import native

    try:
        lib = native.lib()
        native.declare(lib, "nm_mbind_node", ctypes.c_int, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_int)
        native.declare(lib, "nm_page_nodes", ctypes.c_int, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong,
                       ctypes.POINTER(ctypes.c_int))
        return lib
    except (NodemapError, AttributeError):
        return None


def _bind(ptr: int, nbytes: int, node: int) -> str:
    lib = _native()
    if lib is None:
        return "native library without nm_mbind_node (rebuild: pip install .): host memory not bound"
    err = lib.nm_mbind_node(ptr, nbytes, node)
    if err:
        raise NodemapError(f"cannot bind host memory to NUMA node {node} ({os.strerror(err)}): "
                           "the node may be outside this process's cpuset.mems")
    return ""


def page_nodes(ptr: int, nbytes: int, samples: int = 256) -> dict[int, float]:
    """Fraction of (sampled) pages on each NUMA node; {} when unknown."""
    lib = _native()
    page = os.sysconf("SC_PAGE_SIZE")
    npages = nbytes // page
    if lib is None or npages == 0:
        return {}
    step = max(1, npages // samples)
    count = -(-npages // step)
    out = (ctypes.c_int * count)()
    if lib.nm_page_nodes(ptr, count, step * page, out):
        return {}
    found: dict[int, float] = {}
    for v in out:
        found[v] = found.get(v, 0.0) + 1 / count
    return found
