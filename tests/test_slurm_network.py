"""The test cluster with a real network (scripts/slurm-test-cluster start --network): every node a
slurmd in its own network namespace with NICs rail0 and rail1 shaped by tc, MPI across the
namespaces, links slowed, delayed, lossy or cut by `link`, and nothing of it left after stop."""

import json
import os
import re
import subprocess
import sys
import time

import pytest

from slurm_cluster import SCRIPT, Cluster

pytestmark = [pytest.mark.slurm, pytest.mark.mpi]

PY = sys.executable
NODEMAP = [PY, "-m", "nodemap"]
RATE_MBS = 25.0  # the script's default rail rate, 200mbit, in MB/s
# Rank 0 sends rank 1 `count` messages of `size` bytes over MPI, three times; prints the best MB/s.
MPI_BW = """
import sys, time
import numpy as np
from mpi4py import MPI
c = MPI.COMM_WORLD
size, count = int(sys.argv[1]), int(sys.argv[2])
buf = np.zeros(size, dtype=np.uint8)
best = 0.0
for _ in range(3):
    c.Barrier()
    t = time.perf_counter()
    for _ in range(count):
        c.Send(buf, 1) if c.Get_rank() == 0 else c.Recv(buf, 0)
    c.Barrier()
    best = max(best, size * count / (time.perf_counter() - t) / 1e6)
if c.Get_rank() == 0:
    print(best)
"""
# From inside a node: the time a TCP connect to a closed port takes (the peer's reset), median of 9, in ms;
# "timeout" when no answer comes within 2 s
RTT = """
import socket, statistics, sys, time
times = []
for _ in range(9):
    s = socket.socket()
    s.settimeout(2)
    t = time.perf_counter()
    try:
        s.connect((sys.argv[1], 9))
    except ConnectionRefusedError:
        times.append((time.perf_counter() - t) * 1e3)
    except OSError:
        print("timeout")
        sys.exit()
    finally:
        s.close()
print(statistics.median(times))
"""
# Receives UDP datagrams on (address, port) until 1.5 s pass without one; prints how many came
UDP_COUNT = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], 9999))
s.settimeout(5)
n = 0
try:
    while True:
        s.recv(2048)
        n += 1
        s.settimeout(1.5)
except socket.timeout:
    pass
print(n)
"""
UDP_SEND = """
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for i in range(int(sys.argv[2])):
    s.sendto(b"x" * 200, (sys.argv[1], 9999))
    if i % 50 == 49:
        time.sleep(0.002)  # well under the rail's rate: tbf queues nothing, only the loss drops
"""


@pytest.fixture(scope="module")
def net_cluster():
    cluster = Cluster.start(network=True)
    try:
        yield cluster
    finally:
        cluster.stop()


def in_node(cluster, node: str, code: str, *args: str, timeout: float = 60) -> str:
    """Run Python in the node's network namespace (as its tasks run), its stdout."""
    p = subprocess.run(["ip", "netns", "exec", cluster.network["namespaces"][node], PY, "-c", code, *args],
                       capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, p.stderr
    return p.stdout.strip()


def addr(cluster, node: str, nic: str) -> str:
    return cluster.network["addresses"][node][nic]


def namespaces() -> set[str]:
    return set(re.findall(r"nodemap-\S+", subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout))


def leftovers(net_id: str) -> list[str]:
    """Namespaces and host interfaces named for the network `net_id`."""
    spaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    return (re.findall(rf"nodemap-{net_id}-\S+", spaces) + re.findall(rf"\b{net_id}-[\w-]+", links))


def running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def mpi_bandwidth(cluster, iface: str, size: int, count: int) -> float:
    p = cluster.srun("--mpi=pmi2", "-N2", "-n2", "-w", "n1,n2", PY, "-c", MPI_BW, str(size), str(count),
                     env={"FI_TCP_IFACE": iface}, timeout=180)
    assert p.returncode == 0, p.stderr
    return float(p.stdout)


def test_every_node_is_a_slurmd_in_its_own_namespace_with_its_rails(net_cluster):
    show = ("import os, socket; print(os.environ['SLURMD_NODENAME'], os.readlink('/proc/self/ns/net'), "
            "','.join(sorted(os.listdir('/sys/class/net'))))")
    p = net_cluster.srun("-N3", "-n3", PY, "-c", show)
    assert p.returncode == 0, p.stderr
    rows = sorted(line.split() for line in p.stdout.splitlines())
    assert [r[0] for r in rows] == ["n1", "n2", "n3"]
    assert len({r[1] for r in rows}) == 3, rows  # three network namespaces
    assert all({"rail0", "rail1"} <= set(r[2].split(",")) for r in rows), rows
    # each rail is its own subnet of the test range, and a node reaches another's rail
    assert addr(net_cluster, "n2", "rail0").startswith(("198.18.", "198.19."))
    assert float(in_node(net_cluster, "n1", RTT, addr(net_cluster, "n2", "rail1"))) < 50


def test_mpi_runs_across_the_namespaces_at_the_rails_rate(net_cluster):
    """The rail, not the CPU, is the limit: MPI between two nodes over a rail runs at its rate (200
    Mbit/s), and at a tenth when that link is slowed."""
    full = mpi_bandwidth(net_cluster, "rail1", 4 << 20, 4)
    assert 0.4 * RATE_MBS < full < 1.1 * RATE_MBS, full
    net_cluster.link("n2", "rail1", "rate=20mbit")
    try:
        slow = mpi_bandwidth(net_cluster, "rail1", 1 << 20, 2)
        other = mpi_bandwidth(net_cluster, "rail0", 4 << 20, 4)
    finally:
        net_cluster.link("n2", "rail1", "clear")
    assert slow < 1.1 * RATE_MBS / 10, slow
    assert other > 0.4 * RATE_MBS, other  # only the one link
    print(f"MPI n1-n2: {full:.1f} MB/s on rail1, {slow:.2f} MB/s slowed to 20mbit, {other:.1f} MB/s on rail0")


def test_link_delay_loss_and_down_change_only_that_link(net_cluster):
    target, beside = addr(net_cluster, "n2", "rail0"), addr(net_cluster, "n2", "rail1")
    assert float(in_node(net_cluster, "n1", RTT, target)) < 1.5
    try:
        assert net_cluster.link("n2", "rail0", "delay=2ms")["delay"] == "2ms"
        delayed = float(in_node(net_cluster, "n1", RTT, target))
        assert 3.5 < delayed < 50, delayed  # 2 ms each way
        assert float(in_node(net_cluster, "n1", RTT, beside)) < 1.5

        net_cluster.link("n2", "rail0", "delay=0ms", "loss=20%")
        receiver = subprocess.Popen(["ip", "netns", "exec", net_cluster.network["namespaces"]["n2"], PY, "-c",
                                     UDP_COUNT, target], stdout=subprocess.PIPE, text=True)
        time.sleep(0.5)
        in_node(net_cluster, "n1", UDP_SEND, target, "2000")
        got = int(receiver.communicate(timeout=30)[0])
        assert 0.65 * 2000 < got < 0.92 * 2000, got  # 20% lost one way (80% expected)

        net_cluster.link("n2", "rail0", "loss=0%", "down")
        carrier = in_node(net_cluster, "n2", "print(open('/sys/class/net/rail0/carrier').read().strip())")
        assert carrier == "0"
        assert in_node(net_cluster, "n1", RTT, target) == "timeout"
        assert float(in_node(net_cluster, "n1", RTT, beside)) < 1.5
        assert net_cluster.link("n2", "rail0", "up")["up"] is True
        assert float(in_node(net_cluster, "n1", RTT, target, timeout=60)) < 50
    finally:
        net_cluster.link("n2", "rail0", "clear")


def show_rows(cluster, *between: str) -> dict:
    """`nodemap run -- [between...] nodemap show --json` on 3 nodes, 2 ranks each: rows by (node, local rank)."""
    p = cluster.srun("--mpi=pmi2", "-N3", "--ntasks-per-node=2", *NODEMAP, "run", "--", *between, *NODEMAP, "show",
                     "--json", timeout=180)
    assert p.returncode == 0, p.stdout + p.stderr
    return {(r["host"], r["local_rank"]): r for r in json.loads(p.stdout)["rows"]}


def test_nodemap_sees_each_nodes_rails_and_gives_each_rank_one(net_cluster):
    """Inside its namespace a node's NICs are its rails (veths: no PCI device, rate unknown); the plan
    gives local rank k rail k and the variables MPI (OFI tcp), UCX and NCCL read; show finds them
    as planned. A rail whose cable is out is a NIC that is down: both ranks plan the other one."""
    topo = json.loads(in_node(net_cluster, "n1", "import runpy, sys; sys.argv = ['nodemap', 'topo', '--json']; "
                                                 "runpy.run_module('nodemap', run_name='__main__')"))
    assert [(n["name"], n["kind"], n["pci_bus_id"], [p["rate_gbps"] for p in n["ports"]]) for n in topo["nics"]] == [
        ("rail0", "Ethernet", "", [0.0]), ("rail1", "Ethernet", "", [0.0])]
    rows = show_rows(net_cluster)
    assert sorted(rows) == [(f"n{k}", lr) for k in (1, 2, 3) for lr in (0, 1)]
    for (node, local), r in rows.items():
        rail = f"rail{local}"
        assert (r["nic_env"]["NODEMAP_NIC"], r["nic_env"]["FI_TCP_IFACE"], r["nic_env"]["NCCL_SOCKET_IFNAME"],
                r["nic_env"]["UCX_NET_DEVICES"]) == (rail, rail, "=" + rail, rail), r
        assert r["verdicts"] == [], r
    # a variable changed after nodemap run is named against the plan
    rows = show_rows(net_cluster, "env", "FI_TCP_IFACE=rail0")
    assert rows[("n2", 0)]["verdicts"] == []
    assert any("FI_TCP_IFACE=rail0 steers to rail0, the plan gave rail1" in v for v in rows[("n2", 1)]["verdicts"])
    net_cluster.link("n2", "rail1", "down")
    try:
        rows = show_rows(net_cluster)
    finally:
        net_cluster.link("n2", "rail1", "up")
    assert [rows[("n2", lr)]["nic_env"]["NODEMAP_NIC"] for lr in (0, 1)] == ["rail0", "rail0"]
    assert [rows[("n3", lr)]["nic_env"]["NODEMAP_NIC"] for lr in (0, 1)] == ["rail0", "rail1"]


HELLO = """
import os
from mpi4py import MPI
c = MPI.COMM_WORLD
print(c.Get_rank(), os.environ["SLURMD_NODENAME"], os.environ.get("FI_TCP_IFACE"), c.allreduce(1), flush=True)
"""


def test_a_rail_cut_just_before_the_job_starts_is_not_planned(net_cluster):
    """n1's rail0 (n1 holds rank 0) loses its carrier just before an MPI job starts under nodemap run,
    as the fault table cuts it after another link's fault was cleared. The kernel writes operstate
    after the carrier, up to a second later (its link watch runs once a second and just ran); a plan
    read from operstate gave local rank 0 rail0 and libfabric's tcp bound to an address no peer
    reaches (MPI_Init hung; once the kernel caught up: "ep_enable failed ... Bad file descriptor").
    The carrier decides: both of n1's ranks take rail1, and nodemap says why."""
    net_cluster.link("n3", "rail0", "delay=1ms")
    try:
        net_cluster.link("n3", "rail0", "clear")  # the forwarder's interfaces go: the kernel's link watch just ran
        net_cluster.link("n1", "rail0", "down")
        p = net_cluster.run("timeout", "120", "srun", "--mpi=pmi2", "-N3", "--ntasks-per-node=2", "--kill-on-bad-exit=1",
                            *NODEMAP, "run", "--", PY, "-c", HELLO, timeout=150)
    finally:
        net_cluster.link("n3", "rail0", "clear")
        net_cluster.link("n1", "rail0", "clear")
    assert p.returncode == 0, p.stdout + p.stderr
    rows = sorted(line.split() for line in p.stdout.splitlines())
    assert [r[0] for r in rows] == [str(r) for r in range(6)] and {r[3] for r in rows} == {"6"}, rows
    assert [r[2] for r in rows if r[1] == "n1"] == ["rail1", "rail1"], rows
    assert [r[2] for r in rows if r[1] == "n2"] == ["rail0", "rail1"], rows
    assert "nodemap run: note: NIC rail0 down: ranks use rail1" in p.stderr, p.stderr


def test_bad_link_settings_say_what_is_accepted(net_cluster):
    for args, says in ((["n9", "rail0", "down"], "no link n9/rail0"), (["n1", "rail0", "rate=fast"], "is not a rate"),
                       (["n1", "rail0", "jitter=1ms"], "is not rate=R")):
        p = subprocess.run([PY, str(SCRIPT), "link", str(net_cluster.top), *args], capture_output=True, text=True,
                           timeout=30)
        assert p.returncode == 2 and says in p.stderr and "Traceback" not in p.stderr, p.stderr


def test_a_second_network_beside_the_first_and_nothing_left_after_stop(net_cluster):
    """Two networked clusters side by side (their own namespaces, bridges and subnets); stop removes
    every namespace, veth, bridge and forwarder of one, faults and all, and leaves the other."""
    other = Cluster.start(nodes=2, network=True, nics=1, rate="100mbit")
    net_id = other.network["id"]
    try:
        assert net_id != net_cluster.network["id"]
        assert addr(other, "n1", "ctl") != addr(net_cluster, "n1", "ctl")
        assert other.srun("-N2", "-n2", "true").returncode == 0
        other.link("n2", "rail0", "delay=1ms", "loss=1%")  # a forwarder process and a second veth pair
        other.link("n1", "rail0", "down")
        forwarder = json.loads((other.top / "network.json").read_text())["forwarders"]["n2/rail0"]
        assert leftovers(net_id)
    finally:
        other.stop()
    assert leftovers(net_id) == []
    assert not running(forwarder)
    assert net_cluster.srun("-N3", "-n3", "true").returncode == 0  # the first one still answers


def test_a_failed_start_removes_the_network_it_made(tmp_path):
    top = tmp_path / "c"
    p = subprocess.run([PY, str(SCRIPT), "start", str(top), "--network", "--nodes", "2", "--timeout", "20",
                        "--conf-line", "NoSuchSlurmKey=1"], capture_output=True, text=True, timeout=120)
    if p.returncode == 2 and "not found" in p.stderr:
        pytest.skip(p.stderr)
    assert p.returncode == 1, p.stderr
    net_id = re.search(r"network (nm\d\d) removed", p.stderr)
    assert net_id, p.stderr
    assert leftovers(net_id.group(1)) == []
    assert not (top / "network.json").exists()


def test_a_bad_rate_is_refused_before_anything_is_made(tmp_path):
    before = namespaces()
    p = subprocess.run([PY, str(SCRIPT), "start", str(tmp_path / "c"), "--network", "--rate", "fast"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "is not a rate like 200mbit" in p.stderr, p.stderr
    assert not (tmp_path / "c" / "network.json").exists()
    assert namespaces() <= before


# The fleet's rules for three nodes on one 2-core host shared with other work (docs/fleet.md's recipe has them)
LOOSE = "[fleet]\nlink_bad = 0.5\nlink_latency = 1e6\n"


def fleet(cluster, tmp_path) -> tuple[dict, str]:
    """`check --fleet --slurm-drain` on the 3 nodes, 2 ranks each (one a rail): fleet.json and the output."""
    (tmp_path / "loose.toml").write_text(LOOSE)
    out = tmp_path / "fleet"
    p = cluster.srun("--mpi=pmi2", "-N3", "--ntasks-per-node=2", *NODEMAP, "check", "--fleet", "-o", str(out),
                     "--pair-size", "128KiB", "--no-html", "--expect", str(tmp_path / "loose.toml"), "--slurm-drain",
                     timeout=480)
    assert p.returncode in (0, 1), p.stdout + p.stderr
    return json.loads((out / "fleet.json").read_text()), p.stdout + p.stderr


def slurm_reasons(cluster) -> dict:
    p = subprocess.run(["sinfo", "-h", "-N", "-o", "%N|%t|%E"], capture_output=True, text=True, env=cluster.env,
                       timeout=30)
    return {n: (state, why) for n, state, why in (line.split("|", 2) for line in p.stdout.splitlines())}


def resume(cluster, node: str) -> None:
    subprocess.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"], env=cluster.env, timeout=30,
                   capture_output=True)


@pytest.mark.slow
@pytest.mark.parametrize("links, says", [
    ((("n2", "rail1", "down"),), "nodemap: fleet: topology NIC rail1 port 1 down 0 Gb/s where 2 of 3 nodes have up"),
    ((("n3", "rail0", "delay=2ms"),), "nodemap: fleet: pairs mpi latency host rail0 vs rail1 "),
    ((("n1", "rail1", "loss=1%"), ("n1", "rail0", "delay=1us")), "nodemap: fleet: pairs mpi tail host rail1 vs rail0 ")],
    ids=["down", "delay", "loss"])
def test_a_rail_down_is_found_named_and_drained(net_cluster, tmp_path, links, says):
    """One node's rail down (its NIC's port where its peers' are up; its ranks plan the other rail, and
    MPI does not hang), 2 ms late each way (healthy pairs' latency spreads 1-8x on this shared host,
    so the rail is judged against the same pair's other rail, measured with it: [fleet] rail_latency),
    or losing 1% (its other rail through the same forwarder, losing nothing: the rails differ by the loss
    alone, seen in their slowest round trips: [fleet] rail_tail): the node is drained in Slurm with a
    reason naming the rail, the others are not. The first link is the fault.
    A rail at a tenth of its rate: tests/test_docs_recipes.py runs docs/fleet.md's recipe."""
    for link in links:
        net_cluster.link(*link)
    t0 = time.monotonic()
    try:
        got, said = fleet(net_cluster, tmp_path)
    finally:
        for link in links:
            net_cluster.link(*link[:2], "clear")
    took = time.monotonic() - t0
    reasons = slurm_reasons(net_cluster)
    node, rail = links[0][:2]
    try:
        assert [d["node"] for d in got["drain"]] == [node], said
        assert re.search(r"rail\d", got["drain"][0]["reason"]).group() == rail  # the first rail it names
        assert reasons[node][0].startswith("drain") and reasons[node][1].startswith(says), reasons
        assert not any(reasons[n][0].startswith("drain") for n in reasons if n != node), reasons
    finally:
        resume(net_cluster, node)
    print(f"{links[0]}: found and drained in {took:.0f} s: {reasons[node][1]}")
