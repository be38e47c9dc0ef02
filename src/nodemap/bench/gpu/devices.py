"""The GPUs a benchmark measures, as CuPy and the Topology see them.

- `import_cupy()` turns a missing [cuda] extra or an invisible GPU into a
  one-line NodemapError (exit 2), never a traceback.
- `gpus()` maps CUDA ordinals to the Topology's physical GPUs by PCI bus id
  (then UUID), so results name "GPU3" as `nodemap topo` does even when
  CUDA_VISIBLE_DEVICES renumbers them, and carry each GPU's peaks. A GPU
  the Topology does not know is "cuda0", its ordinal; `environment` keeps
  its bus id, by which `ordinal_gpus` names it for a reader's Topology.
- `ensure_free` / `device_memory`: device memory asked for and given back.
- `open_bench`: what every single-process GPU kind
  starts with.
"""

from __future__ import annotations

import dataclasses
import os
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Sequence

from ...errors import NodemapError
from ...topology.model import GPU, Topology, norm_bus_id
from ...units import format_size
from ...text import decoded
from ..endpoints import Endpoint
from ..peaks import Peak, hbm_peak, pcie_peak

CUDA_MISSING = ("[cuda] extra missing: CuPy is not installed; pip install 'nodemap[cuda]' "
                "(or cupy-cuda12x / cupy-cuda13x to match your CUDA driver)")
NO_GPU = "no CUDA GPU visible: check nvidia-smi and CUDA_VISIBLE_DEVICES (this benchmark needs a GPU)"


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


def gpu_pcie(topo: Topology | None, g: GPU | None) -> Peak | None:
    """PCIe peak of a GPU's link: what it can train at (the Topology's
    maximum, from sysfs or NVML), else its current state, which an idle GPU
    trains down to Gen1."""
    if g is None:
        return None
    pci = topo.pci_of(g) if topo is not None else None
    if pci is not None and pci.link_max_gen and pci.link_max_width:
        return pcie_peak(pci.link_max_gen, pci.link_max_width)
    gen = g.pcie_gen or (pci.link_gen if pci else 0)
    width = g.pcie_width or (pci.link_width if pci else 0)
    return pcie_peak(gen, width)


def describe(cp: Any, ordinal: int, topo: Topology | None) -> Gpu:
    p = cp.cuda.runtime.getDeviceProperties(ordinal)
    name = decoded(p.get("name", b""))
    bus = bus_id(p)
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
        key=g.key if g is not None else ordinal_key(ordinal),
        numa=g.numa_node if g is not None else -1,
        hbm=hbm_peak(name, int(p.get("totalGlobalMem", 0))),
        pcie=gpu_pcie(topo, g),
    )


def ordinal_key(ordinal: int) -> str:
    """A CUDA device the Topology does not know, by its ordinal in this process ("cuda1"): never "GPU1",
    which names the node's physical GPU 1."""
    return f"cuda{ordinal}"


def key(cp: Any, ordinal: int, topo: Topology | None) -> str:
    """The Topology's name of CUDA device `ordinal` ("GPU3"), else `ordinal_key`: a label, never a
    reason to stop."""
    try:
        return describe(cp, ordinal, topo).key
    except Exception:
        return ordinal_key(ordinal)


def bus_id(props: dict) -> str:
    """The normalized PCI bus id ("0000:1b:00.0") of CUDA device properties."""
    return f"{props.get('pciDomainID', 0):04x}:{props.get('pciBusID', 0):02x}:{props.get('pciDeviceID', 0):02x}.0"


def gpus(cp: Any, spec: str | None, topo: Topology | None) -> list[Gpu]:
    """The GPUs named by --gpus (CUDA ordinals "0,2"; default all visible)."""
    from ..options import gpus as gpu_list

    return [describe(cp, d, topo) for d in gpu_list(spec, cp.cuda.runtime.getDeviceCount())]


def load_topology(path: str | None) -> tuple[Topology | None, str]:
    """The node's Topology (for path classes and PCIe links), or None and why."""
    from ...topology.discover import discover

    if path:
        from ..harness import read_topology

        return read_topology(path), ""
    try:
        return discover(), ""
    except Exception as e:  # a node we cannot read still has GPUs to measure
        why = f"node topology unavailable ({e})"
    try:  # NVML alone still gives GPU names, NUMA nodes, PCIe and NVLinks
        from ...topology import nvml

        topo = nvml.enrich(Topology(source=""))
        if topo.gpus:
            return topo, f"{why}: GPUs and NVLinks from NVML only"
    except Exception:
        pass
    return None, f"{why}: paths are labelled without classes"


def _uuid(v: Any) -> str:
    if isinstance(v, (bytes, bytearray)) and len(v) == 16:
        h = v.hex()
        return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
    return decoded(v)


def enable_peer_access(cp: Any, ordinals: Sequence[int]) -> list[str]:
    """Direct peer access between every pair of these GPUs (NVLink/PCIe
    P2P), as the reference programs enable it; where a pair has none, peer
    copies are staged by the driver and the returned note says so."""
    rt, notes = cp.cuda.runtime, []
    devs = sorted(set(ordinals))
    for a in devs:
        for b in devs:
            if a == b:
                continue
            if not rt.deviceCanAccessPeer(a, b):
                notes.append(f"peer: CUDA device {a} cannot access {b} directly: peer copies are staged by the driver")
                continue
            with cp.cuda.Device(a):
                try:
                    rt.deviceEnablePeerAccess(b)
                except Exception:  # already enabled
                    pass
    return notes


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


def ordinal_gpus(env: Mapping[str, Any], topo: Topology | None) -> dict[str, str]:
    """The Topology's GPU of each CUDA ordinal a ResultSet names ({"cuda0": "GPU2"}), by the bus id (then
    UUID) its `environment` record keeps: its kind's topology did not know the GPU, the reader's may. An
    ordinal without a record stays one: under CUDA_VISIBLE_DEVICES=2,3 "cuda0" is GPU2, not GPU0."""
    out = {}
    for name, rec in env.items():
        e = Endpoint.parse(name)
        if e is not None and e.kind == "cuda" and isinstance(rec, Mapping) and (rec.get("bus_id") or rec.get("uuid")):
            g = match_gpu(topo, str(rec.get("bus_id") or ""), str(rec.get("uuid") or ""))
            if g is not None:
                out[name] = g.key
    return out


def open_bench(args: Any, command: str) -> tuple[Any, Topology | None, list[Gpu], Any]:
    """CuPy, the topology (for path classes and links), the GPUs of --gpus
    and an empty ResultSet that says why the topology is missing, if it is."""
    from ..results import ResultSet

    cp = import_cupy()
    topo, why = load_topology(args.topology)
    devs = gpus(cp, args.gpus, topo)
    rs = ResultSet(command=command, environment=environment(cp, devs))
    if why:
        rs.messages.append(why)
    return cp, topo, devs, rs
