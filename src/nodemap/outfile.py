"""The one way nodemap writes a file the user named (bench -o, topo --export, place -o).

- `check(path)` runs before any work: the folder exists and is writable and
  the path is absent or a regular file, so a long measurement never ends in
  "cannot write". `-` means standard output.
- `write(path, data)` writes a temporary file in the same folder and renames
  it over the path, so a crash or Ctrl-C never leaves half a file. Only a
  regular file (or nothing) is ever replaced: a device, FIFO, directory or
  symbolic link at the path is refused, never turned into a private file
  (as root, `--export /dev/stdout` must not replace /dev/stdout for the
  whole machine). A new file gets 0666 less the umask, as `>` would give it;
  a replaced file keeps its mode.
"""

from __future__ import annotations

import os
import stat
import sys
import tempfile
from typing import BinaryIO, Callable, Union

from .errors import NodemapError

STDOUT = "-"
Data = Union[str, bytes, Callable[[BinaryIO], None]]


def check(path: str, option: str = "--output") -> None:
    """Refuse, in one line, a path that `write` could not fill."""
    if path == STDOUT:
        return
    where = f"{option} {path}"
    if not path or "\0" in path:
        raise NodemapError(f"{option}: give a file name (or - for standard output)")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise NodemapError(f"{where}: folder {folder} does not exist; create it or pick another path")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise NodemapError(f"{where}: folder {folder} is not writable by you; pick another path")
    _check_target(path, where)


def _check_target(path: str, where: str) -> os.stat_result | None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise NodemapError(f"{where}: cannot check it ({e.strerror}); pick another path") from None
    if stat.S_ISLNK(st.st_mode):
        raise NodemapError(f"{where}: is a symbolic link; nodemap replaces only regular files: "
                           "give the real path (or - for standard output)")
    if stat.S_ISDIR(st.st_mode):
        raise NodemapError(f"{where}: is a folder; give a file name inside it")
    if not stat.S_ISREG(st.st_mode):
        raise NodemapError(f"{where}: is not a regular file (a device, FIFO or socket); nodemap replaces only "
                           "regular files: give a file path (or - for standard output)")
    if not os.access(path, os.W_OK):
        raise NodemapError(f"{where}: exists and is not writable by you; pick another path")
    return st


def write(path: str, data: Data, option: str = "--output") -> None:
    """Write `data` (text, bytes, or a function filling a binary file) to
    `path` atomically; `-` writes it to standard output."""
    if path == STDOUT:
        _to_stdout(data)
        return
    where = f"{option} {path}"
    old = _check_target(path, where)  # again: the path may have changed since check()
    folder = os.path.dirname(os.path.abspath(path))
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=".nodemap-", suffix=".tmp", dir=folder)
        with os.fdopen(fd, "wb") as f:
            _fill(f, data)
            os.fchmod(f.fileno(), stat.S_IMODE(old.st_mode) if old else 0o666 & ~_umask())
        os.replace(tmp, path)
        tmp = None
    except OSError as e:
        raise NodemapError(f"{where}: cannot write ({e.strerror or e}); pick a writable path with free space") from None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def _fill(f: BinaryIO, data: Data) -> None:
    if callable(data):
        data(f)
    else:
        f.write(data.encode() if isinstance(data, str) else data)


def _to_stdout(data: Data) -> None:
    sys.stdout.flush()
    _fill(sys.stdout.buffer, data)
    sys.stdout.buffer.flush()


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
