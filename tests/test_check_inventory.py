"""Inventory and health checks on fixture topologies: NVML health through a
fake pynvml, NIC ports, NIC rails from the default plan, the environment
and NUMA memory balance; each gives the right verdict and finding."""

import sys

import pytest

import nodes
from nodemap.check import inventory as inv
from nodemap.check.findings import derive
from nodemap.topology.model import Port, replace
from test_nvml import NVMLError, fake_nvml


def health_nvml(gpus, buses=()):
    """fake_nvml plus the health queries; per GPU: ecc, dbe, remap, throttle, persistence, mig (None: unsupported)."""
    m = fake_nvml([{"bus": (buses[i] if buses else "0").encode(), "name": "NVIDIA H100", "uuid": f"GPU-{i}", "mem": 1}
                   for i in range(len(gpus))])
    m.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, m.NVML_VOLATILE_ECC = 1, 0

    def q(name, wrap=lambda v: v):
        def f(h, *a):
            v = gpus[h].get(name)
            if v is None:
                raise NVMLError("Not Supported")
            return wrap(v)
        return f

    m.nvmlDeviceGetEccMode = q("ecc", lambda v: (v, v))
    m.nvmlDeviceGetTotalEccErrors = q("dbe")
    m.nvmlDeviceGetRemappedRows = q("remap")
    m.nvmlDeviceGetRetiredPagesPendingStatus = q("retired")
    m.nvmlDeviceGetCurrentClocksEventReasons = q("throttle")
    m.nvmlDeviceGetPersistenceMode = q("persistence")
    m.nvmlDeviceGetMigMode = q("mig", lambda v: (v, v))
    return m


HEALTHY = {"ecc": 1, "dbe": 0, "remap": (0, 0, 0, 0), "throttle": 0, "persistence": 1, "mig": 0}


def by_key(checks):
    return {c.key: c for c in checks}


def test_nvml_health_of_healthy_and_broken_gpus(monkeypatch):
    broken = {"ecc": 0, "dbe": 3, "remap": (2, 1, 0, 1), "throttle": 0x40 | 0x4, "persistence": 0, "mig": 1}
    monkeypatch.setitem(sys.modules, "pynvml", health_nvml([HEALTHY, broken]))
    checks, why = inv.nvml_health(nodes.leonardo())
    assert why == ""
    c = by_key(checks)
    assert all(c[f"inventory/nvml/gpu0/{k}"].verdict == "pass"
               for k in ("ecc", "ecc_uncorrected", "remapped_rows", "throttle", "persistence"))
    g1 = "inventory/nvml/gpu1"
    assert c[f"{g1}/ecc"].verdict == "warn" and c[f"{g1}/ecc"].cause == "configuration"
    assert c[f"{g1}/ecc_uncorrected"].verdict == "fail" and c[f"{g1}/ecc_uncorrected"].cause == "hardware"
    assert c[f"{g1}/remapped_rows"].verdict == "fail" and "FAILED" in c[f"{g1}/remapped_rows"].value
    assert c[f"{g1}/throttle"].value == "hardware thermal slowdown, software power cap"
    assert c[f"{g1}/persistence"].verdict == "info" and c[f"{g1}/mig"].value == "on"
    found = derive([], checks)
    assert found[0].verdict == "fail" and found[0].cause == "hardware"


def test_the_ecc_fix_names_the_gpu_as_nvidia_smi_finds_it(monkeypatch):
    # NVML sees one GPU (a cgroup gave the job the node's GPU2): `nvidia-smi -i 2` named a GPU NVML does not
    # have, or another one; its bus id names this one
    topo = nodes.leonardo()
    bus = topo.gpus[2].pci_bus_id
    monkeypatch.setitem(sys.modules, "pynvml", health_nvml([dict(HEALTHY, ecc=0)], [bus]))
    ecc = by_key(inv.nvml_health(topo)[0])["inventory/nvml/gpu2/ecc"]
    assert ecc.verdict == "warn" and ecc.fix == f"nvidia-smi -i {bus} -e 1, then reboot"


def test_nvml_older_gpus_report_retired_pages_and_missing_queries_are_left_out(monkeypatch):
    old = {"ecc": 1, "retired": 1}  # no row remapper (pre-A100), no throttle/persistence/MIG queries
    monkeypatch.setitem(sys.modules, "pynvml", health_nvml([old]))
    c = by_key(inv.nvml_health(nodes.leonardo())[0])
    assert c["inventory/nvml/gpu0/retired_pages"].verdict == "warn"
    assert not any(k.endswith(("/throttle", "/mig", "/persistence", "/remapped_rows")) for k in c)


def test_nvml_that_does_not_start_is_a_skip_not_a_failure(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml([], fail_init=True))
    checks, why = inv.nvml_health(nodes.leonardo())
    assert checks == [] and "NVML does not start" in why and "Driver Not Loaded" in why
    assert inv.nvml_health(nodes.two_socket_four_nics()) == ([], "no NVIDIA GPU in the topology")


def test_nic_ports_up_and_down():
    topo = nodes.two_socket_four_nics()
    nics = list(topo.nics)
    nics[1] = replace(nics[1], ports=(Port(1, "1: DOWN", "InfiniBand"),))
    nics[0] = replace(nics[0], ports=(Port(1, "4: ACTIVE", "InfiniBand", 200.0),))
    c = by_key(inv.nics(replace(topo, nics=tuple(nics))))
    assert c["inventory/nic/mlx5_0/port1"].verdict == "pass" and "200 Gb/s" in c["inventory/nic/mlx5_0/port1"].value
    down = c["inventory/nic/mlx5_1/port1"]
    assert down.verdict == "warn" and down.cause == "hardware" and "ibstat" in down.fix


def test_more_nics_than_tasks_is_a_rail_finding():
    """2 sockets, 4 NICs, no GPU: the default plan has 2 tasks; each should drive its 2 nearest NICs."""
    topo = nodes.two_socket_four_nics()
    (c,) = inv.nic_rails(topo, {})
    assert c.verdict == "warn" and c.cause == "configuration"
    f = derive([], [c])[0]
    assert f.text == "2 tasks, 4 NICs: bind 2 NICs per task and set UCX_MAX_RNDV_RAILS=2"
    assert "task 0: UCX_NET_DEVICES=mlx5_0:1,mlx5_1:1" in f.fix and "task 1: UCX_NET_DEVICES=mlx5_2:1,mlx5_3:1" in f.fix
    (ok,) = inv.nic_rails(topo, {"UCX_NET_DEVICES": "mlx5_0:1,mlx5_1:1"})
    assert ok.verdict == "pass"
    (few,) = inv.nic_rails(topo, {"UCX_NET_DEVICES": "mlx5_0:1", "UCX_MAX_RNDV_RAILS": "1"})
    assert few.verdict == "warn"
    # as many NICs as tasks (or fewer): one NIC each, nothing to say
    assert inv.nic_rails(nodes.leonardo(), {}) == [] and inv.nic_rails(nodes.karolina(), {}) == []


@pytest.mark.parametrize("name, value, verdict", [
    ("UCX_TLS", "tcp,self", "warn"),
    ("UCX_TLS", "rc,sm,self", "info"),
    ("NCCL_P2P_DISABLE", "1", "warn"),
    ("NCCL_ALGO", "Ring", "warn"),
    ("CUDA_LAUNCH_BLOCKING", "1", "warn"),
    ("OMP_NUM_THREADS", "8", "info"),
])
def test_environment_that_changes_results(name, value, verdict):
    (c,) = inv.environment({name: value, "HOME": "/home/user", "PATH": "/bin"})
    assert c.key == f"inventory/env/{name}" and c.verdict == verdict and c.value == value
    if verdict == "warn":
        assert c.cause == "configuration" and f"unset {name}" in c.fix


def test_numa_balance():
    topo = nodes.karolina()
    assert by_key(inv.numa_balance(topo))["inventory/numa_balance"].verdict == "pass"
    numas = list(topo.numa_nodes)
    numas[3] = replace(numas[3], memory=numas[3].memory // 2)  # a failed DIMM
    (c,) = inv.numa_balance(replace(topo, numa_nodes=tuple(numas)))
    assert c.verdict == "warn" and c.cause == "hardware" and "50%" in c.rule and "dmidecode" in c.fix
    assert inv.numa_balance(nodes.leonardo()) == []  # one NUMA node: nothing to balance
