"""Issue 26, poor list: the check's MPI step with a broken MPI library is
skipped with the rank's own reason, not Hydra's banner; no step leaves
Hydra's /tmp/hydra_hwloc_xmlfile_* behind."""

from __future__ import annotations

import os

import pytest

from nodemap.check import mpi

HYDRA_BANNER = """Traceback (most recent call last):
  File "<frozen runpy>", line 198, in _run_module_as_main
ImportError: libmpi.so.12: cannot open shared object file: No such file or directory

===================================================================================
=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES
=   PID 4242 RUNNING AT node17
=   EXIT CODE: 1
=   CLEANING UP REMAINING PROCESSES
=   YOU CAN IGNORE THE BELOW CLEANUP MESSAGES
===================================================================================
[mpiexec@node17] HYDU_sock_write (lib/utils/sock.c:250): write error (Bad file descriptor)
"""


def test_the_reason_is_the_ranks_not_the_launchers():
    assert mpi._last_line(HYDRA_BANNER) == "ImportError: libmpi.so.12: cannot open shared object file: " \
                                            "No such file or directory"
    assert mpi._last_line("=====\n") == "====="  # nothing else said: the banner is still a reason
    assert mpi._last_line("") == ""


def test_hydra_files_the_step_left_are_removed(tmp_path, monkeypatch):
    """New since the step started, ours and held open by no process: removed;
    one from before the step and one a live launcher holds: kept."""
    monkeypatch.setattr(mpi, "HYDRA_DIR", str(tmp_path))
    (tmp_path / "hydra_hwloc_xmlfile_before").write_text("x")
    with mpi._hydra_files_removed():
        (tmp_path / "hydra_hwloc_xmlfile_left").write_text("x")
        (tmp_path / "hydra_hwloc_xmlfile_held").write_text("x")
        held = open(tmp_path / "hydra_hwloc_xmlfile_held")
        (tmp_path / "other").write_text("x")
    held.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hydra_hwloc_xmlfile_before", "hydra_hwloc_xmlfile_held",
                                                          "other"]


@pytest.mark.mpi
def test_a_broken_mpi_library_is_skipped_with_its_reason(tmp_path):
    """The step's line is the rank's reason (bench mpi says what cannot start)."""
    launcher, why = mpi.availability(os.environ)
    if launcher is None:
        pytest.skip(why)
    fake = tmp_path / "mpi4py"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ImportError('libmpi.so.12: cannot open shared object file')\n")
    env = {k: v for k, v in os.environ.items() if k not in mpi.RANK_VARS}
    env["PYTHONPATH"] = f"{tmp_path}:{env.get('PYTHONPATH', '')}"
    with pytest.raises(mpi.MPIFailed) as e:
        mpi.measure("mpi", "quick", ["--sizes", "1", "--tests", "latency", "--repeats", "1"], env)
    assert "libmpi.so.12" in str(e.value) and "=" * 10 not in str(e.value), str(e.value)
