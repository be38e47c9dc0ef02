import os
import signal
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
