"""Temporary files: gone after an error, SIGTERM, or a SIGTERM
that arrives while they are being removed (issue 16, item 8)."""

from __future__ import annotations

import os
import signal

import pytest

from nodemap import scratch


def test_an_error_removes_the_file():
    with pytest.raises(ValueError):
        with scratch.scratch_file("nodemap-test-") as (fd, path):
            os.close(fd)
            raise ValueError
    assert not os.path.exists(path)


def test_sigterm_inside_ends_with_143_and_removes_the_file():
    with pytest.raises(SystemExit) as e:
        with scratch.scratch_file("nodemap-test-") as (fd, path):
            os.close(fd)
            os.kill(os.getpid(), signal.SIGTERM)
    assert e.value.code == 143 and not os.path.exists(path)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # put back


@pytest.mark.parametrize("signum, raised", [(signal.SIGTERM, SystemExit), (signal.SIGINT, KeyboardInterrupt)])
def test_a_signal_during_the_removal_waits_until_it_is_done(monkeypatch, signum, raised):
    real = scratch._unlink

    def interrupted(path):
        os.kill(os.getpid(), signum)  # the handler runs here, before the removal
        real(path)

    monkeypatch.setattr(scratch, "_unlink", interrupted)
    with pytest.raises(raised):
        with scratch.scratch_file("nodemap-test-") as (fd, path):
            os.close(fd)
    assert not os.path.exists(path)
