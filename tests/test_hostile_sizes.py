"""Issue 16, item 3: tiny inputs that would cost huge memory or time are
refused in a moment with one line (or read right, in linear time)."""

from __future__ import annotations

import gzip
import io
import json
import tarfile
import time

import pytest
from hypothesis import given, strategies as st

from hostile import LIMIT as LIMIT_S
from hostile import CPU, NODE, env, hwloc_xml, nodemap, put, refused, snapshot
from nodemap.errors import InputError, NodemapError
from nodemap.launcher import detect, tasks_per_node
from nodemap.topology import snapshot as tarballs
from nodemap.topology.cpuset import MAX_INDEX, CpuSet, CpuSetError
from nodemap.units import parse_size

LIMIT = "2^20"


# --- the parsers, driven by hypothesis ---------------------------------------------------------

parts = st.tuples(st.integers(0, 3000), st.integers(0, 200), st.integers(1, 9))


@given(st.lists(parts, min_size=1, max_size=12))
def test_list_syntax_matches_python_ranges(items):
    text = ",".join(f"{lo}-{lo + n}:{s}" if s > 1 else f"{lo}-{lo + n}" for lo, n, s in items)
    want = {i for lo, n, s in items for i in range(lo, lo + n + 1, s)}
    assert set(CpuSet.parse(text)) == want
    assert CpuSet.parse(CpuSet(want).format()) == CpuSet(want)


@given(st.integers(MAX_INDEX + 1, 10**30), st.sampled_from(["0-{}", "{}", "0-{}:7", "5,{}-{}"]))
def test_indexes_beyond_the_limit_are_refused_at_once(big, shape):
    t0 = time.perf_counter()
    with pytest.raises(CpuSetError, match=r"2\^20"):
        CpuSet.parse(shape.format(big, big))
    assert time.perf_counter() - t0 < 0.05


@given(st.text(max_size=12))
def test_any_text_is_a_set_or_a_cpuset_error(text):
    try:
        s = CpuSet.parse(text)
    except CpuSetError as e:
        assert len(str(e)) < 300
    else:
        assert s.last() <= MAX_INDEX


@given(st.sets(st.integers(0, 5000), max_size=60), st.integers(0, 40))
def test_hwloc_masks_with_padding_words(members, pad):
    s = CpuSet(members)
    words = ["0x" + w for w in s.format_mask().split(",")]
    assert CpuSet.parse_mask(",".join(["0x0"] * pad + words)) == s
    assert CpuSet.parse_mask(",".join(["0x00000000"] * pad + words)) == s


@given(st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 10**13)), min_size=1, max_size=5))
def test_slurm_tasks_per_node_is_bounded(items):
    text = ",".join(f"{c}(x{r})" for c, r in items)
    total = sum(r for _, r in items)
    try:
        counts = tasks_per_node(text)
    except NodemapError as e:
        assert total > 1 << 20 or any(r == 0 for _, r in items) or len(str(e)) < 300
    else:
        assert len(counts) == total <= 1 << 20


launcher_vars = st.sampled_from(["SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "PALS_LOCAL_RANKID",
                                  "FLUX_TASK_LOCAL_ID", "MV2_COMM_WORLD_LOCAL_RANK", "SLURM_TASKS_PER_NODE",
                                  "OMPI_COMM_WORLD_LOCAL_SIZE", "FLUX_JOB_SIZE", "SLURM_NODEID"])
values = st.one_of(st.text(max_size=12), st.integers(-5, 10**15).map(str), st.just("9" * 5000),
                   st.just("1(x99999999999)"), st.just("²"))


@given(st.dictionaries(launcher_vars, values, min_size=1, max_size=4))
def test_launcher_variables_give_a_rank_or_one_clear_error(env_vars):
    env_vars = {"SLURM_JOB_ID": "1", **env_vars}
    try:
        lr = detect(env_vars)
    except NodemapError as e:
        assert len(str(e)) < 400 and "\n" not in str(e)
    else:
        assert 0 <= lr.rank < 10**9 and 0 <= lr.size


@given(st.one_of(st.text(max_size=20), st.just("inf"), st.just("nan"), st.just("1e400G"), st.just("9" * 5000)))
def test_sizes_are_bytes_or_one_clear_error(text):
    try:
        n = parse_size(text, "--budget")
    except NodemapError as e:
        assert len(str(e)) < 400 and "\n" not in str(e)
    else:
        assert isinstance(n, int) and n >= 0


def test_linear_time_on_long_lists_and_masks():
    t0 = time.perf_counter()
    assert len(CpuSet.parse(",".join(str(i) for i in range(0, MAX_INDEX, 4)))) == (MAX_INDEX + 1) // 4
    assert CpuSet.parse_mask(",".join(["0x00000000"] * 300_000 + ["0xff"])) == CpuSet(range(8))
    with pytest.raises(CpuSetError, match="repeats itself"):
        CpuSet.parse(",".join(["0-1048575"] * 20_000))
    s = CpuSet.parse("0-1048575:2")
    assert len(s.ranges()) == 1 << 19 and s.format().count(",") == (1 << 19) - 1
    assert time.perf_counter() - t0 < 8


# --- the CLI on the same inputs, capped ------------------------------------------------------


@pytest.mark.parametrize("cpus", ["0-99999999999", "0-3000000000:7", "4000000000", "0" * 5000 + "1-" + "9" * 5000])
def test_cpus_option(cpus):
    refused(nodemap("plan", "--tasks", "1", "--cpus", cpus), "--cpus", LIMIT)


def test_sysfs_file(tmp_path):
    snapshot(tmp_path)
    put(tmp_path, f"{NODE}/node0/cpulist", "0-99999999999")
    refused(nodemap("topo", "--input", str(tmp_path)), "node0/cpulist", LIMIT)


def test_sysfs_mask_file(tmp_path):
    snapshot(tmp_path)
    put(tmp_path, f"{CPU}/online", "0-1," * 200_000 + "0-1048575:3")
    put(tmp_path, f"{NODE}/node0/cpumap", "f" * 300_000)
    refused(nodemap("topo", "--input", str(tmp_path)), "node0/cpumap", LIMIT)


def test_json_export(tmp_path):
    xml = tmp_path / "n.xml"
    xml.write_text(hwloc_xml())
    d = json.loads(nodemap("topo", "--input", str(xml), "--json").stdout)
    d["numa_nodes"][0]["cpuset"] = "0-99999999999"
    (tmp_path / "n.json").write_text(json.dumps(d))
    refused(nodemap("topo", "--input", str(tmp_path / "n.json")), "n.json", LIMIT)


@pytest.mark.parametrize("field, value, words", [
    ("pus", 4000000000, ["PU number 4000000000", "1048575"]),
    ("numa_nodes", -3, ["NUMA node number -3"]),
    ("distances", [[10] * 2000] * 2000, ["distances are not a 1 x 1 matrix"]),
    ("caches", [{"level": 2, "kind": "unified", "size": 1, "cpuset": "0"}] * 200_000, ["200000 caches", "131072"]),
])
def test_json_objects(tmp_path, field, value, words):
    xml = tmp_path / "n.xml"
    xml.write_text(hwloc_xml())
    d = json.loads(nodemap("topo", "--input", str(xml), "--json").stdout)
    if field in ("pus", "numa_nodes"):
        d[field][-1]["os_index"] = value
    else:
        d[field] = value
    (tmp_path / "n.json").write_text(json.dumps(d))
    refused(nodemap("topo", "--input", str(tmp_path / "n.json")), "n.json", *words)


def test_xml_os_index(tmp_path):
    (tmp_path / "n.xml").write_text(hwloc_xml(pu1="4000000000"))
    refused(nodemap("topo", "--input", str(tmp_path / "n.xml")), "n.xml", "os_index", "1048575")


def test_long_xml_mask_is_read_in_linear_time(tmp_path):
    # 11 MB of zero words before the real bits: quadratic parsing took > 60 s
    (tmp_path / "n.xml").write_text(hwloc_xml(mask="0x00000000," * 1_000_000 + "0x00000003"))
    r = nodemap("topo", "--input", str(tmp_path / "n.xml"))
    assert r.returncode == 0 and "PUs 0-1" in r.stdout, r.stderr


def test_long_xml_mask_with_a_high_bit_is_refused_at_once(tmp_path):
    # the old reader shifted a growing mask per word: quadratic, > 60 s
    (tmp_path / "n.xml").write_text(hwloc_xml(mask="0x00000001," + "0x00000000," * 1_000_000 + "0x00000003"))
    r = nodemap("topo", "--input", str(tmp_path / "n.xml"))
    refused(r, "n.xml", "Machine", "cpuset", "2^20")
    assert r.seconds < LIMIT_S  # the bound (5 s took 5.3 on a loaded machine); memory stays capped


def _tar_gz(path, members) -> None:
    with tarfile.open(path, "w:gz", format=tarfile.GNU_FORMAT) as t:
        for ti in members:
            t.addfile(ti, io.BytesIO(b"x" * ti.size) if ti.size else None)


def test_tar_long_name_is_refused_and_cut(tmp_path):
    ti = tarfile.TarInfo("sys/" + "a" * (8 << 20))
    _tar_gz(tmp_path / "s.tar.gz", [ti])
    line = refused(nodemap("topo", "--input", str(tmp_path / "s.tar.gz")), "s.tar.gz", "long-name header")
    assert len(line) < 300


def test_tar_chain_of_long_name_headers(tmp_path):
    ti = tarfile.TarInfo("././@LongLink")
    ti.type, ti.size = tarfile.GNUTYPE_LONGNAME, 2
    one = ti._create_header(ti.get_info(), tarfile.GNU_FORMAT, "utf-8", "surrogateescape") + b"x\0" + bytes(510)
    (tmp_path / "c.tar.gz").write_bytes(gzip.compress(one * 20_000, 1))  # each names the next member
    refused(nodemap("topo", "--input", str(tmp_path / "c.tar.gz")), "c.tar.gz", "not a sysfs snapshot")


def test_tar_long_names_count_against_a_byte_limit(tmp_path):
    # 9000 members named by 4000 characters each: tarfile keeps every name (37 MB)
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as t:
        ti = tarfile.TarInfo("./" * 2000)
        ti.type = tarfile.DIRTYPE
        t.addfile(ti)
    one = raw.getvalue()[:512 + 4096 + 512]  # long-name header, the name, the member's header
    (tmp_path / "n.tar.gz").write_bytes(gzip.compress(one * 9000, 1))
    refused(nodemap("topo", "--input", str(tmp_path / "n.tar.gz")), "n.tar.gz", "32 MiB of long names")


def test_tar_headers_count_against_the_member_limit(tmp_path, monkeypatch):
    # in-process with a lower limit: 200,000 headers take seconds to walk
    monkeypatch.setattr(tarballs, "MAX_MEMBERS", 2000)
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as t:
        ti = tarfile.TarInfo("./" * 60)  # over 100 characters: a long-name header, then the member's
        ti.type = tarfile.DIRTYPE
        t.addfile(ti)
    one = raw.getvalue()[:3 * 512]  # the two headers and the name block, without the end of archive
    (tmp_path / "m.tar.gz").write_bytes(gzip.compress(one * 1010, 1))  # 1010 members, 2020 headers
    with pytest.raises(InputError, match="more than 2000 members and headers"):
        tarballs.unpack(str(tmp_path / "m.tar.gz"), str(tmp_path / "out"))


def test_a_tree_over_the_member_limit_is_refused_before_it_is_written(tmp_path):
    """The real limit: 250,000 empty directories once took 76 s (creating and
    removing them); now the headers are counted first, nothing written."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as t:
        ti = tarfile.TarInfo("sys/d")
        ti.type = tarfile.DIRTYPE
        t.addfile(ti)
    (tmp_path / "d.tar.gz").write_bytes(gzip.compress(raw.getvalue()[:512] * (tarballs.MAX_MEMBERS + 1), 1))
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    r = nodemap("topo", "--input", str(tmp_path / "d.tar.gz"), env_=env(TMPDIR=str(tmp)))
    refused(r, "d.tar.gz", f"more than {tarballs.MAX_MEMBERS} members", "hwloc XML")
    assert r.seconds < LIMIT_S and list(tmp.iterdir()) == []


def test_npz_declaring_gigabytes_is_refused_before_loading(tmp_path):
    np = pytest.importorskip("numpy")
    import zipfile

    # 2.2 GiB of int64 [rows x 8] counts declared. Zeros would compress to
    # 2 MB, but only the header is read before refusing, so 64 MB of them
    # (written fast) stand for the rest.
    rows = (2300 << 20) // 64
    with zipfile.ZipFile(tmp_path / "c.npz", "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        with z.open("counts.npy", "w", force_zip64=True) as f:
            np.lib.format.write_array_header_1_0(f, {"descr": "<i8", "fortran_order": False, "shape": (rows, 8)})
            f.write(bytes(64 << 20))
        for name, a in (("alloc_sizes", np.array([rows << 21])), ("chunk_size", np.array(1 << 21))):
            b = io.BytesIO()
            np.lib.format.write_array(b, a.astype(np.int64))
            z.writestr(f"{name}.npy", b.getvalue())
    r = nodemap("place", "plan", "--counts", str(tmp_path / "c.npz"), "--budget", "1GiB")
    refused(r, "c.npz", "2.2 GiB", "larger chunk")
    assert r.seconds < 5


@pytest.mark.parametrize("var, value, words", [
    ("SLURM_TASKS_PER_NODE", "1(x99999999999)", ["Slurm tasks per node", "--local-size"]),
    ("SLURM_LOCALID", "9" * 5000, ["SLURM_LOCALID", "characters"]),
])
def test_launcher_variables(tmp_path, var, value, words):
    e = env(tmp_path, **{"SLURM_JOB_ID": "1", "SLURM_LOCALID": "0", "SLURM_NODEID": "0", var: value})
    refused(nodemap("run", "--dry-run", "--", "true", env_=e), *words)


@pytest.mark.parametrize("flag, args", [("--tasks", ["--tasks", str(10**20)]),
                                        ("--tasks", ["--tasks", "2000000", "--oversubscribe"]),
                                        ("--threads", ["--tasks", "1", "--threads", str(10**20)])])
def test_counts(flag, args):
    refused(nodemap("plan", *args), flag, "limit")


@pytest.mark.parametrize("kind", ["memory", "latency", "numa"])
def test_repeats_beyond_any_need(kind):
    # the kernels keep a time per repetition and thread: a MemoryError traceback before the limit
    refused(nodemap("bench", kind, "--repeats", str(10**11)), "--repeats", "at most")


@pytest.mark.parametrize("name", ["32em64t-2n8c+dax+nvme+mic+dimms", "40intel64-4n10c+pci-conflicts",
                                  "fakecpuid1f-64intel64-2p4d2n2c2t"])
def test_the_header_count_walks_a_real_snapshot_to_its_end(fixtures, monkeypatch, name):
    """_walk counts the headers tarfile reads (minus its look past the
    end): refused one below, read at the count."""
    path = fixtures / "hwloc-linux" / f"{name}.tar.bz2"
    with tarfile.open(path, "r:*", tarinfo=tarballs._counted()) as t:
        t.getmembers()
        headers = t._nodemap_headers - 1  # its last read found the end
    for limit, refuses in ((headers - 1, True), (headers, False)):
        monkeypatch.setattr(tarballs, "MAX_MEMBERS", limit)
        with tarfile.open(path, "r:*") as t:
            if refuses:
                with pytest.raises(tarballs._Refused, match=f"more than {limit} members"):
                    tarballs._walk(t.fileobj, str(path))
            else:
                assert tarballs._walk(t.fileobj, str(path)) is not None


def test_a_negative_size_in_a_tar_header_does_not_walk_backwards(tmp_path):
    """int("-1000", 8) is -512: a header count that trusted it would step
    back onto the same header without end."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.USTAR_FORMAT) as t:
        ti = tarfile.TarInfo("sys/f")
        ti.size = 600
        t.addfile(ti, io.BytesIO(b"x" * 600))
    head = bytearray(raw.getvalue()[:512])
    head[124:136] = b"-0000001000\0"
    head[148:156] = b" " * 8
    head[148:156] = b"%06o\0 " % sum(head)  # a valid checksum: the header looks intact
    (tmp_path / "n.tar.gz").write_bytes(gzip.compress(bytes(head) + raw.getvalue()[512:], 1))
    r = nodemap("topo", "--input", str(tmp_path / "n.tar.gz"))
    assert "members" not in refused(r, "n.tar.gz")  # not walked 50,000 times over the same header
