"""`nodemap slurm gres` and `nodemap slurm features` on the field's nodes:
the GPUs' and NICs' local cores are the ones the seed documents name
(Karolina GPU0/1 -> cores 48-63, Perlmutter GPU k -> NUMA 3-k), NVLink
counts from NVSwitch (DGX-like) and direct links (POWER8 hwloc XML), a
real hwloc XML (Lassen), and a node with nothing to share."""

from __future__ import annotations

import json

import pytest
from conftest import FIXTURES

import nodes
from nodemap.cli import main
from nodemap.slurm import config
from nodemap.topology.model import Link, replace


def run(capsys, tmp_path, topo_or_path, *argv):
    path = topo_or_path
    if not isinstance(topo_or_path, str):
        path = str(tmp_path / "node.json")
        with open(path, "w") as f:
            f.write(topo_or_path.to_json())
    assert main(["slurm", *argv, "--input", path]) == 0
    return capsys.readouterr().out


def cores_of(lines: list[str]) -> dict[str, str]:
    """File= or Type= -> Cores= of each gres.conf line."""
    out = {}
    for line in lines:
        f = dict(w.split("=", 1) for w in line.split())
        out[f.get("File") or f["Type"]] = f.get("Cores", "")
    return out


def test_karolina_gpu0_and_1_get_cores_48_to_63(capsys, tmp_path):
    out = run(capsys, tmp_path, nodes.karolina(), "gres", "--node-name", "acn01").splitlines()
    assert out[0].startswith("# gres.conf for acn01") and "GresTypes=gpu,nic" in out[0]
    c = cores_of(out[1:])
    assert c["/dev/nvidia0"] == c["/dev/nvidia1"] == "48-63"  # NUMA 3 (CONTEXT.md)
    assert c["/dev/nvidia2"] == "16-31" and c["/dev/nvidia4"] == "112-127" and c["/dev/nvidia6"] == "80-95"
    assert c["mlx5_1"] == "48-63" and c["mlx5_0"] == "16-31"  # mlx5_1 shares GPU0/1's switch
    assert out[1] == "NodeName=acn01 Name=gpu Type=a100-sxm4-40gb File=/dev/nvidia0 Cores=48-63"


def test_perlmutter_gpus_in_reverse_numa_order(capsys, tmp_path):
    c = cores_of(run(capsys, tmp_path, nodes.perlmutter(), "gres").splitlines()[1:])
    assert [c[f"/dev/nvidia{k}"] for k in range(4)] == ["48-63", "32-47", "16-31", "0-15"]
    assert c["cxi0"] == "48-63"


def test_dgx_like_nvswitch_links_and_features(capsys, tmp_path):
    k = nodes.karolina()
    dgx = replace(k, links=tuple(Link(g.key, "NVSwitch", "NVLink", 12, 300.0, 3) for g in k.gpus))
    doc = json.loads(run(capsys, tmp_path, dgx, "gres", "--json", "--node-name", "dgx1"))
    gpu3 = doc["gres"][3]
    assert gpu3["links"] == "12,12,12,-1,12,12,12,12" and gpu3["cores"] == "16-31"
    assert doc["node_gres"] == "gpu:a100-sxm4-40gb:8,nic:mlx5_0:1,nic:mlx5_1:1,nic:mlx5_2:1,nic:mlx5_3:1"
    feat = run(capsys, tmp_path, dgx, "features", "--node-name", "dgx1").splitlines()
    assert feat[1] == "Features=a100-sxm4-40gb,gpus8,nvlink-nv12,nics4,ib200g,sockets2,numa8"


def test_direct_nvlinks_of_a_power8_hwloc_xml(capsys, tmp_path, fixtures):
    lines = run(capsys, tmp_path, str(fixtures / "hwloc-xml" / "power8gpudistances.xml"), "gres").splitlines()[1:]
    assert [ln.split("Links=")[1] for ln in lines] == ["-1,2,0,0", "2,-1,0,0", "0,0,-1,2", "0,0,2,-1"]
    assert cores_of(lines) == {"/dev/nvidia0": "0-3", "/dev/nvidia1": "0-3", "/dev/nvidia2": "4-7",
                               "/dev/nvidia3": "4-7"}


def test_lassen_hwloc_xml(capsys, tmp_path, fixtures):
    path = fixtures / "mpibind" / "topo-xml" / "coral-lassen.xml"
    if not path.exists():
        pytest.skip(f"{path} not found")
    c = cores_of(run(capsys, tmp_path, str(path), "gres").splitlines()[1:])
    assert c["/dev/nvidia0"] == c["/dev/nvidia1"] == "0-19" and c["/dev/nvidia2"] == "20-39"
    assert c["mlx5_0"] == "0-19" and c["mlx5_2"] == "20-39"
    assert "enP5p1s0f0" not in c  # the host's Ethernet ports are not a job's NICs
    feat = run(capsys, tmp_path, str(path), "features", "--json")
    assert json.loads(feat)["features"] == ["v100-sxm2-16gb", "gpus4", "pcie", "nics4", "ib", "sockets2", "numa2"]


def test_a_node_with_nothing_to_share(capsys, tmp_path):
    bare = replace(nodes.two_socket_four_nics(), nics=(), pci_devices=())
    out = run(capsys, tmp_path, bare, "gres", "--node-name", "c1").splitlines()
    # was "GresTypes=gpu and NodeName=c1 Gres=(none)": a configuration to add for nothing
    assert out == ["# c1 has no GPU and no RDMA NIC: no GRES to configure (no gres.conf lines, no Gres= in "
                   "slurm.conf)"]
    assert run(capsys, tmp_path, bare, "features", "--node-name", "c1").splitlines() == [
        "# slurm.conf: add this Features= to NodeName=c1's existing line (a second NodeName=c1 line is fatal: "
        "Duplicated NodeHostName)", "Features=sockets2,numa2"]


def test_nothing_printed_is_a_second_nodename_line(capsys, tmp_path):
    # issue 35 defect 8: `NodeName=n1 Features=...` as printed, beside n1's own line, made slurmctld and every
    # slurmd fatal ("Duplicated NodeHostName n1"); the gres header named a "NodeName=n1 Gres=" line the same way
    k = nodes.karolina()
    for action in ("features", "gres"):
        out = run(capsys, tmp_path, k, action, "--node-name", "acn01").splitlines()
        assert not [ln for ln in out if ln.startswith("NodeName=acn01 ") and " Name=" not in ln], out
        assert "existing line" in out[0]


def test_type_names_are_words_slurm_does_not_split():
    assert config.type_name("NVIDIA A100-SXM4-40GB") == "a100-sxm4-40gb"
    assert config.type_name("Tesla V100-SXM2-16GB") == "v100-sxm2-16gb"
    assert config.type_name("AMD Instinct MI250X") == "instinct-mi250x"
    assert config.type_name("a,b:c=d") == "a_b_c_d"
    assert config.type_name("") == "unknown"


def test_an_odd_node_name_is_refused(capsys, tmp_path):
    path = tmp_path / "n.json"
    path.write_text(nodes.karolina().to_json())
    assert main(["slurm", "gres", "--input", str(path), "--node-name", "a b"]) == 2
    assert "characters a Slurm node name cannot have" in capsys.readouterr().err


@pytest.mark.slurm
def test_the_real_slurmd_parses_the_lines(capsys, tmp_path):
    """slurmd -G (print the GRES configuration and exit: no daemon) on a
    DGX-like node's lines, the /dev/nvidiaN files replaced by stand-in
    character devices in tmp_path; the node's layout from slurm.conf
    (config_overrides), so Cores=48-63 must fit Karolina's 2x64 cores."""
    import os
    import shutil
    import stat
    import subprocess

    from slurm_cluster import SBIN, unavailable

    if unavailable():
        pytest.skip(unavailable())
    k = nodes.karolina()
    dgx = replace(k, links=tuple(Link(g.key, "NVSwitch", "NVLink", 12, 300.0, 3) for g in k.gpus))
    doc = json.loads(run(capsys, tmp_path, dgx, "gres", "--json", "--node-name", "n1"))
    dev = tmp_path / "dev"
    dev.mkdir()
    for i in range(8):
        os.mknod(dev / f"nvidia{i}", stat.S_IFCHR | 0o600, os.makedev(1, 3))  # /dev/null's numbers
    (tmp_path / "gres.conf").write_text("".join(
        f"NodeName=n1 {line.replace('File=/dev/', f'File={dev}/')}\n" for line in doc["lines"]))
    (tmp_path / "spool").mkdir()
    (tmp_path / "slurm.conf").write_text(
        f"ClusterName=gres\nSlurmctldHost=localhost\nGresTypes=gpu,nic\nDebugFlags=Gres\n"
        f"SlurmdSpoolDir={tmp_path}/spool\nSlurmdPidFile={tmp_path}/slurmd.pid\nSlurmdParameters=config_overrides\n"
        f"NodeName=n1 Sockets=2 CoresPerSocket=64 ThreadsPerCore=2 Gres={doc['node_gres']}\n"
        "PartitionName=p Nodes=n1\n")
    p = subprocess.run([shutil.which("slurmd", path=SBIN), "-G", "-f", str(tmp_path / "slurm.conf"), "-N", "n1"],
                       capture_output=True, text=True, timeout=60)
    out = p.stdout + p.stderr
    assert p.returncode == 0 and "error" not in out and "fatal" not in out, out
    assert "Index=0 ID=" in out and f"File={dev}/nvidia0 Cores=48-63" in out
    assert "Links=-1,12,12,12,12,12,12,12" in out
    assert out.count("Name=gpu") == 8 and out.count("Name=nic") == 4


def test_nvidia_device_files_count_only_nvidia_gpus(capsys, tmp_path):
    # an Intel iGPU as GPU0 made the first NVIDIA GPU File=/dev/nvidia1 and the last one a device
    # that does not exist: the driver's minor numbers count NVIDIA's GPUs only (as CUDA_VISIBLE_DEVICES)
    topo = nodes.karolina()
    igpu = replace(topo.gpus[0], vendor="Intel", model="Intel UHD Graphics", os_names=("renderD128",))
    topo = replace(topo, gpus=(igpu, *topo.gpus[1:]))
    files = [line.split("File=")[1].split()[0] for line in run(capsys, tmp_path, topo, "gres").splitlines()[1:]
             if "Name=gpu" in line]
    assert files == ["/dev/dri/renderD128"] + [f"/dev/nvidia{i}" for i in range(len(topo.gpus) - 1)]


# --- linear in the GPUs: the one-pass lookups give what pair-by-pair asking gave ----------------

from hypothesis import given, settings, strategies as st  # noqa: E402

from nodemap.topology import paths  # noqa: E402

_ENDS = ["GPU0", "GPU1", "GPU2", "GPU3", "NVSwitch", "NVSwitch1", "CPU"]
_links = st.lists(st.builds(Link, st.sampled_from(_ENDS), st.sampled_from(_ENDS),
                            st.sampled_from(["NVLink", "NVLink", "xGMI"]), st.integers(0, 18),
                            st.sampled_from([0.0, 25.0, 50.0])), max_size=14)


@settings(max_examples=300, deadline=None)
@given(_links, st.integers(2, 4))
def test_one_pass_nvlink_counts_equal_the_pairwise_ones(links, ngpus):
    topo = replace(nodes.build(nodes.Spec(gpus=[nodes.Dev(0)] * ngpus)), links=tuple(links))
    nv = paths.NvLinks(topo)
    keys = [g.key for g in topo.gpus]
    counts = [paths.nvlink(topo, a, b)[0] for i, a in enumerate(keys) for b in keys[i + 1:]]
    assert [nv.count(a, b) for i, a in enumerate(keys) for b in keys[i + 1:]] == counts
    assert nv.fewest(keys) == (min(counts), any(counts))
    for g in topo.gpus:  # Links= as the pairwise walk wrote it
        row = [-1 if o.index == g.index else paths.nvlink(topo, g.key, o.key)[0] for o in topo.gpus]
        assert config.gpu_links(topo, g) == (",".join(map(str, row)) if any(c > 0 for c in row) else "")


def test_local_cores_of_every_device_in_one_pass_equal_one_by_one():
    for topo in (nodes.karolina(), nodes.perlmutter(), nodes.coral_ea()):
        near, cpus = config._Cores(topo), paths.cpu_affinities(topo)
        for key in paths.device_keys(topo):
            assert cpus[key] == paths.cpu_affinity(topo, key)
            lid = config.logical_cores(topo)
            one = [lid[c.cpuset.first()] for c in topo.cores if c.cpuset and not c.cpuset.isdisjoint(cpus[key])]
            assert near.near(cpus[key]) == config.CpuSet(one).format()
