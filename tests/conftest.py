import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# A suite started in the background (`make test &`, nohup) inherits SIGINT
# ignored, and so would every nodemap it starts: the Ctrl-C tests would then
# see a run that never stops. Take Ctrl-C as a terminal gives it (a child
# exec'd from a handled signal starts with the default action).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
# ../shared/fixtures beside the checkout (never copied into the project)
FIXTURES = Path(os.environ.get("NODEMAP_FIXTURES", ROOT.parent / "shared" / "fixtures"))


@pytest.fixture(autouse=True)
def _environment_kept():
    """A kind run in this process sets what the libraries it starts read
    (NCCL_RUNTIME_CONNECT=0 before a single-process NCCL init): a command's
    own business, but here it would outlive the test and reach every later
    test's children (srun hands its environment to the tasks)."""
    saved = dict(os.environ)
    yield
    if os.environ != saved:
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture(scope="session")
def fixtures() -> Path:
    if not FIXTURES.is_dir():
        pytest.skip(f"fixtures not found at {FIXTURES} (../shared/fixtures beside the checkout)")
    return FIXTURES


@pytest.fixture
def karolina_json(tmp_path) -> str:
    """tests/nodes.py's Karolina-like node saved as nodemap JSON, for --input."""
    import nodes

    path = tmp_path / "karolina.json"
    path.write_text(nodes.karolina().to_json())
    return str(path)


@pytest.fixture(scope="session")
def slurm_cluster():
    """A real 3-node Slurm cluster on this machine (tests/slurm_cluster.py), for the whole session."""
    from slurm_cluster import Cluster

    cluster = Cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def rails_namespace():
    """A network namespace whose NICs are two veths (as a networked test cluster's node): the
    namespace's name and the host's ends of its rail0 and rail1."""
    if os.geteuid() != 0 or not shutil.which("ip"):
        pytest.skip("needs root and ip (iproute2) for a network namespace")
    tag = f"{os.getpid() % 100000}"
    ns, ends = f"nodemap-test-{tag}", [f"nmt{tag}r{k}" for k in (0, 1)]
    subprocess.run(["ip", "netns", "add", ns], check=True, timeout=30)
    try:
        for k, end in enumerate(ends):
            subprocess.run(["ip", "link", "add", end, "type", "veth", "peer", "name", f"rail{k}", "netns", ns],
                           check=True, timeout=30)
            subprocess.run(["ip", "link", "set", end, "up"], check=True, timeout=30)
            subprocess.run(["ip", "-n", ns, "link", "set", f"rail{k}", "up"], check=True, timeout=30)
        yield ns, ends
    finally:
        subprocess.run(["ip", "netns", "del", ns], timeout=30)  # and with it the pairs
